"""What an exhausted budget does about the plan (budget/targets.py found what): suspend
and resume workloads through their own suspend field or their Kueue Workload, evict pods,
say what it cannot stop; each on the object re-read just before, conditional on its
resourceVersion, with an Event, marks, a log line and a metric; DryRun says instead.
"""

import contextlib
from dataclasses import dataclass, field
from datetime import datetime

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Blocked, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import BUDGET_KIND as KIND
from trainwarden.budget import enforcement
from trainwarden.core.announce import Announcements
from trainwarden.core.workloads import (
    is_suspended,
)

log = logs.get(__name__)


@dataclass
class EnforceOutcome:
    """What carrying out one enforcement plan did (suspensions, resumes, evictions)."""

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
    announced: Announcements

    @property
    def name(self) -> str:
        return str(self.budget["metadata"]["name"])


async def fresh(kube: Kube, ref: enforcement.WorkloadRef) -> JSON | None:
    """The object as it is now: act on what is there, not on what the cache said."""
    found = await kube.get(ref.api_version, ref.kind, ref.namespace, ref.name)
    if found is None or found["metadata"].get("uid") != ref.uid:
        return None
    return found


async def _suspend(ctx: Context, w: enforcement.Workload, out: EnforceOutcome) -> None:
    obj = await fresh(ctx.kube, w.ref)
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


async def _reactivate(
    kube: Kube, budget: str, job: JSON, w: enforcement.Workload, out: EnforceOutcome
) -> bool:
    """Resume through Kueue: reactivate the Workload, only if this budget deactivated it
    (its mark), then drop the job's marks. False: nothing was resumed (said in `out`)."""
    workload = await workloads.kueue_workload(kube, job)
    if workload is None:
        out.pending.append(f"not resuming {w.ref}: its Kueue Workload is not found")
        return False
    mine = workloads.suspended_by(workload) == workloads.label_value(budget)
    inactive = (workload.get("spec") or {}).get("active") is False
    if inactive and not mine:  # deactivated by someone else since: theirs to reactivate
        out.pending.append(f"not resuming {w.ref}: its Workload was deactivated by someone else")
        out.resumed.add(w.ref.uid)
        log.info("left deactivated", object=str(w.ref), policy=f"{KIND}/{budget}")
        await _unmark_current(kube, w.ref)
        return False
    if inactive:
        await workloads.reactivate(kube, workload)
    await _unmark_current(kube, w.ref)
    return True


async def _unmark_current(kube: Kube, ref: enforcement.WorkloadRef) -> None:
    """The job's marks, dropped from the version now stored (Kueue may have just changed
    it); a conflict leaves a stale mark, never a wrong state."""
    job = await fresh(kube, ref)
    if job is None:
        return
    try:
        await workloads.unmark(kube, job)
    except (Conflict, Gone) as error:
        log.info("marks left on the job", object=str(ref), error=str(error))


async def resume(
    kube: Kube, budget: str, w: enforcement.Workload, out: EnforceOutcome, *, why: str
) -> None:
    """Resume a workload `budget` suspended (through Kueue if Kueue runs it), on the
    version stored now; `why` is the Event's message. A conflict defers it (not in
    `out.resumed`)."""
    obj = await fresh(kube, w.ref)
    if obj is None or not is_suspended(obj):
        out.resumed.add(w.ref.uid)  # gone or resumed by someone else: nothing left to do
        return
    try:
        if w.kueue_managed:
            if not await _reactivate(kube, budget, obj, w, out):
                return
        else:
            await workloads.resume(kube, obj)
    except (Conflict, Gone) as error:
        log.info("resume deferred", object=str(w.ref), policy=f"{KIND}/{budget}", error=str(error))
        metrics.report_action(KIND, budget, "Resume", "conflict")
        return
    out.resumed.add(w.ref.uid)
    await kube.event(obj, type_="Normal", reason="ResumedByBudget", message=why, action="Resume")
    log.info("workload resumed", object=str(w.ref), policy=f"{KIND}/{budget}", why=why)
    metrics.report_action(KIND, budget, "Resume", "done")


async def _describe(ctx: Context, decision: enforcement.Plan, out: EnforceOutcome) -> None:
    """DryRun: the same plan, said instead of done (announced once per workload)."""
    for w in decision.suspend:
        out.pending.append(f"would suspend {w.ref} ({ctx.reason})")
        key = f"dry-suspend/{w.ref.uid}"
        if ctx.announced.first(key):
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
        if not ctx.announced.first(key):
            continue
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


async def act(ctx: Context, decision: enforcement.Plan) -> EnforceOutcome:
    """Apply the plan (Enforce) or describe it (DryRun)."""
    out = EnforceOutcome()
    await _unstoppable(ctx, decision)
    if ctx.spec.mode == "DryRun":
        await _describe(ctx, decision, out)
        return out
    for w in decision.suspend:
        await _suspend(ctx, w, out)
    for w in decision.resume:
        why = f"TrainingBudget {ctx.name} is within its limit again"
        await resume(ctx.kube, ctx.name, w, out, why=why)
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
