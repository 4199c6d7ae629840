"""A run's receipt arithmetic, failure waste, names and the ledger's bounds: pure."""

import json
import math
import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.checkpoint_status import MAX_COMPLETIONS
from trainwarden.api.v1alpha1.receipt import Checkpoints
from trainwarden.core.efficiency import Measure
from trainwarden.core.locations import completions
from trainwarden.core.pods import facts
from trainwarden.core.reads import CODE
from trainwarden.core.receipts import (
    Located,
    annotation,
    awaits_scan,
    message,
    spec,
)
from trainwarden.core.runs import (
    CheckpointHistory,
    Interruption,
    PodRecord,
    Run,
    interruptions,
    losses,
    stopped,
    totals,
)
from trainwarden.core.workloads import terminal

T0 = 1_800_000_000.0
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@st.composite
def pods(draw: st.DrawFn) -> PodRecord:
    start = T0 + draw(st.floats(0, 10_000))
    length = draw(st.floats(0, 10_000))
    ended = draw(st.booleans())
    return PodRecord(
        uid=draw(st.uuids()).hex,
        name=f"p-{draw(st.integers(0, 10**6))}",
        start=start,
        end=start + length if ended else None,
        outcome=draw(st.sampled_from(["Succeeded", "Failed"])) if ended else "Running",
        accelerators=float(draw(st.integers(0, 8))),
        restarts=draw(st.integers(0, 5)),
        rates=(("b", draw(st.floats(0, 10))),),
    )


def a_run(records: list[PodRecord], **fields: object) -> Run:
    run = Run("batch/v1", "Job", "team-a", "train", "uid-1234567890", T0, T0)
    run.pods = {p.uid: p for p in records}
    for key, value in fields.items():
        setattr(run, key, value)
    return run


@given(st.lists(pods(), max_size=20), st.floats(0, 10), st.floats(0, 1))
def test_held_is_used_plus_idle_plus_unknown_whatever_was_measured(
    records: list[PodRecord], measured_share: float, busy: float
) -> None:
    closed = T0 + 30_000
    held = totals(records, closed).held
    measure = Measure(held * measured_share, held * measured_share * busy)  # may exceed held
    s = spec(a_run(records), closed=closed, measure=measure, measurement="", located=None)
    a = s.accelerator_hours
    assert abs(a.used + a.idle + a.unknown - a.held) <= 2e-6 + 1e-9 * a.held  # 6 decimals each
    assert min(a.used, a.idle, a.unknown) >= 0
    assert a.effective_percent is None or 0 <= a.effective_percent <= 100
    assert s.pods.failed_accelerator_hours <= a.held + 1e-9


def test_a_receipt_without_prometheus_counts_everything_unknown_and_says_why() -> None:
    gpu = PodRecord("u", "p", T0, T0 + 3600, "Succeeded", 2, 0, (("team-a", 3.0),))
    run = a_run([gpu], finished_at=T0 + 3600)
    s = spec(run, closed=T0 + 4000, measure=None, measurement="no Prometheus", located=None)
    assert (s.accelerator_hours.held, s.accelerator_hours.unknown) == (2.0, 2.0)
    assert s.accelerator_hours.used == s.accelerator_hours.idle == 0
    assert s.accelerator_hours.effective_percent is None, "not 0 %: nothing was measured"
    assert s.measurement == "no Prometheus"
    assert s.cost == 3.0
    assert [c.budget for c in s.charges] == ["team-a"]
    assert s.wall_time == "1h"
    assert s.outcome == "Deleted"


def test_the_cost_is_the_highest_budget_never_the_sum() -> None:
    """Budgets overlap (a team's and a project's both see a pod): never added up."""
    gpu = PodRecord("u", "p", T0, T0 + 3600, "Succeeded", 1, 0, (("project", 5.0), ("team", 2.0)))
    s = spec(a_run([gpu]), closed=T0 + 3600, measure=None, measurement="", located=None)
    assert s.cost == 5.0
    assert [(c.budget, c.cost) for c in s.charges] == [("project", 5.0), ("team", 2.0)]


def seen(complete: list[float], as_of: float = T0 + 10**6) -> CheckpointHistory:
    """Checkpoints every scan saw, the last scan after everything."""
    return CheckpointHistory(complete, as_of)


