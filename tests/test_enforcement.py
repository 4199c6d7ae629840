"""Enforcement plans: suspend in order within the cap; resume only what this budget suspended."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.budget.enforcement import Workload, WorkloadRef, plan

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
KINDS = [("batch/v1", "Job"), ("ray.io/v1", "RayJob"), ("apps/v1", "Deployment"), ("v1", "Pod")]


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    api_version, kind = draw(st.sampled_from(KINDS))
    suspended = draw(st.booleans())
    kueue = draw(st.booleans())  # Kueue manages it: it has an active Workload (kueue_route)
    return Workload(
        ref=WorkloadRef(
            api_version, kind, "ns", draw(st.text("abc", min_size=1)), draw(st.uuids()).hex
        ),
        created=NOW - timedelta(minutes=draw(st.integers(0, 1000))),
        accelerators=draw(st.integers(0, 8)),
        priority=draw(st.integers(-10, 10)),
        suspended=suspended,
        suspended_by=draw(st.sampled_from([None, "mine", "other"])) if suspended else None,
        kueue_managed=kueue,
        kueue_workload="wl" if kueue else None,
    )


def make_plan(ws: list[Workload], level: str = "Exhausted", **overrides: object):  # type: ignore[no-untyped-def]
    args = {
        "now": NOW,
        "exhausted_since": NOW - timedelta(minutes=10),
        "grace": timedelta(minutes=5),
        "order": ["Newest"],
        "resume_automatically": True,
        "recent_suspensions": 0,
        "max_per_minute": 1000,
        "generation": 2,
        "period_start": NOW.replace(hour=0),
    }
    args.update(overrides)
    return plan("mine", level, ws, **args)  # type: ignore[arg-type]


@given(st.lists(workloads(), max_size=12), st.integers(0, 5), st.integers(1, 5))
def test_exhausted_plan_invariants(ws: list[Workload], recent: int, cap: int) -> None:
    result = make_plan(ws, recent_suspensions=recent, max_per_minute=cap)
    eligible = [
        w
        for w in ws
        if not w.suspended and (w.ref.api_version, w.ref.kind) != ("apps/v1", "Deployment")
    ]
    assert len(result.suspend) <= max(0, cap - recent)
    assert set(result.suspend) | set(result.deferred) == set(eligible)
    assert not set(result.suspend) & set(result.deferred)
    assert result.resume == ()
    created = [w.created for w in result.suspend]
    assert created == sorted(created, reverse=True), "newest first"
    for w, reason in result.skipped:
        assert w.ref.kind == "Deployment", reason


@given(st.lists(workloads(), max_size=12), st.sampled_from(["Ok", "Warning"]))
def test_only_what_this_budget_suspended_is_resumed(ws: list[Workload], level: str) -> None:
    result = make_plan(ws, level=level)
    assert result.suspend == ()
    assert set(result.resume) == {w for w in ws if w.suspended and w.suspended_by == "mine"}
    assert make_plan(ws, level=level, resume_automatically=False).resume == ()


def test_resume_needs_a_new_period_or_spec_not_just_dropping_below() -> None:
    """Usage that stopped at the limit must not resume and re-suspend the job forever."""
    period = NOW.replace(hour=0)
    job = Workload(
        WorkloadRef("batch/v1", "Job", "ns", "j", "u"),
        NOW,
        suspended=True,
        suspended_by="mine",
        suspended_in=(2, period),
    )
    assert make_plan([job], level="Warning").resume == ()
    assert make_plan([job], level="Warning", generation=3).resume == (job,)
    assert make_plan([job], level="Ok", period_start=period + timedelta(days=1)).resume == (job,)


def test_nothing_is_suspended_during_the_grace_period() -> None:
    job = Workload(WorkloadRef("batch/v1", "Job", "ns", "j", "u"), NOW)
    during = make_plan([job], exhausted_since=NOW - timedelta(minutes=1))
    assert during.suspend == ()
    assert during.grace_ends == NOW + timedelta(minutes=4)
    assert make_plan([job], exhausted_since=NOW - timedelta(minutes=5)).suspend == (job,)
    assert make_plan([job], grace=timedelta()).suspend == (job,)


def test_order_lowest_priority_then_largest() -> None:
    def job(name: str, priority: int, gpus: int) -> Workload:
        return Workload(WorkloadRef("batch/v1", "Job", "ns", name, name), NOW, gpus, priority)

    jobs = [job("a", 10, 8), job("b", 0, 1), job("c", 0, 8), job("d", 5, 4)]
    result = make_plan(jobs, order=["LowestPriority", "Largest"])
    assert [w.ref.name for w in result.suspend] == ["c", "b", "d", "a"]


@given(st.lists(workloads(), max_size=6), st.integers(-3600, 3600), st.integers(0, 1800))
def test_a_skewed_exhaustion_stamp_never_moves_the_grace_period_past_now_plus_grace(
    ws: list[Workload], skew: int, grace: int
) -> None:
    """Issue 17, item 7: Exhausted's lastTransitionTime stamped by a clock ahead (found by
    tests/test_budget_skew.py: a stamp 5 minutes in the future held a 0 s grace period
    for 5 minutes). The grace period ends by now + grace whatever the stamp says."""
    since = NOW + timedelta(seconds=skew)
    result = make_plan(ws, exhausted_since=since, grace=timedelta(seconds=grace))
    assert result.grace_ends is None or result.grace_ends <= NOW + timedelta(seconds=grace)
    if grace == 0:
        assert (
            result.suspend
            or result.deferred
            or not any(not w.suspended and w.ref.kind == "Job" and not w.kueue_managed for w in ws)
        )


def test_nothing_left_to_suspend_announces_no_grace_period() -> None:
    """Every charged workload already suspended: status must not say "suspending charged
    workloads at ... (grace period)"."""
    held = Workload(
        WorkloadRef("batch/v1", "Job", "ns", "a", "a"), NOW, 8, 0, suspended=True, suspended_by="b"
    )
    during = make_plan([held], exhausted_since=NOW)
    assert (during.suspend, during.grace_ends) == ((), None)
    running = Workload(WorkloadRef("batch/v1", "Job", "ns", "c", "c"), NOW, 8, 0)
    assert make_plan([held, running], exhausted_since=NOW).grace_ends == NOW + timedelta(minutes=5)
