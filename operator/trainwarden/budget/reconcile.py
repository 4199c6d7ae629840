"""One TrainingBudget evaluation: observe its pods, decide with the core, act, record.

- observe: the members the BudgetIndex keeps current (no scan of the cluster), the ledger
  (in memory, or from status after a restart) and the budget's record of what it
  suspended;
- decide: usage (budget/accrual), thresholds (core/budgets), what stops each charged pod
  (budget/targets.py over budget/containment), the plan (budget/enforcement);
- act: budget/enforce.py, in Enforce mode; the same plan is only described in DryRun;
- record: status, written when a reader would see something new, and otherwise at most
  every STATUS_INTERVAL for the totals that move with the clock.
"""

import math
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from trainwarden import failpoints, logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import AcceleratorSeries, Busy
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.budget import (
    MAX_SUSPENDED,
    AdmissionStatus,
    PeriodSummary,
    SuspendedWorkload,
    TrainingBudgetSpec,
    TrainingBudgetStatus,
)
from trainwarden.api.v1alpha1.efficiency import EfficiencyStatus
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.budget import efficiency as budget_efficiency
from trainwarden.budget import enforce, enforcement, holds, targets
from trainwarden.budget import status as bs
from trainwarden.budget.accrual import Accrual, Period, accrue
from trainwarden.budget.catchup import catch_up
from trainwarden.budget.holding import HeldRef, holds_new_work
from trainwarden.budget.holding import admission as hold_status
from trainwarden.budget.holds import HoldMemory
from trainwarden.budget.ledger import Ledger
from trainwarden.budget.periods import Window, current_window
from trainwarden.cache.budgets import Members
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.status import RESYNC, LastWrite, report_invalid, write_status
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import BudgetView
from trainwarden.core.budgets import (
    Limits,
    crossing_time,
    level,
    percent_used,
    threshold_conditions,
)
from trainwarden.core.budgets import limits as budget_limits
from trainwarden.core.charges import Charge
from trainwarden.core.conditions import ConditionUpdate, set_condition
from trainwarden.core.readiness import readiness

log = logs.get(__name__)
KIND = "TrainingBudget"
STATUS_INTERVAL = timedelta(seconds=60)
"""The longest the running totals in status lag behind while only the clock moves them.
Shorter than other kinds' (controllers/status.py): a pod deleted while the operator is down
is charged up to the last status write that saw it, so this bounds that loss."""
CHURN_INTERVAL = timedelta(seconds=10)
"""The longest a change in the running pods (burn rate, forecast, pods gone into the
ledger) waits to be written: bursts of pod churn cost one write per budget per interval."""
DEFERRED_RETRY = timedelta(seconds=10)


@dataclass
class Memory(LastWrite):
    """What one budget carries between evaluations. Losing it (a restart) is safe: the
    ledger is read back from status and pods that vanished meanwhile are estimated."""

    ledger: Ledger | None = None
    period: Period | None = None
    estimated: Usage = field(default_factory=Usage)
    unwritten: datetime | None = None
    """When a change not yet written is due to be."""
    announced: set[str] = field(default_factory=set)
    evictions: list[datetime] = field(default_factory=list)
    """When bare pods were evicted in the last minute (they leave no record in status)."""
    strays: dict[str, datetime] = field(default_factory=dict)
    """Since when each charged pod has been waiting on something else to stop it (its
    owner's controller, Kueue): past containment.SETTLE the budget stops it itself."""
    since: datetime | None = None
    """This process's first evaluation of the budget: older records are an earlier
    process's, which the cache (listed since) shows as they are (targets.ours)."""
    holding: HoldMemory = field(default_factory=HoldMemory)
    efficiency: budget_efficiency.EfficiencyMemory = field(
        default_factory=budget_efficiency.EfficiencyMemory
    )
    shown: EfficiencyStatus | None = None
    """The efficiency status of the last evaluation (budget/efficiency.py)."""


