"""Budget arithmetic: how much of each limit is used, and when a threshold will be crossed."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.conditions import EXHAUSTED, WARNING
from trainwarden.api.v1alpha1.types import MAX_DURATION
from trainwarden.core.accounting import AcceleratorPrice, PriceTable, Usage
from trainwarden.core.conditions import ConditionUpdate

Level = Literal["Ok", "Warning", "Exhausted"]


def prices(spec: TrainingBudgetSpec) -> PriceTable:
    """The budget's rates as the accounting prices usage with."""
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


@dataclass(frozen=True)
class Limits:
    """The limited dimensions of a budget; None means unlimited."""

    accelerator_hours: float | None = None
    accelerator_hours_by_resource: Mapping[str, float] = field(default_factory=dict)
    cpu_core_hours: float | None = None
    memory_gib_hours: float | None = None
    cost: float | None = None
    storage_gib_hours: float | None = None
    storage_gib_hours_by_class: Mapping[str, float] = field(default_factory=dict)

    def dimensions(
        self, usage: Usage, storage: Mapping[str, float] | None = None
    ) -> dict[str, tuple[float, float]]:
        """name -> (used, limit) for every limited dimension; the storage ones only with
        `storage`, GiB-hours per class (budget/storage.py)."""
        dims: dict[str, tuple[float, float]] = {}
        if storage is not None:
            if self.storage_gib_hours is not None:
                dims["storageGiBHours"] = (sum(storage.values()), self.storage_gib_hours)
            for klass, limit in self.storage_gib_hours_by_class.items():
                dims[f"storageGiBHours[{klass}]"] = (storage.get(klass, 0.0), limit)
        if self.accelerator_hours is not None:
            dims["acceleratorHours"] = (usage.total_accelerator_hours, self.accelerator_hours)
        for resource, limit in self.accelerator_hours_by_resource.items():
            dims[f"acceleratorHours[{resource}]"] = (
                usage.accelerator_hours.get(resource, 0.0),
                limit,
            )
        if self.cpu_core_hours is not None:
            dims["cpuCoreHours"] = (usage.cpu_core_hours, self.cpu_core_hours)
        if self.memory_gib_hours is not None:
            dims["memoryGiBHours"] = (usage.memory_gib_hours, self.memory_gib_hours)
        if self.cost is not None:
            dims["cost"] = (usage.cost, self.cost)
        return dims


MAX_PERCENT = 1e9
"""The most a percentage says: a limit next to zero (1e-300) would make it infinite, which
neither JSON nor the arithmetic after it can carry."""


def _percent(used: float, limit: float) -> float:
    if limit <= 0:
        # A zero limit forbids any use: the first second of use exhausts it.
        return 100.0 if used > 0 else 0.0
    percent = 100.0 * used / limit
    if not percent > 0:  # no use, or a negative one only a mangled ledger holds (never -inf)
        return 0.0
    return percent if percent <= MAX_PERCENT else MAX_PERCENT


def limits(spec: TrainingBudgetSpec) -> Limits:
    """The spec's limits, as the core compares usage with them."""
    lim = spec.limits
    return Limits(
        lim.accelerator_hours,
        lim.accelerator_hours_by_resource,
        lim.cpu_core_hours,
        lim.memory_gib_hours,
        lim.cost,
        lim.storage_gib_hours,
        lim.storage_gib_hours_by_class,
    )


def ratios(
    usage: Usage, limits: Limits, storage: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Used over limit per limited dimension (1: the limit; as capped as a percentage)."""
    dims = limits.dimensions(usage, storage)
    return {name: _percent(*pair) / 100 for name, pair in dims.items()}


def percent_used(
    usage: Usage, limits: Limits, storage: Mapping[str, float] | None = None
) -> tuple[float, str]:
    """The most constrained dimension's percentage, and its name."""
    dims = limits.dimensions(usage, storage)
    if not dims:
        return 0.0, ""
    name = max(dims, key=lambda d: _percent(*dims[d]))
    return _percent(*dims[name]), name


def level(percent: float, warn: float, enforce: float, *, keeps: bool = False) -> Level:
    """`keeps`: see threshold_conditions."""
    if percent >= enforce or keeps:
        return "Exhausted"
    if percent >= warn:
        return "Warning"
    return "Ok"


def crossing_time(
    usage: Usage, rate_per_hour: Usage, limits: Limits, percent: float, now: datetime
) -> datetime | None:
    """When the first limited dimension reaches `percent` at the current rate.

    Exact for as long as the set of running pods does not change; the controller recomputes
    it whenever a pod starts or stops, so it can sleep until then instead of polling. A
    crossing further away than MAX_DURATION (a huge limit, a tiny rate) is no crossing: it
    would not fit in a datetime.
    """
    used = limits.dimensions(usage)
    rates = limits.dimensions(rate_per_hour)
    earliest: datetime | None = None
    for name, (value, limit) in used.items():
        target = limit * percent / 100.0
        if value >= target:
            return now
        rate = rates[name][0]
        if rate <= 0:
            continue
        hours = (target - value) / rate
        if not hours <= MAX_DURATION / timedelta(hours=1):  # also inf and NaN
            continue
        when = now + timedelta(hours=hours)
        earliest = when if earliest is None else min(earliest, when)
    return earliest


def threshold_conditions(
    percent: float, dimension: str, warn: float, enforce: float, *, keeps: bool = False
) -> list[ConditionUpdate]:
    """The Warning and Exhausted conditions for a budget at `percent` of its limit.

    `keeps`: the budget keeps workloads it suspended under this spec in this period. It
    stays Exhausted then, as its holds and its resume rule do (budget/holding.py,
    budget/enforcement.py): usage that stopped right at the limit reads a hair below it
    once the pods' end times (one-second resolution) are in, and a condition that flips
    back while the suspension stands tells the team the opposite of what happens."""
    what = f"{percent:.1f}% of {dimension or 'the budget'} used"
    warned, exhausted = percent >= warn, percent >= enforce
    kept = keeps and not exhausted
    return [
        ConditionUpdate(
            WARNING,
            "True" if warned or kept else "False",
            "ThresholdReached" if warned or kept else "BelowThreshold",
            f"{what}; warn at {warn:g}%",
        ),
        ConditionUpdate(
            EXHAUSTED,
            "True" if exhausted or kept else "False",
            "LimitReached" if exhausted else "KeepsSuspended" if kept else "WithinLimit",
            f"{what}; enforce at {enforce:g}%"
            + ("; the workloads suspended at the limit stay suspended this period" if kept else ""),
        ),
    ]
