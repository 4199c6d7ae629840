"""Restarts neither lose nor double count: replaying observations with a crash in between
gives the same usage as observing without one."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.core.accounting import PodSnapshot, account
from trainwarden.core.ledger import Ledger, advance, charged

T0 = datetime(2026, 7, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def at(s: int) -> datetime:
    return T0 + timedelta(seconds=s)


@st.composite
def lifetimes(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """(start, end, gpus) per pod, whole seconds within [0, 300)."""
    pods = []
    for _ in range(draw(st.integers(1, 6))):
        start = draw(st.integers(0, 250))
        pods.append((start, draw(st.integers(start + 1, 300)), draw(st.integers(1, 8))))
    return pods


def world(pods: list[tuple[int, int, int]], t: int) -> dict[str, PodSnapshot]:
    """The pods that exist at second t: started and not yet deleted (deleted at their end)."""
    return {
        f"p{i}": PodSnapshot(f"p{i}", "ns", f"p{i}", {GPU: gpus}, at(start))
        for i, (start, end, gpus) in enumerate(pods)
        if start <= t < end
    }


def run(pods: list[tuple[int, int, int]], ticks: list[int], down: range | None) -> float:
    """Observe at each tick (skipping those while down), then account at the last one."""
    ledger = Ledger()
    last_live: dict[str, PodSnapshot] = {}
    for t in ticks:
        if down is not None and t in down:
            last_live = {}  # the process died: its memory of deletions is gone
            continue
        live = world(pods, t)
        gone = {
            uid: PodSnapshot(
                p.uid, p.namespace, p.name, p.requests, p.start, at(pods[int(uid[1:])][1])
            )
            for uid, p in last_live.items()
            if uid not in live
        }
        ledger = advance(ledger, live, gone, now=at(t), window_start=T0)
        last_live = live
    live = world(pods, ticks[-1])
    usage = account(charged(ledger, live), T0, at(ticks[-1]), accelerators=[GPU])
    return usage.total.accelerator_hours.get(GPU, 0.0) * 3600


@settings(max_examples=100, deadline=None)
@given(lifetimes(), st.integers(1, 200), st.integers(1, 60))
def test_crash_loses_at_most_the_unobserved_tail(
    pods: list[tuple[int, int, int]], crash_at: int, downtime: int
) -> None:
    ticks = list(range(0, 301))
    exact = sum(min(end, 300) * g - start * g for start, end, g in pods)
    steady = run(pods, ticks, None)
    assert steady == pytest.approx(exact, abs=1e-6), "observing every second is exact"

    crashed = run(pods, ticks, range(crash_at, crash_at + downtime))
    # Pods deleted while the operator was down are charged up to the last observation:
    # the loss is bounded by the downtime per such pod, and nothing is ever double counted.
    # Pods deleted between the last observation before the crash and the first one after
    # it are charged up to that last observation: the loss is bounded by the unobserved
    # tail of each such pod, and nothing is ever double counted.
    last_seen, back = crash_at - 1, crash_at + downtime
    bound = sum(g * (e - max(s, last_seen)) for s, e, g in pods if last_seen < e <= back)
    assert crashed <= exact + 1e-6
    assert exact - crashed <= bound + 1e-6


def test_pod_known_gone_is_charged_to_its_real_end() -> None:
    pod = PodSnapshot("u", "ns", "p", {GPU: 2}, at(0))
    ledger = advance(Ledger(), {"u": pod}, {}, now=at(10), window_start=T0)
    final = PodSnapshot("u", "ns", "p", {GPU: 2}, at(0), at(15))
    ledger = advance(ledger, {}, {"u": final}, now=at(20), window_start=T0)
    assert ledger.open == {}
    assert ledger.closed["u"].end == at(15)


def test_vanished_unseen_pod_is_charged_to_last_observation() -> None:
    pod = PodSnapshot("u", "ns", "p", {GPU: 2}, at(0))
    ledger = advance(Ledger(), {"u": pod}, {}, now=at(10), window_start=T0)
    ledger = advance(ledger, {}, {}, now=at(100), window_start=T0)
    assert ledger.closed["u"].end == at(10)


def test_closed_entries_leave_with_the_window() -> None:
    final = PodSnapshot("u", "ns", "p", {GPU: 2}, at(0), at(15))
    ledger = advance(Ledger(), {}, {"u": final}, now=at(20), window_start=T0)
    assert "u" in ledger.closed
    assert advance(ledger, {}, {}, now=at(30), window_start=at(16)).closed == {}