@dataclass(frozen=True)
class Decision:
    """Everything an evaluation decided, before acting."""

    accrual: Accrual
    limits: Limits
    percent: float
    dimension: str
    conditions: list[Any]
    flipped: list[ConditionUpdate]
    plan: enforcement.Plan
    records: list[SuspendedWorkload]
    window_start: datetime
    window_end: datetime | None
    exhausted: bool

    @property
    def remaining(self) -> dict[str, float]:
        """What is left of each limited dimension, never negative."""
        dims = self.limits.dimensions(self.accrual.usage.total)
        return {dim: round(max(0.0, limit - used), 6) for dim, (used, limit) in dims.items()}


def _accrue(
    spec: TrainingBudgetSpec,
    members: Members,
    memory: Memory,
    old: TrainingBudgetStatus,
    period: Period,
    now: datetime,
    unseen: Sequence[Charge] = (),
) -> Accrual:
    """`unseen`: pods that came and went while no operator ran, from their series."""
    restoring = memory.ledger is None
    if memory.ledger is None:
        memory.ledger, memory.period, memory.estimated = bs.ledger_from(old)
    window = spec.period.window
    rolling = window.total_seconds() if spec.period.type == "Rolling" and window else None
    result = accrue(
        memory.ledger,
        period=period,
        previous=memory.period,
        live=list(members.live.values()),
        gone=[*members.take_gone(), *unseen],
        now=now.timestamp(),
        label_keys=members.label_keys,
        rolling=rolling,
        restoring=restoring and memory.ledger.observed_at is not None,
    )
    if result.ended is not None:
        memory.estimated = Usage()
    if result.vanished is not None:
        memory.estimated = memory.estimated + result.vanished.total
    for c in unseen:
        memory.estimated = memory.estimated + c.rate.usage(c.seconds(period.start, now.timestamp()))
    memory.ledger, memory.period = result.ledger, period
    return result


def _thresholds(
    old: list[Any],
    pct: float,
    dim: str,
    spec: TrainingBudgetSpec,
    stamp: datetime,
    generation: int,
    keeps: bool,
) -> tuple[list[Any], list[ConditionUpdate]]:
    conds, _ = set_condition(old, readiness([]), now=stamp, generation=generation)
    flipped = []
    t = spec.thresholds
    for update in threshold_conditions(pct, dim, t.warn, t.enforce, keeps=keeps):
        before = next((c for c in conds if c.type == update.type), None)
        conds, _ = set_condition(conds, update, now=stamp, generation=generation)
        if update.status == "True" and (before is None or before.status != "True"):
            flipped.append(update)
    return conds, flipped


def decide(
    name: str,
    generation: int,
    spec: TrainingBudgetSpec,
    members: Members,
    cache: ClusterCache,
    memory: Memory,
    old: TrainingBudgetStatus,
    created: datetime,
    now: datetime,
    unseen: Sequence[Charge] = (),
    own: AbstractSet[str] = frozenset(),
) -> Decision:
    """Usage, thresholds and the enforcement plan, from the budget's members and record.
    `own`: the uids of the operator's own Jobs, never suspended."""
    window = _window(spec, now, created)
    period = period_of(window.start, window.end)
    acct = _accrue(spec, members, memory, old, period, now, unseen)
    limits = budget_limits(spec)
    pct, dim = percent_used(acct.usage.total, limits)
    records, suspended = targets.ours(name, old.suspended, cache, now, memory.since)
    keeps = any((r.generation, r.period_start) == (generation, window.start) for r in records)
    lvl = level(pct, spec.thresholds.warn, spec.thresholds.enforce, keeps=keeps)
    stamp = now.replace(microsecond=0)
    conds, flipped = _thresholds(list(old.conditions), pct, dim, spec, stamp, generation, keeps)
    exhausted = next((c for c in conds if c.type == C.EXHAUSTED), None)
    found = (
        targets.candidates(members.facts, cache, spec.accelerators, now, memory.strays, own)
        if lvl == "Exhausted"
        else targets.Found()
    )
    plan = enforcement.plan(
        name,
        lvl,
        found.workloads + suspended,
        now=now,
        exhausted_since=exhausted.last_transition_time
        if lvl == "Exhausted" and exhausted
        else None,
        grace=spec.enforcement.grace_period,
        order=spec.enforcement.order,
        resume_automatically=spec.enforcement.resume == "Automatic",
        recent_suspensions=_recent(records, memory, now),
        max_per_minute=min(spec.enforcement.max_suspensions_per_minute, targets.room(records)),
        generation=generation,
        period_start=window.start,
    )
    plan = found.into(plan)
    return Decision(
        acct,
        limits,
        pct,
        dim,
        conds,
        flipped,
        plan,
        records,
        window.start,
        window.end,
        lvl == "Exhausted",
    )


