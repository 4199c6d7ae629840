"""Enforcement through Kueue: an exhausted budget deactivates the Kueue Workload of a
Kueue-managed Job (never its suspend field, which Kueue owns), marks both, and
reactivates only what it deactivated once it has room; a Workload deactivated by anyone
else stays as it is; a Job Kueue does not act on is suspended like any other."""

from datetime import timedelta

import pytest

from test_budget_reconcile import TB, Budgets
from trainwarden.adapters.kube import Conflict
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import SUSPENDED_BY
from trainwarden.budget import enforcement
from trainwarden.testing.builders import (
    BudgetBuilder,
    JobBuilder,
    NamespaceBuilder,
    PodBuilder,
    WorkloadBuilder,
)
from world import JSON, World

NS = "team-a"
KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def exhausted(limit: float = 1) -> BudgetBuilder:
    return BudgetBuilder("b").namespaces(NS).accelerator_hours(limit).enforce().grace("0s")


def kueue_job(world: World, name: str, *, workload: bool = True, active: bool = True) -> JSON:
    """A Job Kueue admitted, its pod running 8 GPUs for an hour, and its Workload."""
    job = world.put(JobBuilder(name, NS).gpus(8).queue("lq").build())
    started = world.now - timedelta(hours=1)
    world.put(PodBuilder(f"{name}-0", NS).gpus(8).owned_by(job).started(started).build())
    if workload:
        wl = WorkloadBuilder(f"job-{name}", NS).for_job(job).admitted("cq", started)
        world.put(wl.active(active).build())
    return job


def read_job(world: World, name: str) -> JSON:
    return world.read("batch/v1", "Job", NS, name)


def read_workload(world: World, name: str) -> JSON:
    return world.read(KUEUE, "Workload", NS, f"job-{name}")


def kueue_suspends(world: World, name: str) -> None:
    """What Kueue does to the Job of a deactivated Workload: suspends it (pods go)."""
    world.fake.edit("batch/v1", "Job", NS, name, {"spec": {"suspend": True}})
    world.fake.drop("v1", "Pod", NS, f"{name}-0")
    world.sync()


def raise_limit(world: World, budget: Budgets) -> None:
    raised = exhausted(1000).build()
    budget.body = world.fake.edit(*TB, None, "b", {"spec": raised["spec"]})
    budget.index.set_budget("b", TrainingBudgetSpec.model_validate(raised["spec"]))


def test_an_exhausted_budget_deactivates_the_workload_and_reactivates_it(world: World) -> None:
    kueue_job(world, "train")
    budget = Budgets(world, exhausted())
    budget.evaluate()
    workload, job = read_workload(world, "train"), read_job(world, "train")
    assert workload["spec"]["active"] is False
    assert workload["metadata"]["labels"][SUSPENDED_BY] == "b"
    assert "exhausted" in workload["metadata"]["annotations"]["trainwarden.dev/suspend-reason"]
    assert job["metadata"]["labels"][SUSPENDED_BY] == "b"
    assert not job["spec"].get("suspend"), "Kueue owns spec.suspend: never flipped"
    assert "DeactivatedByBudget" in world.fake.reasons("Workload", "job-train")
    assert "SuspendedByBudget" in world.fake.reasons("Job", "train")
    assert [s["ref"]["name"] for s in budget.status()["suspended"]] == ["train"]
    patched = [(w.kind, w.verb) for w in world.fake.writes if w.kind in ("Job", "Workload")]
    assert patched == [("Job", "patch"), ("Workload", "patch")], "the job marked first"
    assert all(w.body["metadata"]["resourceVersion"] for w in world.fake.writes_to("Workload"))

    kueue_suspends(world, "train")
    world.advance(60)
    budget.evaluate()
    assert read_workload(world, "train")["spec"]["active"] is False, "still exhausted"

    raise_limit(world, budget)
    budget.evaluate()
    workload, job = read_workload(world, "train"), read_job(world, "train")
    assert workload["spec"]["active"] is True
    assert SUSPENDED_BY not in workload["metadata"].get("labels", {})
    assert SUSPENDED_BY not in job["metadata"].get("labels", {})
    assert job["spec"]["suspend"] is True, "Kueue unsuspends it once admitted again"
    assert "ResumedByBudget" in world.fake.reasons("Job", "train")
    assert budget.status().get("suspended", []) == []


