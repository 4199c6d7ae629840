"""A TrainingBudget's decision, before it acts: its usage (budget/ledger.py `accrue`), its
thresholds (core/budgets.py), what stops each charged pod (budget/targets.py over
budget/enforcement.py) and the enforcement plan (budget/enforcement.py); and what one
budget carries between evaluations (Memory)."""

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import SuspendedWorkload, TrainingBudgetStatus
from trainwarden.api.v1alpha1.efficiency import EfficiencyStatus
from trainwarden.budget import efficiency as budget_efficiency
from trainwarden.budget import enforcement, storage_step, targets
from trainwarden.budget import status as bs
from trainwarden.budget.holds import HoldMemory
from trainwarden.budget.ledger import Accrual, Ledger, Period, Window, accrue, current_window
from trainwarden.budget.storage import StorageLedger
from trainwarden.budget.storage_step import StorageView
from trainwarden.budget.usage import UsageMemory
from trainwarden.cache.budgets import Members
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.status import LastWrite
from trainwarden.core.accounting import Charge, Usage
from trainwarden.core.announce import Announcements
from trainwarden.core.budgets import (
    Level,
    Limits,
    level,
    percent_used,
    threshold_conditions,
)
from trainwarden.core.budgets import limits as budget_limits
from trainwarden.core.conditions import ConditionUpdate, readiness, set_condition


@dataclass
class Memory(LastWrite):
    """What one budget carries between evaluations. Losing it (a restart) is safe: the
    ledger is read back from status and pods that vanished meanwhile are estimated."""

    ledger: Ledger | None = None
    period: Period | None = None
    estimated: Usage = field(default_factory=Usage)
    unwritten: datetime | None = None
    """When a change not yet written is due to be."""
    announced: Announcements = field(default_factory=Announcements)
    evictions: list[datetime] = field(default_factory=list)
    """When bare pods were evicted in the last minute (they leave no record in status)."""
    strays: dict[str, datetime] = field(default_factory=dict)
    """Since when each charged pod has been waiting on something else to stop it (its
    owner's controller, Kueue): past enforcement.SETTLE the budget stops it itself."""
    since: datetime | None = None
    """This process's first evaluation of the budget: older records are an earlier
    process's, which the cache (listed since) shows as they are (targets.ours)."""
    holding: HoldMemory = field(default_factory=HoldMemory)
    efficiency: budget_efficiency.EfficiencyMemory = field(
        default_factory=budget_efficiency.EfficiencyMemory
    )
    shown: EfficiencyStatus | None = None
    """The efficiency status of the last evaluation (budget/efficiency.py)."""
    usage: UsageMemory = field(default_factory=UsageMemory)
    """The BudgetUsages this process wrote (budget/usage.py)."""
    storage: StorageLedger | None = None
    """The storage ledger (budget/storage.py); None: read back from status."""


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
    storage: StorageView | None = None
    """The budget's storage, if it accounts storage (budget/storage_step.py)."""

    @property
    def total(self) -> Usage:
        """The pods' usage, its cost with storage's."""
        extra = Usage(cost=self.storage.cost) if self.storage is not None else Usage()
        return self.accrual.usage.total + extra

    @property
    def remaining(self) -> dict[str, float]:
        """What is left of each limited dimension, never negative."""
        by_class = self.storage.usage.by_class if self.storage is not None else None
        dims = self.limits.dimensions(self.total, by_class)
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


STORAGE_TYPES = {C.WARNING: C.STORAGE_WARNING, C.EXHAUSTED: C.STORAGE_EXHAUSTED}