@given(st.lists(pods(), max_size=15), st.lists(st.floats(T0, T0 + 20_000), max_size=10))
def test_losses_never_count_the_same_time_twice(
    records: list[PodRecord], checkpoints: list[float]
) -> None:
    suspensions = sorted({p.start + 1 for p in records[:3]})
    events = interruptions(records, suspensions)
    lost = losses(records, events, seen(checkpoints))
    assert len(lost) == len(events)
    if records:
        first = min(p.start for p in records)
        span = max((e.at for e in events), default=first) - first
        assert sum(x.seconds or 0 for x in lost) <= span + 1e-6
    for x, e in zip(lost, events, strict=True):
        assert x.seconds is not None
        assert x.seconds >= 0
        assert x.accelerators >= 0
        assert not x.upper_bound
        newest = max((c for c in checkpoints if c <= e.at), default=None)
        if newest is not None:
            assert x.seconds <= e.at - newest + 1e-6


@given(st.lists(pods(), min_size=1, max_size=10), st.floats(T0, T0 + 20_000))
def test_a_newer_checkpoint_never_makes_a_failure_cost_more(
    records: list[PodRecord], extra: float
) -> None:
    events = interruptions(records, [])
    before = losses(records, events, seen([]))
    after = losses(records, events, seen([extra]))
    for b, a in zip(before, after, strict=True):
        assert a.seconds is not None
        assert b.seconds is not None
        assert a.seconds <= b.seconds + 1e-9


def brute_lost(records: list[PodRecord], event: Interruption, complete: list[float]) -> float:
    """The reference, second by second: the seconds of the run's work, since its pods last
    started after an earlier interruption, that no checkpoint written before the work came
    to rest covers."""
    rest = stopped(records, event)
    saved = max((c for c in complete if c <= rest), default=float("-inf"))
    t, lost = math.floor(min(p.start for p in records)), 0
    while t < event.at:
        if t >= saved:
            lost += 1
        t += 1
    return lost


@given(
    st.integers(1, 4),
    st.integers(100, 3000),
    st.integers(0, 200),
    st.lists(st.integers(0, 3000), max_size=8),
    st.sampled_from(["Failed", "Suspended"]),
)
def test_one_interruption_loses_what_a_second_by_second_count_says(
    gpus: int, at: int, grace: int, written: list[int], reason: str
) -> None:
    """One pod from T0 (whole seconds) interrupted at T0 + at, ending `grace` later when
    suspended (a trainer saving on SIGTERM writes its checkpoint in that time)."""
    end = at + (grace if reason == "Suspended" else 0)
    outcome = "Failed" if reason == "Failed" else "Succeeded"
    pod = PodRecord("u", "p", T0, T0 + end, outcome, gpus, 0, ())
    complete = [T0 + w for w in written]
    events = interruptions([pod], [T0 + at] if reason == "Suspended" else [])
    (event,) = events
    (lost,) = losses([pod], events, seen(complete))
    assert lost.seconds == brute_lost([pod], event, complete)
    assert lost.accelerators == gpus
    assert lost.hours == pytest.approx(lost.seconds * gpus / 3600)


def test_a_suspension_whose_pods_saved_on_sigterm_loses_nothing() -> None:
    """Suspended at +100 s; the pod saved a checkpoint as it stopped at +104 s."""
    pod = PodRecord("u", "p", T0, T0 + 104, "Succeeded", 1, 0, ())
    events = interruptions([pod], [T0 + 100])
    (lost,) = losses([pod], events, seen([T0 + 40, T0 + 103]))
    assert (lost.seconds, lost.upper_bound) == (0, False)
    (before,) = losses([pod], events, seen([T0 + 40]))  # no save on SIGTERM
    assert before.seconds == 60


def test_a_suspension_seen_after_the_api_s_rounded_end_of_its_pod_still_counts_it() -> None:
    """The pod saved on SIGTERM at 3.5 s after the minute and stopped at 3.6 s: the API says
    it finished at 3 s, the checkpoint's time is kept to the second (3 s), and the operator
    saw the suspension at 3.045 s. The pod's GPUs were held, and nothing was lost."""
    pod = PodRecord("u", "p", T0, T0 + 63, "Succeeded", 4, 0, ())
    events = interruptions([pod], [T0 + 63.045])
    assert events == [Interruption(T0 + 63, "Suspended")]  # to the second, as the API's
    (lost,) = losses([pod], events, seen([T0 + 40, T0 + 63]))
    assert (lost.seconds, lost.accelerators) == (0, 4)


