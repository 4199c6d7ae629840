"""Lightning checkpoint names read the way `ModelCheckpoint.format_checkpoint_name` writes
them (Lightning 2.6): the template's `{name}` and `{name:spec}` fields become
`name=<value>` (`auto_insert_metric_name`), fields are joined by the template's own text
(`-` by default: `{epoch}-{step}`), a name taken already gets `-v1`, `-v2`, ... before
`.ckpt` (a run restarted into the same directory), and the value is Python's formatting of
a number (`0.2610`, `-0.5`, `1e-05`, `005`, `95.0%`, `nan`).

So a value ends where the number ends, never at the next `-` (`val_loss=0.2610-val_mae=
0.4276-v1.ckpt` records both), and a name runs from the end of the previous value (less
one joining `-` or `_`) to its `=`: names may hold `-` themselves, and the text of a
template before its first field (`sample-mnist-epoch=02`) is kept as the name too, with
each suffix after a `-` (`mnist-epoch`, `epoch`) as another spelling; text glued to a
field by `_` (`best_{val_loss}`) cannot be told from the name (`best_val_loss`), except
before `epoch` and `step` (`run7_step=40`), which no metric spells. A value followed by
a digit or `.` is no number Lightning wrote (`lr=1.2.3`): that field is text. A metric name with
`/` (`val/loss`) makes Lightning write into a subdirectory (`epoch=0-val/loss=0.26.ckpt`:
the directory `epoch=0-val` holding `loss=0.26.ckpt`); the caller passes that whole
relative path, and the name reads back as `val/loss`.
"""

import math
import re
from dataclasses import dataclass, field

_VERSION = re.compile(r"(.*)-v([0-9]{1,9})", re.DOTALL)
_NUMBER = re.compile(
    r"[-+ ]?(?:nan|inf|(?:[0-9](?:[_,]?[0-9])*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?%?)"
    r"(?![0-9.])",
    re.IGNORECASE,
)
_STEP = re.compile(r"[0-9]{1,18}")
_STEP_NAME = re.compile(r"(?:^|[-_])step$")
_EPOCH_NAME = re.compile(r"(?:^|[-_])epoch$")
"""`step` and `epoch` after a template's text (`run7_step`), which no metric spells."""
LAST = re.compile(r"last(-v[0-9]+)?\.ckpt")
"""`save_last`'s name (CHECKPOINT_NAME_LAST), versioned when taken."""


@dataclass(frozen=True)
class Parsed:
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """Finite values by name (every spelling of the name), epoch and step left out."""
    version: int | None = None
    """N of a `-vN` suffix."""


def _value(text: str) -> float | None:
    cleaned = text.replace(",", "").replace("_", "").strip()
    scale = 100.0 if cleaned.endswith("%") else 1.0
    try:
        value = float(cleaned.rstrip("%")) / scale
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _spellings(name: str) -> list[str]:
    """The name, and each suffix after a `-` (the template's text before a field)."""
    parts = name.split("-")
    spelled = ("-".join(parts[i:]) for i in range(len(parts)))
    return [s for s in spelled if s and "=" not in s]


def fields(stem: str) -> list[tuple[str, str]]:
    """(name, value text) of every `name=value`, in order; a value is the longest number
    after the `=`, or nothing (that `=` is then part of the next name)."""
    found: list[tuple[str, str]] = []
    start = 0
    at = stem.find("=")
    while at >= 0:
        number = _NUMBER.match(stem, at + 1)
        if number is None or number.end() == at + 1:
            at = stem.find("=", at + 1)
            continue
        name = stem[start:at]
        if name[:1] in ("-", "_") and start > 0:
            name = name[1:]
        if name:
            found.append((name, number.group()))
        start = number.end()
        at = stem.find("=", start)
    return found


def parse(name: str) -> Parsed:
    """What a checkpoint's name records: `name` is its path relative to the directory
    (`a/b.ckpt` when a metric name held `/`)."""
    stem = name.removesuffix(".ckpt")
    version = None
    if (versioned := _VERSION.fullmatch(stem)) and "=" not in stem[len(versioned.group(1)) :]:
        stem, version = versioned.group(1), int(versioned.group(2))
    step: int | None = None
    metrics: dict[str, float] = {}
    for raw_name, text in fields(stem):
        if _STEP_NAME.search(raw_name):
            if step is None and _STEP.fullmatch(text.strip()):
                step = int(text)
            continue
        for spelling in _spellings(raw_name):
            if not _EPOCH_NAME.search(spelling) and (value := _value(text)) is not None:
                metrics.setdefault(spelling, value)
    return Parsed(step, metrics, version)
