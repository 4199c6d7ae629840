"""What governed work spent, as Prometheus expects it: base units (seconds, bytes),
money in its own family with its currency, one label name per meaning."""

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from trainwarden.api.v1alpha1.names import BUDGET_KIND, CHECKPOINT_KIND, IDLE_KIND
from trainwarden.metrics import series

HOUR = 3600.0
"""Seconds in an hour: figures kept in hours (the spec's unit) are exported in seconds."""
GIB = float(2**30)

BUDGET_INFO = Gauge(
    "trainwarden_budget_info",
    "1 for each budget, labelled with its mode (Enforce, DryRun) and period: join on `budget`"
    " to alert on Enforce budgets only, or to route alerts by mode.",
    ["budget", "mode", "period"],
)
BUDGET_RATIO = Gauge(
    "trainwarden_budget_used_ratio",
    "Used over limit this period per limited dimension (1: the limit), the dimension named"
    " as the spec names it (acceleratorHours, acceleratorHours[<resource>], cpuCoreHours,"
    " memoryGiBHours, cost); max by (budget) is the most constrained.",
    ["budget", "dimension"],
)
BUDGET_ACCELERATOR_SECONDS = Gauge(
    "trainwarden_budget_accelerator_seconds",
    "Accelerator-seconds charged to a budget in its current period, by resource.",
    ["budget", "resource"],
)
BUDGET_CPU_SECONDS = Gauge(
    "trainwarden_budget_cpu_seconds",
    "Requested core-seconds charged to a budget in its current period.",
    ["budget"],
)
BUDGET_MEMORY_BYTE_SECONDS = Gauge(
    "trainwarden_budget_memory_byte_seconds",
    "Requested memory charged to a budget in its current period, in byte-seconds.",
    ["budget"],
)
BUDGET_STORAGE_BYTE_SECONDS = Gauge(
    "trainwarden_budget_storage_byte_seconds",
    "Storage requested by PersistentVolumeClaims charged to a budget in its current period,"
    " in byte-seconds, per storage class (docs/storage.md).",
    ["budget", "storage_class"],
)
BUDGET_COST = Gauge(
    "trainwarden_budget_cost",
    "Priced usage of a budget in its current period, in the currency of its rates (only"
    " budgets with rates).",
    ["budget", "currency"],
)
_BUDGET_GAUGES = (
    BUDGET_INFO,
    BUDGET_STORAGE_BYTE_SECONDS,
    BUDGET_RATIO,
    BUDGET_ACCELERATOR_SECONDS,
    BUDGET_CPU_SECONDS,
    BUDGET_MEMORY_BYTE_SECONDS,
    BUDGET_COST,
)
BUDGET_EFFICIENCY = Gauge(
    "trainwarden_budget_efficiency_accelerator_seconds",
    "Accelerator-seconds charged to a budget this period by what they did: used (held times"
    " utilization), idle (measured, no work) and unknown (no measurement); held is their sum.",
    ["budget", "state"],
)
IDLE_SECONDS = Counter(
    "trainwarden_idle_accelerator_seconds_total",
    "Accelerator-seconds watched pods were observed idle (suspected, warned or exempt).",
    ["policy", "namespace"],
)
RECLAIMED_SECONDS = Counter(
    "trainwarden_idle_reclaimed_accelerator_seconds_total",
    "Estimated accelerator-seconds freed by idle reclaims (see estimateHorizon).",
    ["policy"],
)
RUN_RECEIPTS = Counter(
    "trainwarden_run_receipts_total",
    "RunReceipts written, by the run's outcome (Succeeded, Failed, Deleted).",
    ["outcome"],
)
RUN_ACCELERATOR_SECONDS = Counter(
    "trainwarden_run_accelerator_seconds_total",
    "Accelerator-seconds of the runs receipts were written for: held, and its parts used, "
    "idle and unknown (no measurement); lost: the failure-waste estimate.",
    ["kind"],
)


def report_run_receipt(outcome: str, hours: Mapping[str, float]) -> None:
    RUN_RECEIPTS.labels(outcome=outcome).inc()
    for kind, value in hours.items():
        RUN_ACCELERATOR_SECONDS.labels(kind=kind).inc(max(0.0, value) * HOUR)


