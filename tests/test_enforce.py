"""What an exhausted budget does to the workloads it charges, against the fake API server:
bare pods are evicted (and count against the per-minute cap), workloads changed, replaced
or suspended by someone else between the cache's view and the action are left alone and
dropped from the record, a refusal is deferred without stopping the others, and a resume
that conflicts is retried."""

from datetime import timedelta
from typing import Any

import pytest

from fakekube import FakeKube
from test_budget_reconcile import TB, Budgets, job_with_pod
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.budget import enforcement
from trainwarden.budget.targets import SETTLE
from trainwarden.testing.builders import (
    BudgetBuilder,
    JobBuilder,
    JobSetBuilder,
    NamespaceBuilder,
    PodBuilder,
)
from world import JSON, World

NS = "team-a"


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def exhausted(**options: int) -> BudgetBuilder:
    """A budget already over its limit with any running GPU pod of an hour, acting at once."""
    builder = BudgetBuilder("b").namespaces(NS).accelerator_hours(1).enforce().grace("0s")
    return builder.max_suspensions_per_minute(options.get("per_minute", 10))


def bare_pod(world: World, name: str, gpus: int = 4) -> JSON:
    started = world.now - timedelta(hours=1)
    return world.put(PodBuilder(name, NS).gpus(gpus).started(started).build())


def suspended_names(budget: Budgets) -> list[str]:
    return [s["ref"]["name"] for s in budget.status().get("suspended", [])]


def job(world: World, name: str) -> JSON:
    return world.read("batch/v1", "Job", NS, name)


def pending(budget: Budgets) -> list[str]:
    return list(budget.status().get("pendingActions", []))


def test_a_bare_pod_is_evicted_and_leaves_no_record(world: World) -> None:
    pod = bare_pod(world, "notebook")
    budget = Budgets(world, exhausted())
    budget.evaluate()
    [evict] = world.fake.writes_to("Pod", "notebook", "evict")
    assert evict.body["preconditions"]["uid"] == pod["metadata"]["uid"]
    assert world.fake.read("v1", "Pod", NS, "notebook") is None
    assert "SuspendedByBudget" in world.fake.reasons("Pod", "notebook")
    assert "Suspended" in world.fake.reasons("TrainingBudget", "b")
    assert suspended_names(budget) == [], "an eviction cannot be resumed: nothing to record"


def test_evictions_count_against_the_per_minute_cap(world: World) -> None:
    """Bare pods leave no record in status, so the budget remembers its evictions: with a
    cap of one a minute, the retry ten seconds later must not evict the next pod."""
    for name in ("a", "b", "c"):
        bare_pod(world, name)
    budget = Budgets(world, exhausted(per_minute=1))
    budget.evaluate()
    assert len(world.fake.writes_to("Pod", verb="evict")) == 1
    assert any(line.startswith("deferred Pod/") for line in pending(budget))
    world.advance(10)
    budget.evaluate()
    assert len(world.fake.writes_to("Pod", verb="evict")) == 1, "over 1/minute"
    world.advance(60)
    budget.evaluate()
    assert len(world.fake.writes_to("Pod", verb="evict")) == 2, "a minute later: the next"


def test_pods_that_are_not_running_are_left_alone(world: World) -> None:
    hour_ago = world.now - timedelta(hours=1)
    world.put(PodBuilder("leaving", NS).gpus(4).started(hour_ago).deleting(world.now).build())
    world.put(PodBuilder("done", NS).gpus(4).started(hour_ago).finished(world.now).build())
    world.put(PodBuilder("running", NS).gpus(4).started(hour_ago).build())
    budget = Budgets(world, exhausted())
    world.fake.drop("v1", "Pod", NS, "running")  # gone after charging the budget
    world.sync()
    budget.evaluate()
    conditions = {c["type"]: c["status"] for c in budget.status()["conditions"]}
    assert conditions["Exhausted"] == "True"
    assert [w for w in world.fake.writes if w.kind == "Pod"] == []
    assert "Suspended" not in world.fake.reasons("TrainingBudget", "b")


def test_a_pod_whose_owner_is_not_seen_waits_then_is_evicted(world: World) -> None:
    """A Job the cache has not listed yet may just have been created: its pod waits
    SETTLE from its start; a reference to a Job that never appears (dangling, or written by
    the pod's creator) does not keep the pod out of reach."""
    stranger = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", "uid": "u-x"}}
    pod = (
        PodBuilder("orphan", NS).gpus(4).owned_by(stranger).started(world.now - timedelta(hours=1))
    )
    world.put(PodBuilder("young", NS).gpus(4).owned_by(stranger).started(world.now).build())
    world.put(pod.build())
    budget = Budgets(world, exhausted())
    due = budget.evaluate()
    assert [w.name for w in world.fake.writes_to("Pod", verb="evict")] == ["orphan"]
    assert any(
        line.startswith("skipped Pod/team-a/young: its owner Job x is not in the operator")
        for line in pending(budget)
    )
    assert due <= world.now + enforcement.SETTLE
    world.advance(enforcement.SETTLE.total_seconds())
    budget.evaluate()
    assert sorted(w.name for w in world.fake.writes_to("Pod", verb="evict")) == ["orphan", "young"]


