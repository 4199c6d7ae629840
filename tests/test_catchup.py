"""Pods that came and went while the operator was down, charged from their accelerator
series after the restart (issue 17: `make faults`, operator down): from the ledger's
observedAt to their last sample, never twice, never outside the budget's scope, and
marked as estimates."""

from datetime import datetime, timedelta

import pytest

from test_budget_reconcile import TB, Budgets
from trainwarden.adapters.prometheus import MetricsUnavailable, parse_seen
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.core.accounting import PriceTable
from trainwarden.core.catchup import Seen, charges
from trainwarden.testing.builders import BudgetBuilder, NamespaceBuilder, PodBuilder
from world import World, run

NS = "team-a"
GPU = "nvidia.com/gpu"


def test_only_pods_nobody_accounts_for_are_charged_from_the_ledgers_moment() -> None:
    seen = [
        Seen(NS, "vanished", first=100, last=900, accelerators=2),
        Seen(NS, "still-here", first=100, last=900, accelerators=8),
        Seen("elsewhere", "x", first=100, last=900, accelerators=1),
        Seen(NS, "before", first=100, last=400, accelerators=1),
        Seen(NS, "unseen", first=600, last=700, accelerators=1),
    ]
    found = charges(
        seen,
        known={(NS, "still-here")},
        since=500,
        covers=lambda n: n == NS,
        resource=GPU,
        node_labels=lambda _: {},
        prices=PriceTable(),
        label_keys=["team"],
    )
    spans = {c.uid: (c.start, c.end, c.rate.accelerator_total) for c in found}
    assert spans == {f"seen:{NS}/vanished": (500, 900, 2), f"seen:{NS}/unseen": (600, 700, 1)}
    assert all(c.labels == ("",) for c in found)


def test_series_are_grouped_per_pod_with_their_first_and_last_sample() -> None:
    def series(pod: str, gpu: str, times: list[float]) -> dict[str, object]:
        metric = {"namespace": NS, "pod": pod, "gpu": gpu, "Hostname": "node-1"}
        return {"metric": metric, "values": [[t, "0"] for t in times]}

    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                series("a", "0", [10, 15, 20]),
                series("a", "1", [5, 15]),
                series("b", "0", [30]),
            ],
        },
    }
    found = {s.pod: s for s in parse_seen(body)}
    assert found["a"] == Seen(NS, "a", 5, 20, 2, "node-1")
    assert found["b"] == Seen(NS, "b", 30, 30, 1, "node-1")
    with pytest.raises(MetricsUnavailable):
        parse_seen({"status": "error", "error": "bad"})


class FakeSeries:
    def __init__(self, seen: list[Seen], *, down: bool = False) -> None:
        self.seen_pods, self.down = seen, down
        self.asked: list[tuple[list[str], datetime, datetime]] = []

    async def seen(self, namespaces: list[str], start: datetime, end: datetime) -> list[Seen]:
        self.asked.append((list(namespaces), start, end))
        if self.down:
            raise MetricsUnavailable("prometheus: connection refused")
        return self.seen_pods


def _restart_after_outage(
    world: World, series: FakeSeries, builder: BudgetBuilder | None = None
) -> tuple[Budgets, datetime]:
    """A budget charging one 2-GPU pod writes status at T0; the operator dies; the pod is
    deleted; ten minutes later the operator is back and evaluates the budget."""
    world.put(NamespaceBuilder(NS).build())
    pod = PodBuilder("vanished", NS).gpus(2).labels({"team": "a"})
    world.put(pod.started(world.now - timedelta(seconds=600)).build())
    budget = Budgets(world, builder or BudgetBuilder("b").namespaces(NS).accelerator_hours(100))
    budget.evaluate()
    observed = world.now
    world.fake.drop("v1", "Pod", NS, "vanished")
    world.sync()
    budget.restart()
    world.advance(600)
    body = world.read(*TB, None, "b")
    members = budget.index.budgets["b"]
    run(
        reconcile(body, members, world.cache, world.fake, budget.memory, world.now, Sources(series))
    )
    return budget, observed


def _seconds(budget: Budgets) -> tuple[float, float]:
    status = budget.status()
    used = status["used"]["acceleratorHours"] * 3600
    return used, status["ledger"]["estimated"]["acceleratorHours"] * 3600


def test_a_restart_charges_vanished_and_unseen_pods_up_to_their_last_sample() -> None:
    world = World()
    t0 = world.now
    series = FakeSeries(
        [
            Seen(
                NS,
                "vanished",
                (t0 - timedelta(seconds=600)).timestamp(),
                (t0 + timedelta(seconds=300)).timestamp(),
                2,
            ),
            Seen(
                NS,
                "unseen",
                (t0 + timedelta(seconds=100)).timestamp(),
                (t0 + timedelta(seconds=200)).timestamp(),
                1,
            ),
        ]
    )
    budget, observed = _restart_after_outage(world, series)
    assert series.asked == [([NS], observed, world.now)]
    used, estimated = _seconds(budget)
    # vanished: 600 s x 2 up to the last status write (the ledger) + 300 s x 2 after it
    # (its series); unseen: 100 s x 1. All of it is an estimate.
    assert used == pytest.approx(1200 + 600 + 100, abs=0.05)
    assert estimated == pytest.approx(used, abs=0.05)


def test_without_the_series_the_ledger_estimate_stands() -> None:
    world = World()
    budget, _ = _restart_after_outage(world, FakeSeries([], down=True))
    used, estimated = _seconds(budget)
    assert used == pytest.approx(1200, abs=0.05), "charged up to the last status write"
    assert estimated == pytest.approx(1200, abs=0.05)


def test_a_scope_with_a_pod_selector_is_not_caught_up() -> None:
    """Series carry no pod labels: whether a pod was in such a scope cannot be told, so
    the ledger's estimate stands."""
    world = World()
    series = FakeSeries([Seen(NS, "unseen", world.now.timestamp(), world.now.timestamp() + 60, 1)])
    builder = BudgetBuilder("b").namespaces(NS).selector({"team": "a"}).accelerator_hours(100)
    budget, _ = _restart_after_outage(world, series, builder)
    assert series.asked == []
    assert _seconds(budget)[0] == pytest.approx(1200, abs=0.05)


def test_a_pod_seen_to_go_since_the_restart_is_not_charged_again() -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    world.put(PodBuilder("late", NS).gpus(1).started(world.now - timedelta(seconds=100)).build())
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100))
    budget.evaluate()
    start = world.now.timestamp() - 100
    budget.restart()
    world.advance(50)
    world.fake.drop("v1", "Pod", NS, "late")  # after the restart: the new process sees it go
    world.sync()
    world.advance(10)
    series = FakeSeries([Seen(NS, "late", start, world.now.timestamp() - 10, 1)])
    body = world.read(*TB, None, "b")
    members = budget.index.budgets["b"]
    run(
        reconcile(body, members, world.cache, world.fake, budget.memory, world.now, Sources(series))
    )
    used, _ = _seconds(budget)
    assert used == pytest.approx(150, abs=0.05), "charged once, up to when it was seen gone"
