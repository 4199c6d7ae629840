"""Metadata files a trainer writes and a tenant controls (trainer_state.json, Orbax's
metrics, step numbers in names), read so that no content can crash or exhaust the reader:
a small size cap, a parse that turns any nesting into a value or None, numbers that fit a
float, steps that are ASCII digits and fit an int64."""

import json
import math
import re
from contextlib import suppress

METADATA_LIMIT = 2**20
"""Bytes of one metadata file read (trainer_state.json, Orbax's metrics). Hugging Face
writes some 130 bytes per log_history entry, so 1 MiB holds about 8,000 of them (4 million
training steps at the default logging_steps=500, 80,000 at logging_steps=10). Parsed, such
a state costs 3.5 MiB, and no 1 MiB of JSON costs more than about 25 MiB (a list of empty
objects), which the pruner's 256 Mi and the operator's 512 Mi limits absorb (4 MiB could
cost 100 MiB). A larger file is not read: its checkpoint is kept (rule Held), saying why."""
_STEP = re.compile(r"[0-9]{1,18}")


def step_of(text: str | None) -> int | None:
    """A step from a name's digits: ASCII only (`\\d` takes "١٢", which int() reads as 12;
    str.isdigit takes "²", which int() refuses), at most 18 of them (an int64)."""
    if text is None or not _STEP.fullmatch(text):
        return None
    return int(text)


def finite(values: dict[str, object]) -> dict[str, float]:
    """The numeric values that are finite floats (an int past a float's range is not)."""
    found: dict[str, float] = {}
    for k, v in values.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            with suppress(OverflowError):
                if math.isfinite(number := float(v)):
                    found[k] = number
    return found


def parse_json(data: bytes | None) -> object:
    """Metadata as JSON, or None when it is not (malformed, truncated, nested past the
    interpreter's recursion limit: the C parser's own guard raises RecursionError at once,
    an exception like any other here, so 100,000 brackets cost one unreadable checkpoint).
    The parse runs at C speed over at most METADATA_LIMIT bytes; a Python-level depth
    pre-check would cost seconds per file, and the parsed object is never walked."""
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def hf_metrics(state: object) -> dict[str, float]:
    """The numbers logged at the checkpoint's own step (eval_loss, loss, ...)."""
    if not isinstance(state, dict):
        return {}
    step = state.get("global_step")
    found: dict[str, float] = {}
    history = state.get("log_history")
    for entry in history if isinstance(history, list) else []:
        if isinstance(entry, dict) and entry.get("step") == step:
            found |= finite({k: v for k, v in entry.items() if k not in ("step", "epoch")})
    return found
