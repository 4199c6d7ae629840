"""Recognizing checkpoints in a trainer's output directory, the way each trainer writes them.

Streaming: one `os.scandir` of the directory, and per checkpoint a walk of its entries with
`lstat` only; the only files read are small metadata (`trainer_state.json`, DeepSpeed's
`latest`, Orbax's metrics), never weights, each at most METADATA_LIMIT bytes, parsed
whatever their nesting (storage/metadata.py). Everything goes through the handle of the
pinned directory (storage/beneath.py): symlinks are never followed, a link is not a
checkpoint to delete, its target's size is not counted, and nothing outside the directory
is looked at (Lightning's `last.ckpt` link only marks its in-directory target).

Names are tenant input: a step is ASCII digits only, at most 18 of them (storage/metadata.py
step_of), and a pattern matches a whole name (`re.fullmatch`, not `$`, which also matches
before a trailing newline); a name with a control character is no checkpoint. What cannot
be judged (unreadable, absurd times) is not a checkpoint to plan: it is left alone and
named in `Scan.failures`.
"""

import fnmatch
import os
import re
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from trainwarden.api.v1alpha1.checkpoint import Layout
from trainwarden.core.retention import Checkpoint, order_key, written_key
from trainwarden.storage import beneath, lightning_names, trainer_word
from trainwarden.storage.beneath import Identity, Pinned, Walked
from trainwarden.storage.metadata import METADATA_LIMIT, finite, hf_metrics, parse_json, step_of

PIN_MARKER = trainer_word.PIN_MARKER
HF_STATE = "trainer_state.json"
LATEST_LIMIT = 4096
"""Bytes of DeepSpeed's `latest` (a tag name)."""
_STEP = r"([0-9]{1,18})"
_HF = re.compile(rf"checkpoint-{_STEP}")
_HF_STAGING = re.compile(rf"tmp-checkpoint-{_STEP}")
_DEEPSPEED = re.compile(rf"global_step{_STEP}")
_ORBAX = re.compile(rf"(?:.+_)?{_STEP}")
_ORBAX_TMP = ".orbax-checkpoint-tmp"
_ORBAX_COMMIT = "commit_success.txt"
_DCP_METADATA = ".metadata"
_DCP_DATA = re.compile(r"__([0-9]+)_[0-9]+\.distcp")
_DCP_RANK_METADATA = re.compile(r"__([0-9]+)\.metadata")
_LAST_DIGITS = re.compile(r"([0-9]+)(?!.*[0-9])", re.DOTALL)
Reader = Callable[[str, int], bytes | None]
"""Reads one metadata file, by its path relative to the directory, at most `limit` bytes:
None when it is absent or not a regular file; raises TooLarge past the limit. By default
through the pinned directory; the S3 mirror fetches exactly these files on demand."""
TOMBSTONE = ".trainwarden-deleting-"
"""A checkpoint being deleted is first renamed so (storage/pruning.py): if deletion stops
half-way, what is left is never taken for a checkpoint, complete or not."""


def _regular(walked: Walked, name: str) -> bool:
    return stat.S_ISREG(walked.inside.get(name, 0))


def _make(
    ctx: "_Context",
    name: str,
    walked: Walked,
    *,
    step: int | None,
    complete: bool,
    metrics: dict[str, float] | None = None,
    resume_by: str | None = None,
    held: str | None = None,
    trainer_best: str | None = None,
) -> Checkpoint:
    pinned = PIN_MARKER in walked.inside or f"{name}{PIN_MARKER}" in ctx.kinds
    ctx.identities[name] = walked.identity
    return Checkpoint(
        name=name,
        created=datetime.fromtimestamp(walked.newest, UTC),
        size=walked.size,
        step=step,
        complete=complete,
        metrics=metrics or {},
        pinned=pinned,
        resume_point=resume_by is not None,
        resume_by=resume_by,
        held=held,
        trainer_best=trainer_best,
    )