def test_a_failure_loses_the_work_since_the_last_checkpoint_times_the_accelerators() -> None:
    # Two workers of 4 GPUs from T0; one fails at +2h; the newest checkpoint was at +1h30m.
    a = PodRecord("a", "w-0", T0, T0 + 7200, "Failed", 4, 0, ())
    b = PodRecord("b", "w-1", T0, T0 + 7210, "Succeeded", 4, 0, ())
    retry = PodRecord("c", "w-0b", T0 + 7300, T0 + 9000, "Succeeded", 4, 0, ())
    events = interruptions([a, b, retry], [])
    assert events == [Interruption(T0 + 7200, "Failed")]
    (lost,) = losses([a, b, retry], events, seen([T0 + 1800, T0 + 5400, T0 + 8000]))
    assert (lost.seconds, lost.accelerators, lost.hours) == (1800, 8, 4.0)


def test_pods_failing_together_are_one_failure_and_work_restarts_after_it() -> None:
    gang = [PodRecord(str(i), f"w-{i}", T0, T0 + 3600 + i, "Failed", 1, 0, ()) for i in range(4)]
    again = PodRecord("r", "w-r", T0 + 4000, T0 + 5000, "Failed", 1, 0, ())
    events = interruptions([*gang, again], [])
    assert [e.at for e in events] == [T0 + 3600, T0 + 5000]
    lost = losses([*gang, again], events, seen([]))
    assert [x.seconds for x in lost] == [3600, 1000]  # the second from the restart at +4000
    assert [x.accelerators for x in lost] == [4, 1]


def test_a_failure_after_the_last_scan_is_only_an_upper_bound() -> None:
    """The last scan was at +50 min: a checkpoint written between it and the failure at
    +60 min is not seen, so the loss since the one at +40 min is at most 20 min."""
    pod = PodRecord("a", "w-0", T0, T0 + 3600, "Failed", 2, 0, ())
    events = interruptions([pod], [])
    (lost,) = losses([pod], events, CheckpointHistory([T0 + 2400], as_of=T0 + 3000))
    assert (lost.seconds, lost.upper_bound) == (1200, True)
    (scanned,) = losses([pod], events, CheckpointHistory([T0 + 2400], as_of=T0 + 3600))
    assert (scanned.seconds, scanned.upper_bound) == (1200, False)


@given(
    st.lists(st.integers(0, 50_000), min_size=1, max_size=80, unique=True),
    st.lists(st.integers(1, 50_000), min_size=1, max_size=6, unique=True),
)
def test_a_bounded_history_estimates_what_the_whole_one_does_or_says_it_cannot(
    written: list[int], failures: list[int]
) -> None:
    """The history a location's status keeps (the newest 32, core/locations.completions)
    gives every interruption after its oldest entry the same loss as every checkpoint ever
    seen would; older ones are not estimated, never guessed."""
    ends = sorted(failures)
    starts = [0, *ends[:-1]]  # each pod starts as the one before it fails
    pods_ = [
        PodRecord(str(i), f"p{i}", T0 + s, T0 + e, "Failed", 1, 0, ())
        for i, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]
    events = interruptions(pods_, [])
    scan = datetime.fromtimestamp(T0 + 60_000, UTC)
    every = [datetime.fromtimestamp(T0 + w, UTC) for w in written]
    kept = completions([], every, scan, MAX_COMPLETIONS)
    times = [t.timestamp() for t in kept]
    full = losses(pods_, events, CheckpointHistory([T0 + w for w in written], scan.timestamp()))
    horizon = min(times) if len(times) >= MAX_COMPLETIONS else None
    bounded = losses(pods_, events, CheckpointHistory(times, scan.timestamp(), horizon))
    for whole, part in zip(full, bounded, strict=True):
        if horizon is not None and part.at < horizon:
            assert part.seconds is None
        else:
            assert part.seconds == whole.seconds


def test_failure_waste_needs_a_policy_scanning_the_location_and_says_so_without_one() -> None:
    failed = PodRecord("a", "w-0", T0, T0 + 600, "Failed", 2, 0, ())
    run = a_run([failed], checkpoint_path="ckpt:/runs/a")
    s = spec(run, closed=T0 + 700, measure=None, measurement="", located=None)
    assert s.failure_waste is not None
    assert s.failure_waste.accelerator_hours is None
    assert "no CheckpointPolicy scans ckpt:/runs/a" in s.failure_waste.note
    unnamed = spec(a_run([failed]), closed=T0 + 700, measure=None, measurement="", located=None)
    assert unnamed.failure_waste is None  # no checkpoint location named: nothing to estimate


