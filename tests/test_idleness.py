"""The idle state machine: warn, then reclaim after grace; never on missing data."""

from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainwarden.core import idleness
from trainwarden.core.idleness import IdleState, Observation, coalesced, lease_expired, step
from trainwarden.testing import windows

T0 = datetime(2026, 8, 1, tzinfo=UTC)
STEP = timedelta(seconds=15)
WINDOW = timedelta(minutes=5)
WARMUP = timedelta(minutes=2)
GRACE = timedelta(minutes=3)


def series(values: list[float | None], end: datetime) -> list[tuple[datetime, float]]:
    """One sample per STEP ending at `end`; None is a missing scrape."""
    n = len(values)
    return [(end - (n - 1 - i) * STEP, v) for i, v in enumerate(values) if v is not None]


def grid(now: datetime = T0) -> list[datetime]:
    """A range query's step times: the window and two steps back."""
    return windows.grid(now, WINDOW + 2 * STEP, STEP)


def judge(values: list[float | None], now: datetime = T0) -> Observation:
    """The verdict as the operator reaches it: Prometheus's summary of the window."""
    steps = windows.grid(now, WINDOW, STEP)
    summed, coverage = windows.summary(series(values, now), steps, 5)
    return idleness.judge(coverage, summed, now=now, window=WINDOW, resolution=STEP)


@settings(max_examples=1000)
@given(
    st.lists(st.one_of(st.none(), st.floats(0, 100), st.sampled_from([4.99, 5.0])), max_size=40),
    st.integers(0, 14),
)
def test_the_summary_judges_exactly_as_every_step_did(
    values: list[float | None], shift: int
) -> None:
    """Invariant: for any history (gaps, values at the threshold, too short for the
    window), the window summed up to two numbers per pod gives the verdict and idle-since
    the per-step judgment gave, at any instant between steps."""
    now = T0 + timedelta(seconds=shift)
    points = series(values, T0)
    per_step = windows.observe(points, now=now, window=WINDOW, threshold=5, steps=grid(now))
    steps = windows.grid(now, WINDOW, STEP)
    summed, coverage = windows.summary(points, steps, 5)
    assert idleness.judge(coverage, summed, now=now, window=WINDOW, resolution=STEP) == per_step


def test_verdicts() -> None:
    assert judge([1.0] * 21).verdict == "Idle"
    assert judge([50.0] * 21).verdict == "Busy"
    suspect = judge([50.0] * 10 + [1.0] * 11)
    assert suspect.verdict == "Suspect"
    assert suspect.idle_since == T0 - 10 * STEP
    assert judge([]).verdict == "Unknown"
    assert judge([1.0] * 10).verdict == "Unknown", "the window must be covered"
    gappy = [1.0] * 8 + [None] * 4 + [1.0] * 9
    assert judge(gappy).verdict == "Unknown", "a gap is not idleness"
    assert judge([1.0] * 20 + [99.0]).verdict == "Busy", "the peak decides, not the mean"


def run(
    observations: list[Observation], started: datetime = T0 - timedelta(hours=1)
) -> list[tuple[IdleState, str | None]]:
    state: IdleState | None = None
    out = []
    for i, obs in enumerate(observations):
        state, action = step(
            state,
            obs,
            now=T0 + i * timedelta(minutes=1),
            started=started,
            warmup=WARMUP,
            grace=GRACE,
        )
        out.append((state, action))
    return out


IDLE = Observation("Idle", idle_since=T0 - WINDOW)
BUSY = Observation("Busy")
UNKNOWN = Observation("Unknown")


def test_warn_then_reclaim_after_grace() -> None:
    actions = [a for _, a in run([IDLE] * 6)]
    assert actions == ["Warn", None, None, "Reclaim", None, None]


def test_recovery_during_grace_withdraws_the_warning() -> None:
    actions = [a for _, a in run([IDLE, IDLE, BUSY, IDLE, IDLE, IDLE, IDLE])]
    assert actions == ["Warn", None, "Withdraw", "Warn", None, None, "Reclaim"]