def test_a_workload_deactivated_by_someone_else_is_never_reactivated(world: World) -> None:
    kueue_job(world, "train")
    budget = Budgets(world, exhausted())
    budget.evaluate()
    kueue_suspends(world, "train")
    # An admin takes over: drops our mark, keeps the Workload deactivated.
    world.fake.edit(
        KUEUE, "Workload", NS, "job-train", {"metadata": {"labels": {SUSPENDED_BY: None}}}
    )
    world.sync()
    raise_limit(world, budget)
    budget.evaluate()
    assert read_workload(world, "train")["spec"]["active"] is False
    assert budget.status().get("suspended", []) == [], "no longer ours to resume"
    assert any("deactivated by someone else" in p for p in budget.status()["pendingActions"])


def test_a_queue_label_without_kueue_acting_on_it_does_not_shield_a_job(world: World) -> None:
    """The label alone proves nothing: Kueue may not manage the namespace, or not be
    installed. A labelled Job with no Workload once Kueue had SETTLE to make one, and one
    whose Workload is inactive yet still runs SETTLE later, are suspended themselves."""
    kueue_job(world, "orphan", workload=False)
    kueue_job(world, "inactive", active=False)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    assert not world.fake.writes_to("Job", verb="patch")
    assert not world.fake.writes_to("Workload", verb="patch")
    pending = budget.status()["pendingActions"]
    assert (
        f"skipped Pod/{NS}/orphan-0: labelled for Kueue, which has no Workload of it yet" in pending
    )
    assert any(
        p.startswith(f"skipped Pod/{NS}/inactive-0: its Kueue Workload is inactive")
        for p in pending
    )
    world.advance(enforcement.SETTLE.total_seconds())
    budget.evaluate()
    assert read_job(world, "orphan")["spec"]["suspend"] is True
    assert read_job(world, "inactive")["spec"]["suspend"] is True
    assert not world.fake.writes_to("Workload", verb="patch"), "Kueue's object is left alone"
    assert sorted(s["ref"]["name"] for s in budget.status()["suspended"]) == ["inactive", "orphan"]


def test_a_job_suspended_without_kueue_is_resumed_without_it(world: World) -> None:
    kueue_job(world, "orphan", workload=False)
    budget = Budgets(world, exhausted())
    world.advance(enforcement.SETTLE.total_seconds())
    budget.evaluate()
    assert read_job(world, "orphan")["spec"]["suspend"] is True
    world.fake.drop("v1", "Pod", NS, "orphan-0")
    world.sync()
    raised = exhausted(limit=1000).build()["spec"]
    world.fake.edit(*TB, None, "b", {"spec": raised})
    budget.index.set_budget("b", TrainingBudgetSpec.model_validate(raised))
    budget.evaluate()
    assert read_job(world, "orphan")["spec"]["suspend"] is False
    assert SUSPENDED_BY not in read_job(world, "orphan")["metadata"]["labels"]


def test_dry_run_only_says_what_it_would_deactivate(world: World) -> None:
    kueue_job(world, "train")
    budget = Budgets(world, exhausted().dry_run())
    budget.evaluate()
    assert read_workload(world, "train")["spec"]["active"] is True
    assert not world.fake.writes_to("Job", verb="patch")
    assert any("would suspend Job/team-a/train" in p for p in budget.status()["pendingActions"])


def test_a_workload_changed_meanwhile_is_not_deactivated_and_the_job_unmarked(
    world: World,
) -> None:
    kueue_job(world, "train")
    budget = Budgets(world, exhausted())
    world.fake.fail_next("patch", "Workload", Conflict("changed"))
    budget.evaluate()
    assert read_workload(world, "train")["spec"]["active"] is True
    assert SUSPENDED_BY not in read_job(world, "train")["metadata"].get("labels", {})
    assert budget.status().get("suspended", []) == []
    budget.evaluate()  # the next evaluation tries again
    assert read_workload(world, "train")["spec"]["active"] is False
