"""A run's facts as the operator gathers them while its pods exist, and the arithmetic of
its receipt over them: accelerator-hours held, cost per budget, failures, and the compute
failures and suspensions lost since the newest complete checkpoint.

Times are POSIX seconds, as in core/accounting.py.
"""

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from trainwarden.core.accounting import HOUR, Charge, Outcome

COALESCE = 60.0
"""Seconds within which pods that fail count as one failure (a gang failing together)."""
MAX_PODS = 5000
"""Pods one run keeps at most (its receipt says partial beyond)."""
MAX_SUSPENSIONS = 100
API_RESOLUTION = 1.0
"""Seconds: the API's times (a container's finishedAt) are to the second."""
SAVE_WINDOW = 3600.0
"""Seconds after a suspension within which the checkpoint its stopping pods wrote counts
as saved at the suspension (a termination grace period longer than an hour is rare)."""


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What a run keeps of one pod that held something: enough to bill and measure it."""

    uid: str
    name: str
    start: float
    end: float | None
    """None while it holds its requests."""
    outcome: Outcome
    accelerators: float
    restarts: int
    rates: tuple[tuple[str, float], ...]
    """(budget, cost per hour) for every budget that charges it."""

    def seconds(self, until: float) -> float:
        end = until if self.end is None else min(self.end, until)
        return max(0.0, end - self.start)

    def held_at(self, t: float) -> bool:
        """Held at `t`, its own end included (a pod failing at t held at t), and the
        second after it: the API gives a container's end to the second, rounded down,
        while the operator sees a suspension to the microsecond."""
        return self.start <= t and (self.end is None or t < self.end + API_RESOLUTION)


def pod_record(name: str, restarts: int, charges: Mapping[str, Charge]) -> PodRecord | None:
    """A pod as the budgets charging it see it; None if none does (it held nothing they
    count). Accelerators as the budgets count them (their `accelerators` resource names)."""
    if not charges:
        return None
    first = next(iter(charges.values()))
    return PodRecord(
        uid=first.uid,
        name=name,
        start=first.start,
        end=first.end,
        outcome=first.outcome,
        accelerators=max(c.rate.accelerator_total for c in charges.values()),
        restarts=restarts,
        rates=tuple(sorted((budget, c.rate.cost) for budget, c in charges.items())),
    )


@dataclass(frozen=True, slots=True)
class Totals:
    held: float
    """Accelerator-hours."""
    started: int
    failed: int
    failed_hours: float
    restarts: int
    costs: Mapping[str, float]
    """Per budget."""


def totals(pods: Iterable[PodRecord], until: float) -> Totals:
    """What the pods held up to `until` (an open pod: as if it ended then)."""
    held = failed_hours = 0.0
    started = failed = restarts = 0
    costs: dict[str, float] = {}
    for p in pods:
        seconds = p.seconds(until)
        hours = p.accelerators * seconds / HOUR
        held += hours
        started += 1
        restarts += p.restarts
        if p.outcome == "Failed":
            failed += 1
            failed_hours += hours
        for budget, per_hour in p.rates:
            costs[budget] = costs.get(budget, 0.0) + per_hour * seconds / HOUR
    return Totals(held, started, failed, failed_hours, restarts, costs)


@dataclass(frozen=True, slots=True)
class Interruption:
    at: float
    reason: Literal["Failed", "Suspended"]


@dataclass(frozen=True, slots=True)
class CheckpointHistory:
    """What a CheckpointPolicy's scans saw of a location's complete checkpoints."""

    complete: Sequence[float]
    """When they were written."""
    as_of: float | None
    """When the newest scan looked: a checkpoint written since is not in `complete`."""
    horizon: float | None = None
    """Older completions were dropped (the history is bounded): before this time the
    newest complete checkpoint is not known."""


@dataclass(frozen=True, slots=True)
class Lost:
    at: float
    reason: Literal["Failed", "Suspended"]
    seconds: float | None
    """None: the interruption is older than the checkpoint history reaches."""
    accelerators: float
    upper_bound: bool = False
    """No scan saw the location after the interruption: a checkpoint written since the
    last scan would make the loss smaller."""

    @property
    def hours(self) -> float:
        return (self.seconds or 0.0) * self.accelerators / HOUR


def stopped(pods: Iterable[PodRecord], event: Interruption) -> float:
    """When the work an interruption stopped came to rest: a failure at once; a suspension
    once the pods it stopped ended (a trainer that saves on SIGTERM writes its checkpoint
    then), at most SAVE_WINDOW later."""
    if event.reason == "Failed":
        return event.at
    ends = [p.end for p in pods if p.held_at(event.at) and p.end is not None]
    return min(max([event.at, *ends]), event.at + SAVE_WINDOW)


def interruptions(pods: Iterable[PodRecord], suspensions: Iterable[float]) -> list[Interruption]:
    """Failures (pods failing within COALESCE of each other are one) and suspensions,
    in time order; a suspension to the second, as the API gives the pods' ends and the
    checkpoints' times (the operator sees it to the microsecond: a checkpoint written in
    the same second is not a loss)."""
    failures = sorted(p.end for p in pods if p.outcome == "Failed" and p.end is not None)
    found = [Interruption(float(math.floor(t)), "Suspended") for t in suspensions]
    last: float | None = None
    for t in failures:
        if last is None or t - last > COALESCE:
            found.append(Interruption(t, "Failed"))
        last = t
    return sorted(found, key=lambda i: (i.at, i.reason))


def losses(
    pods: Sequence[PodRecord], events: Sequence[Interruption], history: CheckpointHistory
) -> list[Lost]:
    """Per interruption, the work since the newest complete checkpoint written before it
    came to rest (`stopped`), times the accelerators the run held then. Work before a
    previous interruption is never counted twice: the clock starts again when the run's
    pods start again after it."""
    starts = sorted(p.start for p in pods)
    if not starts:
        return []
    checkpoints = sorted(history.complete)
    began = starts[0]
    out: list[Lost] = []
    for event in events:
        rest = stopped(pods, event)
        held = sum(p.accelerators for p in pods if p.held_at(event.at))
        seconds: float | None = None
        if history.horizon is None or rest >= history.horizon:
            index = bisect_right(checkpoints, rest)
            since = max(checkpoints[index - 1], began) if index else began
            seconds = max(0.0, event.at - since)
        unseen = history.as_of is None or history.as_of < rest
        out.append(Lost(event.at, event.reason, seconds, held, unseen))
        began = min((s for s in starts if s > event.at), default=event.at)
    return out


MAX_CLAIMS = 64
"""Distinct claims a run's accumulator names at most (core/run_storage.py)."""