@dataclass(frozen=True)
class BudgetFigures:
    """A budget's figures this period, in the units of its spec (hours, GiB-hours); they
    are exported in base units (seconds, bytes), as Prometheus names them."""

    mode: str
    period: str
    accelerator_hours: Mapping[str, float]
    cpu_core_hours: float
    memory_gib_hours: float
    ratios: Mapping[str, float]
    """Used over limit, per limited dimension."""
    cost: tuple[float, str] | None
    """Priced usage and its currency; None without rates."""
    storage_gib_hours: Mapping[str, float] = field(default_factory=dict)
    """GiB-hours per storage class; empty where the budget accounts no storage."""


def report_budget(budget: str, f: BudgetFigures) -> None:
    """Set a budget's gauges; a series whose labels no longer apply (its mode, period,
    currency or a dimension changed) is removed, not left at its last value."""
    seen = series.of(BUDGET_KIND, budget)
    now = _gauges(budget, f)
    for key in {k for k in seen if k[0] in _BUDGET_GAUGES} - now.keys():
        with contextlib.suppress(KeyError):
            key[0].remove(*key[1])
        seen.discard(key)
    for (gauge, labels), value in now.items():
        gauge.labels(*labels).set(value)
    seen.update(now)


def _gauges(budget: str, f: BudgetFigures) -> dict[tuple[Gauge, tuple[str, ...]], float]:
    out: dict[tuple[Gauge, tuple[str, ...]], float] = {
        (BUDGET_INFO, (budget, f.mode, f.period)): 1.0
    }
    out |= {(BUDGET_RATIO, (budget, d)): r for d, r in f.ratios.items()}
    out |= {
        (BUDGET_ACCELERATOR_SECONDS, (budget, r)): h * HOUR for r, h in f.accelerator_hours.items()
    }
    out[BUDGET_CPU_SECONDS, (budget,)] = f.cpu_core_hours * HOUR
    out[BUDGET_MEMORY_BYTE_SECONDS, (budget,)] = f.memory_gib_hours * GIB * HOUR
    out |= {
        (BUDGET_STORAGE_BYTE_SECONDS, (budget, c)): h * GIB * HOUR
        for c, h in f.storage_gib_hours.items()
    }
    if f.cost is not None:
        out[BUDGET_COST, (budget, f.cost[1])] = f.cost[0]
    return out


def report_efficiency(budget: str, used: float, idle: float, unknown: float) -> None:
    """What the accelerator-hours charged this period did (budget/efficiency)."""
    seen = series.of(BUDGET_KIND, budget)
    for state, hours in (("used", used), ("idle", idle), ("unknown", unknown)):
        BUDGET_EFFICIENCY.labels(budget, state).set(hours * HOUR)
        seen.add((BUDGET_EFFICIENCY, (budget, state)))


def report_reclaimed_hours(policy: str, hours: float) -> None:
    RECLAIMED_SECONDS.labels(policy).inc(hours * HOUR)
    series.of(IDLE_KIND, policy).add((RECLAIMED_SECONDS, (policy,)))


def report_idle_hours(policy: str, namespace: str, hours: float) -> None:
    IDLE_SECONDS.labels(policy, namespace).inc(hours * HOUR)
    series.of(IDLE_KIND, policy).add((IDLE_SECONDS, (policy, namespace)))


CHECKPOINTS_DELETED = Counter(
    "trainwarden_checkpoints_deleted_total",
    "Checkpoints deleted by CheckpointPolicy pruner Jobs (DryRun deletes none).",
    ["policy", "namespace"],
)
CHECKPOINT_BYTES_FREED = Counter(
    "trainwarden_checkpoint_bytes_freed_total",
    "Bytes of checkpoints deleted by CheckpointPolicy pruner Jobs.",
    ["policy", "namespace"],
)


def report_checkpoints_pruned(policy: str, namespace: str, deleted: int, freed: int) -> None:
    CHECKPOINTS_DELETED.labels(policy, namespace).inc(deleted)
    CHECKPOINT_BYTES_FREED.labels(policy, namespace).inc(freed)
    series.of(CHECKPOINT_KIND, policy).update(
        {(CHECKPOINTS_DELETED, (policy, namespace)), (CHECKPOINT_BYTES_FREED, (policy, namespace))}
    )