class _Context:
    """What a layout needs to know about the whole directory, read once per scan."""

    def __init__(
        self,
        tree: Pinned,
        layout: Layout,
        kinds: dict[str, int],
        read: Reader | None = None,
        *,
        whole: bool = True,
    ) -> None:
        """`whole`: a scan of the whole directory, which also reads the trainer's word on
        it (not when one entry is looked at again right before its deletion)."""
        self.tree, self.fd, self.layout, self.kinds = tree, tree.fd, layout, kinds
        self.read: Reader = read or (
            lambda relative, limit: beneath.read_file(tree.fd, relative, limit)
        )
        self.identities: dict[str, Identity] = {}
        self.latest: int | None = None
        self.latest_tag: str | None = None
        self.last_targets: set[str] = set()
        self.orbax_commits = False
        self.notes: list[str] = []
        self.hf_named: dict[str, str | None] = {}
        """What each Trainer state's best_model_checkpoint names."""
        self.single: dict[str, str] = {}
        self.word = trainer_word.LightningWord()
        if layout.type == "DeepSpeed" and self.is_file("latest"):
            try:
                raw = self.read("latest", LATEST_LIMIT) or b""
            except beneath.TooLarge:
                raw = b""
            tag = raw.decode(errors="replace").strip()
            match = _DEEPSPEED.fullmatch(tag)
            self.latest_tag = tag or None
            self.latest = step_of(match.group(1)) if match else None
        if layout.type == "Lightning":
            self.single = trainer_word.nested(self.fd, kinds) if whole else {}
            linked = trainer_word.link_targets(tree.path, self.fd, kinds)
            self.last_targets = {e for p in linked if (e := trainer_word.entry(p, self.single))}
            if whole and read is None:
                self.word = trainer_word.lightning(self.fd, kinds, self.single)
                self.notes += self.word.notes
            elif whole:
                self.notes.append("Lightning's callback state is not read from object storage")
        if layout.type == "Orbax":
            self.orbax_commits = any(
                _ORBAX.fullmatch(n)
                and self.is_dir(n)
                and beneath.exists(self.fd, f"{n}/{_ORBAX_COMMIT}")
                for n in kinds
            )

    def walk(self, name: str) -> Walked:
        return beneath.walk(self.fd, name)

    def is_dir(self, name: str) -> bool:
        return stat.S_ISDIR(self.kinds.get(name, 0))

    def is_file(self, name: str) -> bool:
        return stat.S_ISREG(self.kinds.get(name, 0))


def _huggingface(ctx: _Context, name: str) -> Checkpoint | None:
    staging = _HF_STAGING.fullmatch(name)
    m = _HF.fullmatch(name)
    if not (staging or m) or not ctx.is_dir(name):
        return None
    walked = ctx.walk(name)
    if staging:
        return _make(ctx, name, walked, step=step_of(staging.group(1)), complete=False)
    assert m is not None
    step = step_of(m.group(1))
    if not _regular(walked, HF_STATE):
        return _make(ctx, name, walked, step=step, complete=False)
    try:
        state = parse_json(ctx.read(f"{name}/{HF_STATE}", METADATA_LIMIT))
    except beneath.TooLarge as error:
        held = f"{error}: its state is not read"
        return _make(ctx, name, walked, step=step, complete=True, held=held)
    complete = isinstance(state, dict)
    if isinstance(state, dict):
        named = state.get("best_model_checkpoint")
        ctx.hf_named[name] = named if isinstance(named, str) else None
    metrics = hf_metrics(state)
    return _make(ctx, name, walked, step=step, complete=complete, metrics=metrics)


def _deepspeed(ctx: _Context, name: str) -> Checkpoint | None:
    if not (m := _DEEPSPEED.fullmatch(name)) or not ctx.is_dir(name):
        return None
    walked = ctx.walk(name)
    step = step_of(m.group(1))
    if ctx.latest is not None and step is not None:
        complete = step <= ctx.latest  # a newer tag is still being written by its ranks
    else:
        # No `latest` (written only after every rank saved): trust a tag only if its model
        # states are there.
        complete = any(f.endswith("model_states.pt") for f in walked.inside)
    resume = "DeepSpeed's latest names it" if name == ctx.latest_tag else None
    return _make(ctx, name, walked, step=step, complete=complete, resume_by=resume)


