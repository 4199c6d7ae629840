"""What a budget charges a pod: an hourly rate along every dimension, over an interval.

A `Charge` is computed once per pod change (not per evaluation) and holds plain floats, so
that an evaluation over 10,000 pods is a tight loop: seconds held times a rate.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainwarden.core.accounting import CPU, GIB, MEMORY, Outcome, PodSnapshot, PriceTable, Usage

HOUR = 3600.0


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
) -> Rate:
    """What one hour of a pod with these effective requests costs, on its node."""
    accel = tuple((r, float(requests[r])) for r in accelerators if requests.get(r))
    cores = float(requests.get(CPU, 0.0))
    gib = float(requests.get(MEMORY, 0.0)) / GIB
    cost = (
        sum(n * prices.accelerator_price(r, node_labels) for r, n in accel)
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
) -> Charge | None:
    """The charge of a pod, or None if it never started (it held nothing)."""
    if pod.start is None:
        return None
    return Charge(
        pod.uid,
        pod.namespace,
        pod.start.timestamp(),
        pod.end.timestamp() if pod.end is not None else None,
        pod.outcome,
        tuple(pod.labels.get(k, "") for k in label_keys),
        rate(pod.requests, node_labels, accelerators, prices),
    )