def mounted(run: "Run", claims: Iterable[str]) -> None:
    """Note the claims one of the run's pods mounts, bounded by MAX_CLAIMS."""
    for name in claims:
        if name not in run.claims:
            run.claims.add(name if len(run.claims) < MAX_CLAIMS - 1 else "")


@dataclass
class Run:
    """The accumulator of one live run: bounded by the pods it has had (MAX_PODS), and
    dropped once its receipt is written."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    created: float
    observed_from: float
    pods: dict[str, PodRecord] = field(default_factory=dict)
    dropped: int = 0
    """Pods past MAX_PODS, not kept: the receipt says it is partial."""
    labels: dict[str, str] = field(default_factory=dict)
    suspended: bool = False
    suspensions: list[float] = field(default_factory=list)
    budget_suspensions: int = 0
    idle_reclaims: int = 0
    checkpoint_path: str | None = None
    declared: Mapping[str, str] = field(default_factory=dict)
    """The experiment ledger's annotations as the cache keeps them (core/ledger.py reads
    them when the receipt is written)."""
    result: Literal["Succeeded", "Failed", "Deleted"] | None = None
    finished_at: float | None = None
    claims: set[str] = field(default_factory=set)
    """The claims its pods mounted, by name (at most MAX_CLAIMS; "" stands for those
    past it, or past a pod's own cap): the receipt charges the storage they held."""

    def open_pods(self) -> int:
        return sum(1 for p in self.pods.values() if p.end is None)