def _lightning(ctx: _Context, name: str) -> Checkpoint | None:
    """`*.ckpt` files, or directories (DeepSpeedStrategy and sharded FSDP save those, and
    a metric name with `/` nests one file in a directory)."""
    if name in ctx.single:
        parsed = lightning_names.parse(f"{name}/{ctx.single[name]}")
    elif name.endswith(".ckpt") and (ctx.is_file(name) or ctx.is_dir(name)):
        parsed = lightning_names.parse(name)
    else:
        return None
    resume = ctx.word.last.get(name)
    if lightning_names.LAST.fullmatch(name) or name in ctx.last_targets:
        resume = resume or "Lightning's last.ckpt names it"
    return _make(
        ctx,
        name,
        ctx.walk(name),
        step=parsed.step,
        complete=True,  # written whole; minAge covers a write in flight
        metrics=parsed.metrics | ctx.word.scores.get(name, {}),
        resume_by=resume,
        trainer_best=ctx.word.best.get(name),
    )


def _orbax(ctx: _Context, name: str) -> Checkpoint | None:
    if not ctx.is_dir(name):
        return None
    if _ORBAX_TMP in name:
        digits = _LAST_DIGITS.search(name.split(_ORBAX_TMP)[0])
        step = step_of(digits.group(1)) if digits else None
        return _make(ctx, name, ctx.walk(name), step=step, complete=False)
    if not (m := _ORBAX.fullmatch(name)):
        return None
    walked = ctx.walk(name)
    committed = not ctx.orbax_commits or stat.S_ISREG(walked.inside.get(_ORBAX_COMMIT, 0))
    complete = walked.files > 0 and committed
    metrics: object = None
    if stat.S_ISDIR(walked.inside.get("metrics", 0)):
        try:
            metrics = parse_json(ctx.read(f"{name}/metrics/metrics", METADATA_LIMIT))
        except beneath.TooLarge as error:
            held = f"{error}: its metrics are not read"
            return _make(ctx, name, walked, step=step_of(m.group(1)), complete=complete, held=held)
    return _make(
        ctx,
        name,
        walked,
        step=step_of(m.group(1)),
        complete=complete,
        metrics=finite(metrics) if isinstance(metrics, dict) else {},
    )


def _dcp_written(names: list[str]) -> bool:
    """`.metadata` is renamed into place last; without collectives (torch >= 2.7) each rank
    writes `__<rank>.metadata`, complete once every rank that wrote data has one."""
    if _DCP_METADATA in names:
        return True
    ranks = {m.group(1) for n in names if (m := _DCP_DATA.fullmatch(n))}
    written = {m.group(1) for n in names if (m := _DCP_RANK_METADATA.fullmatch(n))}
    return bool(written) and ranks <= written


def _torch_dcp(ctx: _Context, name: str) -> Checkpoint | None:
    if not ctx.is_dir(name):
        return None
    names = beneath.listdir(ctx.fd, name)  # decide first: no full walk of unrelated dirs
    metadata = any(n == _DCP_METADATA or _DCP_RANK_METADATA.fullmatch(n) for n in names)
    if not metadata and not any(n.endswith(".distcp") for n in names):
        return None
    digits = _LAST_DIGITS.search(name)
    step = step_of(digits.group(1)) if digits else None
    written = _dcp_written(names)
    return _make(ctx, name, ctx.walk(name), step=step, complete=written)


def _glob(ctx: _Context, name: str) -> Checkpoint | None:
    layout = ctx.layout
    assert layout.glob is not None
    assert layout.step_pattern is not None
    if name.startswith(".") or not fnmatch.fnmatchcase(name, layout.glob):
        return None
    found = re.search(layout.step_pattern, name)
    step = step_of(found.group(1)) if found else None  # the group may be empty or absent
    return _make(ctx, name, ctx.walk(name), step=step, complete=True)


def marks_completion(basename: str) -> bool:
    """Whether a file of this name is what some layout reads to call its checkpoint
    complete (Trainer's state, DeepSpeed's model states, Orbax's commit, DCP's metadata):
    deleted last, so a deletion stopped half-way leaves a checkpoint still complete."""
    return (
        basename in (HF_STATE, _ORBAX_COMMIT, _DCP_METADATA)
        or basename.endswith("model_states.pt")
        or _DCP_RANK_METADATA.fullmatch(basename) is not None
    )


