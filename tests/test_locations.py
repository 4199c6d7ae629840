"""Which checkpoint directories a policy governs, from PVC selectors and job annotations."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import CHECKPOINT_PATH, CHECKPOINT_PIN, RESUME_FROM
from trainwarden.core.locations import (
    FUTURE_SKEW,
    RETRY_FIRST,
    RETRY_MAX,
    Location,
    TrainingJob,
    completions,
    locations,
    next_run,
    parse_path,
    retry_delay,
    s3_location,
    s3_url,
    training_job,
)

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)


def job(name: str, path: str | None, finished: datetime | None = None, **extra: str) -> TrainingJob:
    annotations = {CHECKPOINT_PATH: path} if path is not None else {}
    return TrainingJob("team", name, f"uid-{name}", {**annotations, **extra}, finished)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ckpt:/runs/a", ("ckpt", "/runs/a")),
        ("ckpt:/runs/a/", ("ckpt", "/runs/a")),
        ("ckpt:", ("ckpt", "/")),
        ("ckpt:/", ("ckpt", "/")),
        ("ckpt://x//y", ("ckpt", "/x/y")),
    ],
)
def test_checkpoint_paths_are_normalized(value: str, expected: tuple[str, str]) -> None:
    assert parse_path(value) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("ckpt", 'must be "<pvc>:<path>"'),
        ("Bad_Name:/x", 'must be "<pvc>:<path>"'),
        ("ckpt:runs", "must be absolute"),
        ("ckpt:/runs/../../etc", "must stay inside the volume"),
        ("ckpt:/../x", "must stay inside the volume"),
    ],
)
def test_malformed_paths_say_what_is_wrong(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_path(value)


def test_jobs_sharing_a_directory_make_one_location() -> None:
    found, problems = locations(
        [("team", "shared")],
        "/",
        [
            job("a", "ckpt:/out", NOW - timedelta(hours=2), **{CHECKPOINT_PIN: "c-1, c-2"}),
            job("b", "ckpt:/out/", NOW - timedelta(hours=1), **{RESUME_FROM: "c-9"}),
            job("c", "ckpt:/other"),
            job("d", "no-colon"),
            job("e", None),
        ],
    )
    assert [(x.pvc, x.path) for x in found] == [
        ("ckpt", "/other"),
        ("ckpt", "/out"),
        ("shared", "/"),
    ]
    out = found[1]
    assert out.jobs == ("a", "b")
    assert out.pins == {"c-1", "c-2"}
    assert out.resume_from == {"c-9"}
    assert out.finished_at == NOW - timedelta(hours=1)
    assert [(j.name, "<pvc>:<path>" in p) for j, p in problems] == [("d", True)]


def test_a_pvc_annotation_names_a_claim_in_its_own_namespace_only() -> None:
    """team-b's finished Job naming "ckpt:/out" governs team-b's claim ckpt, never team-a's:
    team-a's directory keeps its own state, pins and rules."""
    theirs = replace(job("b", "ckpt:/out", NOW, **{CHECKPOINT_PIN: "c-1"}), namespace="team-b")
    found, _ = locations([("team-a", "ckpt")], "/out", [theirs])
    assert [(x.namespace, x.pvc, x.jobs, x.pins) for x in found] == [
        ("team-a", "ckpt", (), frozenset()),
        ("team-b", "ckpt", ("b",), frozenset({"c-1"})),
    ]


def test_a_directory_counts_as_finished_only_once_every_writer_finished() -> None:
    found, _ = locations(
        [], "/", [job("a", "ckpt:/x", NOW - timedelta(hours=1)), job("b", "ckpt:/x")]
    )
    assert found[0].state(NOW, timedelta(0)) == "Running"
    done = Location("team", "ckpt", "/x", finished_at=NOW - timedelta(minutes=30))
    assert done.state(NOW, timedelta(hours=1)) == "Unknown", "not before the delay"
    assert done.state(NOW, timedelta(minutes=30)) == "Finished"
    assert done.state(NOW, None) == "Unknown", "no afterCompletion: finishing changes nothing"


def test_location_keys_are_stable_and_distinct() -> None:
    a, b = Location("t", "p", "/a"), Location("t", "p", "/b")
    assert a.key == Location("t", "p", "/a").key
    assert a.key != b.key
    assert len(a.key) == 10


