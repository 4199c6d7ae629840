"""Repeat runs noticed before they start (issue 28 item 5): new work that declares the same
config hash and data version as a finished run's receipt in its namespace is told so —
a kubectl warning naming the earlier run's receipt, outcome and cost, and the mark
trainwarden.dev/repeat-of — and, where a budget covering it in Enforce says `repeats:
Hold`, created suspended until its submitter starts it.

Pure: the webhook looks the earlier run up in the cache (cache/cluster.py `earlier_run`),
by what core/ledger.py reads of the work's annotations, the same reading the receipt
recorded. A repeat hold is not a budget's hold: no budget starts it (budget/holds.py
knows only HELD_BY), its submitter does, by unsuspending it (or removing the gate).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainwarden.api.v1alpha1.names import REPEAT_HELD_BY, REPEAT_INTENDED, REPEAT_OF
from trainwarden.core.ledger import Earlier
from trainwarden.core.shapes import mapping

JSON = dict[str, Any]
MARKS = (REPEAT_OF, REPEAT_HELD_BY)


@dataclass(frozen=True)
class Repeat:
    warnings: tuple[str, ...] = ()
    marks: tuple[JSON, ...] = ()
    """JSON patch of the repeat marks (set, or removed from a copied manifest)."""
    held_by: str | None = None
    """The budget whose repeats: Hold holds the work."""


def intended(obj: Mapping[str, Any]) -> bool:
    annotations = mapping(mapping(obj.get("metadata")).get("annotations"))
    return annotations.get(REPEAT_INTENDED) == "true"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _patch(obj: Mapping[str, Any], marks: Mapping[str, str]) -> list[JSON]:
    current = mapping(mapping(obj.get("metadata")).get("annotations"))
    if not current and marks:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(marks)}]
    ops: list[JSON] = [
        {"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"}
        for k in MARKS
        if k in current and k not in marks
    ]
    return ops + [
        {"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
        for k, v in marks.items()
    ]


def check(
    obj: Mapping[str, Any],
    hold: Sequence[tuple[str, bool]],
    earlier: Earlier | None,
    *,
    held_already: bool,
    holds_as: str,
) -> Repeat:
    """What the repeat check says of work that would start now, named `what` in messages
    (`hold`: the budgets covering it whose repeats is Hold, by name, and whether each is
    in Enforce; `holds_as`: spec.suspend or the scheduling gate). `held_already`: a budget
    holds it for being exhausted (that hold stands; the repeat is said beside it)."""
    if earlier is None:
        return Repeat(marks=tuple(_patch(obj, {})))
    said = (
        f"trainwarden: {_what(obj)} repeats a finished run: {earlier.describe()} declared the "
        f"same config hash {earlier.config_hash} and data version {earlier.data_version}"
    )
    enforcing = next((name for name, enforce in hold if enforce), None)
    marks = {REPEAT_OF: earlier.receipt}
    if held_already or intended(obj) or not hold:
        return Repeat((said,), tuple(_patch(obj, marks)))
    if enforcing is None:
        would = f"{said}; TrainingBudget {hold[0][0]} would hold it (repeats: Hold, DryRun)"
        return Repeat((would,), tuple(_patch(obj, marks)))
    held = (
        f"{said}; held ({holds_as}) by TrainingBudget {enforcing} (repeats: Hold): start "
        f'it yourself if the repeat is intended (or submit it with {REPEAT_INTENDED}: "true")'
    )
    marks[REPEAT_HELD_BY] = enforcing
    return Repeat((held,), tuple(_patch(obj, marks)), enforcing)


def _what(obj: Mapping[str, Any]) -> str:
    meta = mapping(obj.get("metadata"))
    name = meta.get("name") or f"{meta.get('generateName', '')}…"
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{name}"
