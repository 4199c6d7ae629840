"""Usage accounting: the integral of requested resources over each pod's running time.

Pure arithmetic over plain snapshots; the caller gathers pods and passes `now`.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

Outcome = Literal["Running", "Succeeded", "Failed"]
CPU = "cpu"
MEMORY = "memory"
GIB = float(2**30)
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """What accounting needs from one pod, and nothing more.

    `requests` are the pod's effective requests (see `effective_requests`): CPU in cores,
    memory in bytes, extended resources in units. `start` is when the pod began holding
    them (status.startTime), `end` when it stopped (the last container's finishedAt, or when
    the pod vanished); a pod that never started has no start and costs nothing.
    """

    uid: str
    namespace: str
    name: str
    requests: Mapping[str, float]
    start: datetime | None
    end: datetime | None = None
    outcome: Outcome = "Running"
    labels: Mapping[str, str] = field(default_factory=dict)
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AcceleratorPrice:
    resource: str
    node_selector: Mapping[str, str]
    price: float


@dataclass(frozen=True)
class PriceTable:
    accelerator_hour: Sequence[AcceleratorPrice] = ()
    cpu_core_hour: float = 0.0
    memory_gib_hour: float = 0.0

    def accelerator_price(self, resource: str, node_labels: Mapping[str, str]) -> float:
        """The most specific matching rate (most node labels), 0 if none matches."""
        matching = [
            rate
            for rate in self.accelerator_hour
            if rate.resource == resource
            and all(node_labels.get(k) == v for k, v in rate.node_selector.items())
        ]
        if not matching:
            return 0.0
        return max(matching, key=lambda rate: len(rate.node_selector)).price


@dataclass(frozen=True)
class Usage:
    """Usage along every dimension a budget can limit."""

    accelerator_hours: Mapping[str, float] = field(default_factory=dict)
    cpu_core_hours: float = 0.0
    memory_gib_hours: float = 0.0
    cost: float = 0.0

    @property
    def total_accelerator_hours(self) -> float:
        return sum(self.accelerator_hours.values())

    @property
    def is_zero(self) -> bool:
        return not any(
            (self.total_accelerator_hours, self.cpu_core_hours, self.memory_gib_hours, self.cost)
        )

    def __add__(self, other: "Usage") -> "Usage":
        merged = defaultdict(float, self.accelerator_hours)
        for resource, hours in other.accelerator_hours.items():
            merged[resource] += hours
        return Usage(
            dict(merged),
            self.cpu_core_hours + other.cpu_core_hours,
            self.memory_gib_hours + other.memory_gib_hours,
            self.cost + other.cost,
        )

    def scaled(self, factor: float) -> "Usage":
        return Usage(
            {r: h * factor for r, h in self.accelerator_hours.items()},
            self.cpu_core_hours * factor,
            self.memory_gib_hours * factor,
            self.cost * factor,
        )


def held_seconds(pod: PodSnapshot, lo: datetime, hi: datetime) -> float:
    """Seconds within [lo, hi) during which the pod held its requests."""
    if pod.start is None:
        return 0.0
    end = hi if pod.end is None else min(pod.end, hi)
    start = max(pod.start, lo)
    return max(0.0, (end - start).total_seconds())


def hourly_rate(
    pod: PodSnapshot, accelerators: Iterable[str], prices: PriceTable = PriceTable()
) -> Usage:
    """What one hour of this pod costs along every dimension."""
    accel = {r: float(pod.requests[r]) for r in accelerators if pod.requests.get(r)}
    cores = float(pod.requests.get(CPU, 0.0))
    gib = float(pod.requests.get(MEMORY, 0.0)) / GIB
    cost = (
        sum(n * prices.accelerator_price(r, pod.node_labels) for r, n in accel.items())
        + cores * prices.cpu_core_hour
        + gib * prices.memory_gib_hour
    )
    return Usage(accel, cores, gib, cost)


def pod_usage(
    pod: PodSnapshot,
    lo: datetime,
    hi: datetime,
    accelerators: Iterable[str],
    prices: PriceTable = PriceTable(),
) -> Usage:
    return hourly_rate(pod, accelerators, prices).scaled(held_seconds(pod, lo, hi) / HOUR)


@dataclass(frozen=True)
class Accounting:
    """A budget's usage over a window, and who spent it on what."""

    total: Usage
    by_namespace: Mapping[str, Usage]
    by_label: Mapping[str, Mapping[str, Usage]]
    by_outcome: Mapping[Outcome, Usage]
    burn_rate: Usage
    """Usage per hour of the pods holding resources right now."""


def account(
    pods: Iterable[PodSnapshot],
    lo: datetime,
    hi: datetime,
    *,
    accelerators: Sequence[str],
    prices: PriceTable = PriceTable(),
    attribution_labels: Sequence[str] = (),
) -> Accounting:
    total = Usage()
    burn = Usage()
    by_namespace: dict[str, Usage] = defaultdict(Usage)
    by_label: dict[str, dict[str, Usage]] = {
        label: defaultdict(Usage) for label in attribution_labels
    }
    by_outcome: dict[Outcome, Usage] = defaultdict(Usage)
    for pod in pods:
        rate = hourly_rate(pod, accelerators, prices)
        seconds = held_seconds(pod, lo, hi)
        if pod.start is not None and pod.end is None and pod.start <= hi:
            burn = burn + rate
        if seconds <= 0:
            continue
        usage = rate.scaled(seconds / HOUR)
        total = total + usage
        by_namespace[pod.namespace] += usage
        by_outcome[pod.outcome] += usage
        for label in attribution_labels:
            by_label[label][pod.labels.get(label, "")] += usage
    return Accounting(
        total,
        dict(by_namespace),
        {label: dict(values) for label, values in by_label.items()},
        dict(by_outcome),
        burn,
    )