def _storage_thresholds(
    conds: list[Any],
    flipped: list[ConditionUpdate],
    view: StorageView | None,
    spec: TrainingBudgetSpec,
    stamp: datetime,
    generation: int,
) -> tuple[list[Any], list[ConditionUpdate]]:
    """StorageWarning and StorageExhausted, as the budget's own thresholds say them of
    its storage limits (and cost); absent while it accounts no storage."""
    conds = [c for c in conds if c.type not in STORAGE_TYPES.values()] if view is None else conds
    if view is None:
        return conds, flipped
    flipped = list(flipped)
    t = spec.thresholds
    for update in threshold_conditions(view.percent, view.dimension, t.warn, t.enforce):
        update = replace(update, type=STORAGE_TYPES[update.type])
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
    window = window_of(spec, now, created)
    period = period_of(window.start, window.end)
    acct = _accrue(spec, members, memory, old, period, now, unseen)
    limits = budget_limits(spec)
    storage = _storage(spec, limits, acct.usage.total, memory, old, cache, window, now)
    cost = Usage(cost=storage.cost) if storage is not None else Usage()
    pct, dim = percent_used(acct.usage.total + cost, limits)
    records, suspended = targets.ours(name, old.suspended, cache, now, memory.since)
    keeps = any((r.generation, r.period_start) == (generation, window.start) for r in records)
    lvl = level(pct, spec.thresholds.warn, spec.thresholds.enforce, keeps=keeps)
    stamp = now.replace(microsecond=0)
    conds, flipped = _thresholds(list(old.conditions), pct, dim, spec, stamp, generation, keeps)
    conds, flipped = _storage_thresholds(conds, flipped, storage, spec, stamp, generation)
    exhausted = next((c for c in conds if c.type == C.EXHAUSTED), None)
    found = (
        targets.candidates(members.facts, cache, spec.accelerators, now, memory.strays, own)
        if lvl == "Exhausted"
        else targets.Found()
    )
    since = exhausted.last_transition_time if lvl == "Exhausted" and exhausted else None
    work = found.workloads + suspended
    plan = found.into(_plan(name, lvl, spec, work, since, records, memory, generation, window, now))
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
        storage,
    )


def _storage(
    spec: TrainingBudgetSpec,
    limits: Limits,
    pods: Usage,
    memory: Memory,
    old: TrainingBudgetStatus,
    cache: ClusterCache,
    window: Window,
    now: datetime,
) -> StorageView | None:
    """The storage ledger advanced to `now` and judged; None without storage limits or
    prices (nothing is accounted)."""
    if not storage_step.accounts(spec):
        memory.storage = None
        return None
    ledger = memory.storage if memory.storage is not None else storage_step.ledger_from(old)
    ledger, usage, current = storage_step.advance(
        spec, ledger, cache, period_start=window.start.timestamp(), now=now.timestamp()
    )
    memory.storage = ledger
    return storage_step.judge(spec, limits, pods, usage, current=current)


def _plan(
    name: str,
    lvl: Level,
    spec: TrainingBudgetSpec,
    workloads: list[enforcement.Workload],
    exhausted_since: datetime | None,
    records: list[SuspendedWorkload],
    memory: Memory,
    generation: int,
    window: Window,
    now: datetime,
) -> enforcement.Plan:
    """What to suspend and resume this evaluation, at the budget's level."""
    return enforcement.plan(
        name,
        lvl,
        workloads,
        now=now,
        exhausted_since=exhausted_since,
        grace=spec.enforcement.grace_period,
        order=spec.enforcement.order,
        resume_automatically=spec.enforcement.resume == "Automatic",
        recent_suspensions=_recent(records, memory, now),
        max_per_minute=min(spec.enforcement.max_suspensions_per_minute, targets.room(records)),
        generation=generation,
        period_start=window.start,
    )


def window_of(spec: TrainingBudgetSpec, now: datetime, created: datetime) -> Window:
    p = spec.period
    return current_window(p.type, now, time_zone=p.time_zone, rolling=p.window, origin=created)


def period_of(start: datetime, end: datetime | None) -> Period:
    return Period(start.timestamp(), end.timestamp() if end else None)


def _recent(records: list[SuspendedWorkload], memory: Memory, now: datetime) -> int:
    """Suspensions and evictions in the last minute, for the per-minute cap."""
    minute_ago = now - timedelta(minutes=1)
    memory.evictions = [t for t in memory.evictions if t > minute_ago]
    return sum(1 for r in records if r.suspended_at > minute_ago) + len(memory.evictions)
