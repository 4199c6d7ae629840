"""A budget's hold on new work: when it holds, until when the webhook may believe it,
which workloads are held (`held_workload`, `held_pod`: the webhook's mark on a suspended or
gated workload) and which of them it starts when it has room again.

The webhook (core/admission.py) holds new work while the budget's status says so, until
`holdUntil`. The leader renews that deadline every few minutes while it holds, never past
the period's end: the operator stopped, new work starts again within HOLD_LEASE; the
period reset, at once.

Releases go oldest first by the API server's creation time (which no tenant writes; the
`held-at` annotation is for people), at most `room` a minute, each only if what it
declares it will cost fits what the budget has left after what it already started and
has not used yet. That commitment is kept in status (`admission.released`), so it holds
across evaluations and restarts until the started work finishes. A held workload that
does not fit, or that is outside the budget's scope, takes no place: the next one that
fits goes first.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    MAX_RELEASED,
    AdmissionStatus,
    ReleasedWorkload,
)
from trainwarden.api.v1alpha1.names import HELD_BY, RECLAIMED_BY, SUSPENDED_BY
from trainwarden.api.v1alpha1.types import ObjectReference
from trainwarden.budget.status import usage_from, usage_model
from trainwarden.core.accounting import Charge, Usage
from trainwarden.core.admission import GATE, HOLD_MARKS, BudgetView, covering
from trainwarden.core.budgets import prices
from trainwarden.core.estimate import demand, estimate, shares, usage_along
from trainwarden.core.pods import PodFacts
from trainwarden.core.scope import in_scope
from trainwarden.core.shapes import mapping, mappings
from trainwarden.core.workloads import (
    EPOCH,
    KUEUE_QUEUE,
    POD,
    SUSPEND_FIELD,
    WorkloadFacts,
    is_suspended,
)

HOLD_LEASE = timedelta(minutes=5)
"""How long a published hold lasts without renewal: how long new work may still be held
after the operator stopped."""
RENEW_BEFORE = timedelta(minutes=3)
"""A hold with less than this left is renewed (at most one status write per budget every
two minutes while it holds)."""
SETTLE = timedelta(seconds=60)
"""A record of a start this process made is believed this long though the cache still
shows the workload held (the cache lags behind our own patch)."""


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
    released: Sequence[ReleasedWorkload] | None = None,
) -> AdmissionStatus | None:
    """The admission status to publish; None when there is nothing to say. `released`:
    None keeps the previous record of what the budget started."""
    kept = list(previous.released if previous else []) if released is None else list(released)
    if not holding:
        if not held and not kept:
            return None
        return AdmissionStatus(held=held, released=kept, observed_generation=generation)
    until = previous.hold_until if previous is not None and previous.holding else None
    if until is None or until - now < RENEW_BEFORE or until > now + HOLD_LEASE:
        until = now.replace(microsecond=0) + HOLD_LEASE
    if period_end is not None:
        until = min(until, period_end)
    return AdmissionStatus(
        holding=True, hold_until=until, held=held, released=kept, observed_generation=generation
    )


@dataclass(frozen=True, slots=True)
class HeldRef:
    """A held workload: enough to find it, re-read it and start it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    created: datetime
    """When the API server created it: the order holds are released in."""
    seen: int = field(default=0, compare=False)
    """The cache event it was last seen in: a judgement of its cost stands until the next."""

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def held_workload(w: WorkloadFacts | None) -> tuple[str, HeldRef] | None:
    """Held, and by whom: marked, suspended, not Kueue's, not suspended by a budget or
    reclaimed as idle since (those are other records, with other owners)."""
    if w is None or not w.suspended or w.kueue_managed or HELD_BY not in w.annotations:
        return None
    if SUSPENDED_BY in w.labels or RECLAIMED_BY in w.labels:
        return None
    ref = HeldRef(w.api_version, w.kind, w.namespace, w.name, w.uid, w.created)
    return w.annotations[HELD_BY], ref


def held_pod(p: PodFacts | None) -> tuple[str, HeldRef] | None:
    """Held, and by whom: gated by trainwarden and marked."""
    if p is None or not p.gated or HELD_BY not in p.annotations:
        return None
    s = p.snapshot
    at = p.created or EPOCH
    return p.annotations[HELD_BY], HeldRef(*POD, s.namespace, s.name, s.uid, at)


