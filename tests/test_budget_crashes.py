"""A budget's operator killed between its decision and its writes (the faults suite's
failpoints, `make faults`), replayed against the fake API server: the restarted process
finishes the action once, and its record names each workload once."""

import pytest

from test_budget_reconcile import TB, Budgets, job_with_pod
from trainwarden.testing.builders import BudgetBuilder, NamespaceBuilder
from world import World

NS = "team-a"


class Killed(Exception):
    """The process died here (nothing in the reconciler catches it)."""


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def exhausted() -> BudgetBuilder:
    return BudgetBuilder("b").namespaces(NS).accelerator_hours(1).enforce().grace("0s")


def test_killed_between_the_record_and_the_suspension_suspends_once_with_one_record(
    world: World,
) -> None:
    """Found while building `make faults` (a SIGKILL after the record was written):
    the restarted operator suspended the Job and appended a second record of it, so it
    held two places of MAX_SUSPENDED and counted twice against the per-minute cap."""
    job_with_pod(world, "train", 4, 3600)
    budget = Budgets(world, exhausted())
    world.fake.fail_next("patch", "Job", Killed("SIGKILL"), name="train")
    with pytest.raises(Killed):
        budget.evaluate()
    world.sync()
    assert [s["ref"]["name"] for s in budget.status()["suspended"]] == ["train"]
    assert world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend") is not True

    budget.restart()
    world.advance(2)
    budget.evaluate()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
    patches = world.fake.writes_to("Job", "train", "patch")
    assert [w.outcome for w in patches if w.outcome == "changed"] == ["changed"], "once"
    assert [s["ref"]["name"] for s in budget.status()["suspended"]] == ["train"], "one record"


def test_killed_between_the_resume_and_its_status_leaves_no_stale_record(world: World) -> None:
    """A budget resumed its Job and died before writing the status that drops the record.
    The restarted operator's cache was listed after the resume, so it cannot be lagging
    behind a suspension of ours: the record is dropped at once, not kept for a minute as
    if it were this process's own suspension in flight (status said "suspended" of a Job
    that ran), and nothing is resumed twice."""
    job_with_pod(world, "train", 4, 3600)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
    raised = exhausted().accelerator_hours(1000).build()
    world.fake.edit(*TB, None, "b", {"spec": raised["spec"]})
    budget.body = world.read(*TB, None, "b")
    world.advance(5)
    world.fake.fail_next("patch", "TrainingBudget", Killed("SIGKILL"), subresource="status")
    with pytest.raises(Killed):
        budget.evaluate()
    world.sync()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is False
    assert [s["ref"]["name"] for s in budget.status()["suspended"]] == ["train"]

    budget.restart()
    world.advance(2)
    budget.evaluate()
    assert budget.status().get("suspended", []) == [], "dropped at the first evaluation"
    resumes = [w for w in world.fake.writes_to("Job", "train", "patch") if w.outcome == "changed"]
    assert len(resumes) == 2, "one suspension, one resume"
