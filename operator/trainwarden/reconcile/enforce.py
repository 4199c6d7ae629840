"""What an exhausted budget suspends and resumes: candidates from the cache, the budget's
own record of what it suspended, and the actions themselves.

The record (status.suspended) is the only thing a budget trusts about what it suspended:
labels and annotations on a workload are written by anyone who can edit it, so a Job
labelled "suspended-by: team-a" by its owner is neither resumed by team-a's budget nor
able to break it. A suspension is recorded before it is made (the caller writes status
between `plan` and `act`), so a crash in between leaves a record of a workload that is
not suspended, which the next evaluation drops, never a suspended workload nobody may
resume.
"""

import contextlib
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Blocked, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.budget import MAX_SUSPENDED, SuspendedWorkload, TrainingBudgetSpec
from trainwarden.api.v1alpha1.types import ObjectReference
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import containment, enforcement
from trainwarden.core.pods import PodFacts
from trainwarden.core.workloads import (
    EPOCH,
    POD,
    SUSPENDED_BY,
    WorkloadFacts,
    ancestors,
    is_suspended,
)

log = logs.get(__name__)
KIND = "TrainingBudget"
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
    (core/containment.py), from the cache; never the operator's `own` Jobs (pruners, known
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
        if isinstance(decision, containment.Unstoppable):
            ref = enforcement.WorkloadRef(*POD, snap.namespace, snap.name, snap.uid)
            said = (enforcement.Workload(ref, snap.start or EPOCH), decision.why)
            if decision.until is None:
                out.unstoppable.append(said)
                continue
            out.waiting.append(said)
            out.recheck = min(out.recheck or decision.until, decision.until)
            continue
        gpus = sum(snap.requests.get(r, 0.0) for r in accelerators)
        if isinstance(decision, containment.Evict):
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
) -> containment.Unstoppable | containment.Evict | tuple[WorkloadFacts, str | None]:
    """How to stop one pod: a wait, an eviction, or the workload to suspend with the name
    of the Kueue Workload to suspend it through (None: its own suspend field)."""
    snap = pod.snapshot
    chain = ancestors(pod.owner, snap.namespace, cache.workload)
    decision = containment.stop(
        chain, pod.owner, started=snap.start, stray_since=stray_since, now=now
    )
    if not isinstance(decision, containment.Suspend):
        return decision
    target = decision.workload
    if not target.kueue_managed:
        return target, None
    record = cache.kueue.workload_of(target.uid)
    state = (True, record.active) if record is not None else None
    route = containment.kueue_route(target, state, stray_since=stray_since, now=now)
    if isinstance(route, containment.Unstoppable):
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


@dataclass
class Outcome:
    pending: list[str] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)
    """uids whose suspension did not happen (their records are dropped)."""
    resumed: set[str] = field(default_factory=set)
    evicted: int = 0
    """Bare pods evicted: not resumable, so not recorded; they count against the cap."""


@dataclass(frozen=True)
class Context:
    """What every action of one evaluation shares."""

    kube: Kube
    budget: JSON
    spec: TrainingBudgetSpec
    reason: str
    generation: int
    period_start: datetime
    announced: set[str]

    @property
    def name(self) -> str:
        return str(self.budget["metadata"]["name"])


async def _fresh(kube: Kube, ref: enforcement.WorkloadRef) -> JSON | None:
    """The object as it is now: act on what is there, not on what the cache said."""
    found = await kube.get(ref.api_version, ref.kind, ref.namespace, ref.name)
    if found is None or found["metadata"].get("uid") != ref.uid:
        return None
    return found


