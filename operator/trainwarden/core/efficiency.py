"""Effective accelerator-hours: how much of the time a pod held accelerators did work.

Prometheus answers, per pod and per step, the sum over its accelerators of each one's
mean utilization within the step (`busy`, in accelerators) and how many accelerators
reported (`count`). A point at `at` covers the step (at - step, at]. For the part of a
pod's held interval a point covers:
- measured accelerator-hours: the accelerators that reported, at most those requested;
- used: measured x utilization (`busy`, scaled down if more series reported than the pod
  requests: a stale series must not inflate the pod);
- idle: measured - used.
What no point covers (a gap, a missing accelerator's series, the operator being down with
no data left) is *unknown*: held minus measured. It is never counted as idle or as used.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trainwarden.core.accounting import HOUR, Charge
from trainwarden.core.tally import OTHER

MAX_POINTS = 10_000
"""Points per series one range query asks for at most (Prometheus refuses 11,000)."""
MAX_VALUES = 400_000
"""Points in one answer at most, over all its series: what keeps the answer under the
adapter's size limit when a catch-up covers hundreds of pods for a whole period."""


@dataclass(frozen=True, slots=True)
class Point:
    at: float
    """POSIX seconds: the end of the step the point covers."""
    busy: float
    """Sum over the reporting accelerators of their mean utilization, 0-1 each."""
    count: int
    """How many of the pod's accelerators reported within the step."""


@dataclass(frozen=True, slots=True)
class Measure:
    """Accelerator-hours with a measurement, and the part of them that did work."""

    measured: float = 0.0
    used: float = 0.0

    def __add__(self, other: "Measure") -> "Measure":
        return Measure(self.measured + other.measured, self.used + other.used)

    def scaled(self, factor: float) -> "Measure":
        return Measure(self.measured * factor, self.used * factor)

    @property
    def idle(self) -> float:
        return max(0.0, self.measured - self.used)


def overlap(a: float, b: float, lo: float, hi: float) -> float:
    """Seconds of (a, b] within [lo, hi)."""
    return max(0.0, min(b, hi) - max(a, lo))


def measures(
    points: Iterable[Point],
    *,
    step: float,
    accelerators: float,
    start: float,
    end: float | None,
    lo: float,
    hi: float,
) -> Iterable[tuple[float, Measure]]:
    """Per point, what it says of a pod that held `accelerators` over [start, end) (end
    None: still holding), counted within [lo, hi)."""
    if accelerators <= 0:
        return
    held_lo, held_hi = max(lo, start), hi if end is None else min(hi, end)
    for p in points:
        seconds = overlap(p.at - step, p.at, held_lo, held_hi)
        if seconds <= 0 or p.count <= 0:
            continue
        reporting = min(float(p.count), accelerators)
        busy = min(max(p.busy, 0.0), float(p.count)) * reporting / p.count
        yield p.at, Measure(reporting * seconds / HOUR, busy * seconds / HOUR)


def integrate(
    points: Iterable[Point],
    *,
    step: float,
    accelerators: float,
    start: float,
    end: float | None,
    lo: float,
    hi: float,
) -> Measure:
    """The sum of `measures`."""
    total = Measure()
    for _, m in measures(
        points, step=step, accelerators=accelerators, start=start, end=end, lo=lo, hi=hi
    ):
        total = total + m
    return total


def query_step(span: float, resolution: float, series: int) -> float:
    """The step of a range query over `span` seconds: the resolution, or coarser where
    that many points would pass MAX_POINTS per series or MAX_VALUES in all. A coarser
    step measures as exactly (each point is a mean over its step), only with coarser
    edges at a pod's start and end."""
    points = min(MAX_POINTS, max(1, MAX_VALUES // max(1, series)))
    return float(max(resolution, math.ceil(span / points)))


def measured_seconds(c: Charge, m: Measure) -> float:
    """The seconds at `c`'s rate whose usage is `m.measured` accelerator-hours: how a
    measure becomes a share of a tally (cost in proportion)."""
    n = c.rate.accelerator_total
    return m.measured / n * HOUR if n > 0 else 0.0


def used_seconds(c: Charge, m: Measure) -> float:
    n = c.rate.accelerator_total
    return m.used / n * HOUR if n > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Row:
    """One key of an efficiency breakdown, in accelerator-hours (and cost of idle)."""

    held: float
    used: float
    idle: float
    unknown: float

    @property
    def effective(self) -> float | None:
        """Used over held, or None when nothing was held."""
        return self.used / self.held if self.held > 0 else None


def row(held: float, measured: float, used: float) -> Row:
    """A key's row: measured never above held (a pod's end is known to the second, a
    step to its width), used never above measured."""
    measured = min(max(measured, 0.0), held)
    used = min(max(used, 0.0), measured)
    return Row(held, used, measured - used, held - measured)


def rows(
    held: Mapping[str, float], measured: Mapping[str, float], used: Mapping[str, float]
) -> dict[str, Row]:
    """Per key of the held breakdown; measured keys it does not show count with "(other)",
    where a capped held breakdown put them."""

    def aligned(values: Mapping[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in values.items():
            target = key if key in held else OTHER
            out[target] = out.get(target, 0.0) + value
        return out

    m, u = aligned(measured), aligned(used)
    return {key: row(h, m.get(key, 0.0), u.get(key, 0.0)) for key, h in held.items()}
