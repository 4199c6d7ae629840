"""How far this process's clock is from the API server's, from the `Date` of its answers.

Pod start and finish times are stamped by the API server and the kubelet; a budget
charges a running pod from its startTime up to the operator's "now". With the operator's
clock ahead of the server's by five minutes, every running pod is over-charged by five
minutes (a budget near its limit is suspended early); behind, pods started in the last
five minutes are charged nothing. So the operator measures the offset and reckons in the
server's time, and when it cannot tell what time the server has, it does not act on time.

Every answer's `Date` header is the server's clock truncated to the second, taken between
the moment the request was sent and the moment the answer arrived (local clock): the
offset lies within [date - received, date + 1 - sent]. Intersecting the intervals of
recent answers narrows it below a second; an interval that does not meet the others means
a clock was stepped, and the newest answers win. Pure: no clock is read here.
"""

from collections.abc import Sequence
from dataclasses import dataclass

BOUND = 5.0
"""Seconds of skew worth a warning, and of uncertainty beyond which the operator does
not act on time (the estimate is normally within half a second)."""
STALE = 900.0
"""Seconds after which the newest answer no longer tells the server's time. A healthy
operator hears from the server at least every 5 minutes (each informer's watch is renewed
by then, and budgets write status every minute while pods run); clocks drift by
milliseconds in 15 minutes, so this only says the server has been out of reach."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One answer: local POSIX seconds when it was sent and received, and its `Date`."""

    sent: float
    received: float
    server: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """The server's clock minus ours, within [low, high] seconds."""

    low: float
    high: float
    at: float
    """Local time of the newest answer it rests on."""

    @property
    def offset(self) -> float:
        return (self.low + self.high) / 2

    @property
    def uncertainty(self) -> float:
        return (self.high - self.low) / 2


def bounds(sample: Sample) -> tuple[float, float]:
    """Where the offset lies for one answer (never an empty interval)."""
    sent = min(sample.sent, sample.received)
    return sample.server - sample.received, sample.server + 1.0 - sent


def estimate(samples: Sequence[Sample]) -> Estimate | None:
    """The tightest offset the newest consistent answers allow; None without answers.
    Answers are in the order they arrived; an older one that contradicts the newer ones
    is from before a clock was stepped and is left out, with every answer before it."""
    if not samples:
        return None
    *older, newest = samples
    low, high = bounds(newest)
    for sample in reversed(older):
        lo, hi = bounds(sample)
        if lo > high or hi < low:
            break
        low, high = max(low, lo), min(high, hi)
    return Estimate(low, high, newest.received)


def doubt(found: Estimate | None, local_now: float, bound: float = BOUND) -> str | None:
    """Why the server's time is not known well enough to act on, or None when it is."""
    if found is None:
        return "no answer from the API server has told its time yet"
    if local_now - found.at > STALE:
        return f"no answer from the API server for {local_now - found.at:.0f} s"
    if found.uncertainty > bound:
        return (
            f"the API server's time is known only to within {found.uncertainty:.0f} s "
            f"(its answers were too slow to tell)"
        )
    return None


def skewed(found: Estimate | None, bound: float = BOUND) -> bool:
    """Whether the offset is certainly beyond `bound` (worth a warning)."""
    return found is not None and (found.low > bound or found.high < -bound)


def server_time(local_now: float, found: Estimate | None) -> float:
    """Our clock corrected by the estimate (as it is without one)."""
    return local_now + (found.offset if found is not None else 0.0)
