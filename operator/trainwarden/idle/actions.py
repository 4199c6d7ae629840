"""What an idle policy does to pods and workloads: warn, withdraw a warning, reclaim.

Each function takes the evaluation's frozen context and returns what it did; the caller
gathers the results into status. In DryRun every function says what it would do instead.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Blocked, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.names import IDLE_KIND as KIND
from trainwarden.api.v1alpha1.names import IDLE_RECLAIMED_AT
from trainwarden.core import reclaim
from trainwarden.core.announce import Announcements
from trainwarden.core.idleness import IdleState, Observation
from trainwarden.core.pods import OwnerRef, PodFacts, parse_time
from trainwarden.core.workloads import SUSPEND_FIELD, is_suspended

log = logs.get(__name__)
PER_WORKLOAD = ("Suspend", "ScaleDown")
VERB = {"Suspend": "suspend", "Delete": "evict", "ScaleDown": "scale down", "NotifyOnly": "notify"}
DONE = {
    "Suspend": "suspended",
    "Delete": "evicted",
    "ScaleDown": "scaled down",
    "NotifyOnly": "notified about",
}


@dataclass(frozen=True)
class Watched:
    """One accelerator pod the policy governs, as this evaluation sees it."""

    view: reclaim.PodView
    facts: PodFacts
    lease: timedelta | None
    previous: IdleState | None
    observation: Observation


@dataclass(frozen=True)
class Context:
    kube: Kube
    body: JSON
    spec: IdleReclaimPolicySpec
    now: datetime
    announced: Announcements
    """Events already announced (the policy's memory): posted once each."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def enforce(self) -> bool:
        return self.spec.mode == "Enforce"


@dataclass
class Result:
    """What acting did: lines for pendingActions, announcements still due, reclaims done,
    pods kept warm (reclaimWhen: UnderPressure) with why, and when that may change."""

    pending: list[str] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    reclaimed_hours: list[float] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    wake: datetime | None = None

    def add(self, other: "Result") -> None:
        self.pending += other.pending
        self.touched |= other.touched
        self.reclaimed_hours += other.reclaimed_hours
        self.kept |= other.kept
        self.wake = min((t for t in (self.wake, other.wake) if t is not None), default=None)


def ref(obj: JSON) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace')}/{meta['name']}"


def pod_obj(view: reclaim.PodView) -> JSON:
    meta = {"name": view.name, "namespace": view.namespace, "uid": view.uid}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def stamp(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


async def announce_once(
    ctx: Context,
    key: str,
    obj: JSON,
    reason: str,
    message: str,
    out: Result,
    *,
    warning: bool = True,
) -> bool:
    """An Event and log line that would repeat every evaluation (DryRun, a bad annotation)
    are posted once, for as long as the condition lasts without a break; `warning=False`
    for news that needs nobody's attention (a Normal Event, an info line)."""
    out.touched.add(key)
    if not ctx.announced.first(key):
        return False
    say = log.warning if warning else log.info
    say(reason, object=ref(obj), policy=f"{KIND}/{ctx.name}", message=message)
    kind = "Warning" if warning else "Normal"
    await ctx.kube.event(obj, type_=kind, reason=reason, message=message, action="Observe")
    return True


async def owner(
    kube: Kube, spec: IdleReclaimPolicySpec, namespace: str, found: OwnerRef | None
) -> JSON | None:
    """The workload to act on: None for a bare pod, or when the owner is gone."""
    if found is None:
        return None
    if spec.action == "ScaleDown":
        return await workloads.scalable_owner(kube, namespace, found)
    return await workloads.top_level(kube, namespace, found)


async def _mark_pod(kube: Kube, view: reclaim.PodView, marks: Mapping[str, str | None]) -> None:
    """Annotate a pod; one that is already gone needs no mark."""
    try:
        patch = {"metadata": {"annotations": dict(marks)}}
        await kube.merge_patch("v1", "Pod", view.namespace, view.name, patch)
    except Gone:
        return


async def warn_or_withdraw(
    ctx: Context, w: Watched, verdict: reclaim.Verdict, target: JSON | None
) -> Result:
    """The warning is an Event on the pod and its owner plus marks on the pod, which are
    also what a restarted operator resumes the grace period from."""
    view, spec, out = w.view, ctx.spec, Result()
    if verdict.action == "Warn":
        assert verdict.state.warned_at is not None
        at = verdict.state.warned_at + spec.grace_period
        message = (
            f"{view} holds {view.accelerators:g} accelerator(s) and {verdict.cause}; "
            f"IdleReclaimPolicy {ctx.name} will {VERB[spec.action]} "
            f"{ref(target) if target else view} at {stamp(at)} unless utilization recovers"
        )
        marks, reason, type_ = (
            reclaim.warning_marks(verdict.state, ctx.name),
            "IdleAccelerators",
            "Warning",
        )
    else:
        why = verdict.exemption or "utilization recovered"
        message = f"IdleReclaimPolicy {ctx.name} withdrew its idle warning on {view}: {why}"
        marks, reason, type_ = reclaim.withdrawn_marks(), "IdleWarningWithdrawn", "Normal"
    if not ctx.enforce:
        out.pending.append(f"would {'warn' if verdict.action == 'Warn' else 'withdraw'}: {message}")
        return out
    # Events first: killed in between, the pod is warned again (the grace period restarts);
    # the other way round it could be reclaimed after a warning nobody was shown.
    for obj in (pod_obj(view), target):
        if obj is not None:
            await ctx.kube.event(obj, type_=type_, reason=reason, message=message, action="Warn")
    await _mark_pod(ctx.kube, view, marks)
    log.info(reason, object=str(view), policy=f"{KIND}/{ctx.name}", message=message)
    metrics.report_action(KIND, ctx.name, str(verdict.action), "done")
    return out


def expected_end(target: JSON | None, members: list[Watched]) -> datetime | None:
    """The earliest known end: the pods' lease ends and the Job's activeDeadlineSeconds."""
    ends = [w.view.started + w.lease for w in members if w.lease is not None]
    deadline = ((target or {}).get("spec") or {}).get("activeDeadlineSeconds")
    began = parse_time(((target or {}).get("status") or {}).get("startTime"))
    if isinstance(deadline, int) and began is not None:
        ends.append(began + timedelta(seconds=deadline))
    return min(ends) if ends else None


def refusal(action: str, first: Watched, target: JSON | None) -> str | None:
    """Why this reclaim must not act on its target, if it must not."""
    found = first.facts.owner
    if action == "Suspend" and found is not None:
        if target is None or (target["apiVersion"], target["kind"]) not in SUSPEND_FIELD:
            kind = target["kind"] if target else found.kind
            return f"its owner {kind} has no suspend field (use ScaleDown or Delete)"
        if workloads.kueue_managed(target):
            return "managed by Kueue, which owns spec.suspend"
    if action == "ScaleDown" and target is None:
        return "no Deployment or StatefulSet runs it"
    return None


def already_done(action: str, target: JSON | None) -> bool:
    if target is None:
        return False
    if action == "Suspend":
        return is_suspended(target)
    if action == "ScaleDown":
        return int((target.get("spec") or {}).get("replicas") or 0) == 0
    return False


async def _carry_out(
    ctx: Context, target: JSON | None, members: list[Watched], reason: str
) -> None:
    action, kube = ctx.spec.action, ctx.kube
    labels, annotations = workloads.reclaim_marks(ctx.name, reason)
    if action == "Suspend" and target is not None:
        await workloads.suspend(kube, target, labels, annotations)
    elif action == "ScaleDown" and target is not None:
        await workloads.scale_down(kube, target, labels, annotations)
    elif action in ("Suspend", "Delete"):  # Suspend of a bare pod evicts it, as budgets do
        for w in members:
            v = w.view
            await kube.evict(
                v.namespace, v.name, uid=v.uid, resource_version=w.facts.resource_version
            )


async def _record_reclaim(
    ctx: Context, r: reclaim.Reclaim, target: JSON | None, members: list[Watched], reason: str
) -> float:
    """Events, marks, log line and metrics of a reclaim that was carried out."""
    hours = reclaim.reclaimed_hours(
        r.accelerators, ctx.now, expected_end(target, members), ctx.spec.estimate_horizon
    )
    subject = ref(target) if target else str(members[0].view)
    action = ctx.spec.action
    message = f"{reason}; {DONE[action]} {subject}, freeing ~{hours:.2f} accelerator-hours"
    for obj in [target, *(pod_obj(w.view) for w in members)]:
        if obj is not None:
            await ctx.kube.event(
                obj, type_="Warning", reason="IdleReclaimed", message=message, action=action
            )
    await ctx.kube.event(
        ctx.body, type_="Warning", reason="Reclaimed", message=message, action=action
    )
    for w in members:
        await _mark_pod(ctx.kube, w.view, {IDLE_RECLAIMED_AT: stamp(ctx.now)})
    log.warning(
        "idle accelerators reclaimed",
        object=subject,
        policy=f"{KIND}/{ctx.name}",
        action=action,
        accelerators=r.accelerators,
        estimated_hours=round(hours, 3),
    )
    metrics.report_action(KIND, ctx.name, action, "done")
    metrics.report_reclaimed_hours(ctx.name, hours)
    return hours


async def act(
    ctx: Context, r: reclaim.Reclaim, members: list[Watched], target: JSON | None
) -> tuple[bool, Result]:
    """Carry out one reclaim (Enforce) or describe it (DryRun); True once it is done."""
    action, out = ctx.spec.action, Result()
    subject = ref(target) if target else str(members[0].view)
    why_not = refusal(action, members[0], target)
    if why_not is not None:
        out.pending.append(f"cannot {VERB[action]} {subject}: {why_not}")
        return False, out
    if already_done(action, target):
        return True, out
    reason = f"IdleReclaimPolicy {ctx.name}: {r.cause}"
    if not ctx.enforce:
        out.pending.append(f"would {VERB[action]} {subject} ({reason})")
        message = f"DryRun: would {VERB[action]} {subject}"
        if await announce_once(ctx, f"dry/{subject}", ctx.body, "WouldReclaim", message, out):
            metrics.report_action(KIND, ctx.name, action, "dry-run")
        return False, out
    try:
        await _carry_out(ctx, target, members, reason)
    except (Conflict, Blocked, Gone) as error:
        out.pending.append(f"deferred {subject}: {error}")
        metrics.report_action(
            KIND, ctx.name, action, "blocked" if isinstance(error, Blocked) else "conflict"
        )
        log.info("reclaim deferred", object=subject, policy=f"{KIND}/{ctx.name}", error=str(error))
        return False, out
    out.reclaimed_hours.append(await _record_reclaim(ctx, r, target, members, reason))
    return True, out
