"""Idle reclaim decisions for one policy evaluation: per pod, then per workload.

Pure: the caller gathers pods, their utilization verdicts, exemptions and the warnings
recorded on them, and passes `now`. A warning is recorded on the pod itself (annotations),
so a restarted operator resumes the grace period where it was instead of starting over or,
worse, reclaiming without a warning.
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from trainwarden.api.v1alpha1.names import (
    IDLE_POLICY,
    IDLE_RECLAIMED_AT,
    IDLE_SINCE,
    IDLE_WARNED_AT,
)
from trainwarden.core.durations import human
from trainwarden.core.exemptions import Exemption
from trainwarden.core.idleness import Action, IdleState, Observation, lease_expired, step

MARKS = (IDLE_SINCE, IDLE_WARNED_AT, IDLE_POLICY, IDLE_RECLAIMED_AT)


@dataclass(frozen=True)
class Rules:
    """The parts of an IdleReclaimPolicy spec that judge one pod."""

    threshold: float
    window: timedelta
    warmup: timedelta
    grace: timedelta
    step: timedelta
    """The query step: a moment is judged once the point of its step is in."""


@dataclass(frozen=True)
class PodView:
    uid: str
    namespace: str
    name: str
    started: datetime
    accelerators: float
    group: str
    """The workload the pod belongs to: a workload is reclaimed only when all of it is."""

    def __str__(self) -> str:
        return f"Pod/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Verdict:
    state: IdleState
    action: Action | None
    cause: str = ""
    """Why the pod counts as idle (utilization or lease), empty when it does not."""
    exemption: str | None = None
    due: datetime | None = None
    """When this pod's state can next change without any new event (a wake-up time)."""


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def recorded(
    annotations: Mapping[str, str],
    policy: str,
    *,
    now: datetime,
    started: datetime,
    notify_only: bool,
) -> IdleState | None:
    """The state this policy recorded on a pod, if any, as far as it can be vouched for.

    Pod annotations are written by whoever can edit the pod. Marks of another policy, or
    mangled ones, are not ours to trust: the pod starts afresh (warned again, never
    reclaimed on the strength of a warning nobody can vouch for). A warning dated before
    the pod started or in the future (which would postpone its reclaim forever) is
    mangled; a "reclaimed" mark on a pod that still runs is believed only for NotifyOnly,
    whose reclaim leaves the pod running (otherwise it would exempt the pod for good)."""
    if annotations.get(IDLE_POLICY) != policy:
        return None
    warned_at = _parse(annotations.get(IDLE_WARNED_AT))
    since = _parse(annotations.get(IDLE_SINCE))
    if warned_at is None or since is None or not started <= warned_at <= now or since > now:
        return None
    reclaimed_at = _parse(annotations.get(IDLE_RECLAIMED_AT))
    if reclaimed_at is not None and notify_only and warned_at <= reclaimed_at <= now:
        return IdleState("Reclaimed", reclaimed_at, warned_at)
    return IdleState("Warned", since, warned_at)


def previous_state(
    remembered: IdleState | None, marks: IdleState | None, *, enforce: bool
) -> IdleState | None:
    """Where a pod's story continues from. Under Enforce a warning exists only if it is on
    the pod (a person may have removed it: then it is warned again before any reclaim);
    DryRun changes nothing, so it can only remember."""
    if not enforce:
        return remembered
    if marks is not None:
        return marks
    if remembered is None or remembered.warned_at is not None:
        return None
    return remembered


def warning_marks(state: IdleState, policy: str) -> dict[str, str | None]:
    assert state.warned_at is not None
    return {
        IDLE_SINCE: state.since.isoformat(timespec="seconds"),
        IDLE_WARNED_AT: state.warned_at.isoformat(timespec="seconds"),
        IDLE_POLICY: policy,
        IDLE_RECLAIMED_AT: None,
    }


def withdrawn_marks() -> dict[str, str | None]:
    return dict.fromkeys(MARKS)


def judge(
    pod: PodView,
    previous: IdleState | None,
    observation: Observation,
    exemption: Exemption,
    *,
    now: datetime,
    rules: Rules,
    lease: timedelta | None,
) -> Verdict:
    """One pod's next state. A pod past its lease counts as idle whatever its utilization;
    an exempt pod is never warned or reclaimed (a warning already given is withdrawn)."""
    cause = ""
    if lease_expired(pod.started, now, lease):
        assert lease is not None
        observation = Observation("Idle", idle_since=pod.started + lease)
        cause = f"its lease of {human(lease)} expired"
    elif observation.verdict == "Idle":
        cause = f"every accelerator stayed below {rules.threshold:g}% for {human(rules.window)}"
    state, action = step(
        previous,
        observation,
        now=now,
        started=pod.started,
        warmup=rules.warmup,
        grace=rules.grace,
    )
    if exemption.reason is not None and (
        action in ("Warn", "Reclaim") or state.state in ("Warned", "Exempt")
    ):
        since = previous.since if previous and previous.state == "Exempt" else now
        withdraw: Action | None = "Withdraw" if previous and previous.warned_at else None
        exempt = IdleState("Exempt", since)
        return Verdict(exempt, withdraw, cause, exemption.reason, exemption.until)
    return Verdict(state, action, cause, None, _due(pod, state, now, rules, lease))


