"""A TrainingBudget's status: built from its decision and what it did, and written as soon
as a reader would see something new, otherwise at most every status interval (every kind's,
controllers/status.py) for the totals that move with the clock; the Events of thresholds
crossed."""

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    MAX_SUSPENDED,
    AdmissionStatus,
    PeriodSummary,
    SuspendedWorkload,
    TrainingBudgetStatus,
)
from trainwarden.api.v1alpha1.names import BUDGET_KIND as KIND
from trainwarden.budget import efficiency as budget_efficiency
from trainwarden.budget import enforcement, storage_step, usage
from trainwarden.budget import status as bs
from trainwarden.budget.decide import Decision, Memory
from trainwarden.controllers.status import write_status
from trainwarden.core.budgets import crossing_time, percent_used, ratios

log = logs.get(__name__)
CHURN_INTERVAL = timedelta(seconds=30)
"""The longest a change in the running pods (burn rate, forecast, pods gone into the
ledger) waits to be written: pod churn costs at most two writes a minute per budget, however
many runs start and end (at 10 s it was 1.1 of the 2.2 requests per finished run at 10 pods/s
over 100 budgets). Enforcement never waits for it: the ledger is in memory."""


def pending_actions(
    spec: TrainingBudgetSpec, plan: enforcement.Plan, records: list[Any]
) -> list[str]:
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
    breakdown = bs.breakdown_model(d.accrual.usage)
    storage = storage_admission = None
    if d.storage is not None and memory.storage is not None:
        storage = storage_step.status_of(memory.storage, d.storage)
        storage_admission = storage_step.refusal(
            d.storage,
            spec,
            old.storage_admission,
            now=now,
            period_end=d.window_end,
            generation=generation,
        )
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
        breakdown=breakdown,
        suspended=records,
        admission=admission,
        pending_actions=bs.capped(pending),
        efficiency=memory.shown,
        budget_usages=usage.copies(memory.usage, breakdown),
        history=_summary(d, memory, old, spec),
        storage=storage,
        storage_admission=storage_admission,
        ledger=bs.ledger_model(memory.ledger, memory.estimated).model_copy(
            update={"efficiency": budget_efficiency.ledger(memory.efficiency)}
        ),
        last_evaluated=now,
    )


def figures(d: Decision, spec: TrainingBudgetSpec) -> metrics.BudgetFigures:
    """What the budget exports to Prometheus (metrics/spend.py)."""
    total = d.total
    storage = d.storage.usage.by_class if d.storage is not None else None
    return metrics.BudgetFigures(
        mode=spec.mode,
        period=spec.period.type,
        accelerator_hours=total.accelerator_hours,
        cpu_core_hours=total.cpu_core_hours,
        memory_gib_hours=total.memory_gib_hours,
        ratios=ratios(total, d.limits, storage),
        storage_gib_hours=dict(storage or {}),
        cost=(total.cost, spec.rates.currency) if spec.rates else None,
    )


REASONS = {
    C.WARNING: "BudgetWarning",
    C.EXHAUSTED: "BudgetExhausted",
    C.STORAGE_WARNING: "StorageWarning",
    C.STORAGE_EXHAUSTED: "StorageExhausted",
}


async def announce(kube: Kube, body: JSON, d: Decision) -> None:
    name = body["metadata"]["name"]
    for update in d.flipped:
        reason = REASONS[update.type]
        await kube.event(
            body, type_="Warning", reason=reason, message=update.message, action="Account"
        )
        storage = d.storage if update.type in (C.STORAGE_WARNING, C.STORAGE_EXHAUSTED) else None
        log.info(
            "budget threshold crossed",
            object=f"{KIND}/{name}",
            reason=reason,
            percent=round(storage.percent if storage else d.percent, 3),
            dimension=storage.dimension if storage else d.dimension,
        )


async def record(
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
    soon = min(CHURN_INTERVAL, memory.status_interval)  # never later than clock-only
    wait = {"now": timedelta(0), "soon": soon, "later": memory.status_interval}.get(urgency or "")
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
