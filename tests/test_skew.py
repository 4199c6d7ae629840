"""Clock skew between the operator and the API server (issue 17, item 7): the offset
measured from the `Date` of answers always contains the truth, follows a stepped clock,
says when it is not known; and no clock makes a charge negative."""

import math
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from trainwarden import failpoints
from trainwarden.budget.ledger import Ledger, Period, accrue
from trainwarden.clock import ServerClock, parse_date
from trainwarden.core import skew
from trainwarden.core.accounting import Charge, Rate
from trainwarden.core.skew import Sample
from world import T0

offsets = st.floats(-7200, 7200, allow_nan=False)
latencies = st.floats(0, 20, allow_nan=False)
fractions = st.floats(0, 1)
T = 1_800_000_000.0


def answer(offset: float, sent: float, latency: float, at: float) -> Sample:
    """An answer the server stamped at a moment `at` (0..1) of its round trip."""
    server_moment = sent + latency * at + offset
    return Sample(sent, sent + latency, float(math.floor(server_moment)))


@given(offsets, latencies, fractions, st.floats(0, 1e6))
def test_one_answer_bounds_the_true_offset(
    offset: float, latency: float, at: float, later: float
) -> None:
    low, high = skew.bounds(answer(offset, T + later, latency, at))
    assert low - 1e-6 <= offset <= high + 1e-6  # the test's own float rounding


@given(offsets, st.lists(st.tuples(latencies, fractions, st.floats(0, 5)), min_size=1))
def test_the_estimate_contains_the_truth_and_is_as_narrow_as_the_fastest_answer(
    offset: float, trips: list[tuple[float, float, float]]
) -> None:
    samples, sent = [], T
    for latency, at, pause in trips:
        samples.append(answer(offset, sent, latency, at))
        sent += latency + pause
    found = skew.estimate(samples)
    assert found is not None
    assert found.low - 1e-6 <= offset <= found.high + 1e-6
    assert found.uncertainty <= (1 + min(t[0] for t in trips)) / 2 + 1e-6


@given(offsets, st.floats(3, 3600), st.sampled_from([-1, 1]), st.integers(1, 5))
def test_a_stepped_clock_is_followed_at_once(
    offset: float, step: float, sign: int, before: int
) -> None:
    """Answers from before the step contradict the newer ones: the newest win."""
    samples = [answer(offset, T + i, 0.01, 0.5) for i in range(before)]
    stepped = offset + sign * step
    samples.append(answer(stepped, T + before + 1, 0.01, 0.5))
    found = skew.estimate(samples)
    assert found is not None
    assert found.low - 1e-6 <= stepped <= found.high + 1e-6


def test_doubt_without_answers_when_stale_and_when_too_slow() -> None:
    assert skew.doubt(None, T) is not None
    fresh = skew.estimate([answer(300, T, 0.02, 0.5)])
    assert skew.doubt(fresh, T + 1) is None
    assert "no answer" in (skew.doubt(fresh, T + skew.STALE + 1) or "")
    slow = skew.estimate([answer(300, T, 30, 0.5)])
    assert "within" in (skew.doubt(slow, T + 31) or "")


@given(st.floats(-1e6, 1e6), st.floats(0, 1e6), st.floats(-1e6, 1e6))
def test_no_clock_makes_a_charge_negative(start: float, width: float, now: float) -> None:
    """A clock behind the server sees pods that started "in the future": 0, never less."""
    c = Charge("u", "ns", T + start, None, "Running", (), Rate((("gpu", 1.0),)))
    assert c.seconds(T + now - width, T + now) >= 0.0
    result = accrue(
        Ledger(),
        period=Period(T + now - width, None),
        previous=None,
        live=[c],
        gone=[],
        now=T + now,
        label_keys=(),
    )
    assert result.usage.total.total_accelerator_hours >= 0.0


def test_the_server_clock_reckons_in_the_servers_time() -> None:
    """The operator's clock 5 minutes ahead; one answer corrects it to within a second."""
    local = T0.timestamp() + 300
    clock = ServerClock(local=lambda: T0.fromtimestamp(local, T0.tzinfo))
    assert clock.doubt() is not None, "no answer yet: in doubt"
    clock.observe(local - 0.05, local, format_datetime(T0, usegmt=True))
    assert abs(clock.now().timestamp() - T0.timestamp()) <= 1.0
    assert clock.doubt() is None
    estimate = clock.estimate()
    assert estimate is not None
    assert skew.skewed(estimate)


def test_dates_parse_and_bad_ones_are_ignored() -> None:
    assert parse_date("Tue, 01 Dec 2026 12:00:00 GMT") == T0.timestamp()
    assert parse_date("yesterday") is None
    assert parse_date(None) is None
    clock = ServerClock()
    clock.observe(T, T, "not a date")
    assert clock.estimate() is None


def test_the_clock_skew_failpoint_takes_signed_seconds_and_nothing_else() -> None:
    assert failpoints.parse(["clock-skew=+300"]) == {"clock-skew": "+300"}
    assert failpoints.parse(["clock-skew=-90.5"]) == {"clock-skew": "-90.5"}
    for bad in ("clock-skew=kill", "clock-skew=nan", "clock-skew=1e12"):
        try:
            failpoints.parse([bad])
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")
    failpoints.configure({"clock-skew": "-120"})
    try:
        assert failpoints.skew() == -120.0
        failpoints.hit("clock-skew")  # a state, not a place: never kills
    finally:
        failpoints.configure({})
    assert failpoints.skew() == 0.0
