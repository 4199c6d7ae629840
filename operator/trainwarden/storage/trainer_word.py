"""What the trainer itself says about its checkpoints, read from what it wrote: which one is
its best, which one a resume loads, and what its metric names mean.

- Hugging Face Trainer: `best_model_checkpoint` in `trainer_state.json` (written when
  `metric_for_best_model` is set), read from the newest complete checkpoints (the highest
  step and the one written last); `metric_for_best_model="loss"` means `eval_loss` (the
  Trainer prefixes `eval_` to a name without it).
- Lightning: the ModelCheckpoint state inside the newest readable `.ckpt`
  (storage/lightning_state.py): `best_model_path` (protected), `best_k_models`' scores (which
  rank checkpoints whose names carry no metric), `last_model_path` (the resume point).
- DeepSpeed: `latest` (storage/layouts.py reads it as the resume pointer it is).
"""

import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field

from trainwarden.storage import beneath, lightning_names, lightning_state
from trainwarden.storage.lightning_state import Unreadable

PIN_MARKER = ".trainwarden-pin"

LIGHTNING_READS = 3
"""`.ckpt` files tried, newest first, for the callback state (the newest may be half
written)."""


def resolve_metric(layout: str, metric: str) -> tuple[str, str | None]:
    """The metric name as the layout's trainer resolves it, and a note when it differs."""
    if layout == "HuggingFace" and not metric.startswith("eval_"):
        resolved = f"eval_{metric}"
        return resolved, (
            f"keepBest: metric {metric!r} is read as {resolved!r}, as Hugging Face's "
            "metric_for_best_model resolves it"
        )
    return metric, None


def hf_best(
    named: Mapping[str, str | None], newest: Iterable[str], present: Iterable[str]
) -> dict[str, str]:
    """Checkpoint -> why, for what `best_model_checkpoint` names in the states of the
    `newest` checkpoints (`named`: each checkpoint's recorded path, or None)."""
    here = set(present)
    found: dict[str, str] = {}
    for source in newest:
        path = named.get(source)
        if not path:
            continue
        name = posixpath.basename(posixpath.normpath(path))
        if name in here:
            found.setdefault(name, f"Hugging Face's best_model_checkpoint (in {source})")
    return found


@dataclass
class LightningWord:
    """The callback state, by entry of the directory."""

    best: dict[str, str] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def entry(path: str, single: Mapping[str, str]) -> str | None:
    """The directory entry a recorded path is: the file itself, or the directory that
    holds it when a metric name's `/` nested it (`single`: directory -> its one file)."""
    parts = path.split("/")
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2 and single.get(parts[0]) == parts[1]:
        return parts[0]
    return None


def _newest(fd: int, files: Iterable[str]) -> list[str]:
    timed: list[tuple[float, str]] = []
    for relative in files:
        try:
            info = os.stat(relative, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            timed.append((info.st_mtime, relative))
    return [relative for _, relative in sorted(timed, reverse=True)]


def lightning(
    fd: int,
    kinds: Mapping[str, int],
    single: Mapping[str, str],
    reader: Callable[[int, str], lightning_state.Word] = lightning_state.read,
) -> LightningWord:
    """The word of the newest readable `.ckpt` directly in the directory (or alone in a
    directory a `/` made): `single` maps such directories to their one file."""
    files = [n for n, k in kinds.items() if n.endswith(".ckpt") and stat.S_ISREG(k)]
    files += [f"{d}/{f}" for d, f in single.items()]
    word = LightningWord()
    for relative in _newest(fd, files)[:LIGHTNING_READS]:
        try:
            state = reader(fd, relative)
        except (Unreadable, OSError) as error:
            word.notes.append(f"Lightning's callback state in {relative} not read: {error}")
            continue
        for path, why in state.best.items():
            if (name := entry(path, single)) is not None:
                word.best.setdefault(name, why)
        for path, why in state.last.items():
            if (name := entry(path, single)) is not None:
                word.last.setdefault(name, why)
        for path, scores in state.scores.items():
            if (name := entry(path, single)) is not None:
                word.scores.setdefault(name, scores)
        return word
    return word


def link_targets(path: str, fd: int, kinds: Mapping[str, int]) -> set[str]:
    """Paths, relative to the directory, that Lightning's `last.ckpt` links name (`save_last=
    "link"`), when they stay inside it; the links themselves are never followed."""
    base = os.path.normpath(path)
    targets = set()
    for name, mode in kinds.items():
        if lightning_names.LAST.fullmatch(name) and stat.S_ISLNK(mode):
            try:
                link = os.readlink(name, dir_fd=fd)
            except OSError:
                continue  # the link went away while we looked
            target = os.path.relpath(os.path.normpath(os.path.join(base, link)), base)
            if not target.startswith(".."):
                targets.add(target)
    return targets


def nested(fd: int, kinds: Mapping[str, int]) -> dict[str, str]:
    """Directories holding exactly one `.ckpt` file and nothing else (a pin aside), mapped
    to that file: what Lightning writes for a metric name with `/` (`epoch=0-val/loss=0.26
    .ckpt`)."""
    found = {}
    for name, mode in kinds.items():
        if name.endswith(".ckpt") or name.startswith(".") or not stat.S_ISDIR(mode):
            continue
        inside = [n for n in beneath.listdir(fd, name) if n != PIN_MARKER]
        if len(inside) == 1 and inside[0].endswith(".ckpt"):
            with suppress(OSError):
                info = os.stat(f"{name}/{inside[0]}", dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode):
                    found[name] = inside[0]
    return found