def test_training_job_reads_completion_and_only_its_own_annotations() -> None:
    body = {
        "metadata": {
            "namespace": "team",
            "name": "run",
            "uid": "u1",
            "annotations": {CHECKPOINT_PATH: "ckpt:/x", "other.io/huge": "x" * 1000},
        },
        "status": {
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-02T11:00:00Z"}
            ]
        },
    }
    found = training_job(body)
    assert found.annotations == {CHECKPOINT_PATH: "ckpt:/x"}
    assert found.finished_at == datetime(2026, 12, 2, 11, tzinfo=UTC)
    assert training_job({"metadata": {"name": "r"}}).finished_at is None


def test_the_schedule_comes_from_status_alone() -> None:
    """A restarted operator computes the same next run (and so the same pruner Job name)."""
    created, hour, delay = NOW - timedelta(days=1), timedelta(hours=1), timedelta(minutes=10)

    def due(last: datetime | None, where: Location) -> datetime:
        return next_run(last, where, interval=hour, after_delay=delay, created=created)

    running = Location("team", "ckpt", "/x", writers=1)
    assert due(None, running) == created, "the first run is due at once"
    assert due(NOW, running) == NOW + hour
    finished = Location("team", "ckpt", "/x", finished_at=NOW + timedelta(minutes=5))
    assert due(NOW, finished) == NOW + timedelta(minutes=15), "once the jobs finished"
    later = NOW + timedelta(minutes=16)
    assert due(later, finished) == later + hour, "only once"
    no_rule = next_run(NOW, finished, interval=hour, after_delay=None, created=created)
    assert no_rule == NOW + hour, "without afterCompletion finishing changes nothing"


def test_a_cron_schedule_names_its_runs_from_status_alone() -> None:
    created = datetime(2026, 12, 1, 10, 17, tzinfo=UTC)
    where = Location("team", "ckpt", "/x", writers=1)

    def due(last: datetime | None, cron: str, zone: str = "UTC") -> datetime:
        return next_run(
            last,
            where,
            interval=timedelta(hours=1),
            after_delay=None,
            created=created,
            cron=cron,
            zone=zone,
        )

    assert due(None, "0 3 * * *") == datetime(2026, 12, 2, 3, tzinfo=UTC), "first after creation"
    ran = datetime(2026, 12, 2, 3, 0, 40, tzinfo=UTC)  # the pruner finished 40 s after 03:00
    assert due(ran, "0 3 * * *") == datetime(2026, 12, 3, 3, tzinfo=UTC)
    assert due(ran, "*/15 * * * *") == datetime(2026, 12, 2, 3, 15, tzinfo=UTC)
    berlin = due(ran, "0 3 * * *", "Europe/Berlin")
    assert berlin == datetime(2026, 12, 3, 2, tzinfo=UTC), "03:00 in Berlin is 02:00 UTC in winter"
    finished = Location("team", "ckpt", "/x", finished_at=ran + timedelta(hours=2))
    after = next_run(
        ran,
        finished,
        interval=timedelta(hours=1),
        after_delay=timedelta(minutes=10),
        created=created,
        cron="0 3 * * *",
    )
    assert after == ran + timedelta(hours=2, minutes=10), "a finished job is not kept waiting"


def test_s3_annotations_name_a_prefix_not_a_pvc() -> None:
    jobs = [
        job("a", "s3://ckpts/runs//llama"),
        job("b", "s3://ckpts/runs/llama/", finished=NOW, **{CHECKPOINT_PIN: "checkpoint-5"}),
        job("c", "s3://ckpts/other"),
        job("d", "s3://Bad_Bucket/x"),
        job("e", "s3://ckpts/../x"),
    ]
    found, problems = locations([], "/", jobs)
    assert found == []
    assert [(j.name, "s3://" in p) for j, p in problems] == [("d", True), ("e", True)]
    where, foreign = s3_location(s3_url("s3://ckpts/runs/llama"), jobs, "team")
    assert (where.path, where.jobs, where.writers) == ("s3://ckpts/runs/llama/", ("a", "b"), 1)
    assert where.pins == {"checkpoint-5"}
    assert foreign == []