async def _suspend(ctx: Context, w: enforcement.Workload, out: Outcome) -> None:
    obj = await _fresh(ctx.kube, w.ref)
    if obj is None or is_suspended(obj):
        out.failed.add(w.ref.uid)  # gone, replaced, or suspended by someone else meanwhile
        return
    labels, annotations = workloads.budget_marks(
        ctx.name, ctx.reason, ctx.generation, ctx.period_start
    )
    try:
        if w.kueue_workload is not None:
            await _deactivate(ctx, obj, w.kueue_workload, (labels, annotations))
        elif await workloads.suspend(ctx.kube, obj, labels, annotations) is None:
            out.evicted += 1  # a bare pod: no record, so counted here for the cap
    except (Conflict, Blocked, Gone) as error:
        out.failed.add(w.ref.uid)
        out.pending.append(f"deferred {w.ref}: {error}")
        result = "blocked" if isinstance(error, Blocked) else "conflict"
        metrics.report_action(KIND, ctx.name, "Suspend", result)
        log.info(
            "suspension deferred", object=str(w.ref), policy=f"{KIND}/{ctx.name}", error=str(error)
        )
        return
    reason = f"{ctx.reason} (evicted: {w.note})" if w.note else ctx.reason
    await ctx.kube.event(
        obj, type_="Warning", reason="SuspendedByBudget", message=reason, action="Suspend"
    )
    await ctx.kube.event(
        ctx.budget,
        type_="Warning",
        reason="Suspended",
        message=f"suspended {w.ref}",
        action="Suspend",
    )
    log.warning("workload suspended", object=str(w.ref), policy=f"{KIND}/{ctx.name}", reason=reason)
    metrics.report_action(KIND, ctx.name, "Suspend", "done")


Marks = tuple[dict[str, str], dict[str, str]]


async def _deactivate(ctx: Context, job: JSON, name: str, marks: Marks) -> None:
    """Suspend a Kueue-managed workload the way Kueue expects: deactivate its Workload
    (Kueue evicts it and suspends the job). The job is marked first: a crash in between
    leaves a marked running job, whose record the next evaluation drops, never a
    deactivated Workload that nobody may reactivate."""
    workload = await workloads.kueue_workload(ctx.kube, job, name)
    if workload is None or (workload.get("spec") or {}).get("active") is False:
        raise Gone(f"{job['kind']} {job['metadata']['name']} has no active Kueue Workload")
    marked = await workloads.mark(ctx.kube, job, *marks)
    try:
        await workloads.deactivate(ctx.kube, workload, *marks)
    except (Conflict, Gone):
        with contextlib.suppress(Conflict, Gone):
            await workloads.unmark(ctx.kube, marked)
        raise
    await ctx.kube.event(
        workload,
        type_="Warning",
        reason="DeactivatedByBudget",
        message=ctx.reason,
        action="Suspend",
    )
    log.warning(
        "Kueue workload deactivated",
        object=f"Workload/{job['metadata']['namespace']}/{workload['metadata']['name']}",
        policy=f"{KIND}/{ctx.name}",
        reason=ctx.reason,
    )


async def _reactivate(ctx: Context, job: JSON, w: enforcement.Workload, out: Outcome) -> bool:
    """Resume through Kueue: reactivate the Workload, only if this budget deactivated it
    (its mark), then drop the job's marks. False: nothing was resumed (said in `out`)."""
    workload = await workloads.kueue_workload(ctx.kube, job)
    if workload is None:
        out.pending.append(f"not resuming {w.ref}: its Kueue Workload is not found")
        return False
    mine = workloads.suspended_by(workload) == workloads.label_value(ctx.name)
    inactive = (workload.get("spec") or {}).get("active") is False
    if inactive and not mine:  # deactivated by someone else since: theirs to reactivate
        out.pending.append(f"not resuming {w.ref}: its Workload was deactivated by someone else")
        out.resumed.add(w.ref.uid)
        log.info("left deactivated", object=str(w.ref), policy=f"{KIND}/{ctx.name}")
        await _unmark_fresh(ctx, w.ref)
        return False
    if inactive:
        await workloads.reactivate(ctx.kube, workload)
    await _unmark_fresh(ctx, w.ref)
    return True


async def _unmark_fresh(ctx: Context, ref: enforcement.WorkloadRef) -> None:
    """The job's marks, dropped from the version now stored (Kueue may have just changed
    it); a conflict leaves a stale mark, never a wrong state."""
    job = await _fresh(ctx.kube, ref)
    if job is None:
        return
    try:
        await workloads.unmark(ctx.kube, job)
    except (Conflict, Gone) as error:
        log.info("marks left on the job", object=str(ref), error=str(error))


