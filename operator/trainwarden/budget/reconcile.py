"""One TrainingBudget evaluation: observe its pods, decide, act, record.

- observe: the members the BudgetIndex keeps current (no scan of the cluster), the ledger
  (in memory, or from status after a restart) and the budget's record of what it
  suspended;
- decide (budget/decide.py): usage (budget/ledger accrue), thresholds (core/budgets), what stops
  each charged pod (budget/targets.py over budget/enforcement), the plan
  (budget/enforcement);
- act: budget/enforce.py, in Enforce mode; the same plan is only described in DryRun;
  held workloads are started as the budget has room (budget/holds.py);
- record (budget/record.py): status, written when a reader would see something new, and
  otherwise at most every STATUS_INTERVAL for the totals that move with the clock.
"""

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from trainwarden import failpoints, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import AcceleratorSeries, Busy
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    AdmissionStatus,
    PriceSources,
    SuspendedWorkload,
    TrainingBudgetStatus,
)
from trainwarden.api.v1alpha1.names import BUDGET_KIND as KIND
from trainwarden.budget import efficiency as budget_efficiency
from trainwarden.budget import enforce, holds, storage_step, targets
from trainwarden.budget import status as bs
from trainwarden.budget.catchup import catch_up
from trainwarden.budget.decide import Decision, Memory, decide, period_of, window_of
from trainwarden.budget.holding import HeldRef, holds_new_work
from trainwarden.budget.holding import admission as hold_status
from trainwarden.budget.record import (
    announce,
    build_status,
    figures,
    pending_actions,
    record,
)
from trainwarden.budget.usage_write import publish
from trainwarden.cache.budgets import Members
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.status import RESYNC, open_policy
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import BudgetView
from trainwarden.core.budgets import crossing_time
from trainwarden.core.scope import in_namespaces

DEFERRED_RETRY = timedelta(seconds=10)


def _next(
    d: Decision, spec: TrainingBudgetSpec, memory: Memory, now: datetime, *, held: bool
) -> datetime:
    total, burn = d.total, _burn(d, spec)
    wake = [now + RESYNC]
    if d.storage is not None:
        wake += [t for t in storage_step.wakes(d.storage, spec, d.limits, now) if t > now]
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
    """The workloads this budget holds (budget/holds.py HeldIndex)."""
    others: Callable[[], Sequence[BudgetView]] = tuple
    """Every budget of this instance as its status says (a hold may be handed over)."""
    instance: str | None = None
    """The operator's --instance, on the BudgetUsages it writes (budget/usage_write.py)."""
    prices: PriceSources | None = None
    """Where its accelerator prices came from (budget/prices.py), for status."""
    acted: Callable[[], None] = lambda: None
    """Told once the budget suspended or resumed: the rest of the evaluation (its Events,
    holds, status, usage) then runs off its worker (controllers/base.py `hand_off`)."""


@dataclass
class _Turn:
    """One evaluation's decision and what its steps share; `body` is the object as last
    written."""

    kube: Kube
    body: JSON
    spec: TrainingBudgetSpec
    memory: Memory
    old: TrainingBudgetStatus
    d: Decision
    generation: int
    now: datetime
    prices: PriceSources | None = None

    def status(
        self,
        records: list[SuspendedWorkload],
        pending: list[str],
        admission: AdmissionStatus | None,
    ) -> TrainingBudgetStatus:
        d, g = self.d, self.generation
        built = build_status(
            d, self.spec, self.memory, self.old, records, pending, g, self.now, admission
        )
        return built.model_copy(update={"prices": self.prices}) if self.prices else built

    async def write(self, status: TrainingBudgetStatus, *, force: bool) -> None:
        self.body = await record(self.kube, self.body, self.memory, status, self.now, force=force)


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
    models = (TrainingBudgetSpec, TrainingBudgetStatus)
    opened = await open_policy(kube, body, models, bs.KEPT, memory, now)
    if opened is None:
        return now + RESYNC
    name, generation, spec, old = opened.name, opened.generation, opened.spec, opened.old
    members = members or Members.of(spec)  # not indexed yet: it charges nothing so far
    d = await _decide(body, spec, members, cache, memory, old, now, src)
    plan, holding = enforce.hold(d.plan, src.doubt, spec.mode, f"{KIND}/{name}")
    d = replace(d, plan=plan)
    t = _Turn(kube, body, spec, memory, old, d, generation, now, src.prices)
    records = list(d.records)
    kept = ((r.generation, r.period_start) for r in d.records)
    holds_new = (
        holds_new_work(d.exhausted, kept, generation, d.window_start)
        and spec.enforcement.new_workloads == "Hold"
        and src.doubt is None
    )
    if spec.mode == "Enforce" and d.plan.suspend:  # the record first (enforce.py)
        records = await _record_first(t, records, holding=holds_new, held=len(src.held))
    outcome = await _act(kube, t.body, spec, d, memory, generation, now)
    if spec.mode == "Enforce" and (d.plan.suspend or d.plan.resume):
        src.acted()  # the suspension first: the thresholds' Events and status after it
    await announce(kube, body, d)
    records = [r for r in records if r.ref.uid not in outcome.failed | outcome.resumed]
    pending = holding + pending_actions(spec, d.plan, records) + outcome.pending
    h = await _release(t, src, cache, members, records, pending, holds_new)
    pending += h.pending
    await t.write(
        t.status(records, pending, h.admission), force=bool(outcome.failed or outcome.resumed)
    )
    metrics.report_budget(name, figures(d, spec))
    covered, fresh = _covered(spec, cache), memory.written_at == now
    await publish(kube, t.body, spec, memory.usage, covered, src.instance, now, fresh=fresh)
    memory.acts_at = acts_at(d, spec, now)
    return _next(d, spec, memory, now, held=bool(holding) or h.again)


