"""One TrainingBudget evaluation: observe pods, decide with the core, act, record status."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Blocked, Conflict, Kube
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.budget import (
    Ledger as LedgerModel,
)
from trainwarden.api.v1alpha1.budget import (
    LedgerPod,
    PeriodSummary,
    ResourceUsage,
    SuspendedWorkload,
    TrainingBudgetSpec,
    TrainingBudgetStatus,
    UsageBreakdown,
    UsageShare,
)
from trainwarden.api.v1alpha1.types import Condition, ObjectReference, Scope
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core import enforcement
from trainwarden.core.accounting import (
    AcceleratorPrice,
    PodSnapshot,
    PriceTable,
    Usage,
    account,
)
from trainwarden.core.budgets import (
    Limits,
    crossing_time,
    level,
    percent_used,
    threshold_conditions,
)
from trainwarden.core.conditions import ConditionUpdate, set_condition
from trainwarden.core.ledger import Ledger, advance, charged
from trainwarden.core.periods import Window, current_window, ended
from trainwarden.core.pods import PodFacts
from trainwarden.core.readiness import readiness
from trainwarden.core.scope import BUDGET_LABEL, charge, in_scope
from trainwarden.reconcile import status
from trainwarden.reconcile.inventory import Inventory
from trainwarden.reconcile.status import RESYNC, LastWrite, report_invalid, write_status

log = logs.get(__name__)


@dataclass
class Memory(LastWrite):
    """What one budget's evaluations carry between cycles, in memory only.

    Losing it (a restart) is safe: `gone` degrades to the ledger's last observation, and
    `announced` only de-duplicates Events.
    """

    gone: dict[str, PodSnapshot] = field(default_factory=dict)
    announced: set[str] = field(default_factory=set)


def previous_status(raw: Mapping[str, Any], obj: str) -> TrainingBudgetStatus:
    """The ledger, history and period survive every evaluation; the rest is recomputed."""
    fields = ("conditions", "ledger", "history", "periodStart", "periodEnd")
    return status.previous_status(TrainingBudgetStatus, raw, fields, obj)


def _ledger_from(model: LedgerModel | None) -> Ledger:
    if model is None:
        return Ledger()

    def pod(p: LedgerPod) -> PodSnapshot:
        return PodSnapshot(
            p.uid,
            p.namespace,
            p.name,
            p.requests,
            p.start,
            p.end,
            p.outcome,
            p.labels,
            p.node_labels,
        )

    return Ledger(
        model.observed_at,
        {p.uid: pod(p) for p in model.open},
        {p.uid: pod(p) for p in model.closed},
    )


def _ledger_to(ledger: Ledger) -> LedgerModel:
    def pod(p: PodSnapshot) -> LedgerPod:
        assert p.start is not None
        return LedgerPod(
            uid=p.uid,
            namespace=p.namespace,
            name=p.name,
            start=p.start,
            end=p.end,
            outcome=p.outcome,
            requests=dict(p.requests),
            labels=dict(p.labels),
            node_labels=dict(p.node_labels),
        )

    return LedgerModel(
        observed_at=ledger.observed_at,
        open=[pod(p) for p in ledger.open.values()],
        closed=[pod(p) for p in ledger.closed.values()],
    )


def _usage_model(usage: Usage) -> ResourceUsage:
    return ResourceUsage(
        accelerator_hours=round(usage.total_accelerator_hours, 6),
        accelerator_hours_by_resource={r: round(h, 6) for r, h in usage.accelerator_hours.items()},
        cpu_core_hours=round(usage.cpu_core_hours, 6),
        memory_gib_hours=round(usage.memory_gib_hours, 6),
        cost=round(usage.cost, 6),
    )


def _shares(parts: Mapping[str, Usage]) -> list[UsageShare]:
    return [
        UsageShare(
            key=k, accelerator_hours=round(u.total_accelerator_hours, 6), cost=round(u.cost, 6)
        )
        for k, u in sorted(parts.items(), key=lambda kv: -kv[1].total_accelerator_hours)
    ]


def _prices(spec: TrainingBudgetSpec) -> PriceTable:
    if spec.rates is None:
        return PriceTable()
    return PriceTable(
        tuple(
            AcceleratorPrice(r.resource, r.node_selector, r.price)
            for r in spec.rates.accelerator_hour
        ),
        spec.rates.cpu_core_hour,
        spec.rates.memory_gib_hour,
    )


def _limits(spec: TrainingBudgetSpec) -> Limits:
    lim = spec.limits
    return Limits(
        lim.accelerator_hours,
        lim.accelerator_hours_by_resource,
        lim.cpu_core_hours,
        lim.memory_gib_hours,
        lim.cost,
    )


def _condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def _running_workloads(
    kube: Kube, live: Mapping[str, tuple[PodSnapshot, PodFacts]], accelerators: Iterable[str]
) -> list[tuple[enforcement.Workload, JSON]]:
    """Top-level owners of the running charged pods, freshly read (what we act on)."""
    accelerators = list(accelerators)
    seen: dict[str, tuple[enforcement.Workload, JSON]] = {}
    owners: dict[str, JSON | None] = {}  # one read per owner, however many pods it has
    for pod, facts in live.values():
        if pod.end is not None or pod.outcome != "Running":
            continue
        if facts.owner is None:
            obj = await kube.get("v1", "Pod", pod.namespace, pod.name)
        else:
            if facts.owner.uid not in owners:
                owners[facts.owner.uid] = await workloads.top_level(
                    kube, pod.namespace, facts.owner
                )
            obj = owners[facts.owner.uid]
        if obj is None:
            continue
        meta = obj["metadata"]
        gpus = sum(pod.requests.get(r, 0.0) for r in accelerators)
        previous = seen.get(meta["uid"])
        workload = enforcement.Workload(
            ref=enforcement.WorkloadRef(
                obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], meta["uid"]
            ),
            created=_parse_time(str(meta["creationTimestamp"])),
            accelerators=gpus + (previous[0].accelerators if previous else 0.0),
            priority=facts.priority,
            suspended=workloads.is_suspended(obj),
            suspended_by=workloads.suspended_by(obj),
            kueue_managed=workloads.kueue_managed(obj),
        )
        seen[meta["uid"]] = (workload, obj)
    return list(seen.values())


async def reconcile(
    body: JSON,
    inventory: Inventory,
    kube: Kube,
    memory: Memory,
    now: datetime,
    ours: list[JSON],
) -> datetime:
    """Evaluate one budget; return when it next needs evaluating if nothing changes.

    `ours` are the workloads carrying this budget's suspended-by label.
    """
    meta = body["metadata"]
    name = meta["name"]
    generation = int(meta.get("generation") or 0)
    stamp = now.replace(microsecond=0)  # conditions carry whole seconds, like metav1.Time
    old = previous_status(body.get("status") or {}, f"TrainingBudget/{name}")
    parsed = parse_spec(TrainingBudgetSpec, body.get("spec") or {})
    if isinstance(parsed, list):
        await report_invalid(kube, body, parsed, old.conditions, memory, stamp)
        return now + RESYNC
    spec = parsed
    metrics.report_policy_ready("TrainingBudget", name, ready=True)

    window = current_window(
        spec.period.type,
        now,
        time_zone=spec.period.time_zone,
        rolling=spec.period.window,
        origin=_parse_time(str(meta["creationTimestamp"])),
    )
    live: dict[str, tuple[PodSnapshot, PodFacts]] = {}
    for namespace, store in list(inventory.pods.items()):
        ns_labels = inventory.namespace_labels(namespace)
        for facts in store:
            pod = facts.snapshot
            if not in_scope(spec.scope, pod.namespace, ns_labels, pod.labels):
                continue
            snap = PodSnapshot(
                pod.uid,
                pod.namespace,
                pod.name,
                pod.requests,
                pod.start,
                pod.end,
                pod.outcome,
                pod.labels,
                inventory.node_labels(facts.node),
            )
            live[pod.uid] = (snap, facts)
    live_pods = {uid: snap for uid, (snap, _) in live.items()}

    prices = _prices(spec)
    label_keys = [*spec.attribution_labels, BUDGET_LABEL]
    node_keys = sorted({k for r in prices.accelerator_hour for k in r.node_selector})
    old_ledger = _ledger_from(old.ledger)
    seen_gone = set(memory.gone)
    gone = {
        uid: pod
        for uid, pod in memory.gone.items()
        if uid in old_ledger.open
        or in_scope(
            spec.scope, pod.namespace, inventory.namespace_labels(pod.namespace), pod.labels
        )
    }

    history = list(old.history)
    previous = Window(old.period_start, old.period_end) if old.period_start else None
    if (closed := ended(previous, window)) is not None and closed.end is not None:
        before = account(
            charged(old_ledger, live_pods),
            closed.start,
            closed.end,
            accelerators=spec.accelerators,
            prices=prices,
        )
        pct_before, _ = percent_used(before.total, _limits(spec))
        summary = PeriodSummary(
            start=closed.start,
            end=closed.end,
            usage=_usage_model(before.total),
            percent=round(pct_before, 3),
        )
        history = [summary, *history][: spec.history_limit]

    ledger = advance(
        old_ledger,
        live_pods,
        gone,
        now=now,
        window_start=window.start,
        label_keys=label_keys,
        node_keys=node_keys,
    )
    acct = account(
        charged(ledger, live_pods),
        window.start,
        now,
        accelerators=spec.accelerators,
        prices=prices,
        attribution_labels=spec.attribution_labels,
    )
    limits = _limits(spec)
    pct, dim = percent_used(acct.total, limits)
    lvl = level(pct, spec.thresholds.warn, spec.thresholds.enforce)

    conds = list(old.conditions)
    conds, _ = set_condition(conds, readiness([]), now=stamp, generation=generation)
    updates = threshold_conditions(pct, dim, spec.thresholds.warn, spec.thresholds.enforce)
    exhausted = lvl == "Exhausted"
    flipped: list[ConditionUpdate] = []
    for update in updates:
        before_c = _condition(conds, update.type)
        conds, _ = set_condition(conds, update, now=stamp, generation=generation)
        if update.status == "True" and (before_c is None or before_c.status != "True"):
            flipped.append(update)
    for update in flipped:
        reason = "BudgetWarning" if update.type == C.WARNING else "BudgetExhausted"
        await kube.event(
            body, type_="Warning", reason=reason, message=update.message, action="Account"
        )
        log.info(
            "budget threshold crossed",
            object=f"TrainingBudget/{name}",
            reason=reason,
            percent=round(pct, 3),
            dimension=dim,
        )
    exhausted_cond = _condition(conds, C.EXHAUSTED)
    exhausted_since = exhausted_cond.last_transition_time if exhausted and exhausted_cond else None

    candidates = await _running_workloads(kube, live, spec.accelerators) if exhausted else []
    objects = {w.ref.uid: obj for w, obj in candidates}
    ours_workloads = []
    for obj in ours:
        m = obj["metadata"]
        ref = enforcement.WorkloadRef(
            obj["apiVersion"], obj["kind"], m["namespace"], m["name"], m["uid"]
        )
        ours_workloads.append(
            enforcement.Workload(
                ref,
                _parse_time(str(m["creationTimestamp"])),
                suspended=workloads.is_suspended(obj),
                suspended_by=name,  # listed by this budget's suspended-by label
                suspended_in=workloads.suspended_in(obj),
            )
        )
        objects[m["uid"]] = obj
    recent = sum(
        1
        for obj in ours
        if (at := (obj["metadata"].get("annotations") or {}).get(workloads.SUSPENDED_AT))
        and _parse_time(at) > now - timedelta(minutes=1)
    )
    decision = enforcement.plan(
        name,
        lvl,
        [w for w, _ in candidates] + ours_workloads,
        now=now,
        exhausted_since=exhausted_since,
        grace=spec.enforcement.grace_period,
        order=spec.enforcement.order,
        resume_automatically=spec.enforcement.resume == "Automatic",
        recent_suspensions=recent,
        max_per_minute=spec.enforcement.max_suspensions_per_minute,
        generation=generation,
        period_start=window.start,
    )
    pending, acted = await _act(kube, body, spec, decision, objects, memory, pct, dim, window.start)
    current = {o["metadata"]["uid"]: o for o in ours} | acted

    suspended = [
        _suspended_entry(o, now)
        for o in current.values()
        if workloads.is_suspended(o) and workloads.suspended_by(o) == workloads.label_value(name)
    ]
    warn_at = crossing_time(acct.total, acct.burn_rate, limits, spec.thresholds.warn, now)
    enforce_at = crossing_time(acct.total, acct.burn_rate, limits, spec.thresholds.enforce, now)
    exhaustion = crossing_time(acct.total, acct.burn_rate, limits, 100, now)
    new_status = TrainingBudgetStatus(
        observed_generation=generation,
        conditions=conds,
        period_start=window.start,
        period_end=window.end,
        used=_usage_model(acct.total),
        remaining={
            dim: round(max(0.0, limit - used), 6)
            for dim, (used, limit) in limits.dimensions(acct.total).items()
        },
        percent=round(pct, 3),
        most_constrained=dim or None,
        burn_rate_per_hour=_usage_model(acct.burn_rate),
        projected_exhaustion=exhaustion,
        breakdown=UsageBreakdown(
            by_namespace=_shares(acct.by_namespace),
            by_label={k: _shares(v) for k, v in acct.by_label.items()},
            by_outcome=_shares({str(k): v for k, v in acct.by_outcome.items()}),
        ),
        suspended=suspended,
        pending_actions=pending,
        history=history,
        ledger=_ledger_to(ledger),
        last_evaluated=now,
    )
    await write_status(
        kube,
        "TrainingBudget",
        meta,
        memory,
        new_status.model_dump(mode="json", by_alias=True, exclude_none=True),
    )
    for uid in seen_gone:  # now in the ledger, or never this budget's; newer ones stay
        memory.gone.pop(uid, None)
    metrics.report_budget(name, acct.total.accelerator_hours, limits.dimensions(acct.total), pct)

    wake = [now + RESYNC]
    for t in (warn_at, enforce_at, window.end, decision.grace_ends):
        if t is not None and t > now:
            wake.append(t)
    if decision.deferred:
        wake.append(now + timedelta(seconds=10))
    return min(wake)


def _suspended_entry(obj: JSON, now: datetime) -> SuspendedWorkload:
    meta = obj["metadata"]
    annotations = meta.get("annotations") or {}
    at = annotations.get(workloads.SUSPENDED_AT)
    return SuspendedWorkload(
        ref=ObjectReference(
            api_version=obj["apiVersion"],
            kind=obj["kind"],
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
        ),
        suspended_at=_parse_time(at) if at else now,
        reason=annotations.get(workloads.SUSPEND_REASON, ""),
    )


async def _act(
    kube: Kube,
    budget: JSON,
    spec: TrainingBudgetSpec,
    decision: enforcement.Plan,
    objects: Mapping[str, JSON],
    memory: Memory,
    pct: float,
    dim: str,
    period_start: datetime,
) -> tuple[list[str], dict[str, JSON]]:
    """Apply the plan (Enforce) or describe it (DryRun).

    Returns the pending-action lines and the objects as the actions left them, by uid.
    """
    acted: dict[str, JSON] = {}
    name = budget["metadata"]["name"]
    dry = spec.mode == "DryRun"
    pending = [f"skipped {w.ref}: {why}" for w, why in decision.skipped]
    if decision.grace_ends is not None and not decision.suspend and not decision.deferred:
        pending.append(
            f"suspending charged workloads at {decision.grace_ends.isoformat()} (grace period)"
        )
    pending += [
        f"deferred {w.ref}: over {spec.enforcement.max_suspensions_per_minute}/minute"
        for w in decision.deferred
    ]
    reason = f"TrainingBudget {name} exhausted: {pct:.1f}% of {dim} used"
    for w in decision.suspend:
        obj = objects[w.ref.uid]
        if dry:
            pending.append(f"would suspend {w.ref} ({reason})")
            key = f"dry-suspend/{w.ref.uid}"
            if key not in memory.announced:
                memory.announced.add(key)
                await kube.event(
                    budget,
                    type_="Normal",
                    reason="WouldSuspend",
                    message=f"DryRun: would suspend {w.ref}",
                    action="Suspend",
                )
                metrics.report_action("TrainingBudget", name, "Suspend", "dry-run")
            continue
        try:
            generation = int(budget["metadata"].get("generation") or 0)
            labels, annotations = workloads.budget_marks(name, reason, generation, period_start)
            suspended = await workloads.suspend(kube, obj, labels, annotations)
        except (Conflict, Blocked) as error:
            log.info("suspension deferred", object=str(w.ref), policy=name, error=str(error))
            result = "blocked" if isinstance(error, Blocked) else "conflict"
            metrics.report_action("TrainingBudget", name, "Suspend", result)
            continue
        await kube.event(
            obj, type_="Warning", reason="SuspendedByBudget", message=reason, action="Suspend"
        )
        await kube.event(
            budget,
            type_="Warning",
            reason="Suspended",
            message=f"suspended {w.ref}",
            action="Suspend",
        )
        log.warning(
            "workload suspended", object=str(w.ref), policy=f"TrainingBudget/{name}", reason=reason
        )
        metrics.report_action("TrainingBudget", name, "Suspend", "done")
        if suspended is not None:
            acted[w.ref.uid] = suspended
    for w in decision.resume:
        obj = objects[w.ref.uid]
        if dry:
            pending.append(f"would resume {w.ref}")
            continue
        try:
            acted[w.ref.uid] = await workloads.resume(kube, obj)
        except Conflict as error:
            log.info(
                "resume deferred: object changed", object=str(w.ref), policy=name, error=str(error)
            )
            metrics.report_action("TrainingBudget", name, "Resume", "conflict")
            continue
        message = f"TrainingBudget {name} is within its limit again"
        await kube.event(
            obj, type_="Normal", reason="ResumedByBudget", message=message, action="Resume"
        )
        log.info("workload resumed", object=str(w.ref), policy=f"TrainingBudget/{name}")
        metrics.report_action("TrainingBudget", name, "Resume", "done")
    return pending, acted


async def report_label_problems(
    scopes: Mapping[str, Scope], inventory: Inventory, kube: Kube, reported: set[str]
) -> None:
    """A pod naming a budget that does not exist or does not cover it is charged by scope
    and reported once (Event on the pod, log line, metric); it never stops evaluation."""
    problems: list[tuple[PodSnapshot, str]] = []
    for namespace, store in list(inventory.pods.items()):  # gather first: no await inside
        for facts in list(store):
            pod = facts.snapshot
            if BUDGET_LABEL not in pod.labels or pod.uid in reported:
                continue
            ns_labels = inventory.namespace_labels(namespace)
            verdict = charge(scopes, namespace, ns_labels, pod.labels)
            if verdict.problem is not None:
                problems.append((pod, verdict.problem))
    for pod, problem in problems:
        reported.add(pod.uid)
        log.warning(
            "budget label ignored", object=f"Pod/{pod.namespace}/{pod.name}", problem=problem
        )
        metrics.report_label_problem()
        ref = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        }
        await kube.event(
            ref, type_="Warning", reason="UnknownBudget", message=problem, action="Account"
        )
