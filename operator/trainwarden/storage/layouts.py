"""Recognizing checkpoints in a trainer's output directory, the way each trainer writes them.

Streaming: one `os.scandir` of the directory, and per checkpoint a walk of its entries with
`lstat` only; the only files read are small metadata (`trainer_state.json`, DeepSpeed's
`latest`, Orbax's metrics), never weights. Symlinks are never followed: a link is not a
checkpoint to delete, its target's size is not counted, and nothing outside the directory
is looked at (Lightning's `last.ckpt` link only marks its in-directory target).
"""

import fnmatch
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from trainwarden.api.v1alpha1.checkpoint import Layout
from trainwarden.core.retention import Checkpoint

PIN_MARKER = ".trainwarden-pin"
HF_STATE = "trainer_state.json"
_HF = re.compile(r"^checkpoint-(\d+)$")
_HF_STAGING = re.compile(r"^tmp-checkpoint-(\d+)$")
_DEEPSPEED = re.compile(r"^global_step(\d+)$")
_LIGHTNING_STEP = re.compile(r"(?:^|[-_])step=(\d+)")
_LIGHTNING_LAST = re.compile(r"^last(-v\d+)?\.ckpt$")
_LIGHTNING_METRIC = re.compile(r"([A-Za-z_][A-Za-z0-9_/]*)=([-+0-9.eE]+)")
_ORBAX = re.compile(r"^(?:.+_)?(\d+)$")
_ORBAX_TMP = ".orbax-checkpoint-tmp"
_ORBAX_COMMIT = "commit_success.txt"
_DCP_METADATA = ".metadata"
_DCP_DATA = re.compile(r"^__(\d+)_\d+\.distcp$")
_DCP_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")
_LAST_DIGITS = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class _Walked:
    size: int
    """Bytes of the regular files inside (or of the file itself)."""
    newest: float
    inside: dict[str, int]
    """Modes of the entries directly inside, from lstat."""
    files: int
    """Regular files anywhere inside (an Orbax step with none is still being made)."""


def _walk(path: str) -> _Walked:
    """Sizes and times without following links; strings, not Path objects (100,000 entries
    of pathlib cost more than the system calls)."""
    top = os.lstat(path)
    newest, size = top.st_mtime, top.st_size if stat.S_ISREG(top.st_mode) else 0
    inside: dict[str, int] = {}
    if not stat.S_ISDIR(top.st_mode):
        return _Walked(size, newest, inside, int(stat.S_ISREG(top.st_mode)))
    count = 0
    stack, first = [path], True
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for item in entries:
                    info = item.stat(follow_symlinks=False)
                    if first:
                        inside[item.name] = info.st_mode
                    newest = max(newest, info.st_mtime)
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(item.path)
                    elif stat.S_ISREG(info.st_mode):
                        size += info.st_size
                        count += 1
        except FileNotFoundError:
            pass  # removed while we looked: the caller re-checks before any deletion
        first = False
    return _Walked(size, newest, inside, count)