def _window(spec: TrainingBudgetSpec, now: datetime, created: datetime) -> Window:
    p = spec.period
    return current_window(p.type, now, time_zone=p.time_zone, rolling=p.window, origin=created)


def period_of(start: datetime, end: datetime | None) -> Period:
    return Period(start.timestamp(), end.timestamp() if end else None)


def _recent(records: list[SuspendedWorkload], memory: Memory, now: datetime) -> int:
    """Suspensions and evictions in the last minute, for the per-minute cap."""
    minute_ago = now - timedelta(minutes=1)
    memory.evictions = [t for t in memory.evictions if t > minute_ago]
    return sum(1 for r in records if r.suspended_at > minute_ago) + len(memory.evictions)


def _pending(spec: TrainingBudgetSpec, plan: enforcement.Plan, records: list[Any]) -> list[str]:
    """What the budget is waiting to do, one line each."""
    lines = [f"cannot stop {w.ref}: {why}" for w, why in plan.unstoppable]
    lines += [f"skipped {w.ref}: {why}" for w, why in plan.skipped]
    if plan.grace_ends is not None and not plan.suspend and not plan.deferred:
        lines.append(
            f"suspending charged workloads at {plan.grace_ends.isoformat()} (grace period)"
        )
    cap = spec.enforcement.max_suspensions_per_minute
    if len(records) >= MAX_SUSPENDED:
        lines.append(f"at most {MAX_SUSPENDED} workloads are held suspended per budget")
    lines += [f"deferred {w.ref}: over {cap}/minute" for w in plan.deferred]
    return lines


def _summary(
    d: Decision, memory: Memory, old: TrainingBudgetStatus, spec: TrainingBudgetSpec
) -> list[PeriodSummary]:
    history = list(old.history)
    if d.accrual.ended is not None:
        ended, total = d.accrual.ended
        pct, _ = percent_used(total, d.limits)
        summary = PeriodSummary(
            start=datetime.fromtimestamp(ended.start, UTC),
            end=datetime.fromtimestamp(ended.end or ended.start, UTC),
            usage=bs.usage_model(total),
            percent=round(pct, 3),
        )
        history = [summary, *history]
    return history[: spec.history_limit]


def build_status(
    d: Decision,
    spec: TrainingBudgetSpec,
    memory: Memory,
    old: TrainingBudgetStatus,
    records: list[SuspendedWorkload],
    pending: list[str],
    generation: int,
    now: datetime,
    admission: AdmissionStatus | None,
) -> TrainingBudgetStatus:
    total, burn = d.accrual.usage.total, d.accrual.burn
    assert memory.ledger is not None
    return TrainingBudgetStatus(
        observed_generation=generation,
        conditions=d.conditions,
        period_start=d.window_start,
        period_end=d.window_end,
        used=bs.usage_model(total),
        remaining=d.remaining,
        percent=math.floor(d.percent * 10) / 10,  # shown by kubectl: 99.9 until it is 100
        most_constrained=d.dimension or None,
        burn_rate_per_hour=bs.usage_model(burn),
        projected_exhaustion=crossing_time(total, burn, d.limits, 100, now),
        breakdown=bs.breakdown_model(d.accrual.usage),
        suspended=records,
        admission=admission,
        pending_actions=bs.capped(pending),
        efficiency=memory.shown,
        history=_summary(d, memory, old, spec),
        ledger=bs.ledger_model(memory.ledger, memory.estimated).model_copy(
            update={"efficiency": budget_efficiency.ledger(memory.efficiency)}
        ),
        last_evaluated=now,
    )


