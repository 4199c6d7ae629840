"""The release decision (budget/holding.py), pure: for any set of held workloads (in and out of
the budget's scope, any `held-at`, any declared durations, garbage included), what one or
several evaluations start never adds up to more than the budget had left, and a workload of
the budget's that fits is never kept waiting by ones that do not fit or are not its own."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import MAX_RELEASED, AdmissionStatus, ReleasedWorkload
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION, HELD_AT, HELD_BY
from trainwarden.budget.holding import (
    SETTLE,
    Candidate,
    HeldRef,
    Plan,
    State,
    admission,
    affordable,
    candidate,
    outstanding,
    plan_release,
    released,
    total,
)
from trainwarden.core.accounting import Usage
from trainwarden.core.estimate import usage_along
from trainwarden.testing.builders import BudgetBuilder, JobBuilder

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
EPS = 1e-9
SPEC = TrainingBudgetSpec.model_validate(
    BudgetBuilder("b")
    .namespaces("team-a")
    .selector({"team": "a"})
    .accelerator_hours(1)
    .build()["spec"]
)
DIMENSIONS = ("acceleratorHours", "cpuCoreHours")
DURATIONS = [None, "1m", "10m", "20m", "30m", "40m", "2h", "36500d", "soon", "0s", "-5m"]


@st.composite
def held(draw: st.DrawFn, uid: str) -> Candidate:
    """A held Job as the decision sees it after the re-read: in team-a or another
    namespace, selected or not, created any time, claiming any held-at, declaring any
    duration (or garbage), of 0 to 4 GPUs and some cores."""
    namespace = draw(st.sampled_from(["team-a", "team-x"]))
    created = NOW - timedelta(seconds=draw(st.integers(0, 7200)))
    claimed = draw(st.sampled_from(["1970-01-01T00:00:00Z", created.isoformat(), "garbage"]))
    marks = {HELD_BY: "b", HELD_AT: claimed}
    duration = draw(st.sampled_from(DURATIONS))
    if duration is not None:
        marks[EXPECTED_DURATION] = duration
    job = JobBuilder(f"j-{uid}", namespace).gpus(draw(st.integers(0, 4))).suspended()
    job.cpu(str(draw(st.integers(0, 8))))
    job.pod_labels({"team": draw(st.sampled_from(["a", "b"]))}).annotations(marks)
    obj = job.build()
    obj["metadata"]["uid"] = uid
    ref = HeldRef("batch/v1", "Job", namespace, f"j-{uid}", uid, created)
    return candidate(ref, obj, SPEC, {})


@st.composite
def queues(draw: st.DrawFn, prefix: str = "h") -> list[Candidate]:
    count = draw(st.integers(0, 10))
    return [draw(held(f"{prefix}{i}")) for i in range(count)]


remainings = st.fixed_dictionaries({d: st.floats(0, 12, allow_nan=False) for d in DIMENSIONS})


@st.composite
def commitments(draw: st.DrawFn) -> dict[str, Usage]:
    """What the budget started before and has not used yet (uids apart from the queue's)."""
    count = draw(st.integers(0, 4))
    return {
        f"r{i}": Usage(
            {"nvidia.com/gpu": draw(st.floats(0, 4, allow_nan=False))},
            draw(st.floats(0, 4, allow_nan=False)),
        )
        for i in range(count)
    }


def along(usage: Usage) -> dict[str, float]:
    return {d: usage_along(usage, d) for d in DIMENSIONS}


def fits(c: Candidate, plan: Plan) -> bool:
    """Whether `c` would fit beside everything the plan commits, a place for its record
    included."""
    others = {u: v for u, v in plan.commitments.items() if u != c.ref.uid}
    ok, _ = affordable(c.cost, total(others.values()), plan.remaining)
    return ok and (c.cost is None or len(others) < MAX_RELEASED)


@settings(max_examples=1000)
@given(queues(), st.integers(0, 6), remainings, commitments())
def test_one_evaluation_starts_only_its_own_within_what_is_left_and_skips_nothing_that_fits(
    queue: list[Candidate],
    room: int,
    remaining: dict[str, float],
    before: dict[str, Usage],
) -> None:
    plan = plan_release(queue, room, remaining, before)
    assert len(plan.start) <= room
    assert all(c.covered and c.ref.namespace == "team-a" for c in plan.start), "only its own"
    if any(c.cost is not None for c in plan.start):
        committed = along(total(plan.commitments.values()))
        assert all(committed[d] <= remaining[d] + EPS for d in DIMENSIONS), "never overcommits"
    started = {c.ref.uid for c in plan.start}
    newest = max((c.ref.created for c in plan.start), default=None)
    for c in queue:
        if c.covered and c.ref.uid not in started and fits(c, plan):
            assert len(plan.start) == room, f"{c} fits and there is room: nothing may hold it"
            assert newest is None or c.ref.created >= newest, f"{c} is older than one started"


@dataclass
class Simulation:
    """A budget evaluated several times: what it started runs and uses part of what it
    declared, some of it finishes, the operator restarts; status keeps the records."""

    left: float
    """What the budget had left when the held work became startable (GPU-hours)."""
    now: datetime = NOW
    since: datetime = NOW
    records: list[ReleasedWorkload] = field(default_factory=list)
    used: dict[str, float] = field(default_factory=dict)
    """GPU-hours each started workload has used so far."""
    cost: dict[str, float] = field(default_factory=dict)
    over: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)

    def remaining(self) -> dict[str, float]:
        return {"acceleratorHours": max(0.0, self.left - sum(self.used.values()))}

    def states(self) -> dict[str, State]:
        return {u: "over" if u in self.over else "running" for u in self.started}

    def evaluate(self, queue: Sequence[Candidate], room: int) -> None:
        usage = {u: Usage({"nvidia.com/gpu": h}) for u, h in self.used.items()}
        kept = outstanding(self.records, self.states(), usage, self.now, self.since)
        waiting = [c for c in queue if c.ref.uid not in self.started]
        plan = plan_release(waiting, room, self.remaining(), {r.ref.uid: u for r, u in kept})
        records = {r.ref.uid: r for r, _ in kept}
        for c in plan.start:
            self.started.add(c.ref.uid)
            if c.cost is not None:
                records[c.ref.uid] = released(c.ref, c.cost, self.now)
                self.cost[c.ref.uid] = c.cost.total_accelerator_hours
        self.records = [records[u] for u in plan.commitments]

    def runs(self, fraction: Mapping[str, float], finished: set[str], seconds: int) -> None:
        """Declared work that runs uses up to what it declared; some of it finishes."""
        self.now += timedelta(seconds=seconds)
        for uid, part in fraction.items():
            if uid in self.cost and uid not in self.over:
                self.used[uid] = max(self.used.get(uid, 0.0), self.cost[uid] * part)
        self.over |= finished & set(self.cost)

    def committed_and_spent(self) -> float:
        """What the started work has used plus what it may still use."""
        running = sum(self.cost[u] - self.used.get(u, 0.0) for u in self.cost if u not in self.over)
        return sum(self.used.values()) + running