def _finite(values: dict[str, object]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def _read_json(path: str, limit: int = 64 * 2**20) -> object:
    """Small JSON metadata; never through a link, never a FIFO or device (which could
    hang the scan or read forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as file:
            return json.loads(file.read())
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _hf_metrics(state: object) -> dict[str, float]:
    """The numbers logged at the checkpoint's own step (eval_loss, loss, ...)."""
    if not isinstance(state, dict):
        return {}
    step = state.get("global_step")
    found: dict[str, float] = {}
    history = state.get("log_history")
    for entry in history if isinstance(history, list) else []:
        if isinstance(entry, dict) and entry.get("step") == step:
            found |= _finite({k: v for k, v in entry.items() if k not in ("step", "epoch")})
    return found


def reads(relative: str) -> bool:
    """Whether a scan reads this file's content (a path relative to the checkpoint
    directory): what a copy of the directory must hold, where sizes and times suffice for
    everything else (storage/objects.py lays S3 listings out so)."""
    parts = relative.split("/")
    return (
        parts[-1] == HF_STATE
        or relative == "latest"
        or (len(parts) >= 2 and parts[-2:] == ["metrics", "metrics"])
    )


def _regular(walked: _Walked, name: str) -> bool:
    return stat.S_ISREG(walked.inside.get(name, 0))


def _make(
    ctx: "_Context",
    name: str,
    walked: _Walked,
    *,
    step: int | None,
    complete: bool,
    metrics: dict[str, float] | None = None,
    resume_point: bool = False,
) -> Checkpoint:
    pinned = PIN_MARKER in walked.inside or f"{name}{PIN_MARKER}" in ctx.kinds
    return Checkpoint(
        name=name,
        created=datetime.fromtimestamp(walked.newest, UTC),
        size=walked.size,
        step=step,
        complete=complete,
        metrics=metrics or {},
        pinned=pinned,
        resume_point=resume_point,
    )


class _Context:
    """What a layout needs to know about the whole directory, read once per scan."""

    def __init__(self, root: Path, layout: Layout, kinds: dict[str, int]) -> None:
        self.root, self.layout, self.kinds = root, layout, kinds
        self.base = str(root)
        self.latest: int | None = None
        self.latest_tag: str | None = None
        self.last_targets: set[str] = set()
        self.orbax_commits = False
        if layout.type == "DeepSpeed" and self.is_file("latest"):
            try:
                tag = (root / "latest").read_text(errors="replace").strip()
            except OSError:
                tag = ""
            match = _DEEPSPEED.match(tag)
            self.latest_tag = tag or None
            self.latest = int(match.group(1)) if match else None
        if layout.type == "Lightning":
            for name, mode in kinds.items():
                if _LIGHTNING_LAST.match(name) and stat.S_ISLNK(mode):
                    try:
                        target = Path(os.path.normpath(root / os.readlink(root / name)))
                    except OSError:
                        continue  # the link went away while we looked
                    if target.parent == root:
                        self.last_targets.add(target.name)
        if layout.type == "Orbax":
            self.orbax_commits = any(
                _ORBAX.match(n) and self.is_dir(n) and os.path.lexists(root / n / _ORBAX_COMMIT)
                for n in kinds
            )

    def path(self, name: str) -> str:
        return os.path.join(self.base, name)

    def is_dir(self, name: str) -> bool:
        return stat.S_ISDIR(self.kinds.get(name, 0))

    def is_file(self, name: str) -> bool:
        return stat.S_ISREG(self.kinds.get(name, 0))


def _huggingface(ctx: _Context, name: str) -> Checkpoint | None:
    staging = _HF_STAGING.match(name)
    m = _HF.match(name)
    if not (staging or m) or not ctx.is_dir(name):
        return None
    walked = _walk(ctx.path(name))
    if staging:
        return _make(ctx, name, walked, step=int(staging.group(1)), complete=False)
    assert m is not None
    state = _read_json(ctx.path(f"{name}/{HF_STATE}")) if _regular(walked, HF_STATE) else None
    complete = isinstance(state, dict)
    metrics = _hf_metrics(state)
    return _make(ctx, name, walked, step=int(m.group(1)), complete=complete, metrics=metrics)


def _deepspeed(ctx: _Context, name: str) -> Checkpoint | None:
    if not (m := _DEEPSPEED.match(name)) or not ctx.is_dir(name):
        return None
    walked = _walk(ctx.path(name))
    step = int(m.group(1))
    if ctx.latest is not None:
        complete = step <= ctx.latest  # a newer tag is still being written by its ranks
    else:
        # No `latest` (written only after every rank saved): trust a tag only if its model
        # states are there.
        complete = any(f.endswith("model_states.pt") for f in walked.inside)
    resume = name == ctx.latest_tag
    return _make(ctx, name, walked, step=step, complete=complete, resume_point=resume)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _lightning(ctx: _Context, name: str) -> Checkpoint | None:
    """`*.ckpt` files, or directories (DeepSpeedStrategy and sharded FSDP save those)."""
    if not name.endswith(".ckpt") or not (ctx.is_file(name) or ctx.is_dir(name)):
        return None
    step = _LIGHTNING_STEP.search(name)
    metrics = {
        k: value
        for k, v in _LIGHTNING_METRIC.findall(name.removesuffix(".ckpt"))
        if k not in ("epoch", "step") and (value := _number(v.rstrip("."))) is not None
    }
    return _make(
        ctx,
        name,
        _walk(ctx.path(name)),
        step=int(step.group(1)) if step else None,
        complete=True,  # written whole; minAge covers a write in flight
        metrics=metrics,
        resume_point=bool(_LIGHTNING_LAST.match(name)) or name in ctx.last_targets,
    )


def _orbax(ctx: _Context, name: str) -> Checkpoint | None:
    if not ctx.is_dir(name):
        return None
    if _ORBAX_TMP in name:
        digits = _LAST_DIGITS.search(name.split(_ORBAX_TMP)[0])
        step = int(digits.group(1)) if digits else None
        return _make(ctx, name, _walk(ctx.path(name)), step=step, complete=False)
    if not (m := _ORBAX.match(name)):
        return None
    walked = _walk(ctx.path(name))
    committed = not ctx.orbax_commits or stat.S_ISREG(walked.inside.get(_ORBAX_COMMIT, 0))
    metrics_dir = stat.S_ISDIR(walked.inside.get("metrics", 0))
    metrics = _read_json(ctx.path(f"{name}/metrics/metrics")) if metrics_dir else None
    return _make(
        ctx,
        name,
        walked,
        step=int(m.group(1)),
        complete=walked.files > 0 and committed,
        metrics=_finite(metrics) if isinstance(metrics, dict) else {},
    )


def _dcp_written(names: list[str]) -> bool:
    """`.metadata` is renamed into place last; without collectives (torch >= 2.7) each rank
    writes `__<rank>.metadata`, complete once every rank that wrote data has one."""
    if _DCP_METADATA in names:
        return True
    ranks = {m.group(1) for n in names if (m := _DCP_DATA.match(n))}
    written = {m.group(1) for n in names if (m := _DCP_RANK_METADATA.match(n))}
    return bool(written) and ranks <= written


def _torch_dcp(ctx: _Context, name: str) -> Checkpoint | None:
    if not ctx.is_dir(name):
        return None
    try:
        names = os.listdir(ctx.path(name))  # decide first: no full walk of unrelated dirs
    except NotADirectoryError:
        return None
    metadata = any(n == _DCP_METADATA or _DCP_RANK_METADATA.match(n) for n in names)
    if not metadata and not any(n.endswith(".distcp") for n in names):
        return None
    digits = _LAST_DIGITS.search(name)
    step = int(digits.group(1)) if digits else None
    written = _dcp_written(names)
    return _make(ctx, name, _walk(ctx.path(name)), step=step, complete=written)


def _glob(ctx: _Context, name: str) -> Checkpoint | None:
    layout = ctx.layout
    assert layout.glob is not None
    assert layout.step_pattern is not None
    if name.startswith(".") or not fnmatch.fnmatchcase(name, layout.glob):
        return None
    found = re.search(layout.step_pattern, name)
    step = int(found.group(1)) if found and found.group(1).isdigit() else None
    return _make(ctx, name, _walk(ctx.path(name)), step=step, complete=True)


_RECOGNIZERS = {
    "HuggingFace": _huggingface,
    "DeepSpeed": _deepspeed,
    "Lightning": _lightning,
    "Orbax": _orbax,
    "TorchDCP": _torch_dcp,
    "Glob": _glob,
}


def _recognize(ctx: _Context, name: str) -> Checkpoint | None:
    if name.endswith(PIN_MARKER) or stat.S_ISLNK(ctx.kinds.get(name, 0)):
        return None
    return _RECOGNIZERS[ctx.layout.type](ctx, name)


def _kinds(root: Path) -> dict[str, int]:
    """The type of every entry from the directory listing itself (no system call each)."""

    def kind(e: os.DirEntry[str]) -> int:
        if e.is_symlink():
            return stat.S_IFLNK
        if e.is_dir(follow_symlinks=False):
            return stat.S_IFDIR
        return stat.S_IFREG if e.is_file(follow_symlinks=False) else 0

    with os.scandir(root) as entries:
        return {e.name: kind(e) for e in entries}


def scan(root: Path, layout: Layout) -> Iterator[Checkpoint]:
    """Every checkpoint directly under `root`, one at a time."""
    ctx = _Context(root, layout, _kinds(root))
    for name in sorted(ctx.kinds):
        try:
            found = _recognize(ctx, name)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed or replaced while scanning
        if found is not None:
            yield found


def entry(root: Path, name: str, layout: Layout) -> Checkpoint | None:
    """One entry as it is now (right before deleting it), or None if it is no checkpoint."""
    try:
        if layout.type in ("Lightning", "Orbax"):  # they look at their neighbours too
            kinds = _kinds(root)
        else:
            kinds = {
                n: os.lstat(root / n).st_mode
                for n in (name, f"{name}{PIN_MARKER}", "latest")
                if os.path.lexists(root / n)
            }
        return _recognize(_Context(root, layout, kinds), name)
    except (FileNotFoundError, NotADirectoryError):
        return None
