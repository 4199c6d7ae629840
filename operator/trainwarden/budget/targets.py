"""Which workloads an exhausted budget suspends or resumes, before it acts: what stops each
running pod it charges (budget/enforcement.py over the cache's owner chains), and its own
record of what it suspended (status.suspended).

The record is the only thing a budget trusts about what it suspended: labels and
annotations on a workload are written by anyone who can edit it, so a Job labelled
"suspended-by: team-a" by its owner is neither resumed by team-a's budget nor able to
break it. A suspension is recorded before it is made (budget/reconcile.py writes status
between planning and acting, budget/enforce.py), so a crash in between leaves a record
of a workload that is not suspended, which the next evaluation drops, never a suspended
workload nobody may resume.
"""

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from trainwarden.adapters import workloads
from trainwarden.api.v1alpha1.budget_status import MAX_SUSPENDED, SuspendedWorkload
from trainwarden.api.v1alpha1.names import SUSPENDED_BY
from trainwarden.api.v1alpha1.types import ObjectReference
from trainwarden.budget import enforcement
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core.pods import PodFacts
from trainwarden.core.workloads import EPOCH, POD, WorkloadFacts, ancestors

SETTLE = timedelta(seconds=60)
"""A fresh record is kept even if the cache does not show the suspension yet."""


def _ref(w: WorkloadFacts) -> enforcement.WorkloadRef:
    return enforcement.WorkloadRef(w.api_version, w.kind, w.namespace, w.name, w.uid)


@dataclass
class Found:
    """What an exhausted budget found to stop among the pods it charges."""

    workloads: list[enforcement.Workload] = field(default_factory=list)
    unstoppable: list[tuple[enforcement.Workload, str]] = field(default_factory=list)
    """Pods it cannot stop, and why: said in status and Events."""
    waiting: list[tuple[enforcement.Workload, str]] = field(default_factory=list)
    """Pods something else may still stop (their owner's controller, Kueue): in status."""
    recheck: datetime | None = None
    """When the first wait ends."""

    def into(self, plan: enforcement.Plan) -> enforcement.Plan:
        return replace(
            plan,
            skipped=plan.skipped + tuple(self.waiting),
            unstoppable=tuple(self.unstoppable),
            recheck=self.recheck,
        )


def candidates(
    charged: Mapping[str, PodFacts],
    cache: ClusterCache,
    accelerators: Sequence[str],
    now: datetime,
    strays: dict[str, datetime],
    own: AbstractSet[str] = frozenset(),
) -> Found:
    """The workloads to suspend and the pods to evict among the running charged pods
    (budget/enforcement.py), from the cache; never the operator's `own` Jobs (pruners, known
    by the uids their policies recorded, not by a label a tenant could copy). `strays`:
    since when each pod has been seen waiting on something else to stop it; kept for the
    pods still waiting, dropped for the rest."""
    found: dict[str, enforcement.Workload] = {}
    out = Found()
    waiting: dict[str, datetime] = {}
    for pod in list(charged.values()):
        snap = pod.snapshot
        if snap.end is not None or snap.outcome != "Running" or pod.deleting or pod.gated:
            continue
        decision = _decide(pod, cache, now, strays.get(snap.uid))
        if not isinstance(decision, tuple):  # something else may yet stop it: since when
            waiting[snap.uid] = strays.get(snap.uid, now)
        if isinstance(decision, enforcement.Unstoppable):
            ref = enforcement.WorkloadRef(*POD, snap.namespace, snap.name, snap.uid)
            said = (enforcement.Workload(ref, snap.start or EPOCH), decision.why)
            if decision.until is None:
                out.unstoppable.append(said)
                continue
            out.waiting.append(said)
            out.recheck = min(out.recheck or decision.until, decision.until)
            continue
        gpus = sum(snap.requests.get(r, 0.0) for r in accelerators)
        if isinstance(decision, enforcement.Evict):
            ref = enforcement.WorkloadRef(*POD, snap.namespace, snap.name, snap.uid)
            w = enforcement.Workload(
                ref, snap.start or EPOCH, gpus, pod.priority, note=decision.why
            )
            found[snap.uid] = w
            continue
        owner, kueue = decision
        if owner.uid in own:
            continue
        previous = found.get(owner.uid)
        found[owner.uid] = enforcement.Workload(
            _ref(owner),
            owner.created,
            gpus + (previous.accelerators if previous else 0.0),
            max(pod.priority, previous.priority) if previous else pod.priority,
            suspended=owner.suspended,
            kueue_managed=kueue is not None,
            kueue_workload=kueue,
        )
    strays.clear()
    strays.update(waiting)
    out.workloads = list(found.values())
    return out