async def _resume(ctx: Context, w: enforcement.Workload, out: Outcome) -> None:
    obj = await _fresh(ctx.kube, w.ref)
    if obj is None or not is_suspended(obj):
        out.resumed.add(w.ref.uid)  # gone or resumed by someone else: nothing left to do
        return
    try:
        if w.kueue_managed:
            if not await _reactivate(ctx, obj, w, out):
                return
        else:
            await workloads.resume(ctx.kube, obj)
    except (Conflict, Gone) as error:
        log.info(
            "resume deferred", object=str(w.ref), policy=f"{KIND}/{ctx.name}", error=str(error)
        )
        metrics.report_action(KIND, ctx.name, "Resume", "conflict")
        return
    out.resumed.add(w.ref.uid)
    message = f"TrainingBudget {ctx.name} is within its limit again"
    await ctx.kube.event(
        obj, type_="Normal", reason="ResumedByBudget", message=message, action="Resume"
    )
    log.info("workload resumed", object=str(w.ref), policy=f"{KIND}/{ctx.name}")
    metrics.report_action(KIND, ctx.name, "Resume", "done")


async def _describe(ctx: Context, decision: enforcement.Plan, out: Outcome) -> None:
    """DryRun: the same plan, said instead of done (announced once per workload)."""
    for w in decision.suspend:
        out.pending.append(f"would suspend {w.ref} ({ctx.reason})")
        key = f"dry-suspend/{w.ref.uid}"
        if key not in ctx.announced:
            ctx.announced.add(key)
            await ctx.kube.event(
                ctx.budget,
                type_="Normal",
                reason="WouldSuspend",
                message=f"DryRun: would suspend {w.ref}",
                action="Suspend",
            )
            metrics.report_action(KIND, ctx.name, "Suspend", "dry-run")
    out.pending += [f"would resume {w.ref}" for w in decision.resume]


async def _unstoppable(ctx: Context, decision: enforcement.Plan) -> None:
    """A charged pod the budget cannot stop is said once, for as long as it stays so: a
    Warning Event on the budget and on the pod, and a log line (status lists it too)."""
    for w, why in decision.unstoppable:
        key = f"unstoppable/{w.ref.uid}"
        if key in ctx.announced:
            continue
        ctx.announced.add(key)
        message = f"cannot stop {w.ref}: {why}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": _metadata(w.ref)}
        for obj in (ctx.budget, pod):
            await ctx.kube.event(
                obj, type_="Warning", reason="CannotStop", message=message, action="Suspend"
            )
        log.warning(
            "charged pod cannot be stopped", object=str(w.ref), policy=f"{KIND}/{ctx.name}", why=why
        )
        metrics.report_action(KIND, ctx.name, "Suspend", "unstoppable")


def _metadata(ref: enforcement.WorkloadRef) -> JSON:
    return {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid}


async def act(ctx: Context, decision: enforcement.Plan) -> Outcome:
    """Apply the plan (Enforce) or describe it (DryRun)."""
    out = Outcome()
    await _unstoppable(ctx, decision)
    if ctx.spec.mode == "DryRun":
        await _describe(ctx, decision, out)
        return out
    for w in decision.suspend:
        await _suspend(ctx, w, out)
    for w in decision.resume:
        await _resume(ctx, w, out)
    return out


def hold(
    plan: enforcement.Plan, doubt: str | None, mode: str, obj: str
) -> tuple[enforcement.Plan, list[str]]:
    """With the server's time in doubt (clock.py), an Enforce budget neither suspends nor
    resumes: the plan without them, and what was held, for status's pendingActions."""
    if doubt is None or mode != "Enforce" or not (plan.suspend or plan.resume):
        return plan, []
    log.warning("not acting: the clock is uncertain", object=obj, why=doubt)
    return enforcement.held(plan, f"the operator's clock is uncertain: {doubt}")
