"""A budget evaluated by an operator whose clock disagrees with the API server's (issue
17, item 7), against the fake API server: the operator reckons in the server's time
(clock.ServerClock, measured from the Date of its answers), so a clock five minutes
ahead suspends nothing early and one behind still charges the newest pods; and while the
server's time is unknown, nothing is suspended, and status says why."""

from datetime import timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from test_budget_reconcile import NS, Budgets, job_with_pod
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.clock import ServerClock
from trainwarden.controllers.status import LastWrite, write_status_when_due
from trainwarden.testing.builders import BudgetBuilder, NamespaceBuilder
from world import World, run

SKEW = 300.0


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def operator_clock(world: World, skew: float) -> ServerClock:
    """This process's clock `skew` seconds off the world's (the server's)."""
    return ServerClock(local=lambda: world.now + timedelta(seconds=skew))


def answer(world: World, clock: ServerClock) -> None:
    """One API answer, 20 ms long, stamped with the server's time."""
    received = clock.local_seconds()
    clock.observe(received - 0.02, received, format_datetime(world.now, usegmt=True))


def evaluate(budget: Budgets, clock: ServerClock) -> Any:
    body = budget.world.read("trainwarden.dev/v1alpha1", "TrainingBudget", None, budget.name)
    members = budget.index.budgets.get(budget.name)
    now, doubt = clock.now(), clock.doubt()
    world = budget.world
    due = run(
        reconcile(body, members, world.cache, world.fake, budget.memory, now, Sources(doubt=doubt))
    )
    world.sync()
    return due


def near_the_limit(world: World) -> Budgets:
    """One GPU for 57 minutes of a 1 accelerator-hour budget: 95 %, 3 minutes left."""
    job_with_pod(world, "train", 1, 57 * 60)
    return Budgets(
        world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1).enforce().grace("0s")
    )


def used(budget: Budgets) -> float:
    return float(budget.status()["used"]["acceleratorHours"])


def test_a_clock_five_minutes_ahead_suspends_nothing_early(world: World) -> None:
    budget = near_the_limit(world)
    clock = operator_clock(world, +SKEW)
    answer(world, clock)
    evaluate(budget, clock)
    assert world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend") is not True
    assert used(budget) == pytest.approx(0.95, abs=1 / 3600), "the truth, not 62 minutes"
    world.advance(4 * 60)  # now truly spent: suspended, on time
    answer(world, clock)
    evaluate(budget, clock)
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True


def test_a_clock_five_minutes_behind_charges_the_newest_pods(world: World) -> None:
    job_with_pod(world, "fresh", 2, 120)  # started 2 minutes ago, by the server's clock
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(10).enforce())
    clock = operator_clock(world, -SKEW)
    answer(world, clock)
    evaluate(budget, clock)
    assert used(budget) == pytest.approx(2 * 120 / 3600, abs=2 / 3600), "not 0, not negative"


def test_the_uncorrected_clock_would_have_suspended(world: World) -> None:
    """What the two tests above guard against: reckoning in the skewed local time."""
    budget = near_the_limit(world)
    budget.world.now = world.now  # the server's time is unchanged
    skewed = world.now + timedelta(seconds=SKEW)
    run(reconcile(world.read(*_TB, None, "b"), budget.index.budgets.get("b"), world.cache,
                  world.fake, budget.memory, skewed))  # fmt: skip
    world.sync()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True


_TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")


def test_with_the_servers_time_unknown_nothing_is_suspended_and_status_says_why(
    world: World,
) -> None:
    job_with_pod(world, "train", 1, 2 * 3600)  # truly spent
    budget = Budgets(
        world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1).enforce().grace("0s")
    )
    clock = operator_clock(world, +SKEW)  # no answer yet
    due = evaluate(budget, clock)
    assert world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend") is not True
    assert any("clock is uncertain" in line for line in budget.status()["pendingActions"])
    assert due <= clock.now() + timedelta(seconds=10), "asks again soon"
    answer(world, clock)  # the server's time is known again: the action is taken
    evaluate(budget, clock)
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True


def test_a_server_clock_stepped_back_still_records_before_it_suspends(world: World) -> None:
    """Reproduced by a review: the API server's clock stepped back behind the budget's
    last status write, and `_record` skipped even the forced write that must precede a
    suspension (the time since that write was negative): the Job was suspended with
    `status.suspended: []`, so nothing resumed it in the new period."""
    job_with_pod(world, "train", 1, 50 * 60)
    daily = BudgetBuilder("b").namespaces(NS).period("Daily").enforce().grace("0s")
    budget = Budgets(world, daily.accelerator_hours(10))
    local = [world.now]
    clock = ServerClock(local=lambda: local[0])
    answer(world, clock)
    evaluate(budget, clock)  # status written at 12:00, by the server's clock
    world.now -= timedelta(minutes=10)  # the server's clock steps back; ours goes on
    local[0] += timedelta(seconds=1)
    answer(world, clock)
    assert clock.doubt() is None, "the newest answers win: the server's time is known"
    assert abs((clock.now() - world.now).total_seconds()) < 1
    lowered = daily.accelerator_hours(0.5).build()["spec"]
    world.fake.edit(*_TB, None, "b", {"spec": lowered})
    budget.index.set_budget("b", TrainingBudgetSpec.model_validate(lowered))
    evaluate(budget, clock)
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
    assert [s["ref"]["name"] for s in budget.status().get("suspended", [])] == ["train"]

    world.fake.drop("v1", "Pod", NS, "train-0")  # gone with its suspension
    world.sync()
    world.now = (world.now + timedelta(days=1)).replace(hour=0, minute=1)
    local[0] = world.now
    answer(world, clock)
    evaluate(budget, clock)
    assert not world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"], "resumed"


def test_a_status_throttle_measured_from_a_later_write_holds_nothing_back(world: World) -> None:
    """The same pattern in the status writes of the other kinds (controllers/status.py):
    a write "in the future" must not hold the next ones back until the clock reaches it."""
    body = world.put(BudgetBuilder("b").namespaces(NS).accelerator_hours(1).build())
    last = LastWrite()
    stamp = world.now.isoformat()
    body = run(write_status_when_due(world.fake, "TrainingBudget", body, last,
                                     {"lastEvaluated": stamp}, world.now))  # fmt: skip
    world.now -= timedelta(minutes=10)
    earlier = world.now.isoformat()
    run(write_status_when_due(world.fake, "TrainingBudget", body, last,
                              {"lastEvaluated": earlier}, world.now))  # fmt: skip
    assert world.read(*_TB, None, "b")["status"]["lastEvaluated"] == earlier