def acts_at(d: Decision, spec: TrainingBudgetSpec, now: datetime) -> datetime | None:
    """When the budget may next act: it crosses its enforce threshold at the current burn
    (now, if past it), or a grace period ends. None: not foreseen."""
    enforce = spec.thresholds.enforce
    times = (crossing_time(d.total, _burn(d, spec), d.limits, enforce, now), d.plan.grace_ends)
    return min((t for t in times if t is not None), default=None)


def _burn(d: Decision, spec: TrainingBudgetSpec) -> Usage:
    """What the budget accrues an hour: its pods' burn and its storage's cost rate."""
    if d.storage is None:
        return d.accrual.burn
    return d.accrual.burn + storage_step.cost_rate(d.storage, spec)


def _covered(spec: TrainingBudgetSpec, cache: ClusterCache) -> Callable[[str], bool]:
    """Whether the budget's scope covers a namespace that exists (its BudgetUsage)."""

    def covered(namespace: str) -> bool:
        labels = cache.namespace_labels(namespace)
        return namespace in cache.namespaces and in_namespaces(spec.scope, namespace, labels)

    return covered


async def _decide(
    body: JSON,
    spec: TrainingBudgetSpec,
    members: Members,
    cache: ClusterCache,
    memory: Memory,
    old: TrainingBudgetStatus,
    now: datetime,
    src: Sources,
) -> Decision:
    """Observe what the decision needs (pods no operator saw, what the accelerators did),
    then decide; the efficiency it measured is reported."""
    meta = body["metadata"]
    name, generation = meta["name"], int(meta.get("generation") or 0)
    created = datetime.fromisoformat(str(meta["creationTimestamp"]).replace("Z", "+00:00"))
    memory.since = memory.since or now
    unseen = await catch_up(src.series, spec, members, cache, memory.ledger is None, old, now)
    window = window_of(spec, now, created)
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
    return d


async def _record_first(
    t: _Turn, records: list[SuspendedWorkload], *, holding: bool, held: int
) -> list[SuspendedWorkload]:
    """What the budget will suspend, recorded in status before it suspends (enforce.py)."""
    failpoints.hit("budget-before-record")
    d = t.d
    records = targets.recorded(records, d.plan.suspend, t.now, t.generation, d.window_start)
    pending = pending_actions(t.spec, d.plan, records)
    admission = hold_status(
        t.old.admission,
        holding=holding,
        held=held,
        now=t.now,
        period_end=d.window_end,
        generation=t.generation,
    )
    await t.write(t.status(records, pending, admission), force=True)
    failpoints.hit("budget-before-suspend")
    return records


async def _release(
    t: _Turn,
    src: Sources,
    cache: ClusterCache,
    members: Members,
    records: list[SuspendedWorkload],
    pending: list[str],
    holding: bool,
) -> holds.HoldOutcome:
    """Hold new work, or start what is held as the budget has room (budget/holds.py)."""

    async def intend(admission: AdmissionStatus | None) -> None:
        """What a release commits, written before the release (budget/holds.py)."""
        await t.write(t.status(records, pending, admission), force=True)

    d = t.d
    return await holds.evaluate(
        holds.Holds(
            t.kube, t.body, t.spec, src.others, cache, t.now, t.generation, t.memory.since, intend
        ),
        src.held,
        t.memory.holding,
        members,
        holding=holding,
        acting=src.doubt is None,
        remaining=d.remaining,
        previous=t.old.admission,
        period_end=d.window_end,
    )


async def _act(
    kube: Kube,
    body: JSON,
    spec: TrainingBudgetSpec,
    d: Decision,
    memory: Memory,
    generation: int,
    now: datetime,
) -> enforce.EnforceOutcome:
    """Suspend and resume as planned (Enforce), or describe the plan (DryRun)."""
    name = body["metadata"]["name"]
    if spec.mode == "Enforce" and d.plan.resume:
        failpoints.hit("budget-before-resume")
    reason = f"TrainingBudget {name} exhausted: {d.percent:.1f}% of {d.dimension} used"
    ctx = enforce.Context(kube, body, spec, reason, generation, d.window_start, memory.announced)
    outcome = await enforce.act(ctx, d.plan)
    if spec.mode == "Enforce" and (d.plan.suspend or d.plan.resume):
        failpoints.hit("budget-before-final-status")
    memory.announced.keep_only(
        [f"dry-suspend/{w.ref.uid}" for w in d.plan.suspend]
        + [f"unstoppable/{w.ref.uid}" for w, _ in d.plan.unstoppable]
    )  # what lasts
    memory.evictions += [now] * outcome.evicted
    return outcome