def _decide(
    pod: PodFacts, cache: ClusterCache, now: datetime, stray_since: datetime | None
) -> enforcement.Unstoppable | enforcement.Evict | tuple[WorkloadFacts, str | None]:
    """How to stop one pod: a wait, an eviction, or the workload to suspend with the name
    of the Kueue Workload to suspend it through (None: its own suspend field)."""
    snap = pod.snapshot
    chain = ancestors(pod.owner, snap.namespace, cache.workload)
    decision = enforcement.stop(
        chain, pod.owner, started=snap.start, stray_since=stray_since, now=now
    )
    if not isinstance(decision, enforcement.Suspend):
        return decision
    target = decision.workload
    if not target.kueue_managed:
        return target, None
    record = cache.kueue.workload_of(target.uid)
    state = (True, record.active) if record is not None else None
    route = enforcement.kueue_route(target, state, stray_since=stray_since, now=now)
    if isinstance(route, enforcement.Unstoppable):
        return route
    return target, (record.name if route is None and record is not None else None)


def ours(
    budget: str,
    records: Sequence[SuspendedWorkload],
    cache: ClusterCache,
    now: datetime,
    since: datetime | None = None,
) -> tuple[list[SuspendedWorkload], list[enforcement.Workload]]:
    """The records still true (or too fresh for the cache to show), and the workloads
    they name that are suspended by this budget, as resume candidates.

    `since` is when this process first evaluated the budget: a record from before it was
    written by an earlier process (a restart, a failover), and the cache, listed after
    that process died, cannot lag behind its patches; so such a record is believed only
    if the cache confirms it (a crash between a resume and its status write would
    otherwise leave "suspended" in status, of a running Job, for SETTLE)."""
    kept, suspended = [], []
    label = workloads.label_value(budget)
    for record in records:
        found = cache.workload(record.ref.uid or "")
        fresh = record.suspended_at > now - SETTLE and (
            since is None or record.suspended_at >= since
        )
        if found is None or not found.suspended or found.labels.get(SUSPENDED_BY) != label:
            if fresh:  # the cache may not show it yet; and it counts against the cap
                kept.append(record)
            continue
        kept.append(record)
        suspended.append(
            enforcement.Workload(
                _ref(found),
                found.created,
                suspended=True,
                suspended_by=budget,
                kueue_managed=found.kueue_managed
                and cache.kueue.workload_of(found.uid) is not None,
                suspended_in=(record.generation, record.period_start)
                if record.period_start
                else None,
            )
        )
    return kept, suspended


def record(
    w: enforcement.Workload, now: datetime, generation: int, period_start: datetime
) -> SuspendedWorkload:
    ref = w.ref
    return SuspendedWorkload(
        ref=ObjectReference(
            api_version=ref.api_version,
            kind=ref.kind,
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
        ),
        suspended_at=now,
        generation=generation,
        period_start=period_start,
    )


def recorded(
    records: Sequence[SuspendedWorkload],
    suspending: Sequence[enforcement.Workload],
    now: datetime,
    generation: int,
    period_start: datetime,
) -> list[SuspendedWorkload]:
    """The records with those of the workloads about to be suspended, one per workload.

    A record can precede its suspension by a crash (it is kept while fresh, since the
    cache may not show the suspension yet); suspending that workload again replaces the
    record instead of adding a second one, which would be resumed twice, fill two of the
    budget's MAX_SUSPENDED places and count twice against the per-minute cap.
    Bare pods are evicted, which cannot be resumed: they get no record.
    """
    new = [record(w, now, generation, period_start) for w in suspending if w.ref.kind != "Pod"]
    replaced = {r.ref.uid for r in new}
    return [r for r in records if r.ref.uid not in replaced] + new


def room(records: Sequence[SuspendedWorkload]) -> int:
    return max(0, MAX_SUSPENDED - len(records))
