"""Accounting against a brute-force reference: sum, second by second, what each pod held.

What a budget charges a pod (`charge`) and the tally of those charges (`tally`,
`burn_rate`), the two steps every budget evaluation takes."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.core.accounting import (
    GIB,
    AcceleratorPrice,
    Charge,
    PodSnapshot,
    PriceTable,
    Usage,
    charge,
)
from trainwarden.core.tally import Tally, burn_rate, tally

T0 = datetime(2026, 3, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
ACCELERATORS = (GPU, "amd.com/gpu")

offsets = st.integers(min_value=-200, max_value=400)


@st.composite
def pods(draw: st.DrawFn) -> PodSnapshot:
    started = draw(st.booleans())
    start = T0 + timedelta(seconds=draw(offsets)) if started else None
    end = None
    if start is not None and draw(st.booleans()):
        end = start + timedelta(seconds=draw(st.integers(0, 300)))
    requests = {
        GPU: draw(st.integers(0, 8)),
        "amd.com/gpu": draw(st.sampled_from([0, 0, 1])),
        "cpu": draw(st.sampled_from([0.5, 1, 4, 96])),
        "memory": draw(st.sampled_from([0, GIB, 16 * GIB])),
    }
    outcome = "Running" if end is None else draw(st.sampled_from(["Succeeded", "Failed"]))
    return PodSnapshot(
        uid=draw(st.uuids()).hex,
        namespace=draw(st.sampled_from(["vision", "research"])),
        name="p",
        requests=requests,
        start=start,
        end=end,
        outcome=outcome,
        labels={"team": draw(st.sampled_from(["a", "b"]))},
        node_labels={"nvidia.com/gpu.product": draw(st.sampled_from(["A100", "H100"]))},
    )


PRICES = PriceTable(
    accelerator_hour=(
        AcceleratorPrice(GPU, {}, 2.0),
        AcceleratorPrice(GPU, {"nvidia.com/gpu.product": "H100"}, 4.0),
    ),
    cpu_core_hour=0.05,
    memory_gib_hour=0.01,
)

FREE = PriceTable()


def brute_force_gpu_seconds(pods: list[PodSnapshot], lo: datetime, hi: datetime) -> float:
    """Walk the window one second at a time and count the GPUs held during each second."""
    total = 0.0
    second = lo
    while second < hi:
        for pod in pods:
            if pod.start is None or not pod.start <= second:
                continue
            if pod.end is not None and second >= pod.end:
                continue
            total += pod.requests[GPU]
        second += timedelta(seconds=1)
    return total


def charges(pods: list[PodSnapshot], prices: PriceTable = FREE) -> list[Charge]:
    found = [
        charge(p, p.node_labels, accelerators=ACCELERATORS, prices=prices, label_keys=["team"])
        for p in pods
    ]
    return [c for c in found if c is not None]


def account(pods: list[PodSnapshot], lo: datetime, hi: datetime, prices: PriceTable) -> Tally:
    return tally(charges(pods, prices), lo.timestamp(), hi.timestamp(), ["team"])


def usage(pod: PodSnapshot, lo: datetime, hi: datetime, prices: PriceTable = FREE) -> Usage:
    (c,) = charges([pod], prices)
    return c.rate.usage(c.seconds(lo.timestamp(), hi.timestamp()))


@settings(max_examples=150, deadline=None)
@given(st.lists(pods(), max_size=6), st.integers(-100, 100), st.integers(1, 300))
def test_matches_brute_force(pods: list[PodSnapshot], lo_s: int, length: int) -> None:
    lo = T0 + timedelta(seconds=lo_s)
    hi = lo + timedelta(seconds=length)
    result = account(pods, lo, hi, FREE)
    expected_hours = brute_force_gpu_seconds(pods, lo, hi) / 3600
    assert result.total.accelerator_hours.get(GPU, 0.0) == pytest.approx(expected_hours, abs=1e-9)


@given(st.lists(pods(), max_size=8), st.integers(1, 300))
def test_breakdowns_add_up_to_the_total(pods: list[PodSnapshot], length: int) -> None:
    hi = T0 + timedelta(seconds=length)
    result = account(pods, T0, hi, PRICES)
    for parts in (result.by_namespace, result.by_outcome, result.by_label["team"]):
        assert sum(s.cost for s in parts.values()) == pytest.approx(result.total.cost)
        assert sum(s.accelerator_hours for s in parts.values()) == pytest.approx(
            result.total.total_accelerator_hours
        )


@given(st.lists(pods(), max_size=6), st.integers(1, 200), st.integers(1, 200))
def test_adjacent_windows_add_up(pods: list[PodSnapshot], a: int, b: int) -> None:
    """Splitting a window never loses or double counts: the property restarts rely on."""
    mid = T0 + timedelta(seconds=a)
    hi = mid + timedelta(seconds=b)
    whole = account(pods, T0, hi, PRICES).total
    first = account(pods, T0, mid, PRICES).total
    second = account(pods, mid, hi, PRICES).total
    assert whole.cost == pytest.approx(first.cost + second.cost)
    assert whole.cpu_core_hours == pytest.approx(first.cpu_core_hours + second.cpu_core_hours)


def test_pod_that_never_started_is_not_charged() -> None:
    pod = PodSnapshot("u", "ns", "p", {GPU: 8}, start=None)
    assert charges([pod]) == []


def test_pod_spanning_the_period_is_clipped_to_it() -> None:
    pod = PodSnapshot(
        "u", "ns", "p", {GPU: 2, "cpu": 4, "memory": 8 * GIB}, T0 - timedelta(hours=5)
    )
    used = usage(pod, T0, T0 + timedelta(hours=3))
    assert used.accelerator_hours == {GPU: 6.0}
    assert used.cpu_core_hours == 12.0
    assert used.memory_gib_hours == 24.0


def test_most_specific_rate_wins() -> None:
    h100 = PodSnapshot("u", "ns", "p", {GPU: 1}, T0, node_labels={"nvidia.com/gpu.product": "H100"})
    a100 = PodSnapshot("v", "ns", "p", {GPU: 1}, T0, node_labels={"nvidia.com/gpu.product": "A100"})
    hi = T0 + timedelta(hours=1)
    assert usage(h100, T0, hi, PRICES).cost == 4.0
    assert usage(a100, T0, hi, PRICES).cost == 2.0


def test_burn_rate_counts_only_pods_holding_resources_now() -> None:
    running = PodSnapshot("a", "ns", "p", {GPU: 4}, T0)
    finished = PodSnapshot("b", "ns", "p", {GPU: 8}, T0, T0 + timedelta(minutes=5), "Succeeded")
    pending = PodSnapshot("c", "ns", "p", {GPU: 8}, None)
    at = (T0 + timedelta(hours=1)).timestamp()
    assert burn_rate(charges([running, finished, pending]), at).accelerator_hours == {GPU: 4.0}
