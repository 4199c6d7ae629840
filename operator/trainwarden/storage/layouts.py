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
_LIGHTNING_METRIC = re.compile(r"([A-Za-z_][A-Za-z0-9_/]*)=(-?[0-9.]+(?:e-?[0-9]+)?)")
_ORBAX = re.compile(r"^(?:.+_)?(\d+)$")
_ORBAX_TMP = ".orbax-checkpoint-tmp"
_ORBAX_COMMIT = "commit_success.txt"
_DCP_METADATA = ".metadata"
_LAST_DIGITS = re.compile(r"(\d+)(?!.*\d)")


def _walk(path: Path) -> tuple[int, float, set[str]]:
    """(bytes of regular files, newest mtime, names directly inside) without following links."""
    top = path.lstat()
    newest, size = top.st_mtime, top.st_size if stat.S_ISREG(top.st_mode) else 0
    names: set[str] = set()
    if not stat.S_ISDIR(top.st_mode):
        return size, newest, names
    stack, first = [path], True
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    if first:
                        names.add(entry.name)
                    info = entry.stat(follow_symlinks=False)
                    newest = max(newest, info.st_mtime)
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(Path(entry.path))
                    elif stat.S_ISREG(info.st_mode):
                        size += info.st_size
        except FileNotFoundError:
            pass  # removed while we looked: the caller re-checks before any deletion
        first = False
    return size, newest, names