async def _announce(kube: Kube, body: JSON, d: Decision) -> None:
    name = body["metadata"]["name"]
    for update in d.flipped:
        reason = "BudgetWarning" if update.type == C.WARNING else "BudgetExhausted"
        await kube.event(
            body, type_="Warning", reason=reason, message=update.message, action="Account"
        )
        log.info(
            "budget threshold crossed",
            object=f"{KIND}/{name}",
            reason=reason,
            percent=round(d.percent, 3),
            dimension=d.dimension,
        )


async def _record(
    kube: Kube,
    body: JSON,
    memory: Memory,
    status: TrainingBudgetStatus,
    now: datetime,
    *,
    force: bool,
) -> JSON:
    """Write status as soon as its urgency asks (budget_status.urgency), or when `force`d.
    Returns the object as it now is; `memory.unwritten` says when an unwritten change is
    due. A last write "after" now (the server's clock stepped back) throttles nothing."""
    new = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    urgency = "now" if force else bs.urgency(body.get("status") or {}, new)
    since = now - memory.written_at if memory.written_at else None
    wait = {"now": timedelta(0), "soon": CHURN_INTERVAL, "later": STATUS_INTERVAL}.get(
        urgency or ""
    )
    memory.unwritten = None
    if wait is None:
        return body
    if since is None or since >= wait or since < timedelta(0):
        written = await write_status(kube, KIND, body, memory, new)
        memory.written_at = now
        return written
    assert memory.written_at is not None
    memory.unwritten = memory.written_at + wait
    return body


def _next(
    d: Decision, spec: TrainingBudgetSpec, memory: Memory, now: datetime, *, held: bool
) -> datetime:
    total, burn = d.accrual.usage.total, d.accrual.burn
    wake = [now + RESYNC]
    for t in (
        crossing_time(total, burn, d.limits, spec.thresholds.warn, now),
        crossing_time(total, burn, d.limits, spec.thresholds.enforce, now),
        d.window_end,
        d.plan.grace_ends,
        d.plan.recheck,
        memory.unwritten,
    ):
        if t is not None and t > now:
            wake.append(t)
    if d.plan.deferred or held:  # held: the clock may be known again by then
        wake.append(now + DEFERRED_RETRY)
    return min(wake)


@dataclass(frozen=True)
class Sources:
    """What an evaluation reads besides the budget, its members and the cache."""

    series: AcceleratorSeries | None = None
    """Where pods that came and went while no operator ran are seen (Prometheus)."""
    busy: Busy | None = None
    """What the accelerators did (Prometheus; None: efficiency is not measured)."""
    doubt: str | None = None
    """Why the server's time cannot be trusted to act on now (clock.py); None: it can."""
    own: AbstractSet[str] = frozenset()
    """The operator's own Jobs (pruners), which no budget suspends."""
    held: Sequence[HeldRef] = ()
    """The workloads this budget holds (budget/held.py)."""
    others: Callable[[], Sequence[BudgetView]] = tuple
    """Every budget of this instance as its status says (a hold may be handed over)."""