_RECOGNIZERS = {
    "HuggingFace": _huggingface,
    "DeepSpeed": _deepspeed,
    "Lightning": _lightning,
    "Orbax": _orbax,
    "TorchDCP": _torch_dcp,
    "Glob": _glob,
}


def _recognize(ctx: _Context, name: str) -> Checkpoint | None:
    if (
        name.endswith(PIN_MARKER)
        or name.startswith(TOMBSTONE)
        or not name.isprintable()  # a newline or control character: no trainer writes it
        or stat.S_ISLNK(ctx.kinds.get(name, 0))
    ):
        return None
    return _RECOGNIZERS[ctx.layout.type](ctx, name)


def _kinds(fd: int) -> dict[str, int]:
    """The type of every entry from the directory listing itself (no system call each)."""

    def kind(e: os.DirEntry[str]) -> int:
        if e.is_symlink():
            return stat.S_IFLNK
        if e.is_dir(follow_symlinks=False):
            return stat.S_IFDIR
        return stat.S_IFREG if e.is_file(follow_symlinks=False) else 0

    with os.scandir(fd) as entries:
        return {e.name: kind(e) for e in entries}


@dataclass
class Scan:
    """The checkpoints of one directory, and what could not be judged."""

    checkpoints: list[Checkpoint] = field(default_factory=list)
    identities: dict[str, Identity] = field(default_factory=dict)
    """Device and inode of each checkpoint as scanned: a deletion goes ahead only if the
    entry is still that file."""
    failures: list[str] = field(default_factory=list)
    """"<name>: why" of entries that could not be judged (unreadable, absurd times); they
    are left alone and are not in `checkpoints`."""
    notes: list[str] = field(default_factory=list)
    """What a person should know about what the trainer's own files said."""


def scan(tree: Pinned, layout: Layout, read: Reader | None = None) -> Scan:
    """Every checkpoint directly under the pinned directory."""
    ctx = _Context(tree, layout, _kinds(tree.fd), read)
    found = Scan(identities=ctx.identities, notes=ctx.notes)
    for name in sorted(ctx.kinds):
        try:
            checkpoint = _recognize(ctx, name)
        except FileNotFoundError:
            continue  # removed while scanning
        except (OSError, ValueError, OverflowError) as error:
            found.failures.append(f"{name}: not judged, left alone: {beneath.why(error)}")
            continue
        if checkpoint is not None:
            found.checkpoints.append(checkpoint)
    if ctx.hf_named:
        found.checkpoints = _hf_best(ctx, found.checkpoints)
    return found


def _hf_best(ctx: _Context, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """The Trainer's best, as the newest complete states (by step and by time) name it."""
    complete = [c for c in checkpoints if c.complete and c.name in ctx.hf_named]
    if not complete:
        return checkpoints
    newest = {max(complete, key=order_key).name, max(complete, key=written_key).name}
    best = trainer_word.hf_best(ctx.hf_named, sorted(newest), [c.name for c in checkpoints])
    return [replace(c, trainer_best=best[c.name]) if c.name in best else c for c in checkpoints]


def scan_directory(root: Path, layout: Layout, read: Reader | None = None) -> Scan:
    """`scan` of a directory named by path (tests, a mirror the caller made itself)."""
    with beneath.pinned(str(root)) as tree:
        return scan(tree, layout, read)


def entry(tree: Pinned, name: str, layout: Layout) -> tuple[Checkpoint, Identity] | None:
    """One entry as it is now (right before deleting it) and which file it is, or None if
    it is gone or no checkpoint."""
    try:
        if layout.type in ("Lightning", "Orbax"):  # they look at their neighbours too
            kinds = _kinds(tree.fd)
        else:
            kinds = {}
            for n in (name, f"{name}{PIN_MARKER}", "latest"):
                with suppress(FileNotFoundError):
                    kinds[n] = os.stat(n, dir_fd=tree.fd, follow_symlinks=False).st_mode
        ctx = _Context(tree, layout, kinds, whole=False)
        if layout.type == "Lightning":  # a "/" metric's directory, this one only
            ctx.single = trainer_word.nested(tree.fd, {name: kinds.get(name, 0)})
        found = _recognize(ctx, name)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (found, ctx.identities[name]) if found is not None else None