def located(history: CheckpointHistory) -> Located:
    return Located(Checkpoints(location="ckpt:/runs/a", policy="p"), history)


def test_a_receipt_lists_each_loss_and_says_which_are_upper_bounds() -> None:
    """Failed at +10 min (checkpoint at +8 min, scanned since), then suspended at +30 min
    and not scanned since (checkpoint at +25 min seen): 2 + at most 5 GPU-minutes x 4."""
    first = PodRecord("a", "w-0", T0, T0 + 600, "Failed", 4, 0, ())
    second = PodRecord("b", "w-1", T0 + 660, T0 + 1805, "Succeeded", 4, 0, ())
    run = a_run([first, second], checkpoint_path="ckpt:/runs/a", suspensions=[T0 + 1800])
    history = CheckpointHistory([T0 + 480, T0 + 1500], as_of=T0 + 1700)
    assert awaits_scan(run, located(history))
    s = spec(run, closed=T0 + 1900, measure=None, measurement="", located=located(history))
    waste = s.failure_waste
    assert waste is not None
    assert [(x.reason, x.seconds, x.upper_bound) for x in waste.losses] == [
        ("Failed", 120, False),
        ("Suspended", 300, True),
    ]
    assert waste.accelerator_hours == pytest.approx(4 * 420 / 3600, abs=1e-6)
    assert "1 at most: no scan of the location since" in waste.note
    assert "at most 0.5 lost since the last checkpoint" in message(s)
    saved = CheckpointHistory([T0 + 600, T0 + 1803], as_of=T0 + 1805)  # on the spot
    assert "2 interruption(s), no work lost (checkpointed)" in message(
        spec(run, closed=T0 + 1900, measure=None, measurement="", located=located(saved))
    )
    scanned = CheckpointHistory([T0 + 480, T0 + 1500], as_of=T0 + 1805)
    assert not awaits_scan(run, located(scanned))
    assert not awaits_scan(a_run([second], checkpoint_path="x:/y"), located(history))


def test_the_annotation_and_the_event_are_short() -> None:
    rates = (("b" * 60, 9.0),)
    records = [PodRecord(str(i), f"p{i}", T0, T0 + 9000, "Failed", 8, 3, rates) for i in range(50)]
    s = spec(
        a_run(records), closed=T0 + 9000, measure=Measure(50, 30), measurement="", located=None
    )
    text = annotation("job-train-12345678", s)
    assert len(text) < 400
    assert json.loads(text)["failedPods"] == 50
    said = message(s)
    assert said.startswith(
        "Run finished Deleted in 2h30m: 1000.0 accelerator-hours held, 30.0 used (3%), "
        "20.0 idle, 950.0 unknown; 1125.00 on budget bbb"
    )
    assert said.endswith("; 50 failed pod(s) burned 1000.0 accelerator-hours")


def test_terminal_reads_every_kind_s_own_word_for_finished() -> None:
    at = "2026-01-01T00:00:00Z"
    when = datetime(2026, 1, 1, tzinfo=UTC)

    def cond(kind: str, type_: str) -> dict[str, object]:
        c = {"type": type_, "status": "True", "lastTransitionTime": at}
        return {"kind": kind, "status": {"conditions": [c]}}

    assert terminal(cond("Job", "Complete")) == ("Succeeded", when)
    assert terminal(cond("JobSet", "Completed")) == ("Succeeded", when)
    assert terminal(cond("PyTorchJob", "Failed")) == ("Failed", when)
    assert terminal(cond("Job", "Suspended")) is None
    ray = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete", "endTime": at}
    assert terminal({"kind": "RayJob", "status": ray}) == ("Succeeded", when)
    assert terminal({"kind": "RayJob", "status": {**ray, "jobDeploymentStatus": "Running"}}) is None


def test_restarts_are_summed_over_containers() -> None:
    pod = {
        "metadata": {"uid": "u", "name": "p", "namespace": "n"},
        "status": {
            "containerStatuses": [{"restartCount": 2}, {"restartCount": 3}],
            "initContainerStatuses": [{"restartCount": 1}, {"restartCount": "x"}],
        },
    }
    assert facts(pod, CODE).restarts == 6