def _finite(values: dict[str, object]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def _read_json(path: Path, limit: int = 64 * 2**20) -> object:
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _hf_metrics(state: object) -> dict[str, float]:
    """The numbers logged at the checkpoint's own step (eval_loss, loss, ...)."""
    if not isinstance(state, dict):
        return {}
    step = state.get("global_step")
    found: dict[str, float] = {}
    for entry in state.get("log_history") or []:
        if isinstance(entry, dict) and entry.get("step") == step:
            found |= _finite({k: v for k, v in entry.items() if k not in ("step", "epoch")})
    return found


def _make(
    root: Path,
    name: str,
    *,
    step: int | None,
    complete: bool,
    metrics: dict[str, float] | None = None,
    resume_point: bool = False,
) -> Checkpoint | None:
    path = root / name
    try:
        size, newest, inside = _walk(path)
    except FileNotFoundError:
        return None
    pinned = PIN_MARKER in inside or (root / f"{name}{PIN_MARKER}").exists()
    return Checkpoint(
        name=name,
        created=datetime.fromtimestamp(newest, UTC),
        size=size,
        step=step,
        complete=complete,
        metrics=metrics or {},
        pinned=pinned,
        resume_point=resume_point,
    )


def _is_dir(root: Path, name: str) -> bool:
    try:
        return stat.S_ISDIR((root / name).lstat().st_mode)
    except FileNotFoundError:
        return False


def _is_file(root: Path, name: str) -> bool:
    try:
        return stat.S_ISREG((root / name).lstat().st_mode)
    except FileNotFoundError:
        return False


class _Context:
    """What a layout needs to know about the whole directory, read once per scan."""

    def __init__(self, root: Path, layout: Layout, names: list[str]) -> None:
        self.root, self.layout, self.names = root, layout, names
        self.latest: int | None = None
        self.latest_tag: str | None = None
        self.last_targets: set[str] = set()
        self.orbax_commits = False
        if layout.type == "DeepSpeed" and _is_file(root, "latest"):
            try:
                tag = (root / "latest").read_text(errors="replace").strip()
            except OSError:
                tag = ""
            match = _DEEPSPEED.match(tag)
            self.latest_tag = tag or None
            self.latest = int(match.group(1)) if match else None
        if layout.type == "Lightning":
            for name in names:
                path = root / name
                if _LIGHTNING_LAST.match(name) and path.is_symlink():
                    target = Path(os.path.normpath(path.parent / os.readlink(path)))
                    if target.parent == root:
                        self.last_targets.add(target.name)
        if layout.type == "Orbax":
            self.orbax_commits = any(
                _ORBAX.match(n) and (root / n / _ORBAX_COMMIT).exists() for n in names
            )


def _huggingface(ctx: _Context, name: str) -> Checkpoint | None:
    root = ctx.root
    if staging := _HF_STAGING.match(name):
        return _make(root, name, step=int(staging.group(1)), complete=False)
    if not (m := _HF.match(name)) or not _is_dir(root, name):
        return None
    state = _read_json(root / name / HF_STATE)
    return _make(
        root,
        name,
        step=int(m.group(1)),
        complete=isinstance(state, dict),
        metrics=_hf_metrics(state),
    )


def _deepspeed(ctx: _Context, name: str) -> Checkpoint | None:
    root = ctx.root
    if not (m := _DEEPSPEED.match(name)) or not _is_dir(root, name):
        return None
    step = int(m.group(1))
    if ctx.latest is not None:
        complete = step <= ctx.latest  # a newer tag is still being written by its ranks
    else:
        # No `latest` (written only after every rank saved): trust a tag only if its model
        # states are there.
        complete = any(f.endswith("model_states.pt") for f in os.listdir(root / name))
    return _make(root, name, step=step, complete=complete, resume_point=name == ctx.latest_tag)


def _lightning(ctx: _Context, name: str) -> Checkpoint | None:
    root = ctx.root
    if not name.endswith(".ckpt") or not _is_file(root, name):
        return None
    step = _LIGHTNING_STEP.search(name)
    metrics = {
        k: float(v)
        for k, v in _LIGHTNING_METRIC.findall(name.removesuffix(".ckpt"))
        if k not in ("epoch", "step") and math.isfinite(float(v))
    }
    return _make(
        root,
        name,
        step=int(step.group(1)) if step else None,
        complete=True,  # written whole; minAge covers a write in flight
        metrics=metrics,
        resume_point=bool(_LIGHTNING_LAST.match(name)) or name in ctx.last_targets,
    )


def _orbax(ctx: _Context, name: str) -> Checkpoint | None:
    root = ctx.root
    if _ORBAX_TMP in name and _is_dir(root, name):
        digits = _LAST_DIGITS.search(name.split(_ORBAX_TMP)[0])
        return _make(root, name, step=int(digits.group(1)) if digits else None, complete=False)
    if not (m := _ORBAX.match(name)) or not _is_dir(root, name):
        return None
    inside = os.listdir(root / name)
    complete = bool(inside) and (not ctx.orbax_commits or _ORBAX_COMMIT in inside)
    metrics = _read_json(root / name / "metrics" / "metrics")
    return _make(
        root,
        name,
        step=int(m.group(1)),
        complete=complete,
        metrics=_finite(metrics) if isinstance(metrics, dict) else {},
    )


def _torch_dcp(ctx: _Context, name: str) -> Checkpoint | None:
    root = ctx.root
    if not _is_dir(root, name):
        return None
    inside = os.listdir(root / name)
    if _DCP_METADATA not in inside and not any(f.endswith(".distcp") for f in inside):
        return None
    digits = _LAST_DIGITS.search(name)
    step = int(digits.group(1)) if digits else None
    return _make(root, name, step=step, complete=_DCP_METADATA in inside)


def _glob(ctx: _Context, name: str) -> Checkpoint | None:
    layout = ctx.layout
    assert layout.glob is not None
    assert layout.step_pattern is not None
    if name.startswith(".") or not fnmatch.fnmatchcase(name, layout.glob):
        return None
    found = re.search(layout.step_pattern, name)
    step = int(found.group(1)) if found and found.group(1).isdigit() else None
    return _make(ctx.root, name, step=step, complete=True)


_RECOGNIZERS = {
    "HuggingFace": _huggingface,
    "DeepSpeed": _deepspeed,
    "Lightning": _lightning,
    "Orbax": _orbax,
    "TorchDCP": _torch_dcp,
    "Glob": _glob,
}


def _recognize(ctx: _Context, name: str) -> Checkpoint | None:
    if name.endswith(PIN_MARKER) or (ctx.root / name).is_symlink():
        return None
    return _RECOGNIZERS[ctx.layout.type](ctx, name)


def scan(root: Path, layout: Layout) -> Iterator[Checkpoint]:
    """Every checkpoint directly under `root`, one at a time."""
    with os.scandir(root) as entries:
        names = sorted(e.name for e in entries)
    ctx = _Context(root, layout, names)
    for name in names:
        try:
            found = _recognize(ctx, name)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed or replaced while scanning
        if found is not None:
            yield found


def entry(root: Path, name: str, layout: Layout) -> Checkpoint | None:
    """One entry as it is now (right before deleting it), or None if it is no checkpoint."""
    try:
        names = [name] if layout.type not in ("Lightning", "Orbax") else os.listdir(root)
        return _recognize(_Context(root, layout, names), name)
    except (FileNotFoundError, NotADirectoryError):
        return None