async def reconcile(
    body: JSON,
    members: Members | None,
    cache: ClusterCache,
    kube: Kube,
    memory: Memory,
    now: datetime,
    sources: Sources | None = None,
) -> datetime:
    """Evaluate one budget; return when it next needs evaluating if nothing changes.
    With the server's time in doubt (clock.py), account and report, but do not act."""
    src = sources or Sources()
    meta = body["metadata"]
    name, generation = meta["name"], int(meta.get("generation") or 0)
    old = bs.previous_status(body.get("status") or {}, f"{KIND}/{name}")
    spec = parse_spec(TrainingBudgetSpec, body.get("spec") or {})
    if isinstance(spec, list):
        await report_invalid(kube, body, spec, old.conditions, memory, now.replace(microsecond=0))
        return now + RESYNC
    metrics.report_policy_ready(KIND, name, ready=True)
    members = members or Members.of(spec)  # not indexed yet: it charges nothing so far
    created = datetime.fromisoformat(str(meta["creationTimestamp"]).replace("Z", "+00:00"))
    memory.since = memory.since or now
    unseen = await catch_up(src.series, spec, members, cache, memory.ledger is None, old, now)
    window = _window(spec, now, created)
    period = period_of(window.start, window.end)
    await budget_efficiency.measure(src.busy, spec, members, memory.efficiency, old, period, now)
    d = decide(name, generation, spec, members, cache, memory, old, created, now, unseen, src.own)
    memory.shown = budget_efficiency.shown(
        spec, members, memory.efficiency, d.accrual.usage, period
    )
    if memory.shown is not None:
        t = memory.shown.total
        metrics.report_efficiency(
            name, t.used_accelerator_hours, t.idle_accelerator_hours, t.unknown_accelerator_hours
        )
    plan, holding = enforce.hold(d.plan, src.doubt, spec.mode, f"{KIND}/{name}")
    d = replace(d, plan=plan)
    await _announce(kube, body, d)
    records = list(d.records)
    kept = ((r.generation, r.period_start) for r in d.records)
    holds_new = (
        holds_new_work(d.exhausted, kept, generation, d.window_start)
        and spec.enforcement.new_workloads == "Hold"
        and src.doubt is None
    )
    if spec.mode == "Enforce" and d.plan.suspend:  # the record first (enforce.py)
        failpoints.hit("budget-before-record")
        records = targets.recorded(records, d.plan.suspend, now, generation, d.window_start)
        pending = _pending(spec, d.plan, records)
        admission = hold_status(
            old.admission,
            holding=holds_new,
            held=len(src.held),
            now=now,
            period_end=d.window_end,
            generation=generation,
        )
        intent = build_status(d, spec, memory, old, records, pending, generation, now, admission)
        body = await _record(kube, body, memory, intent, now, force=True)
        failpoints.hit("budget-before-suspend")
    outcome = await _act(kube, body, spec, d, memory, generation, now)
    records = [r for r in records if r.ref.uid not in outcome.failed | outcome.resumed]
    pending = holding + _pending(spec, d.plan, records) + outcome.pending

    async def intend(admission: AdmissionStatus | None) -> None:
        """What a release commits, written before the release (budget/holds.py)."""
        nonlocal body
        status = build_status(d, spec, memory, old, records, pending, generation, now, admission)
        body = await _record(kube, body, memory, status, now, force=True)

    h = await holds.evaluate(
        holds.Holds(kube, body, spec, src.others, cache, now, generation, memory.since, intend),
        src.held,
        memory.holding,
        members,
        holding=holds_new,
        acting=src.doubt is None,
        remaining=d.remaining,
        previous=old.admission,
        period_end=d.window_end,
    )
    pending += h.pending
    final = build_status(d, spec, memory, old, records, pending, generation, now, h.admission)
    await _record(kube, body, memory, final, now, force=bool(outcome.failed or outcome.resumed))
    total = d.accrual.usage.total
    metrics.report_budget(name, total.accelerator_hours, d.limits.dimensions(total), d.percent)
    return _next(d, spec, memory, now, held=bool(holding) or h.again)


async def _act(
    kube: Kube,
    body: JSON,
    spec: TrainingBudgetSpec,
    d: Decision,
    memory: Memory,
    generation: int,
    now: datetime,
) -> enforce.Outcome:
    """Suspend and resume as planned (Enforce), or describe the plan (DryRun)."""
    name = body["metadata"]["name"]
    if spec.mode == "Enforce" and d.plan.resume:
        failpoints.hit("budget-before-resume")
    reason = f"TrainingBudget {name} exhausted: {d.percent:.1f}% of {d.dimension} used"
    ctx = enforce.Context(kube, body, spec, reason, generation, d.window_start, memory.announced)
    outcome = await enforce.act(ctx, d.plan)
    if spec.mode == "Enforce" and (d.plan.suspend or d.plan.resume):
        failpoints.hit("budget-before-final-status")
    memory.announced &= {f"dry-suspend/{w.ref.uid}" for w in d.plan.suspend} | {
        f"unstoppable/{w.ref.uid}" for w, _ in d.plan.unstoppable
    }  # what lasts
    memory.evictions += [now] * outcome.evicted
    return outcome
