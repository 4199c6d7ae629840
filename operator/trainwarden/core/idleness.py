"""Idle accelerator detection: a per-pod state machine over utilization samples.

Missing data is never idleness: a window with no samples or with gaps yields Unknown, and
Unknown never advances towards a reclaim. A pod is idle only when every step of the window
has a point (each step covered at the scrape interval, which the adapter checks) and every
point, the peak across all its accelerators (not the mean), is below threshold.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

State = Literal["WarmingUp", "Active", "IdleSuspected", "Warned", "Unknown", "Exempt", "Reclaimed"]
Action = Literal["Warn", "Withdraw", "Reclaim"]
Verdict = Literal["Unknown", "Busy", "Suspect", "Idle"]


@dataclass(frozen=True)
class Observation:
    """What the samples of one evaluation say about a pod."""

    verdict: Verdict
    idle_since: datetime | None = None
    """Since when every sample has been below threshold (Suspect and Idle)."""


@dataclass(frozen=True)
class IdleState:
    state: State
    since: datetime
    warned_at: datetime | None = None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def step_times(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """The times of a range query's points: from `start` (rounded down to the
    millisecond, as the query sends it) every `step` up to `end`."""
    first = math.floor(start.timestamp() * 1000)
    stride = round(step.total_seconds() * 1000)
    last = end.timestamp() * 1000
    return [
        datetime.fromtimestamp(ms / 1000, UTC) for ms in range(first, math.floor(last) + 1, stride)
    ]


def coalesced(t: datetime, step: timedelta) -> datetime:
    """`t` rounded up to the next multiple of `step` since the epoch: the due times of one
    policy's pods (warm-up ends, grace deadlines) fall on one timer per step instead of one
    evaluation each, at most one step late, never early (whole microseconds: no float)."""
    stride = max(1, step // _MICROSECOND)
    since = (t - _EPOCH) // _MICROSECOND
    return _EPOCH + -(-since // stride) * stride * _MICROSECOND


def _ms(t: datetime) -> int:
    return round(t.timestamp() * 1000)


def observe(
    samples: Sequence[tuple[datetime, float]],
    *,
    now: datetime,
    window: timedelta,
    threshold: float,
    steps: Sequence[datetime],
) -> Observation:
    """Judge one pod from its peak-utilization points (the max over its accelerators).

    The window [now - window, now] must be covered end to end: every step of the query
    that falls within it has a point (the adapter drops steps that missed scrapes);
    otherwise Unknown. A point is the peak of its step, so a spike between points counts.
    """
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


def step(
    previous: IdleState | None,
    observation: Observation,
    *,
    now: datetime,
    started: datetime,
    warmup: timedelta,
    grace: timedelta,
) -> tuple[IdleState, Action | None]:
    """The next state of one pod and the action it calls for, if any.

    Warn first; reclaim only after `grace` has passed since the warning *and* the pod is
    still observed idle now; any busy observation withdraws the warning.
    """
    warned_at = previous.warned_at if previous else None
    if previous is not None and previous.state == "Reclaimed":
        return previous, None
    if now < started + warmup:
        return IdleState("WarmingUp", started), None
    if observation.verdict == "Unknown":
        since = previous.since if previous and previous.state == "Unknown" else now
        return IdleState("Unknown", since, warned_at), None
    if observation.verdict == "Busy":
        since = previous.since if previous and previous.state == "Active" else now
        return IdleState("Active", since), ("Withdraw" if warned_at else None)
    idle_since = observation.idle_since or now
    if observation.verdict == "Suspect":
        # Below threshold now, but busy within the window: not idle yet. A warned pod that
        # was busy again since its warning has recovered, so the warning is withdrawn.
        return IdleState("IdleSuspected", idle_since), ("Withdraw" if warned_at else None)
    if warned_at is None:
        return IdleState("Warned", idle_since, now), "Warn"
    if now >= warned_at + grace:
        return IdleState("Reclaimed", now, warned_at), "Reclaim"
    return IdleState("Warned", idle_since, warned_at), None


def lease_expired(started: datetime, now: datetime, max_lifetime: timedelta | None) -> bool:
    return max_lifetime is not None and now >= started + max_lifetime