def test_a_job_changed_under_the_suspension_is_deferred_and_the_others_suspended(
    world: World,
) -> None:
    job_with_pod(world, "first", 4, 3600)
    job_with_pod(world, "second", 4, 3600)
    budget = Budgets(world, exhausted())

    def user_edits(fake: FakeKube) -> None:
        fake.edit("batch/v1", "Job", NS, "first", {"metadata": {"labels": {"edited": "yes"}}})

    world.fake.on_next("patch", "Job", user_edits, name="first")
    budget.evaluate()
    assert not job(world, "first")["spec"].get("suspend")
    assert "trainwarden.dev/suspended-by" not in job(world, "first")["metadata"]["labels"]
    assert job(world, "second")["spec"]["suspend"] is True
    assert suspended_names(budget) == ["second"], "the failed suspension's record is dropped"
    assert any(line.startswith("deferred Job/team-a/first: ") for line in pending(budget))
    assert world.fake.reasons("Job", "first") == []
    world.advance(1)
    budget.evaluate()
    assert job(world, "first")["spec"]["suspend"] is True, "decided again, and done"
    assert sorted(suspended_names(budget)) == ["first", "second"]


def test_a_job_suspended_or_replaced_by_someone_else_is_not_claimed(world: World) -> None:
    """Between the cache's view and the action, one Job is suspended by its owner and
    another deleted and recreated under the same name: neither is marked or recorded."""
    job_with_pod(world, "paused", 4, 3600)
    job_with_pod(world, "replaced", 4, 3600)
    budget = Budgets(world, exhausted())

    def owner_suspends(fake: FakeKube) -> None:
        fake.edit("batch/v1", "Job", NS, "paused", {"spec": {"suspend": True}})

    def recreated(fake: FakeKube) -> None:
        fake.drop("batch/v1", "Job", NS, "replaced")
        fake.put(JobBuilder("replaced", NS).gpus(4).build())

    world.fake.on_next("get", "Job", owner_suspends, name="paused")
    world.fake.on_next("get", "Job", recreated, name="replaced")
    budget.evaluate()
    assert [w for w in world.fake.writes if w.kind == "Job"] == []
    assert "trainwarden.dev/suspended-by" not in job(world, "paused")["metadata"]["labels"]
    assert not job(world, "replaced")["spec"].get("suspend")
    assert suspended_names(budget) == []
    assert "Suspended" not in world.fake.reasons("TrainingBudget", "b")


def test_an_eviction_refused_by_a_disruption_budget_is_deferred(world: World) -> None:
    bare_pod(world, "guarded")
    bare_pod(world, "free")
    world.fake.block_eviction(NS, "guarded")
    budget = Budgets(world, exhausted())
    budget.evaluate()
    assert world.fake.read("v1", "Pod", NS, "guarded") is not None
    assert world.fake.read("v1", "Pod", NS, "free") is None, "the refusal stops nothing else"
    [line] = [line for line in pending(budget) if "guarded" in line]
    assert line.startswith("deferred Pod/team-a/guarded: ")
    assert "PodDisruptionBudget" in line


def raise_limit(world: World, budget: Budgets) -> None:
    raised = exhausted().accelerator_hours(1000).build()
    budget.body = world.fake.edit(*TB, None, "b", {"spec": raised["spec"]})
    budget.index.set_budget("b", TrainingBudgetSpec.model_validate(raised["spec"]))


def test_a_job_resumed_by_its_owner_is_dropped_from_the_record(world: World) -> None:
    job_with_pod(world, "train", 4, 3600)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    assert suspended_names(budget) == ["train"]
    raise_limit(world, budget)
    world.advance(5)

    def owner_resumes(fake: FakeKube) -> None:
        fake.edit("batch/v1", "Job", NS, "train", {"spec": {"suspend": False}})

    world.fake.on_next("get", "Job", owner_resumes, name="train")
    patches = len(world.fake.writes_to("Job", "train", "patch"))
    budget.evaluate()
    assert len(world.fake.writes_to("Job", "train", "patch")) == patches, "nothing left to do"
    assert "ResumedByBudget" not in world.fake.reasons("Job", "train")
    assert suspended_names(budget) == []


