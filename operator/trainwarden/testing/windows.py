"""The idle window step by step: what Prometheus's summary of a window (core/idleness.py
`judge`) must equal. The fakes answer idle policies through `summary`; the tests hold the
summary to `observe`, the per-step judgment the operator made before it asked Prometheus
to sum the window up (tests/test_idleness.py over any history, e2e/test_idle_signal.py on
the real Prometheus)."""

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from trainwarden.core.idleness import Coverage, Observation, Steps


def _ms(t: datetime) -> int:
    return round(t.timestamp() * 1000)


def grid(now: datetime, window: timedelta, resolution: timedelta) -> list[datetime]:
    """The steps of a subquery `[window:resolution]` evaluated at `now` (Prometheus 2.x):
    the multiples of `resolution` since the epoch within [now - window, now], in
    milliseconds as Prometheus reads them."""
    stride = round(resolution.total_seconds() * 1000)
    end = math.floor(now.timestamp() * 1000)
    first = -(-(end - round(window.total_seconds() * 1000)) // stride) * stride
    return [datetime.fromtimestamp(ms / 1000, UTC) for ms in range(first, end + 1, stride)]


def summary(
    points: Sequence[tuple[datetime, float]], steps: Sequence[datetime], threshold: float
) -> tuple[Steps, Coverage]:
    """What Prometheus answers for one pod whose usable points are `points`."""
    at = {_ms(t) for t in steps}
    mine = [(t, v) for t, v in points if _ms(t) in at]
    busy = [t for t, v in mine if v >= threshold]
    last = steps[-1] if steps else datetime.fromtimestamp(0, UTC)
    return Steps(len(steps), last), Coverage(len(mine), max(busy) if busy else None)


def observe(
    samples: Sequence[tuple[datetime, float]],
    *,
    now: datetime,
    window: timedelta,
    threshold: float,
    steps: Sequence[datetime],
) -> Observation:
    """The per-step judgment: every step of a range query within [now - window, now] has
    a point, the newest busy one decides."""
    start = now - window
    points = {_ms(t): v for t, v in samples}
    required = [t for t in steps if start <= t <= now]
    if not required:
        return Observation("Unknown")
    values = [(t, points.get(_ms(t))) for t in required]
    if any(v is None for _, v in values):
        return Observation("Unknown")
    busy = [t for t, v in values if v is not None and v >= threshold]
    if not busy:
        return Observation("Idle", idle_since=start)
    last_busy = max(busy)
    if last_busy >= required[-1]:
        return Observation("Busy")
    return Observation("Suspect", idle_since=min(t for t in required if t > last_busy))
