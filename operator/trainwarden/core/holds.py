"""A budget's hold on new work: when it holds, until when the webhook may believe it, and
which held workloads it starts when it has room again.

The webhook (core/admission.py) holds new work while the budget's status says so, until
`holdUntil`. The leader renews that deadline every few minutes while it holds, never past
the period's end: the operator stopped, new work starts again within HOLD_LEASE; the
period reset, at once. Releases go oldest first, at most `cap` a minute, and a workload
whose declared cost the budget cannot pay stays held, with the reason said.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from trainwarden.api.v1alpha1.budget import AdmissionStatus
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import GATE, HOLD_MARKS
from trainwarden.core.estimate import shares
from trainwarden.core.shapes import mappings
from trainwarden.core.workloads import POD, SUSPEND_FIELD

HOLD_LEASE = timedelta(minutes=5)
"""How long a published hold lasts without renewal: how long new work may still be held
after the operator stopped."""
RENEW_BEFORE = timedelta(minutes=3)
"""A hold with less than this left is renewed (at most one status write per budget every
two minutes while it holds)."""


def holds_new_work(
    exhausted: bool,
    suspended_in: Iterable[tuple[int, datetime | None]],
    generation: int,
    period_start: datetime,
) -> bool:
    """Whether the budget holds new work: while it is exhausted, and while it keeps
    workloads suspended that it suspended under this spec in this period. Usage that
    stopped right at the limit reads a hair below it once the pods' end times (one-second
    resolution) are in; what the budget keeps suspended, new work must not overtake."""
    return exhausted or any(s == (generation, period_start) for s in suspended_in)


def admission(
    previous: AdmissionStatus | None,
    *,
    holding: bool,
    held: int,
    now: datetime,
    period_end: datetime | None,
    generation: int,
) -> AdmissionStatus | None:
    """The admission status to publish; None when there is nothing to say."""
    if not holding:
        return AdmissionStatus(held=held, observed_generation=generation) if held else None
    until = previous.hold_until if previous is not None and previous.holding else None
    if until is None or until - now < RENEW_BEFORE or until > now + HOLD_LEASE:
        until = now.replace(microsecond=0) + HOLD_LEASE
    if period_end is not None:
        until = min(until, period_end)
    return AdmissionStatus(
        holding=True, hold_until=until, held=held, observed_generation=generation
    )


@dataclass(frozen=True, slots=True)
class HeldRef:
    """A held workload: enough to find it, re-read it and start it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    held_at: datetime

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def release_order(held: Sequence[HeldRef], room: int) -> tuple[list[HeldRef], list[HeldRef]]:
    """Oldest first: those to start now (at most `room`) and those that wait."""
    ordered = sorted(held, key=lambda h: (h.held_at, h.namespace, h.name, h.uid))
    return ordered[: max(0, room)], ordered[max(0, room) :]


def affordable(
    wanted: Usage | None, committed: Usage, remaining: dict[str, float]
) -> tuple[bool, str]:
    """Whether a held workload's declared cost fits what the budget has left, after what
    this evaluation already started: (yes, "") or (no, why). Without a declared duration
    there is no cost to compare: it starts while the budget has room at all."""
    if wanted is None:
        return True, ""
    over = {dim: pct for dim, pct in shares(wanted + committed, remaining).items() if pct > 100.0}
    if not over:
        return True, ""
    dim = max(over, key=lambda d: over[d])
    left = remaining.get(dim, 0.0)
    return False, f"its estimate needs more {dim} than the {left:g} left"


def start_patch(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that starts exactly the version read of a held workload: unsuspend
    (or lift our scheduling gate, keeping others) and drop the hold marks."""
    meta = obj["metadata"]
    patch: dict[str, Any] = {
        "metadata": {
            "resourceVersion": meta["resourceVersion"],
            "annotations": dict.fromkeys(HOLD_MARKS),
        }
    }
    if (obj["apiVersion"], obj["kind"]) == POD:
        gates = mappings((obj.get("spec") or {}).get("schedulingGates"))
        patch["spec"] = {"schedulingGates": [dict(g) for g in gates if g.get("name") != GATE]}
        return patch
    node = patch
    path = SUSPEND_FIELD[(obj["apiVersion"], obj["kind"])]
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = False
    return patch
