"""The bounded ledger against the unbounded truth: exact totals and breakdowns however many
pods pass through, restarts that neither lose nor double count, and a Rolling window
within its stated error bound."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.budget.ledger import BUCKETS, CAP, Ledger, Period, accrue
from trainwarden.core.accounting import Charge, Rate
from trainwarden.core.tally import OTHER, tally

GPU = "nvidia.com/gpu"
KEYS = ("team",)

Pod = tuple[int, int, int, int]
"""(start, end, gpus, namespace index): alive in [start, end), deleted at end."""


def make(i: int, pod: Pod, *, gone: bool) -> Charge:
    start, end, gpus, ns = pod
    return Charge(
        f"p{i}",
        f"ns{ns}",
        float(start),
        float(end) if gone else None,
        "Succeeded" if gone else "Running",
        (f"t{ns % 3}",),
        Rate(((GPU, float(gpus)),), cpu=1.0, cost=2.0 * gpus),
    )


def exact(pods: list[Pod], lo: float, hi: float, charged_until: dict[int, float]) -> float:
    """GPU-hours in [lo, hi): each pod up to its end, or to when it was last seen."""
    total = 0.0
    for i, (start, end, gpus, _) in enumerate(pods):
        stop = min(end, charged_until.get(i, end), hi)
        total += gpus * max(0.0, stop - max(start, lo)) / 3600
    return total


@st.composite
def histories(draw: st.DrawFn, horizon: int = 3000) -> list[Pod]:
    pods = []
    for _ in range(draw(st.integers(1, 40))):
        start = draw(st.integers(0, horizon - 10))
        end = draw(st.integers(start + 1, horizon))
        pods.append((start, end, draw(st.integers(1, 8)), draw(st.integers(0, 30))))
    return pods


def simulate(
    pods: list[Pod], ticks: list[int], down: range | None, period: Period
) -> tuple[float, float, dict[int, float]]:
    """Evaluate at each tick; while `down`, the process is dead (memory lost, no writes).
    Returns the time of the last evaluation, its usage, and up to when each pod deleted
    while nobody watched is charged (0: it was never seen)."""
    ledger, seen_gone, last_write = Ledger(), set[int](), None
    live_at_write: set[int] = set()
    charged_until: dict[int, float] = {}
    restoring = False
    usage = 0.0
    for t in ticks:
        if down is not None and t in down:
            restoring = True
            continue
        live = [make(i, p, gone=False) for i, p in enumerate(pods) if p[0] <= t < p[1]]
        gone_now = [i for i, p in enumerate(pods) if p[1] <= t and i not in seen_gone]
        gone = []
        for i in gone_now:
            seen_gone.add(i)
            if restoring and i in live_at_write and pods[i][1] > (last_write or 0):
                charged_until[i] = float(last_write or 0)  # vanished while down
            elif restoring and i not in live_at_write:
                charged_until[i] = 0.0  # started and ended unseen: never charged
            else:
                gone.append(make(i, pods[i], gone=True))
        result = accrue(
            ledger,
            period=period,
            previous=period if last_write is not None else None,
            live=live,
            gone=gone,
            now=float(t),
            label_keys=KEYS,
            restoring=restoring,
        )
        ledger, restoring, last_write = result.ledger, False, t
        live_at_write = {int(c.uid[1:]) for c in live}
        usage = result.usage.total.accelerator_hours.get(GPU, 0.0)
    return float(last_write or 0), usage, charged_until


@settings(max_examples=300, deadline=None)
@given(histories(), st.lists(st.integers(1, 3000), min_size=1, max_size=30, unique=True))
def test_total_is_exact_however_many_pods(pods: list[Pod], ticks: list[int]) -> None:
    ticks.sort()
    last, usage, _ = simulate(pods, ticks, None, Period(0.0, None))
    assert usage == pytest.approx(exact(pods, 0, last, {}), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(
    histories(),
    st.lists(st.integers(1, 3000), min_size=2, max_size=30, unique=True),
    st.integers(0, 3000),
    st.integers(1, 1500),
)
def test_a_restart_neither_loses_nor_double_counts(
    pods: list[Pod], ticks: list[int], crash: int, outage: int
) -> None:
    """Pods that still exist stay exact; pods deleted while the operator was down are
    charged up to the last write that saw them, as the unbounded ledger did."""
    ticks.sort()
    down = range(crash, crash + outage)
    last, usage, until = simulate(pods, ticks, down, Period(0.0, None))
    assert usage == pytest.approx(exact(pods, 0, last, until), abs=1e-6)


def test_the_ledger_stays_bounded_by_keys_not_pods() -> None:
    """100,000 pods with a new label value each: the ledger keeps CAP keys per breakdown,
    the total and the "(other)" share stay exact."""
    gone = [
        Charge(f"p{i}", f"ns{i % 100}", 0.0, 36.0, "Succeeded", (f"exp-{i}",), Rate(((GPU, 1.0),)))
        for i in range(100_000)
    ]
    result = accrue(
        Ledger(),
        period=Period(0.0, None),
        previous=None,
        live=[],
        gone=gone,
        now=100.0,
        label_keys=("experiment",),
    )
    closed = result.ledger.closed
    assert len(closed.by_namespace) == CAP
    assert len(closed.by_label["experiment"]) == CAP
    assert closed.total.accelerator_hours[GPU] == pytest.approx(1000.0)
    shown = sum(s.accelerator_hours for s in closed.by_label["experiment"].values())
    assert shown == pytest.approx(1000.0)
    assert closed.by_label["experiment"][OTHER].accelerator_hours > 0


def test_a_period_that_ends_is_summarized_and_the_next_starts_empty() -> None:
    first, second = Period(0.0, 1000.0), Period(1000.0, 2000.0)
    pod = Charge("a", "ns", 500.0, None, "Running", ("",), Rate(((GPU, 2.0),)))
    gone = Charge("b", "ns", 900.0, 1100.0, "Succeeded", ("",), Rate(((GPU, 1.0),)))
    before = accrue(
        Ledger(), period=first, previous=None, live=[pod, gone], gone=[], now=950.0, label_keys=KEYS
    )
    after = accrue(
        before.ledger,
        period=second,
        previous=first,
        live=[pod],
        gone=[gone],
        now=1200.0,
        label_keys=KEYS,
    )
    assert after.ended is not None
    period, total = after.ended
    assert (period.start, period.end) == (0.0, 1000.0)
    assert total.accelerator_hours[GPU] == pytest.approx((2 * 500 + 100) / 3600)
    assert after.usage.total.accelerator_hours[GPU] == pytest.approx((2 * 200 + 100) / 3600)


@settings(max_examples=200, deadline=None)
@given(histories(horizon=20_000), st.lists(st.integers(1, 20_000), min_size=1, max_size=40))
def test_a_rolling_window_is_within_one_bucket_of_the_truth(
    pods: list[Pod], ticks: list[int]
) -> None:
    """The stated bound (docs/budgets.md): gone pods' usage in the window is off by at
    most one bucket's usage, i.e. the peak accelerators held at once times window/48."""
    window = 6000.0
    width = window / BUCKETS
    ledger, seen, usage = Ledger(), set[int](), 0.0
    t = 0
    for t in sorted(set(ticks)):
        live = [make(i, p, gone=False) for i, p in enumerate(pods) if p[0] <= t < p[1]]
        gone = [make(i, p, gone=True) for i, p in enumerate(pods) if p[1] <= t and i not in seen]
        seen |= {int(g.uid[1:]) for g in gone}
        result = accrue(
            ledger,
            period=Period(t - window, None),
            previous=None,
            live=live,
            gone=gone,
            now=float(t),
            label_keys=KEYS,
            rolling=window,
        )
        ledger, usage = result.ledger, result.usage.total.accelerator_hours.get(GPU, 0.0)
    truth = exact(pods, t - window, t, {})
    peak = max(sum(p[2] for p in pods if p[0] <= s < p[1]) for s in range(0, 20_000, 50))
    assert abs(usage - truth) <= peak * width / 3600 + 1e-9
    assert len(ledger.buckets) <= BUCKETS + 2


def test_tally_groups_pods_without_losing_any() -> None:
    charges = [
        Charge(f"p{i}", "ns", 0.0, None, "Running", (str(i % 2),), Rate(((GPU, 1.0),), cost=3.0))
        for i in range(10)
    ]
    result = tally(charges, 0.0, 3600.0, ("team",))
    assert result.total.accelerator_hours[GPU] == pytest.approx(10.0)
    assert result.by_label["team"]["0"].cost == pytest.approx(15.0)
    assert math.isclose(result.by_namespace["ns"].accelerator_hours, 10.0)