def heir(
    obj: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    budgets: Sequence[BudgetView],
    now: datetime,
    *,
    leaving: str,
) -> BudgetView | None:
    """The budget that takes over holding `obj` when `leaving` lets it go (has room, or
    was deleted): the first by name of the other Enforce budgets that hold new work in
    its scope now. None: nothing else would hold it, so it starts."""
    found = [
        b
        for b in covering(obj, namespace_labels, [b for b in budgets if b.name != leaving])
        if b.holds(now) and b.spec.mode == "Enforce" and b.spec.enforcement.new_workloads == "Hold"
    ]
    return found[0] if found else None


def release_order(held: Iterable[HeldRef]) -> list[HeldRef]:
    """Oldest first, by what the API server stamped."""
    return sorted(held, key=lambda h: (h.created, h.namespace, h.name, h.uid))


def still_held(obj: Mapping[str, Any], ref: HeldRef, budget: str) -> bool:
    """The object as re-read is the one held, still exactly as the webhook left it for
    `budget`: marked, suspended (or gated), not Kueue's, not suspended by a budget or
    reclaimed as idle since."""
    meta = mapping(obj.get("metadata"))
    labels, annotations = mapping(meta.get("labels")), mapping(meta.get("annotations"))
    if meta.get("uid") != ref.uid or annotations.get(HELD_BY) != budget:
        return False
    if KUEUE_QUEUE in labels or SUSPENDED_BY in labels or RECLAIMED_BY in labels:
        return False
    if (ref.api_version, ref.kind) == POD:
        return any(
            g.get("name") == GATE for g in mappings(mapping(obj.get("spec")).get("schedulingGates"))
        )
    return is_suspended(obj)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A held workload as the release decision sees it."""

    ref: HeldRef
    cost: Usage | None
    """What it declares it will cost; None: it declares no (readable) duration."""
    covered: bool = True
    """Whether the budget's scope covers its pods (its label selector included)."""


def candidate(
    ref: HeldRef,
    obj: Mapping[str, Any],
    spec: TrainingBudgetSpec,
    namespace_labels: Mapping[str, str],
) -> Candidate:
    """How the release decision sees the object re-read for `ref`."""
    d = demand(obj)
    covered = any(in_scope(spec.scope, ref.namespace, namespace_labels, g.labels) for g in d.groups)
    return Candidate(ref, estimate(d, spec.accelerators, prices(spec)).total, covered)


def total(usages: Iterable[Usage]) -> Usage:
    """The sum of `usages`."""
    found = Usage()
    for usage in usages:
        found = found + usage
    return found


def affordable(
    wanted: Usage | None, committed: Usage, remaining: Mapping[str, float]
) -> tuple[bool, str]:
    """Whether a held workload's declared cost fits what the budget has left once what it
    started and has not used yet is set aside: (yes, "") or (no, why). Without a declared
    duration there is no cost to compare: it starts while something is left uncommitted."""
    if wanted is None:
        full = [d for d, left in remaining.items() if 0 < usage_along(committed, d) >= left]
        if not full:
            return True, ""
        return False, f"it declares no duration and what is left of {full[0]} is committed"
    over = {dim: pct for dim, pct in shares(wanted + committed, remaining).items() if pct > 100.0}
    if not over:
        return True, ""
    dim = max(over, key=lambda d: over[d])
    left, held = remaining.get(dim, 0.0), usage_along(committed, dim)
    why = f"its estimate needs more {dim} than the {max(0.0, left - held):g} left"
    return False, why + (f" ({held:.4g} of {left:g} committed to work it started)" if held else "")


@dataclass(frozen=True)
class Plan:
    """One evaluation's release decision, taken one held workload at a time, oldest first:
    what starts now, and why the ones that do not fit stay held."""

    room: int
    """How many may start now (the per-minute cap)."""
    remaining: Mapping[str, float]
    commitments: Mapping[str, Usage]
    """What each workload the budget started (by uid) has not used yet of its estimate."""
    start: tuple[Candidate, ...] = ()
    held: tuple[tuple[HeldRef, str], ...] = ()

    @property
    def full(self) -> bool:
        return len(self.start) >= self.room

    def consider(self, c: Candidate) -> "Plan":
        """The plan with `c` started if there is a place, it is the budget's, and its cost
        fits; a workload that does not fit takes no place from the ones after it."""
        if self.full or not c.covered:
            return self
        others = {uid: u for uid, u in self.commitments.items() if uid != c.ref.uid}
        fits, why = affordable(c.cost, total(others.values()), self.remaining)
        if fits and c.cost is not None and len(others) >= MAX_RELEASED:
            fits, why = False, f"{MAX_RELEASED} started workloads are committed; it waits for one"
        if not fits:
            return replace(self, held=(*self.held, (c.ref, why)))
        kept = others if c.cost is None else {**others, c.ref.uid: c.cost}
        return replace(self, commitments=kept, start=(*self.start, c))