def test_a_conflicting_resume_keeps_the_record_and_is_retried(world: World) -> None:
    job_with_pod(world, "train", 4, 3600)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    raise_limit(world, budget)
    world.advance(5)

    def user_edits(fake: FakeKube) -> None:
        fake.edit("batch/v1", "Job", NS, "train", {"metadata": {"labels": {"edited": "yes"}}})

    world.fake.on_next("patch", "Job", user_edits, name="train")
    budget.evaluate()
    assert job(world, "train")["spec"]["suspend"] is True
    assert suspended_names(budget) == ["train"], "still ours to resume"
    world.advance(5)
    budget.evaluate()
    assert not job(world, "train")["spec"]["suspend"]
    assert world.fake.reasons("Job", "train")[-1] == "ResumedByBudget"
    assert suspended_names(budget) == []


def test_a_record_the_cache_does_not_confirm_is_kept_only_while_fresh(world: World) -> None:
    """A record of a Job that is not (or no longer) suspended by the budget is kept while
    the cache may lag behind, then dropped: the budget never resumes what it no longer
    holds."""
    job_with_pod(world, "train", 4, 3600)
    budget = Budgets(world, exhausted().resume("Never"))
    budget.evaluate()
    world.fake.edit("batch/v1", "Job", NS, "train", {"spec": {"suspend": False}})
    world.sync()
    raise_limit(world, budget)
    world.advance(5)
    budget.evaluate()
    assert suspended_names(budget) == ["train"], "fresh: perhaps the cache has not caught up"
    world.advance(SETTLE.total_seconds())
    budget.evaluate()
    assert suspended_names(budget) == []
    assert "ResumedByBudget" not in world.fake.reasons("Job", "train")


def _running_pod(world: World, name: str, owner: JSON) -> JSON:
    started = world.now - timedelta(hours=1)
    return world.put(PodBuilder(name, NS).gpus(4).owned_by(owner).started(started).build())


def test_a_pod_owned_by_a_configmap_is_evicted(world: World) -> None:
    """Issue 25 (a): a controller reference to an object of a kind trainwarden does not
    suspend (here a ConfigMap the tenant owns) used to leave the pod alone."""
    cm = world.put(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": NS}}
    )
    _running_pod(world, "sneaky", cm)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    [evict] = world.fake.writes_to("Pod", "sneaky", "evict")
    assert evict.outcome == "changed"
    [event] = world.fake.events_for("Pod", "sneaky")
    assert "its owner ConfigMap cm is not a workload trainwarden suspends" in event.message


@pytest.mark.parametrize(
    "parent", [JobSetBuilder("parent", NS).suspended(), JobBuilder("parent", NS).suspended()]
)
def test_a_job_under_a_suspended_parent_is_suspended_itself(world: World, parent: Any) -> None:
    """Issue 25 (c), (d): a running Job controller-owned by a suspended JobSet or Job (the
    tenant's own) was taken to be suspended through its parent. A real JobSet's
    controller suspends its Jobs itself: it has SETTLE to, then the budget does."""
    above = world.put(parent.build())
    child = world.put(JobBuilder("child", NS).gpus(4).owned_by(above).build())
    _running_pod(world, "child-0", child)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    assert not job(world, "child")["spec"].get("suspend"), "first its parent's controller's turn"
    assert any(line.startswith("skipped Pod/team-a/child-0: ") for line in pending(budget))
    world.advance(enforcement.SETTLE.total_seconds())
    budget.evaluate()
    assert job(world, "child")["spec"]["suspend"] is True
    assert suspended_names(budget) == ["child"]


def test_a_reference_is_followed_only_within_the_pods_namespace(world: World) -> None:
    """A uid names one object cluster-wide; an owner reference can only mean one in its own
    namespace. A pod pointing at another team's running JobSet by uid must not get that
    JobSet suspended: the pod itself is stopped."""
    world.put(NamespaceBuilder("team-b").build())
    theirs = world.put(JobSetBuilder("theirs", "team-b").build())
    _running_pod(world, "pointing", theirs)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    assert not world.read("jobset.x-k8s.io/v1alpha2", "JobSet", "team-b", "theirs")["spec"].get(
        "suspend"
    )
    assert [w.name for w in world.fake.writes_to("Pod", verb="evict")] == ["pointing"]


def test_a_deployments_pod_is_named_not_silently_left(world: World) -> None:
    """A ReplicaSet recreates what is evicted and budgets do not scale Deployments: the
    budget says which pod it cannot stop, in status and once as an Event."""
    rs = world.put(
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": NS}}
    )
    _running_pod(world, "serve", rs)
    budget = Budgets(world, exhausted())
    budget.evaluate()
    budget.evaluate()
    assert not world.fake.writes_to("Pod", verb="evict")
    line = "cannot stop Pod/team-a/serve: run by ReplicaSet rs, which recreates an evicted pod"
    assert any(p.startswith(line) for p in pending(budget))
    assert world.fake.reasons("Pod", "serve") == ["CannotStop"]
    assert world.fake.reasons("TrainingBudget", "b").count("CannotStop") == 1
