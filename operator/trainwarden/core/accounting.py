"""Usage accounting: the integral of requested resources over each pod's running time.

What a pod is (`PodSnapshot`), what it costs (`PriceTable`), usage along every dimension a
budget limits (`Usage`), and what a budget charges a pod (`Charge`): an hourly rate along
every dimension, over an interval. A charge is computed once per pod change (not per
evaluation) and holds plain floats, so that an evaluation over 10,000 pods is a tight
loop: seconds held times a rate. Pure arithmetic; the caller gathers pods and passes `now`.
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
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
class NodePrices:
    """Accelerator-hour prices per node name, as the cluster's cost tool says."""

    resource: str
    by_node: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PriceTable:
    accelerator_hour: Sequence[AcceleratorPrice] = ()
    cpu_core_hour: float = 0.0
    memory_gib_hour: float = 0.0
    nodes: NodePrices | None = None
    """Per-node prices that come before `accelerator_hour` for their resource."""

    def source(self, resource: str, node: str, node_labels: Mapping[str, str]) -> str | None:
        """What prices `resource` on `node`: "query", "rates", or None (nothing: free)."""
        nodes = self.nodes
        if nodes is not None and nodes.resource == resource and node in nodes.by_node:
            return "query"
        if self._matching(resource, node_labels):
            return "rates"
        return None

    def _matching(self, resource: str, node_labels: Mapping[str, str]) -> list[AcceleratorPrice]:
        return [
            rate
            for rate in self.accelerator_hour
            if rate.resource == resource
            and all(node_labels.get(k) == v for k, v in rate.node_selector.items())
        ]

    def accelerator_price(
        self, resource: str, node_labels: Mapping[str, str], node: str = ""
    ) -> float:
        """The node's own price if the cluster's cost tool has one, else the most specific
        matching rate (most node labels), 0 if none matches."""
        if self.nodes is not None and self.nodes.resource == resource:
            found = self.nodes.by_node.get(node)
            if found is not None:
                return found
        matching = self._matching(resource, node_labels)
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


@dataclass(frozen=True, slots=True)
class Rate:
    """Usage per hour: accelerators by resource, cores, GiB, and their price."""

    accelerators: tuple[tuple[str, float], ...] = ()
    cpu: float = 0.0
    memory_gib: float = 0.0
    cost: float = 0.0

    @property
    def accelerator_total(self) -> float:
        return sum(n for _, n in self.accelerators)

    def usage(self, seconds: float) -> Usage:
        hours = seconds / HOUR
        return Usage(
            {r: n * hours for r, n in self.accelerators},
            self.cpu * hours,
            self.memory_gib * hours,
            self.cost * hours,
        )


@dataclass(frozen=True, slots=True)
class Charge:
    """One pod as one budget charges it. Times are POSIX seconds; `end` is None while
    the pod holds its requests; a pod that never started is not charged at all."""

    uid: str
    namespace: str
    start: float
    end: float | None
    outcome: Outcome
    labels: tuple[str, ...]
    """The values of the budget's attribution labels, in the spec's order ("" if unset)."""
    rate: Rate

    def seconds(self, lo: float, hi: float) -> float:
        """Seconds within [lo, hi) the pod held its requests."""
        end = hi if self.end is None or self.end > hi else self.end
        start = lo if self.start < lo else self.start
        return end - start if end > start else 0.0

    def running_at(self, t: float) -> bool:
        return self.start <= t and (self.end is None or self.end > t)


def rate(
    requests: Mapping[str, float],
    node_labels: Mapping[str, str],
    accelerators: Sequence[str],
    prices: PriceTable,
    node: str = "",
) -> Rate:
    """What one hour of a pod with these effective requests costs, on its node."""
    accel = tuple((r, float(requests[r])) for r in accelerators if requests.get(r))
    cores = float(requests.get(CPU, 0.0))
    gib = float(requests.get(MEMORY, 0.0)) / GIB
    cost = (
        sum(n * prices.accelerator_price(r, node_labels, node) for r, n in accel)
        + cores * prices.cpu_core_hour
        + gib * prices.memory_gib_hour
    )
    return Rate(accel, cores, gib, cost)


def charge(
    pod: PodSnapshot,
    node_labels: Mapping[str, str],
    *,
    accelerators: Sequence[str],
    prices: PriceTable,
    label_keys: Sequence[str],
    node: str = "",
) -> Charge | None:
    """The charge of a pod on `node`, or None if it never started (it held nothing)."""
    if pod.start is None:
        return None
    return Charge(
        pod.uid,
        pod.namespace,
        pod.start.timestamp(),
        pod.end.timestamp() if pod.end is not None else None,
        pod.outcome,
        tuple(pod.labels.get(k, "") for k in label_keys),
        rate(pod.requests, node_labels, accelerators, prices, node),
    )
