"""A TrainingBudget's status: built from an evaluation, read back after a restart.

The status is bounded (docs/budgets.md): breakdowns keep their largest keys, the ledger
holds tallies and time buckets, never pods. `used` and `breakdown` are also what a
restart compares the live pods with (`ledger.observedAt` says when they were taken), so
the ledger does not repeat them.
"""

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from trainwarden.api.v1alpha1.budget_status import (
    MAX_PENDING,
    LedgerTally,
    ResourceUsage,
    TrainingBudgetStatus,
    UsageBreakdown,
    UsageBucket,
    UsageShare,
)
from trainwarden.api.v1alpha1.budget_status import Ledger as LedgerModel
from trainwarden.budget.ledger import Bucket, Ledger, Period
from trainwarden.core.accounting import Usage
from trainwarden.core.tally import Share, Shares, Tally

KEPT = (
    "conditions",
    "ledger",
    "history",
    "periodStart",
    "periodEnd",
    "used",
    "breakdown",
    "suspended",
    "admission",
    "storage",
    "storageAdmission",
)
RUNNING_TOTALS = (
    "used",
    "remaining",
    "percent",
    "burnRatePerHour",
    "projectedExhaustion",
    "breakdown",
    "efficiency",
    "ledger",
    "lastEvaluated",
    "budgetUsages",
    "storage",
)
"""Fields that move with the clock: written at most every status interval on their own.
(budgetUsages too: what the last publication wrote is said with the next status write,
never by a write of its own, which would publish again.)"""


def round6(value: float) -> float:
    return round(value, 6)


def usage_model(usage: Usage, rounded: Callable[[float], float] = round6) -> ResourceUsage:
    """Usage as status shows it, each figure `rounded` (to six decimals; a commitment
    rounds up: budget/holding.py `released`)."""
    return ResourceUsage(
        accelerator_hours=rounded(usage.total_accelerator_hours),
        accelerator_hours_by_resource={r: rounded(h) for r, h in usage.accelerator_hours.items()},
        cpu_core_hours=rounded(usage.cpu_core_hours),
        memory_gib_hours=rounded(usage.memory_gib_hours),
        cost=rounded(usage.cost),
    )


def usage_from(model: ResourceUsage | None) -> Usage:
    if model is None:
        return Usage()
    return Usage(
        dict(model.accelerator_hours_by_resource),
        model.cpu_core_hours,
        model.memory_gib_hours,
        model.cost,
    )


def _shares(shares: Shares) -> list[UsageShare]:
    ranked = sorted(shares.items(), key=lambda kv: (-kv[1].accelerator_hours, -kv[1].cost, kv[0]))
    return [
        UsageShare(key=k, accelerator_hours=round6(s.accelerator_hours), cost=round6(s.cost))
        for k, s in ranked
    ]


def _shares_from(shares: Sequence[UsageShare]) -> dict[str, Share]:
    return {s.key: Share(s.accelerator_hours, s.cost) for s in shares}


def breakdown_model(t: Tally) -> UsageBreakdown:
    return UsageBreakdown(
        by_namespace=_shares(t.by_namespace),
        by_label={k: _shares(v) for k, v in t.by_label.items()},
        by_outcome=_shares(t.by_outcome),
    )


def tally_from(total: ResourceUsage | None, breakdown: UsageBreakdown | None) -> Tally:
    b = breakdown or UsageBreakdown()
    return Tally(
        usage_from(total),
        _shares_from(b.by_namespace),
        {k: _shares_from(v) for k, v in b.by_label.items()},
        _shares_from(b.by_outcome),
    )


def _time(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def ledger_model(ledger: Ledger, estimated: Usage | None) -> LedgerModel:
    return LedgerModel(
        observed_at=_time(ledger.observed_at) if ledger.observed_at is not None else None,
        closed=LedgerTally(
            total=usage_model(ledger.closed.total), breakdown=breakdown_model(ledger.closed)
        ),
        buckets=[
            UsageBucket(start=_time(b.start), usage=usage_model(b.usage)) for b in ledger.buckets
        ],
        estimated=usage_model(estimated)
        if estimated is not None and not estimated.is_zero
        else None,
    )


def ledger_from(old: TrainingBudgetStatus) -> tuple[Ledger, Period | None, Usage]:
    """The ledger an earlier process wrote, the period it was written in, and what of it
    was already an estimate."""
    model = old.ledger or LedgerModel()
    ledger = Ledger(
        observed_at=model.observed_at.timestamp() if model.observed_at is not None else None,
        closed=tally_from(model.closed.total, model.closed.breakdown),
        charged=tally_from(old.used, old.breakdown),
        buckets=tuple(Bucket(b.start.timestamp(), usage_from(b.usage)) for b in model.buckets),
    )
    period = None
    if old.period_start is not None:
        end = old.period_end.timestamp() if old.period_end is not None else None
        period = Period(old.period_start.timestamp(), end)
    return ledger, period, usage_from(model.estimated)


def urgency(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """How soon a new status must be written: "now" when a reader would see something
    they act on (a condition's status or reason, a suspension, a pending action, a
    period); "soon" when the set of running pods changed (the burn rate, the forecast),
    gone pods were folded into the ledger, or the claims charged changed; "later" when
    only the clock moved the totals; None when nothing changed."""

    def strip(s: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in s.items() if k not in RUNNING_TOTALS}
        out["conditions"] = [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("observedGeneration"))
            for c in s.get("conditions") or []
        ]
        return out

    if strip(old) != strip(new):
        return "now"
    ledger_old, ledger_new = old.get("ledger") or {}, new.get("ledger") or {}
    if old.get("burnRatePerHour") != new.get("burnRatePerHour") or (
        ledger_old.get("closed") != ledger_new.get("closed")
    ):
        return "soon"
    if _claims(old) != _claims(new):  # the claims charged changed: storage's own burn rate
        return "soon"
    same = {k: v for k, v in old.items() if k != "lastEvaluated"} == {
        k: v for k, v in new.items() if k != "lastEvaluated"
    }
    return None if same else "later"


def _claims(status: Mapping[str, Any]) -> tuple[object, object]:
    storage = status.get("storage") or {}
    return storage.get("claims"), storage.get("requestedGiB")


def capped(lines: list[str]) -> list[str]:
    """At most MAX_PENDING lines of at most 256 characters; the last says how many more."""
    lines = [line if len(line) <= 256 else line[:255] + "…" for line in lines]
    if len(lines) <= MAX_PENDING:
        return lines
    return [*lines[: MAX_PENDING - 1], f"and {len(lines) - MAX_PENDING + 1} more"]
