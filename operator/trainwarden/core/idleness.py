"""Idle accelerator detection: a per-pod state machine over utilization samples.

Missing data is never idleness: a window with no samples or with gaps yields Unknown, and
Unknown never advances towards a reclaim. A pod is idle only when every step of the window
has a point (each step covered at the scrape interval, which the adapter checks) and every
point, the peak across all its accelerators (not the mean), is below threshold.
"""

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


@dataclass(frozen=True)
class Steps:
    """The window's steps as Prometheus evaluated them: how many, and the newest. Taken
    from Prometheus's own answer, so no version's boundary rule is assumed here."""

    count: int
    last: datetime


@dataclass(frozen=True)
class Coverage:
    """One pod over the window, as Prometheus summed it up: how many steps have a usable
    point (a finite peak, scrapes not missed), and the newest step whose peak is at or
    above the threshold (None: none is)."""

    covered: int
    last_busy: datetime | None = None


def coalesced(t: datetime, step: timedelta) -> datetime:
    """`t` rounded up to the next multiple of `step` since the epoch: the due times of one
    policy's pods (warm-up ends, grace deadlines) fall on one timer per step instead of one
    evaluation each, at most one step late, never early (whole microseconds: no float)."""
    stride = max(1, step // _MICROSECOND)
    since = (t - _EPOCH) // _MICROSECOND
    return _EPOCH + -(-since // stride) * stride * _MICROSECOND


def judge(
    coverage: Coverage | None,
    steps: Steps,
    *,
    now: datetime,
    window: timedelta,
    resolution: timedelta,
) -> Observation:
    """Judge one pod from its summary of the window [now - window, now].

    Every step of the window must have a point (otherwise Unknown); a point is the peak of
    its step, so a spike between points counts. Idle when no step is busy; Busy when the
    newest is; otherwise Suspect, idle since the step after the last busy one.
    """
    if coverage is None or steps.count <= 0 or coverage.covered < steps.count:
        return Observation("Unknown")
    if coverage.last_busy is None:
        return Observation("Idle", idle_since=now - window)
    if coverage.last_busy >= steps.last:
        return Observation("Busy")
    return Observation("Suspect", idle_since=coverage.last_busy + resolution)


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