steps = st.lists(
    st.tuples(
        st.integers(0, 3),  # room this evaluation
        st.dictionaries(st.sampled_from([f"h{i}" for i in range(10)]), st.floats(0, 1)),
        st.sets(st.sampled_from([f"h{i}" for i in range(10)]), max_size=3),
        st.sampled_from([1, 30, 120]),  # seconds until the next evaluation
        st.booleans(),  # the operator restarts before it
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=1000)
@given(queues(), st.floats(0, 8, allow_nan=False), steps)
def test_several_evaluations_and_restarts_never_start_more_than_was_left(
    queue: list[Candidate],
    left: float,
    evaluations: list[tuple[int, dict[str, float], set[str], int, bool]],
) -> None:
    """Each evaluation counts what the earlier ones started and has not used yet (the
    records in status, which a restart keeps): what was used plus what may still be used
    never exceeds what was left, whatever the per-minute cap lets through when."""
    sim = Simulation(left)
    for room, fraction, finished, seconds, restart in evaluations:
        sim.evaluate(queue, room)
        assert sim.committed_and_spent() <= left + 1e-6, sim
        assert all(c.covered for c in queue if c.ref.uid in sim.started), "only its own"
        sim.runs(fraction, finished, seconds)
        if restart:
            sim.since = sim.now


# --- the pieces, by example -------------------------------------------------------------------


def ref(uid: str, minutes_ago: int = 0) -> HeldRef:
    return HeldRef("batch/v1", "Job", "team-a", uid, uid, NOW - timedelta(minutes=minutes_ago))


def gpu_hours(h: float) -> Usage:
    return Usage({"nvidia.com/gpu": h})


def test_a_record_of_a_start_the_cache_does_not_show_yet_is_believed_only_while_fresh() -> None:
    record = released(ref("a"), gpu_hours(1), NOW)
    held: dict[str, State] = {"a": "held"}
    assert [u for _, u in outstanding([record], held, {}, NOW + SETTLE / 2, NOW)] == [gpu_hours(1)]
    assert outstanding([record], held, {}, NOW + SETTLE, NOW) == [], "stale: it never started"
    later = NOW + timedelta(seconds=1)
    assert outstanding([record], held, {}, later, later) == [], "an earlier process's"


def test_what_a_started_workload_used_is_no_longer_committed_and_it_ends_with_its_run() -> None:
    record = released(ref("a"), gpu_hours(1), NOW)
    used = {"a": gpu_hours(0.25)}
    ((_, left),) = outstanding([record], {"a": "running"}, used, NOW, NOW)
    assert left.total_accelerator_hours == pytest.approx(0.75)
    assert outstanding([record], {"a": "running"}, {"a": gpu_hours(2)}, NOW, NOW) == []
    assert outstanding([record], {"a": "over"}, {}, NOW, NOW) == []


def test_a_stale_record_of_a_workload_still_held_is_replaced_not_counted_twice() -> None:
    """Killed between the record and the start: the workload is judged again as if its
    own record were not there."""
    a = Candidate(ref("a", 2), gpu_hours(0.6))
    plan = plan_release([a], 5, {"acceleratorHours": 1.0}, {"a": gpu_hours(0.6)})
    assert [c.ref.uid for c in plan.start] == ["a"]
    assert plan.commitments == {"a": gpu_hours(0.6)}


def test_work_that_declares_no_duration_starts_while_something_is_left_uncommitted() -> None:
    undeclared = Candidate(ref("a"), None)
    room = {"acceleratorHours": 1.0}
    assert plan_release([undeclared], 1, room, {"r": gpu_hours(0.9)}).start == (undeclared,)
    assert plan_release([undeclared], 1, room, {"r": gpu_hours(1.0)}).start == ()


def test_the_admission_status_keeps_what_was_started_until_told_otherwise() -> None:
    record = released(ref("a"), gpu_hours(0.5), NOW)
    previous = AdmissionStatus(released=[record])
    kept = admission(previous, holding=True, held=0, now=NOW, period_end=None, generation=1)
    assert kept is not None
    assert kept.released == [record]
    assert admission(kept, holding=False, held=0, now=NOW, period_end=None, generation=1,
                     released=[]) is None  # fmt: skip
    assert released(ref("b"), gpu_hours(1 / 3), NOW).estimate.accelerator_hours == 0.333334
