"""Idle accelerator detection: a per-pod state machine over utilization samples.

Missing data is never idleness: a window with no samples or with gaps yields Unknown, and
Unknown never advances towards a reclaim. A pod is idle only when every sample of a fully
covered window, across all its accelerators (the peak, not the mean), is below threshold.
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
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


def observe(
    samples: Sequence[tuple[datetime, float]],
    *,
    now: datetime,
    window: timedelta,
    threshold: float,
    max_gap: timedelta,
) -> Observation:
    """Judge one pod from its peak-utilization samples (the max over its accelerators).

    The window [now - window, now] must be covered: a sample within `max_gap` of both ends
    and no two consecutive samples further apart than `max_gap`; otherwise Unknown.
    """
    start = now - window
    points = sorted((t, v) for t, v in samples if start - max_gap <= t <= now)
    if not points:
        return Observation("Unknown")
    times = [t for t, _ in points]
    covered = (
        times[0] <= start + max_gap
        and times[-1] >= now - max_gap
        and all(b - a <= max_gap for a, b in itertools.pairwise(times))
    )
    if not covered:
        return Observation("Unknown")
    busy = [t for t, v in points if v >= threshold]
    if not busy:
        return Observation("Idle", idle_since=min(times[0], start))
    last_busy = max(busy)
    if last_busy >= times[-1]:
        return Observation("Busy")
    idle_since = min(t for t in times if t > last_busy)
    return Observation("Suspect", idle_since=idle_since)


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
