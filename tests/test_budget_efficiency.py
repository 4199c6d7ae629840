"""A budget's efficiency through its reconciler: what the series say, against what the
pods held, across deletions, restarts and a Prometheus that stops answering."""

from datetime import timedelta
from typing import Any

import pytest

from fakeprometheus import FakeBusy
from test_budget_reconcile import NS, TB, Budgets, job_with_pod
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.testing.builders import BudgetBuilder, NamespaceBuilder
from world import T0, World, run

HOUR = 3600.0


def approx(value: float, tolerance: float = 1e-5) -> Any:  # status rounds to 6 places
    return pytest.approx(value, abs=tolerance)


class Measured(Budgets):
    def __init__(self, world: World, builder: BudgetBuilder, busy: FakeBusy) -> None:
        super().__init__(world, builder)
        self.busy = busy

    def evaluate(self, own: frozenset[str] = frozenset()) -> Any:
        body = self.world.read(*TB, None, self.name)
        members = self.index.budgets.get(self.name)
        w = self.world
        run(reconcile(body, members, w.cache, w.fake, self.memory, w.now, Sources(busy=self.busy)))
        w.sync()

    def efficiency(self) -> dict[str, Any]:
        self.memory.written_at = None  # the figures now, not as last written
        self.evaluate()
        return dict(self.status()["efficiency"])


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def run_for(budget: Measured, seconds: int, every: int = 300) -> None:
    for _ in range(seconds // every):
        budget.world.advance(every)
        budget.evaluate()


def test_two_of_eight_busy_gpus_are_a_quarter_effective(world: World) -> None:
    busy = FakeBusy()
    busy.pods[(NS, "train-0")] = (2.0, 8)
    job_with_pod(world, "train", 8, 0, team="vision")
    budget = Measured(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100), busy)
    budget.evaluate()
    run_for(budget, 3600)
    e = budget.efficiency()
    measured = 3540 / HOUR  # up to one resolution before now
    assert e["total"]["heldAcceleratorHours"] == approx(8.0)
    assert e["total"]["usedAcceleratorHours"] == approx(2 * measured)
    assert e["total"]["idleAcceleratorHours"] == approx(6 * measured)
    assert e["total"]["unknownAcceleratorHours"] == approx(8 * 60 / HOUR)
    assert e["total"]["effectivePercent"] == approx(24.58, 0.01)
    vision = e["breakdown"]["byLabel"]["team"][0]
    assert vision["key"] == "vision"
    assert vision["usedAcceleratorHours"] == approx(2 * measured)
    assert all(step == timedelta(minutes=1) for *_, step in busy.queries)


def test_a_gap_in_the_series_is_unknown_never_idle(world: World) -> None:
    busy = FakeBusy()
    busy.pods[(NS, "train-0")] = (0.0, 4)
    job_with_pod(world, "train", 4, 0)
    budget = Measured(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100), busy)
    budget.evaluate()
    run_for(budget, 1800)
    busy.down = True
    run_for(budget, 1800)
    e = budget.efficiency()
    assert e["total"]["idleAcceleratorHours"] == approx(4 * 1740 / HOUR)
    assert e["total"]["unknownAcceleratorHours"] == approx(4 * 1860 / HOUR)
    assert e["total"]["usedAcceleratorHours"] == 0
    assert "unreachable" in e["message"]
    busy.down = False  # back: the missed hour is measured from the watermark
    world.advance(60)
    e = budget.efficiency()
    assert e["total"]["unknownAcceleratorHours"] == approx(4 * 60 / HOUR)
    assert "message" not in e


def test_a_deleted_pod_is_measured_to_its_end_and_kept_across_a_restart(world: World) -> None:
    busy = FakeBusy()
    busy.pods[(NS, "a-0")] = (1.0, 1)
    busy.pods[(NS, "b-0")] = (0.0, 1)
    job_with_pod(world, "a", 1, 0)
    job_with_pod(world, "b", 1, 0)
    budget = Measured(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100), busy)
    budget.evaluate()
    run_for(budget, 3600)
    world.fake.drop("v1", "Pod", NS, "a-0")  # deleted at 1 h
    world.sync()
    budget.evaluate()
    run_for(budget, 600, every=60)  # its tail is measured once the series are in
    assert budget.memory.efficiency.leaving == []
    before = budget.efficiency()
    assert before["total"]["usedAcceleratorHours"] == approx(1.0)
    assert before["total"]["idleAcceleratorHours"] == approx(1 + (600 - 60) / HOUR)
    asked = len(busy.queries)
    budget.restart()  # the live pod is measured again from its start, a-0 read from status
    budget.evaluate()
    after = budget.efficiency()
    assert after["total"] == before["total"]
    _, start, _, step = busy.queries[asked]
    assert start == T0 + step  # from the first step of b-0's run


def test_without_prometheus_everything_held_is_unknown(world: World) -> None:
    job_with_pod(world, "train", 2, 1800)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100))
    budget.evaluate()
    e = budget.status()["efficiency"]
    assert e["total"]["unknownAcceleratorHours"] == approx(1.0)
    assert e["total"]["usedAcceleratorHours"] == 0
    assert "--prometheus-url" in e["message"]