def plan_release(
    candidates: Iterable[Candidate],
    room: int,
    remaining: Mapping[str, float],
    commitments: Mapping[str, Usage],
) -> Plan:
    """The decision over a whole queue: the shell (budget/holds.py) takes the same
    steps, re-reading each held workload as its turn comes, and stops once `room` are
    started."""
    by_ref = {c.ref: c for c in candidates}
    plan = Plan(max(0, room), remaining, commitments)
    for ref in release_order(by_ref):
        plan = plan.consider(by_ref[ref])
    return plan


State = Literal["running", "held", "over"]


def workload_state(found: WorkloadFacts | None, budget: str) -> State:
    """Where a started workload stands, as the cache shows it: still held (the cache has
    not seen our start yet, or the start never happened), running, or over (gone,
    finished, or suspended since by someone)."""
    if found is None or found.result is not None:
        return "over"
    if found.suspended:
        return "held" if found.annotations.get(HELD_BY) == budget else "over"
    return "running"


def pod_state(found: PodFacts | None) -> State:
    if found is None or found.deleting or found.snapshot.end is not None:
        return "over"
    return "held" if found.gated else "running"


def _left(estimate: Usage, used: Usage) -> Usage:
    """What is left of `estimate` once `used`, along each dimension, never below zero."""
    accel = {
        r: h - used.accelerator_hours.get(r, 0.0) for r, h in estimate.accelerator_hours.items()
    }
    return Usage(
        {r: h for r, h in accel.items() if h > 0},
        max(0.0, estimate.cpu_core_hours - used.cpu_core_hours),
        max(0.0, estimate.memory_gib_hours - used.memory_gib_hours),
        max(0.0, estimate.cost - used.cost),
    )


def outstanding(
    records: Sequence[ReleasedWorkload],
    states: Mapping[str, State],
    used: Mapping[str, Usage],
    now: datetime,
    since: datetime | None,
) -> list[tuple[ReleasedWorkload, Usage]]:
    """The records that still commit something, and what: each started workload's
    estimate less what it used since it started, until it is over or has used it all. A
    record whose workload still looks held is believed while fresh (SETTLE), and never
    from an earlier process (`since`: this process's first evaluation; its cache was
    listed after that process died, so the start never happened)."""
    kept = []
    for r in records:
        state = states.get(r.ref.uid, "over")
        fresh = now - SETTLE < r.released_at and (since is None or r.released_at >= since)
        if state == "over" or (state == "held" and not fresh):
            continue
        left = usage_from(r.estimate)
        if state == "running":
            left = _left(left, used.get(r.ref.uid, Usage()))
        if not left.is_zero:
            kept.append((r, left))
    return kept


def used_since(
    charges: Iterable[tuple[str, Charge]], started: Mapping[str, datetime], now: datetime
) -> dict[str, Usage]:
    """What each started workload (by uid) has used since it started, from its charged
    pods as (workload uid, charge). Pods already gone are not counted: what is left of
    an estimate errs high, never low."""
    found: dict[str, Usage] = {}
    for uid, c in charges:
        at = started.get(uid)
        if at is not None:
            used = c.rate.usage(c.seconds(at.timestamp(), now.timestamp()))
            found[uid] = found.get(uid, Usage()) + used
    return found


def _up(value: float) -> float:
    """Rounded up to six decimals: a record never commits less than was declared."""
    return math.ceil(value * 1e6) / 1e6


def released(ref: HeldRef, cost: Usage, now: datetime) -> ReleasedWorkload:
    """The record of a start, written before the start itself."""
    return ReleasedWorkload(
        ref=ObjectReference(
            api_version=ref.api_version,
            kind=ref.kind,
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
        ),
        estimate=usage_model(cost, _up),
        released_at=now,
    )


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
