"""Effective accelerator-hours: the integration against a brute-force sum per second, and
the meters against the usage they are shown with."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.budget.meters import Meters, advance, fold, slide, view
from trainwarden.core.accounting import Charge, Rate
from trainwarden.core.efficiency import (
    MAX_POINTS,
    MAX_VALUES,
    Measure,
    Point,
    integrate,
    query_step,
    row,
    rows,
)
from trainwarden.core.tally import OTHER, tally

HOUR = 3600.0


def brute(
    points: list[Point], step: int, n: int, start: int, end: int | None, lo: int, hi: int
) -> Measure:
    """Second by second: a second (s, s+1] counts if a point covers it and the pod held
    its accelerators then, within the window."""
    measured = used = 0.0
    top = hi if end is None else min(hi, end)
    for s in range(max(lo, start), top):
        for p in points:
            if p.at - step <= s and s + 1 <= p.at and p.count > 0:
                reporting = min(p.count, n)
                measured += reporting / HOUR
                used += min(max(p.busy, 0.0), p.count) * reporting / p.count / HOUR
    return Measure(measured, used)


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Point], int, int, int, int | None, int, int]:
    step = draw(st.sampled_from([5, 10, 30]))
    first = draw(st.integers(0, 200))
    steps = draw(st.integers(0, 12))
    points = []
    for k in range(steps):
        if draw(st.booleans()) and draw(st.booleans()):
            continue  # a gap
        count = draw(st.integers(0, 10))
        busy = draw(st.floats(-0.5, 12, allow_nan=False))
        points.append(Point(float(first + (k + 1) * step), busy, count))
    n = draw(st.integers(1, 8))
    start = draw(st.integers(0, 400))
    end = draw(st.one_of(st.none(), st.integers(start, 500)))
    lo = draw(st.integers(0, 400))
    hi = draw(st.integers(lo, 500))
    return points, step, n, start, end, lo, hi


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_integration_matches_a_sum_per_second(s: tuple) -> None:  # type: ignore[type-arg]
    points, step, n, start, end, lo, hi = s
    got = integrate(points, step=step, accelerators=n, start=start, end=end, lo=lo, hi=hi)
    want = brute(points, step, n, start, end, lo, hi)
    assert math.isclose(got.measured, want.measured, abs_tol=1e-9)
    assert math.isclose(got.used, want.used, abs_tol=1e-9)
    assert 0 <= got.used <= got.measured + 1e-12
    held = n * max(0, (hi if end is None else min(hi, end)) - max(lo, start)) / HOUR
    assert got.measured <= held + 1e-9  # never more than held


def test_gaps_and_missing_series_are_unknown_not_idle() -> None:
    # 8 GPUs held for 3 steps of 60 s; step 2 has no point; step 3 only 6 series report
    points = [Point(60, 8.0, 8), Point(180, 3.0, 6)]
    m = integrate(points, step=60, accelerators=8, start=0, end=None, lo=0, hi=180)
    held = 8 * 180 / HOUR
    r = row(held, m.measured, m.used)
    assert math.isclose(r.used, (8 * 60 + 3 * 60) / HOUR)
    assert math.isclose(r.idle, 3 * 60 / HOUR)  # the 6 reporting, 3 of them busy
    assert math.isclose(r.unknown, (8 * 60 + 2 * 60) / HOUR)  # the gap and 2 silent GPUs
    assert math.isclose(r.held, r.used + r.idle + r.unknown)


def test_stale_series_beyond_the_request_do_not_inflate_a_pod() -> None:
    m = integrate([Point(60, 4.0, 4)], step=60, accelerators=2, start=0, end=None, lo=0, hi=60)
    assert math.isclose(m.measured, 2 * 60 / HOUR)
    assert math.isclose(m.used, 2 * 60 / HOUR)


@given(st.floats(1, 40 * 86400), st.integers(1, 300), st.integers(1, 5000))
def test_query_step_bounds_the_answer(span: float, resolution: int, series: int) -> None:
    step = query_step(span, resolution, series)
    assert step >= resolution
    points = span / step
    assert points <= MAX_POINTS
    assert points * series <= max(MAX_VALUES, series)  # one point per series at least


def test_rows_fold_keys_the_held_breakdown_does_not_show() -> None:
    got = rows({"a": 2.0, OTHER: 1.0}, {"a": 1.0, "b": 0.5, "c": 0.25}, {"a": 0.5, "b": 0.5})
    assert got["a"] == row(2.0, 1.0, 0.5)
    assert got[OTHER] == row(1.0, 0.75, 0.5)


def _charge(uid: str, ns: str, start: float, end: float | None, n: float = 2.0) -> Charge:
    return Charge(
        uid,
        ns,
        start,
        end,
        "Running" if end is None else "Succeeded",
        (),
        Rate((("nvidia.com/gpu", n),), cost=3.0 * n),
    )


def test_meters_fold_gone_pods_and_keep_their_outcome() -> None:
    a, b = _charge("a", "ns1", 0, None), _charge("b", "ns2", 0, 120)
    points = {
        ("ns1", "a-pod"): [Point(60, 2.0, 2), Point(120, 1.0, 2)],
        ("ns2", "b-pod"): [Point(60, 0.0, 2), Point(120, 0.0, 2)],
    }
    m = advance(
        Meters(period_start=0),
        points,
        {("ns1", "a-pod"): a, ("ns2", "b-pod"): b},
        step=60,
        lo=0,
        hi=120,
        width=None,
    )
    m = fold(m, [b], (), None)
    assert set(m.live) == {"a"}
    held = tally([a, b], 0, 120, ())
    v = view(m, [a], held, (), lo=0, width=None)
    assert math.isclose(v.total.used, 3 * 60 / HOUR)
    assert math.isclose(v.total.idle, (60 + 4 * 60) / HOUR)
    assert math.isclose(v.by_namespace["ns2"].idle, 4 * 60 / HOUR)
    assert math.isclose(v.by_outcome["Succeeded"].idle, 4 * 60 / HOUR)
    # measuring the same interval again adds nothing: the watermark moved
    again = advance(m, points, {("ns1", "a-pod"): a}, step=60, lo=0, hi=120, width=None)
    assert again.live == m.live


def test_rolling_meters_slide_with_the_window() -> None:
    width = 100.0
    a = _charge("a", "ns", 0, None, n=1)
    pts = {("ns", "p"): [Point(float(t), 1.0, 1) for t in range(10, 401, 10)]}
    m = advance(Meters(period_start=0), pts, {("ns", "p"): a}, step=10, lo=0, hi=400, width=width)
    m = slide(m, 200.0, width)
    held = tally([a], 200, 400, ())
    v = view(m, [a], held, (), lo=200, width=width)
    assert math.isclose(v.total.used, held.total.total_accelerator_hours, rel_tol=0.06)
    assert v.total.unknown < 0.06 * v.total.held
