"""One IdleReclaimPolicy evaluation: observe pods and utilization (idle/observe.py),
decide with the core (core/idleness.py, core/reclaim.py, core/exemptions.py), act
(idle/actions.py, idle/nodes.py), record status."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import failpoints, logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import PerGpu, Utilization
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.idle import (
    IdleReclaimPolicySpec,
    IdleReclaimPolicyStatus,
)
from trainwarden.api.v1alpha1.names import IDLE_KIND as KIND
from trainwarden.api.v1alpha1.types import Condition, Scope
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.status import (
    RESYNC,
    LastWrite,
    open_policy,
    write_status_when_due,
)
from trainwarden.core import exemptions, reclaim
from trainwarden.core.announce import Announcements
from trainwarden.core.conditions import ConditionUpdate, readiness, set_condition
from trainwarden.core.idleness import IdleState, coalesced
from trainwarden.idle import actions as acts
from trainwarden.idle import observe as observing
from trainwarden.idle import pressure as idle_pressure
from trainwarden.idle import status as idle_status
from trainwarden.idle.actions import Context, Result, Watched
from trainwarden.idle.nodes import quiet_nodes
from trainwarden.idle.rightsizing import RightsizingMemory
from trainwarden.idle.rightsizing import evaluate as rightsizing

log = logs.get(__name__)
KEPT_STATUS = (
    "conditions",
    "idleNodes",
    "recentActions",
    "actionsTaken",
    "acceleratorHoursReclaimed",
    "idleAcceleratorHours",
    "acknowledgements",
    "lastEvaluated",
)
MIN_INTERVAL = timedelta(seconds=1)
RETRY = timedelta(seconds=10)
METRICS_RETRY = timedelta(seconds=5)
"""How soon a policy asks again after its utilization query failed while it watches pods:
a Prometheus that comes back is seen within this (a common scrape interval), not at the
next resync; one failing query per policy per interval costs little."""


@dataclass
class Memory(LastWrite):
    """What one policy carries between evaluations in memory. Warnings under Enforce live on
    the pods; what is only here (suspicion, DryRun's pretend warnings, when a node went
    quiet) is re-learnt after a restart, which only ever delays an action. Acknowledgements
    are also in status, where a restart finds them."""

    states: dict[str, IdleState] = field(default_factory=dict)
    announced: Announcements = field(default_factory=Announcements)
    node_since: dict[str, datetime] | None = None
    acknowledged: dict[str, tuple[str, datetime]] | None = None
    rightsizing: RightsizingMemory = field(default_factory=RightsizingMemory)


@dataclass
class Owners:
    """The workloads of the watched pods, read from the API once per evaluation each."""

    ctx: Context
    found: dict[str, JSON | None] = field(default_factory=dict)

    async def of(self, w: Watched) -> JSON | None:
        owner = w.facts.owner
        if owner is None:
            return None
        if owner.uid not in self.found:
            self.found[owner.uid] = await acts.owner(
                self.ctx.kube, self.ctx.spec, w.view.namespace, owner
            )
        return self.found[owner.uid]


async def _exemption(
    ctx: Context,
    w: Watched,
    annotations: dict[str, str],
    acknowledged: dict[str, tuple[str, datetime]],
    out: Result,
    seen: dict[str, tuple[str, datetime]] | None,
) -> exemptions.Exemption:
    """The pod's (and its workload's) request to be left alone, as the policy allows it;
    a keep-until is capped from when it was first `seen` (the policy remembers it in
    `acknowledged`, for the next evaluation and for status)."""
    policy = ctx.spec.exemptions
    found = exemptions.exemption(
        annotations,
        w.facts.priority_class,
        now=ctx.now,
        allow_opt_out=policy.allow_opt_out,
        max_keep=policy.max_keep_duration,
        priority_classes=policy.priority_classes,
        seen=(seen or {}).get(w.view.uid),
    )
    if found.acknowledged is not None:
        acknowledged[w.view.uid] = found.acknowledged
    if found.problem is not None:
        message = f"IdleReclaimPolicy {ctx.name}: {found.problem}"
        key = f"problem/{w.view.uid}/{found.problem}"
        await acts.announce_once(ctx, key, acts.pod_obj(w.view), "AnnotationIgnored", message, out)
    return found


async def _judge(
    ctx: Context,
    watched: list[Watched],
    owners: Owners,
    acknowledged: dict[str, tuple[str, datetime]],
    seen: dict[str, tuple[str, datetime]] | None,
) -> tuple[list[tuple[Watched, reclaim.Verdict]], Result]:
    """Each pod's verdict; the workload's annotations are read only for pods about to be
    warned or reclaimed (they may exempt it too)."""
    out, judged, rules = Result(), [], idle_status.rules(ctx.spec)
    for w in watched:
        verdict = None
        for annotations in (dict(w.facts.annotations), None):
            if annotations is None:
                owner = (await owners.of(w) or {}).get("metadata") or {}
                extra = owner.get("annotations") or {}
                if not exemptions.KEYS & set(extra):
                    break
                annotations = {**extra, **w.facts.annotations}
            found = await _exemption(ctx, w, annotations, acknowledged, out, seen)
            verdict = reclaim.judge(
                w.view, w.previous, w.observation, found, now=ctx.now, rules=rules, lease=w.lease
            )
            if verdict.action not in ("Warn", "Reclaim"):
                break
        assert verdict is not None
        judged.append((w, verdict))
    return judged, out


async def _reclaim(
    ctx: Context,
    judged: list[tuple[Watched, reclaim.Verdict]],
    recent: list[datetime],
    owners: Owners,
    cache: ClusterCache,
) -> tuple[dict[str, IdleState], Result]:
    """The reclaims due now, within the cap (and, under pressure, wanted); pods whose
    reclaim did not happen stay warned (returned as state overrides)."""
    spec, out, held = ctx.spec, Result(), {}
    decided = reclaim.plan(
        [(w.view, v) for w, v in judged],
        per_workload=spec.action in acts.PER_WORKLOAD,
        recent=recent,
        max_per_minute=spec.max_actions_per_minute,
        now=ctx.now,
    )
    by_uid = {w.view.uid: w for w, _ in judged}
    states = {w.view.uid: v.state for w, v in judged}
    gated = idle_pressure.gate(ctx, decided, by_uid, cache)
    decided, out.wake = gated.plan, gated.wake

    def hold(r: reclaim.Reclaim) -> None:
        held.update({p.uid: reclaim.held(states[p.uid]) for p in r.pods})

    for r, why in gated.kept:
        hold(r)
        await idle_pressure.keep_warm(ctx, r, why, out)
    for r, why in decided.waiting:
        hold(r)
        out.pending.append(f"waiting to reclaim {r.pods[0]}: {why}")
    for r in decided.deferred:
        hold(r)
        out.pending.append(
            f"deferred {r.pods[0]}: over {spec.max_actions_per_minute} reclaims per minute"
        )
    for r in decided.act:
        members = [by_uid[p.uid] for p in r.pods]
        target = await owners.of(members[0]) if spec.action in acts.PER_WORKLOAD else None
        if spec.mode == "Enforce":
            failpoints.hit("idle-before-reclaim")
        done, result = await acts.act(ctx, r, members, target)
        out.add(result)
        if not done:
            hold(r)
    return held, out


def acts_at(judged: list[tuple[Watched, reclaim.Verdict]]) -> datetime | None:
    """When the policy may next act: a suspected pod's window ending (its warning) or a
    warned pod's grace running out (its reclaim); a warm-up's end is routine."""
    acting = ("IdleSuspected", "Warned")
    return min((v.due for _, v in judged if v.due and v.state.state in acting), default=None)


def _next(
    spec: IdleReclaimPolicySpec, o: idle_status.IdleOutcome, memory: Memory, now: datetime
) -> datetime:
    dues = [v.due for _, v in o.judged if v.due is not None]
    if spec.idle_nodes is not None and memory.node_since:
        dues += [t + spec.idle_nodes.after for t in memory.node_since.values()]
    if any(line.startswith("deferred") for line in o.result.pending):
        dues.append(now + RETRY)
    dues += [o.result.wake] if o.result.wake is not None else []
    step = spec.signal.resolution  # the data moves by steps: so may the judgements
    upcoming = [coalesced(t, step) for t in dues if t > now]
    return max(min([now + RESYNC, *upcoming]), now + MIN_INTERVAL)


async def _metrics_condition(
    kube: Kube,
    body: JSON,
    conds: list[Condition],
    available: ConditionUpdate,
    stamp: datetime,
    generation: int,
) -> list[Condition]:
    """MetricsAvailable, with an Event and a log line when it turns False."""
    was = next((c for c in conds if c.type == C.METRICS_AVAILABLE), None)
    conds, _ = set_condition(conds, available, now=stamp, generation=generation)
    if available.status == "False" and (was is None or was.status != "False"):
        name = body["metadata"]["name"]
        log.warning("utilization unavailable", object=f"{KIND}/{name}", message=available.message)
        await kube.event(
            body,
            type_="Warning",
            reason=available.reason,
            message=available.message,
            action="Observe",
        )
    return conds


async def _act(
    ctx: Context,
    watched: list[Watched],
    owners: Owners,
    acknowledged: dict[str, tuple[str, datetime]],
    memory: Memory,
    old: IdleReclaimPolicyStatus,
    cache: ClusterCache,
) -> tuple[list[tuple[Watched, reclaim.Verdict]], Result, dict[str, IdleState]]:
    """Judge each watched workload, warn or withdraw as judged, reclaim what is due; the
    state each workload is left in."""
    judged, result = await _judge(ctx, watched, owners, acknowledged, memory.acknowledged)
    for w, verdict in judged:
        if verdict.action in ("Warn", "Withdraw"):
            target = await owners.of(w) if verdict.action == "Warn" else None
            result.add(await acts.warn_or_withdraw(ctx, w, verdict, target))
    held, reclaimed = await _reclaim(ctx, judged, list(old.recent_actions), owners, cache)
    result.add(reclaimed)
    states = {w.view.uid: held.get(w.view.uid, v.state) for w, v in judged}
    return judged, result, states


async def reconcile(
    body: JSON,
    cache: ClusterCache,
    kube: Kube,
    prometheus: Utilization | None,
    memory: Memory,
    now: datetime,
    earlier: Sequence[Scope],
    per_gpu: PerGpu | None = None,
) -> datetime:
    """Evaluate one policy; return when it next needs evaluating. `earlier` are the
    scopes of the policies before it by name, which govern the pods they share."""
    models = (IdleReclaimPolicySpec, IdleReclaimPolicyStatus)
    opened = await open_policy(kube, body, models, KEPT_STATUS, memory, now)
    if opened is None:
        return now + RESYNC
    name, generation, stamp, spec, old = (
        opened.name, opened.generation, opened.stamp, opened.spec, opened.old
    )  # fmt: skip
    if memory.acknowledged is None:
        memory.acknowledged = {a.uid: (a.value, a.first_seen) for a in old.acknowledgements}
    # observe
    pods = observing.governed(spec, cache, earlier)
    samples, available = await observing.utilization(prometheus, spec, now, pods)
    conds, _ = set_condition(old.conditions, readiness([]), now=stamp, generation=generation)
    conds = await _metrics_condition(kube, body, conds, available, stamp, generation)
    metrics.report_idle_metrics_available(name, ok=available.status == "True")
    unknown = (
        available.message
        if available.status == "False"
        else f"no utilization samples cover the last {spec.signal.window}"
    )
    watched = observing.watched(spec, name, pods, samples, memory.states, now)
    # decide and act
    ctx = Context(kube, body, spec, now, memory.announced)
    owners = Owners(ctx)
    acknowledged: dict[str, tuple[str, datetime]] = {}
    judged, result, states = await _act(ctx, watched, owners, acknowledged, memory, old, cache)
    memory.node_since, nodes_idle, nodes_pending = await quiet_nodes(
        kube, cache, spec, memory.node_since, old.idle_nodes, name, now
    )
    result.pending += nodes_pending
    over = await rightsizing(per_gpu, ctx, watched, memory.rightsizing, now, owners.of)
    # record
    memory.states, memory.acknowledged = states, acknowledged
    memory.announced.keep_only(result.touched)
    outcome = idle_status.IdleOutcome(conds, judged, states, unknown, result, nodes_idle, over)
    status = idle_status.build(spec, old, outcome, acknowledged, generation, now, name)
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    await write_status_when_due(kube, KIND, body, memory, dumped, now)
    memory.acts_at = acts_at(judged)
    due = _next(spec, outcome, memory, now)
    if samples is None and prometheus is not None and pods:
        due = min(due, now + METRICS_RETRY)
    return due