def test_an_s3_prefix_heeds_only_jobs_in_the_namespace_it_belongs_to() -> None:
    """A finished Job in team-b naming team-a's prefix must not switch it to the stricter
    afterCompletion rules, nor pin or protect anything in it."""
    theirs = replace(
        job("b", "s3://ckpts/team-a/run", finished=NOW, **{CHECKPOINT_PIN: "checkpoint-1"}),
        namespace="team-b",
    )
    ours = replace(job("a", "s3://ckpts/team-a/run"), namespace="team-a")
    url = s3_url("s3://ckpts/team-a/run")
    where, foreign = s3_location(url, [theirs], "team-a")
    assert (where.jobs, where.pins, where.finished_at) == ((), frozenset(), None)
    assert where.state(NOW + timedelta(days=1), timedelta(0)) == "Unknown"
    assert [(j.name, p) for j, p in foreign] == [
        ("b", f"{CHECKPOINT_PATH}: {url} belongs to namespace team-a, not team-b")
    ]
    where, foreign = s3_location(url, [theirs, ours], "team-a")
    assert (where.jobs, where.writers, foreign[0][0].name) == (("a",), 1, "b")


@settings(max_examples=300, deadline=None)
@given(
    failed_runs=st.integers(min_value=0, max_value=100),
    interval_s=st.integers(min_value=60, max_value=7 * 86400),
    since_s=st.integers(min_value=0, max_value=86400),
)
def test_a_failed_run_is_retried_sooner_than_the_schedule_and_never_in_a_loop(
    failed_runs: int, interval_s: int, since_s: int
) -> None:
    """After `failed_runs` failed (or partial) runs in a row the next run is never later
    than the schedule, strictly sooner when the interval is longer than the backoff, never
    sooner than 30 s after the last run, and no sooner than after fewer failures."""
    where = Location("team", "ckpt", "/x", writers=1)
    created, last = NOW - timedelta(days=30), NOW - timedelta(seconds=since_s)
    interval = timedelta(seconds=interval_s)

    def due(failed: int) -> datetime:
        return next_run(
            last, where, interval=interval, after_delay=None, created=created, failed_runs=failed
        )

    scheduled = due(0)
    assert scheduled == last + interval
    at = due(failed_runs)
    assert at <= scheduled
    if failed_runs:
        delay = retry_delay(failed_runs)
        assert delay is not None
        assert RETRY_FIRST <= delay <= RETRY_MAX
        assert at >= last + RETRY_FIRST
        assert at == min(scheduled, last + delay)
        if failed_runs > 1:
            assert due(failed_runs - 1) <= at, "more failures never retry sooner"
    if failed_runs and interval > RETRY_MAX:
        assert at < scheduled


def test_the_retry_backoff_doubles_from_30_seconds_to_an_hour() -> None:
    assert retry_delay(0) is None
    waits = [retry_delay(n) for n in range(1, 10)]
    assert [w.total_seconds() for w in waits if w] == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert retry_delay(10**6) == RETRY_MAX


seconds_ago = st.lists(st.integers(0, 10**6), max_size=40)


@given(st.lists(seconds_ago, max_size=6), st.integers(1, 40))
def test_a_completion_history_merged_scan_by_scan_is_the_newest_of_all_it_saw(
    scans: list[list[int]], limit: int
) -> None:
    """However many scans fold in, and in whatever order their checkpoints come, the
    history is the newest `limit` distinct seconds of everything seen, newest first."""
    history: list[datetime] = []
    everything: set[datetime] = set()
    for ago in scans:
        seen = [NOW - timedelta(seconds=a, microseconds=250) for a in ago]
        history = completions(history, seen, NOW, limit)
        everything |= {t.replace(microsecond=0) for t in seen}
        assert history == sorted(history, reverse=True)
        assert len(history) <= limit
    assert history == sorted(everything, reverse=True)[:limit]
    assert completions(history, history, NOW, limit) == history


def test_a_checkpoint_dated_after_its_scan_is_not_history() -> None:
    """A tenant's mtime from the future would crowd out real checkpoints (and read as one
    written just before every failure): later than the scan allows, it is dropped."""
    real = NOW - timedelta(minutes=3)
    skewed = NOW + FUTURE_SKEW - timedelta(seconds=1)  # a node's clock a little ahead
    future = NOW + timedelta(days=365)
    assert completions([], [real, skewed, future], NOW, 32) == [
        skewed.replace(microsecond=0),
        real.replace(microsecond=0),
    ]