def _due(
    pod: PodView, state: IdleState, now: datetime, rules: Rules, lease: timedelta | None
) -> datetime | None:
    candidates = []
    if state.state == "WarmingUp":
        candidates.append(pod.started + rules.warmup)
    if state.state == "IdleSuspected":
        candidates.append(state.since + rules.window + rules.step)
    if state.state == "Warned" and state.warned_at is not None:
        candidates.append(state.warned_at + rules.grace)
    if lease is not None:
        candidates.append(pod.started + lease)
    future = [t for t in candidates if t > now]
    return min(future) if future else None


def held(state: IdleState) -> IdleState:
    """A reclaim that did not happen (waiting, deferred or failed) leaves the pod warned, so
    it is tried again; only a reclaim that was carried out ends the pod's story."""
    if state.state != "Reclaimed":
        return state
    return IdleState("Warned", state.since, state.warned_at)


@dataclass(frozen=True)
class Reclaim:
    """One reclaim action: a workload (or a single pod) and the idle pods behind it."""

    group: str
    pods: tuple[PodView, ...]
    idle_since: datetime
    cause: str

    @property
    def accelerators(self) -> float:
        return sum(p.accelerators for p in self.pods)


@dataclass(frozen=True)
class Plan:
    act: tuple[Reclaim, ...] = ()
    waiting: tuple[tuple[Reclaim, str], ...] = ()
    """Reclaims held back because part of the workload is not idle, with why."""
    deferred: tuple[Reclaim, ...] = ()
    """Reclaims over the per-minute cap, for a later evaluation."""


def plan(
    judged: Sequence[tuple[PodView, Verdict]],
    *,
    per_workload: bool,
    recent: Sequence[datetime],
    max_per_minute: int,
    now: datetime,
) -> Plan:
    """Which reclaims to carry out now, longest idle first, within the per-minute cap.

    With `per_workload` (Suspend, ScaleDown) a workload is reclaimed only when every one of
    its watched pods is due: one busy rank keeps a distributed run alive.
    """
    groups: dict[str, list[tuple[PodView, Verdict]]] = defaultdict(list)
    for pod, verdict in judged:
        groups[pod.group if per_workload else pod.uid].append((pod, verdict))
    due: list[Reclaim] = []
    waiting: list[tuple[Reclaim, str]] = []
    for key, members in groups.items():
        ready = [(p, v) for p, v in members if v.action == "Reclaim"]
        if not ready:
            continue
        reclaim = Reclaim(
            key,
            tuple(p for p, _ in ready),
            min(v.state.since for _, v in ready),
            ready[0][1].cause,
        )
        busy = [p for p, v in members if v.action != "Reclaim"]
        if busy:
            waiting.append(
                (reclaim, f"{len(busy)} of {len(members)} pods of the workload are not idle")
            )
            continue
        due.append(reclaim)
    due.sort(key=lambda r: (r.idle_since, r.group))
    budget = max(0, max_per_minute - sum(1 for t in recent if t > now - timedelta(minutes=1)))
    return Plan(tuple(due[:budget]), tuple(waiting), tuple(due[budget:]))


def reclaimed_hours(
    accelerators: float, now: datetime, expected_end: datetime | None, horizon: timedelta
) -> float:
    """The accelerator time a reclaim frees: until the workload's expected end, at most
    `horizon` (an idle holder would otherwise have kept the accelerators that long)."""
    until = now + horizon if expected_end is None else min(expected_end, now + horizon)
    return accelerators * max(0.0, (until - now).total_seconds()) / 3600


IDLE_STATES = ("IdleSuspected", "Warned", "Exempt")


def idle_hours(
    accelerators: float,
    state: IdleState,
    previous_evaluation: datetime | None,
    now: datetime,
    max_interval: timedelta,
) -> float:
    """Accelerator-hours a pod spent idle since the previous evaluation: the waste idle
    reclaim exists to stop. An interval longer than `max_interval` (the operator was down)
    counts only `max_interval`: unobserved time is never charged as idle."""
    if state.state not in IDLE_STATES or previous_evaluation is None:
        return 0.0
    start = max(previous_evaluation, state.since, now - max_interval)
    return accelerators * max(0.0, (now - start).total_seconds()) / 3600
