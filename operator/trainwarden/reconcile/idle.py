"""One IdleReclaimPolicy evaluation: observe pods and utilization, decide with the core, warn,
reclaim, record status."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Blocked, Conflict, Gone, Kube
from trainwarden.adapters.prometheus import MetricsUnavailable, Prometheus, Samples
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.idle import (
    MAX_LISTED,
    IdleNode,
    IdlePod,
    IdleReclaimPolicySpec,
    IdleReclaimPolicyStatus,
)
from trainwarden.api.v1alpha1.types import Scope
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import exemptions, nodes, reclaim
from trainwarden.core.conditions import ConditionUpdate, set_condition
from trainwarden.core.idleness import IdleState, Observation, observe, step_times
from trainwarden.core.pods import PodFacts
from trainwarden.core.readiness import readiness
from trainwarden.core.scope import in_scope, selects
from trainwarden.core.workloads import SUSPEND_FIELD, is_suspended
from trainwarden.reconcile.status import (
    RESYNC,
    LastWrite,
    previous_status,
    report_invalid,
    write_status,
)

log = logs.get(__name__)
KIND = "IdleReclaimPolicy"
KEPT_STATUS = (
    "conditions",
    "idleNodes",
    "recentActions",
    "actionsTaken",
    "acceleratorHoursReclaimed",
    "idleAcceleratorHours",
    "lastEvaluated",
)
MIN_INTERVAL = timedelta(seconds=1)
RETRY = timedelta(seconds=10)
PER_WORKLOAD = ("Suspend", "ScaleDown")
LISTED_STATES = ("IdleSuspected", "Warned", "Unknown", "Exempt")
VERB = {"Suspend": "suspend", "Delete": "evict", "ScaleDown": "scale down", "NotifyOnly": "notify"}
DONE = {
    "Suspend": "suspended",
    "Delete": "evicted",
    "ScaleDown": "scaled down",
    "NotifyOnly": "notified about",
}


@dataclass
class Memory(LastWrite):
    """What one policy carries between evaluations in memory. Warnings under Enforce live on
    the pods; what is only here (suspicion, DryRun's pretend warnings, when a node went
    quiet) is re-learnt after a restart, which only ever delays an action."""

    states: dict[str, IdleState] = field(default_factory=dict)
    announced: set[str] = field(default_factory=set)
    node_since: dict[str, datetime] | None = None


@dataclass(frozen=True)
class Watched:
    view: reclaim.PodView
    facts: PodFacts
    lease: timedelta | None
    previous: IdleState | None
    observation: Observation


@dataclass
class Evaluation:
    """One evaluation's context and what it did, for status."""

    body: JSON
    spec: IdleReclaimPolicySpec
    rules: reclaim.Rules
    now: datetime
    memory: Memory
    owners: dict[str, JSON | None] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    actions: int = 0
    hours: float = 0.0
    times: list[datetime] = field(default_factory=list)
    states: dict[str, IdleState] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    """Announcements due this evaluation; the others are forgotten."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def enforce(self) -> bool:
        return self.spec.mode == "Enforce"


def _in_scope(
    spec: IdleReclaimPolicySpec, inventory: ClusterCache, earlier: Sequence[Scope]
) -> list[tuple[PodFacts, float]]:
    """Running accelerator holders in scope and not governed by an earlier policy (a pod
    is governed by one policy only, the first by name)."""
    out = []
    for facts in inventory.pods_now():
        pod = facts.snapshot
        accelerators = sum(pod.requests.get(r, 0.0) for r in spec.accelerators)
        if accelerators <= 0 or pod.start is None or pod.end is not None or facts.deleting:
            continue
        ns_labels = inventory.namespace_labels(pod.namespace)
        if not in_scope(spec.scope, pod.namespace, ns_labels, pod.labels):
            continue
        if any(in_scope(other, pod.namespace, ns_labels, pod.labels) for other in earlier):
            continue
        out.append((facts, accelerators))
    return out


async def _utilization(
    prometheus: Prometheus | None, spec: IdleReclaimPolicySpec, now: datetime, watching: bool
) -> tuple[Samples | None, ConditionUpdate]:
    """One batched query for every watched pod; None when nothing can be known."""
    if prometheus is None:
        return None, ConditionUpdate(
            C.METRICS_AVAILABLE,
            "False",
            C.REASON_NOT_CONFIGURED,
            "the operator runs without --prometheus-url: nothing is judged idle; leases apply",
        )
    ok = ConditionUpdate(
        C.METRICS_AVAILABLE, "True", C.REASON_QUERY_SUCCEEDED, "the utilization query answered"
    )
    if not watching:
        return {}, ok
    signal = spec.signal
    try:
        samples = await prometheus.peaks(
            signal.query,
            start=now - signal.window - 2 * signal.resolution,
            end=now,
            step=signal.resolution,
            min_samples=signal.min_samples,
        )
    except MetricsUnavailable as error:
        message = f"{error}; no pod is judged idle until it answers"
        return None, ConditionUpdate(
            C.METRICS_AVAILABLE, "False", C.REASON_PROMETHEUS_UNAVAILABLE, message
        )
    return samples, ok


async def _announce_once(
    kube: Kube, ev: Evaluation, key: str, obj: JSON, reason: str, message: str
) -> bool:
    """An Event and log line that would repeat every evaluation (DryRun, a bad annotation)
    are posted once, for as long as the condition lasts without a break."""
    ev.touched.add(key)
    if key in ev.memory.announced:
        return False
    ev.memory.announced.add(key)
    log.warning(reason, object=_ref(obj), policy=f"{KIND}/{ev.name}", message=message)
    await kube.event(obj, type_="Warning", reason=reason, message=message, action="Observe")
    return True


async def _judge(
    kube: Kube, ev: Evaluation, w: Watched, owner_annotations: Mapping[str, str]
) -> reclaim.Verdict:
    exempt = ev.spec.exemptions
    found = exemptions.exemption(
        {**owner_annotations, **w.facts.annotations},
        w.facts.priority_class,
        now=ev.now,
        allow_opt_out=exempt.allow_opt_out,
        max_keep=exempt.max_keep_duration,
        priority_classes=exempt.priority_classes,
    )
    if found.problem is not None:
        await _announce_once(
            kube,
            ev,
            f"problem/{w.view.uid}/{found.problem}",
            _pod_obj(w.view),
            "AnnotationIgnored",
            f"IdleReclaimPolicy {ev.name}: {found.problem}",
        )
    return reclaim.judge(
        w.view, w.previous, w.observation, found, now=ev.now, rules=ev.rules, lease=w.lease
    )


async def _owner(kube: Kube, ev: Evaluation, w: Watched) -> JSON | None:
    """The workload to act on, whose annotations may also exempt the pod: None for a bare
    pod, or when the owner is gone. Read once per evaluation, however many pods it has."""
    owner = w.facts.owner
    if owner is None:
        return None
    if owner.uid not in ev.owners:
        namespace = w.view.namespace
        if ev.spec.action == "ScaleDown":
            ev.owners[owner.uid] = await workloads.scalable_owner(kube, namespace, owner)
        else:
            ev.owners[owner.uid] = await workloads.top_level(kube, namespace, owner)
    return ev.owners[owner.uid]


def _annotations(obj: JSON | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _ref(obj: JSON) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace')}/{meta['name']}"


def _pod_obj(view: reclaim.PodView) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": view.name, "namespace": view.namespace, "uid": view.uid},
    }


def _stamp(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


async def _mark_pod(kube: Kube, view: reclaim.PodView, marks: Mapping[str, str | None]) -> None:
    """Annotate a pod; one that is already gone needs no mark."""
    try:
        await kube.merge_patch(
            "v1", "Pod", view.namespace, view.name, {"metadata": {"annotations": dict(marks)}}
        )
    except Gone:
        return


async def _warn_or_withdraw(
    kube: Kube, ev: Evaluation, w: Watched, verdict: reclaim.Verdict
) -> None:
    """The warning is an Event on the pod and its owner plus marks on the pod, which are also
    what a restarted operator resumes the grace period from."""
    view, spec = w.view, ev.spec
    owner = ev.owners.get(w.facts.owner.uid) if w.facts.owner else None
    if verdict.action == "Warn":
        assert verdict.state.warned_at is not None
        at = verdict.state.warned_at + spec.grace_period
        target = _ref(owner) if owner else str(view)
        message = (
            f"{view} holds {view.accelerators:g} accelerator(s) and {verdict.cause}; "
            f"IdleReclaimPolicy {ev.name} will {VERB[spec.action]} {target} at {_stamp(at)} "
            "unless utilization recovers"
        )
        marks = reclaim.warning_marks(verdict.state, ev.name)
        reason, type_ = "IdleAccelerators", "Warning"
    else:
        why = verdict.exemption or "utilization recovered"
        message = f"IdleReclaimPolicy {ev.name} withdrew its idle warning on {view}: {why}"
        marks = reclaim.withdrawn_marks()
        reason, type_ = "IdleWarningWithdrawn", "Normal"
    if not ev.enforce:
        ev.pending.append(f"would {'warn' if verdict.action == 'Warn' else 'withdraw'}: {message}")
        return
    # Events first: killed in between, the pod is warned again (the grace period restarts);
    # the other way round it could be reclaimed after a warning nobody was shown.
    for obj in (_pod_obj(view), owner):
        if obj is not None:
            await kube.event(obj, type_=type_, reason=reason, message=message, action="Warn")
    await _mark_pod(kube, view, marks)
    log.info(reason, object=str(view), policy=f"{KIND}/{ev.name}", message=message)
    metrics.report_action(KIND, ev.name, str(verdict.action), "done")


def _expected_end(target: JSON | None, members: list[Watched]) -> datetime | None:
    """The earliest known end: the pods' lease ends and the Job's activeDeadlineSeconds."""
    ends = [w.view.started + w.lease for w in members if w.lease is not None]
    deadline = ((target or {}).get("spec") or {}).get("activeDeadlineSeconds")
    started = ((target or {}).get("status") or {}).get("startTime")
    if deadline and started:
        began = datetime.fromisoformat(str(started).replace("Z", "+00:00"))
        ends.append(began + timedelta(seconds=int(deadline)))
    return min(ends) if ends else None


def _refusal(ev: Evaluation, first: Watched, target: JSON | None) -> str | None:
    """Why this reclaim must not act on its target, if it must not."""
    action, owner = ev.spec.action, first.facts.owner
    if action == "Suspend" and owner is not None:
        if target is None or (target["apiVersion"], target["kind"]) not in SUSPEND_FIELD:
            kind = target["kind"] if target else owner.kind
            return f"its owner {kind} has no suspend field (use ScaleDown or Delete)"
        if workloads.kueue_managed(target):
            return "managed by Kueue, which owns spec.suspend"
    if action == "ScaleDown" and target is None:
        return "no Deployment or StatefulSet runs it"
    return None


def _already_done(action: str, target: JSON | None) -> bool:
    if target is None:
        return False
    if action == "Suspend":
        return is_suspended(target)
    if action == "ScaleDown":
        return int((target.get("spec") or {}).get("replicas") or 0) == 0
    return False


async def _carry_out(
    kube: Kube, ev: Evaluation, target: JSON | None, members: list[Watched], reason: str
) -> None:
    action = ev.spec.action
    labels, annotations = workloads.reclaim_marks(ev.name, reason)
    if action == "Suspend" and target is not None:
        await workloads.suspend(kube, target, labels, annotations)
    elif action == "ScaleDown" and target is not None:
        await workloads.scale_down(kube, target, labels, annotations)
    elif action in ("Suspend", "Delete"):  # Suspend of a bare pod evicts it, as budgets do
        for w in members:
            view = w.view
            await kube.evict(
                view.namespace, view.name, uid=view.uid, resource_version=w.facts.resource_version
            )


async def _act(kube: Kube, ev: Evaluation, r: reclaim.Reclaim, members: list[Watched]) -> bool:
    """Carry out one reclaim (Enforce) or describe it (DryRun); True once it is done."""
    action = ev.spec.action
    first = members[0]
    target = await _owner(kube, ev, first) if action in PER_WORKLOAD else None
    subject = _ref(target) if target else str(first.view)
    refusal = _refusal(ev, first, target)
    if refusal is not None:
        ev.pending.append(f"cannot {VERB[action]} {subject}: {refusal}")
        return False
    if _already_done(action, target):
        return True
    reason = f"IdleReclaimPolicy {ev.name}: {r.cause}"
    if not ev.enforce:
        ev.pending.append(f"would {VERB[action]} {subject} ({reason})")
        message = f"DryRun: would {VERB[action]} {subject}"
        if await _announce_once(kube, ev, f"dry/{subject}", ev.body, "WouldReclaim", message):
            metrics.report_action(KIND, ev.name, action, "dry-run")
        return False
    try:
        await _carry_out(kube, ev, target, members, reason)
    except (Conflict, Blocked, Gone) as error:
        ev.pending.append(f"deferred {subject}: {error}")
        result = "blocked" if isinstance(error, Blocked) else "conflict"
        metrics.report_action(KIND, ev.name, action, result)
        log.info("reclaim deferred", object=subject, policy=f"{KIND}/{ev.name}", error=str(error))
        return False
    hours = reclaim.reclaimed_hours(
        r.accelerators, ev.now, _expected_end(target, members), ev.spec.estimate_horizon
    )
    ev.actions += 1
    ev.hours += hours
    ev.times.append(ev.now)
    done = DONE[action]
    message = f"{reason}; {done} {subject}, freeing ~{hours:.2f} accelerator-hours"
    for obj in [target, *(_pod_obj(w.view) for w in members)]:
        if obj is not None:
            await kube.event(
                obj, type_="Warning", reason="IdleReclaimed", message=message, action=action
            )
    await kube.event(ev.body, type_="Warning", reason="Reclaimed", message=message, action=action)
    for w in members:
        await _mark_pod(kube, w.view, {reclaim.IDLE_RECLAIMED_AT: _stamp(ev.now)})
    log.warning(
        "idle accelerators reclaimed",
        object=subject,
        policy=f"{KIND}/{ev.name}",
        action=action,
        accelerators=r.accelerators,
        estimated_hours=round(hours, 3),
    )
    metrics.report_action(KIND, ev.name, action, "done")
    metrics.report_reclaimed_hours(ev.name, hours)
    return True


async def _reclaim(
    kube: Kube,
    ev: Evaluation,
    judged: list[tuple[Watched, reclaim.Verdict]],
    recent: list[datetime],
) -> None:
    decided = reclaim.plan(
        [(w.view, v) for w, v in judged],
        per_workload=ev.spec.action in PER_WORKLOAD,
        recent=recent,
        max_per_minute=ev.spec.max_actions_per_minute,
        now=ev.now,
    )
    by_uid = {w.view.uid: w for w, _ in judged}

    def hold(r: reclaim.Reclaim) -> None:
        for pod in r.pods:
            ev.states[pod.uid] = reclaim.held(ev.states[pod.uid])

    for r, why in decided.waiting:
        hold(r)
        ev.pending.append(f"waiting to reclaim {r.pods[0]}: {why}")
    for r in decided.deferred:
        hold(r)
        ev.pending.append(
            f"deferred {r.pods[0]}: over {ev.spec.max_actions_per_minute} reclaims per minute"
        )
    for r in decided.act:
        if not await _act(kube, ev, r, [by_uid[p.uid] for p in r.pods]):
            hold(r)


async def _idle_nodes(
    kube: Kube, ev: Evaluation, inventory: ClusterCache, previous: list[IdleNode]
) -> list[IdleNode]:
    """Accelerator nodes no accelerator pod has used for `after`; cordoned or labelled if
    the policy says so."""
    wanted = ev.spec.idle_nodes
    if wanted is None:
        ev.memory.node_since = None
        return []
    resources = ev.spec.accelerators
    found = {
        name: facts
        for name, facts in inventory.nodes_now().items()
        if wanted.node_selector is None or selects(wanted.node_selector, facts.labels)
    }
    busy = {
        f.node
        for f in inventory.pods_now()
        if f.node
        and f.snapshot.outcome == "Running"
        and not f.deleting
        and any(f.snapshot.requests.get(r, 0.0) > 0 for r in resources)
    }
    known = ev.memory.node_since
    if known is None:
        known = {n.name: n.since for n in previous}
    since = nodes.idle_since(found, busy, known, resources=resources, now=ev.now)
    ev.memory.node_since = since
    idle = nodes.idle_for(since, ev.now, wanted.after)
    acts = nodes.node_actions(
        found, set(idle), policy=ev.name, cordon=wanted.cordon, label=wanted.label
    )
    patches: list[tuple[str, str, JSON]] = [
        *(
            (
                n,
                "cordon",
                {
                    "spec": {"unschedulable": True},
                    "metadata": {"annotations": {nodes.CORDONED_BY: ev.name}},
                },
            )
            for n in acts.cordon
        ),
        *(
            (
                n,
                "uncordon",
                {
                    "spec": {"unschedulable": False},
                    "metadata": {"annotations": {nodes.CORDONED_BY: None}},
                },
            )
            for n in acts.uncordon
        ),
        *(
            (n, "label", {"metadata": {"labels": {nodes.IDLE_NODE_LABEL: "true"}}})
            for n in acts.label
        ),
        *(
            (n, "unlabel", {"metadata": {"labels": {nodes.IDLE_NODE_LABEL: None}}})
            for n in acts.unlabel
        ),
    ]
    for node, verb, patch in patches:
        if not ev.enforce:
            ev.pending.append(f"would {verb} Node/{node}")
            continue
        try:
            await kube.merge_patch("v1", "Node", None, node, patch)
        except (Conflict, Gone) as error:
            ev.pending.append(f"deferred: {verb} Node/{node}: {error}")
            continue
        quiet = _stamp(since.get(node, ev.now))
        message = f"IdleReclaimPolicy {ev.name}: {verb} (no accelerator pods since {quiet})"
        # The node's uid, so `kubectl describe node` lists the Event.
        meta = {"name": node, "uid": found[node].uid}
        node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
        await kube.event(
            node_obj,
            type_="Normal",
            reason=f"IdleNode{verb.capitalize()}",
            message=message,
            action=verb,
        )
        log.info("idle node", object=f"Node/{node}", policy=f"{KIND}/{ev.name}", action=verb)
        metrics.report_action(KIND, ev.name, verb.capitalize(), "done")
    return [IdleNode(name=n, since=since[n]) for n in idle]


def _message(ev: Evaluation, verdict: reclaim.Verdict, unknown: str) -> str:
    state = verdict.state
    if state.state == "Exempt":
        return verdict.exemption or "exempt"
    if state.state == "Unknown":
        return unknown
    if state.state == "IdleSuspected":
        idle_at = state.since + ev.rules.window
        return (
            f"below {ev.rules.threshold:g}% since {_stamp(state.since)}; "
            f"idle at {_stamp(idle_at)} if it stays so"
        )
    assert state.warned_at is not None
    at = state.warned_at + ev.rules.grace
    return (
        f"{verdict.cause or 'idle'}; warned at {_stamp(state.warned_at)}; "
        f"{ev.spec.action} at {_stamp(at)} unless it recovers"
    )


def _listed(
    ev: Evaluation, judged: list[tuple[Watched, reclaim.Verdict]], unknown: str
) -> list[IdlePod]:
    listed = []
    for w, verdict in judged:
        state = ev.states[w.view.uid]
        if state.state not in LISTED_STATES:
            continue
        listed.append(
            IdlePod(
                namespace=w.view.namespace,
                name=w.view.name,
                state=state.state,
                since=state.since,
                accelerators=w.view.accelerators,
                message=_message(ev, verdict, unknown)[:1024],
            )
        )
    return sorted(listed, key=lambda p: (p.since, p.namespace, p.name))


async def reconcile(
    body: JSON,
    inventory: ClusterCache,
    kube: Kube,
    prometheus: Prometheus | None,
    memory: Memory,
    now: datetime,
    earlier: Sequence[Scope],
) -> datetime:
    """Evaluate one policy; return when it next needs evaluating. `earlier` are the
    scopes of the policies before it by name, which govern the pods they share."""
    meta = body["metadata"]
    name = meta["name"]
    generation = int(meta.get("generation") or 0)
    stamp = now.replace(microsecond=0)
    old = previous_status(
        IdleReclaimPolicyStatus, body.get("status") or {}, KEPT_STATUS, f"{KIND}/{name}"
    )
    parsed = parse_spec(IdleReclaimPolicySpec, body.get("spec") or {})
    if isinstance(parsed, list):
        await report_invalid(kube, body, parsed, old.conditions, memory, stamp)
        return now + RESYNC
    spec = parsed
    metrics.report_policy_ready(KIND, name, ready=True)
    signal = spec.signal
    rules = reclaim.Rules(
        threshold=signal.threshold,
        window=signal.window,
        warmup=signal.warmup,
        grace=spec.grace_period,
        step=signal.resolution,
    )
    ev = Evaluation(body, spec, rules, now, memory)

    in_scope_pods = _in_scope(spec, inventory, earlier)
    samples, available = await _utilization(prometheus, spec, now, bool(in_scope_pods))
    grid = step_times(now - signal.window - 2 * signal.resolution, now, signal.resolution)
    conds, _ = set_condition(old.conditions, readiness([]), now=stamp, generation=generation)
    was = next((c for c in conds if c.type == C.METRICS_AVAILABLE), None)
    conds, _ = set_condition(conds, available, now=stamp, generation=generation)
    if available.status == "False" and (was is None or was.status != "False"):
        log.warning("utilization unavailable", object=f"{KIND}/{name}", message=available.message)
        await kube.event(
            body,
            type_="Warning",
            reason=available.reason,
            message=available.message,
            action="Observe",
        )
    metrics.report_idle_metrics_available(name, ok=samples is not None)
    unknown = (
        available.message
        if samples is None
        else f"no utilization samples cover the last {signal.window}"
    )

    judged: list[tuple[Watched, reclaim.Verdict]] = []
    for facts, accelerators in in_scope_pods:
        pod = facts.snapshot
        assert pod.start is not None
        lease = spec.lease
        applies = lease is not None and (
            lease.selector is None or selects(lease.selector, pod.labels)
        )
        observation = (
            observe(
                samples.get((pod.namespace, pod.name), []),
                now=now,
                window=signal.window,
                threshold=signal.threshold,
                steps=grid,
            )
            if samples is not None
            else Observation("Unknown")
        )
        w = Watched(
            reclaim.PodView(pod.uid, pod.namespace, pod.name, pod.start, accelerators, facts.group),
            facts,
            lease.max_lifetime if lease is not None and applies else None,
            reclaim.previous_state(
                memory.states.get(pod.uid),
                reclaim.recorded(facts.annotations, name),
                enforce=spec.mode == "Enforce",
            ),
            observation,
        )
        verdict = await _judge(kube, ev, w, {})
        if verdict.action in ("Warn", "Reclaim"):
            owner = _annotations(await _owner(kube, ev, w))
            if exemptions.KEYS & set(owner):
                verdict = await _judge(kube, ev, w, owner)
        judged.append((w, verdict))
        ev.states[pod.uid] = verdict.state

    for w, verdict in judged:
        if verdict.action in ("Warn", "Withdraw"):
            await _warn_or_withdraw(kube, ev, w, verdict)
    await _reclaim(kube, ev, judged, old.recent_actions)
    idle_nodes = await _idle_nodes(kube, ev, inventory, old.idle_nodes)
    memory.states = ev.states
    memory.announced &= ev.touched

    counts = {s: sum(1 for st in ev.states.values() if st.state == s) for s in LISTED_STATES}
    wasted = dict(old.idle_accelerator_hours)
    for w, _ in judged:
        hours = reclaim.idle_hours(
            w.view.accelerators, ev.states[w.view.uid], old.last_evaluated, now, 2 * RESYNC
        )
        if hours:
            wasted[w.view.namespace] = round(wasted.get(w.view.namespace, 0.0) + hours, 6)
            metrics.report_idle_hours(name, w.view.namespace, hours)
    recent = [t for t in [*old.recent_actions, *ev.times] if t > now - timedelta(minutes=1)]
    status = IdleReclaimPolicyStatus(
        observed_generation=generation,
        conditions=conds,
        pods_watched=len(judged),
        pods_idle=counts["IdleSuspected"] + counts["Warned"],
        pods_unknown=counts["Unknown"],
        pods_exempt=counts["Exempt"],
        idle_pods=_listed(ev, judged, unknown)[:MAX_LISTED],
        idle_nodes=idle_nodes[:MAX_LISTED],
        pending_actions=ev.pending[:MAX_LISTED],
        recent_actions=recent[-1000:],
        actions_taken=old.actions_taken + ev.actions,
        accelerator_hours_reclaimed=round(old.accelerator_hours_reclaimed + ev.hours, 6),
        idle_accelerator_hours=wasted,
        last_evaluated=now,
    )
    await write_status(
        kube, KIND, body, memory, status.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    metrics.report_idle(name, {"Watched": len(judged), **counts}, len(idle_nodes))

    dues = [v.due for _, v in judged if v.due is not None]
    if spec.idle_nodes is not None and memory.node_since:
        dues += [t + spec.idle_nodes.after for t in memory.node_since.values()]
    if any(line.startswith("deferred") for line in ev.pending):
        dues.append(now + RETRY)
    upcoming = [t for t in dues if t > now]
    return max(min([now + RESYNC, *upcoming]), now + MIN_INTERVAL)