def test_unknown_never_reclaims_and_warmup_is_never_judged() -> None:
    assert all(a is None for _, a in run([UNKNOWN] * 10))
    results = run([IDLE] * 3, started=T0)
    assert [s.state for s, _ in results] == ["WarmingUp", "WarmingUp", "Warned"]


def test_lease() -> None:
    assert lease_expired(T0, T0 + timedelta(hours=72), timedelta(hours=72))
    assert not lease_expired(T0, T0 + timedelta(hours=71), timedelta(hours=72))
    assert not lease_expired(T0, T0 + timedelta(days=900), None)


observations = st.sampled_from(
    [IDLE, BUSY, UNKNOWN, Observation("Suspect", idle_since=T0 - timedelta(minutes=1))]
)


@settings(max_examples=300)
@given(st.lists(observations, max_size=30), st.integers(0, 20))
def test_invariants_over_any_history(history: list[Observation], start_offset: int) -> None:
    started = T0 - timedelta(minutes=start_offset)
    results = run(history, started=started)
    warned_at = None
    for i, ((_state, action), obs) in enumerate(zip(results, history, strict=True)):
        now = T0 + i * timedelta(minutes=1)
        if action == "Warn":
            warned_at = now
        if action == "Withdraw":
            warned_at = None
        if action == "Reclaim":
            assert obs.verdict == "Idle", "only an idle observation can reclaim"
            assert warned_at is not None, "warned first"
            assert now >= warned_at + GRACE, "then a full grace period"
            assert now >= started + WARMUP
        if now < started + WARMUP:
            assert action is None
        if obs.verdict == "Unknown":
            assert action is None, "missing data is never idleness"
    assert sum(a == "Reclaim" for _, a in results) <= 1, "a pod is reclaimed once"


@settings(max_examples=200)
@given(st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=1, max_size=40))
def test_idle_verdict_means_every_sample_in_a_covered_window_is_low(
    values: list[float | None],
) -> None:
    obs = judge(values)
    points = series(values, T0)
    in_window = [v for t, v in points if t >= T0 - WINDOW]
    if obs.verdict == "Idle":
        assert in_window
        assert max(in_window) < 5
    if obs.verdict == "Busy":
        assert in_window[-1] >= 5


def test_a_few_points_never_cover_a_window() -> None:
    """The reported exploit: two samples a step apart, then silence, were taken for a
    covered window (1.5 steps of slack at each end). Every step must have its point."""
    steps_in_window = int(WINDOW / STEP) + 1
    for present in range(1, steps_in_window):
        for offset in range(steps_in_window - present + 1):
            values: list[float | None] = [None] * steps_in_window
            values[offset : offset + present] = [1.0] * present
            assert judge(values).verdict == "Unknown", (present, offset)


@settings(max_examples=300)
@given(st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=1, max_size=40))
def test_idle_needs_a_point_at_every_step_of_the_window(values: list[float | None]) -> None:
    if judge(values).verdict == "Idle":
        present = {t for t, _ in series(values, T0)}
        assert all(t in present for t in grid() if t >= T0 - WINDOW)


@settings(max_examples=1000)
@example(datetime(2026, 1, 1, 12, 0, 0, 400, tzinfo=UTC), 10_000)  # rounded to ms, it was early
@given(
    st.integers(min_value=946_684_800_000_000, max_value=4_102_444_800_000_000).map(
        lambda us: datetime.fromtimestamp(us / 1e6, UTC)  # 2000..2100, to the microsecond
    ),
    st.integers(min_value=1, max_value=86_400_000),
)
def test_due_times_are_coalesced_onto_one_step_never_early(t: datetime, step_ms: int) -> None:
    step = timedelta(milliseconds=step_ms)
    c = coalesced(t, step)
    assert c >= t
    assert c - t < step
    assert (c - datetime(1970, 1, 1, tzinfo=UTC)) % step == timedelta(0)
    # Every due time within one step lands on the same timer.
    assert coalesced(c - step + timedelta(milliseconds=1), step) == c
