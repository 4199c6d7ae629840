"""What an idle policy does to each kind of holder, against the fake API server: bare pods
evicted, Deployments scaled to zero, Jobs suspended; what it refuses (no suspend field,
Kueue's Jobs, nothing to scale) and says why; what is already done; a refused or
conflicting action deferred and retried; the cap; an unavailable utilization source; the
workload's own exemption, and a forbidden one announced once."""

from datetime import timedelta

import pytest

from fakekube import FakeKube
from test_idle_reconcile import GRACE, Idle
from trainwarden.adapters.idle_window import IdleWindow
from trainwarden.adapters.prometheus import MetricsUnavailable
from trainwarden.controllers.status import RESYNC
from trainwarden.idle.reconcile import RETRY
from trainwarden.testing.base import ObjectBuilder
from trainwarden.testing.builders import (
    DeploymentBuilder,
    IdlePolicyBuilder,
    JobBuilder,
    NamespaceBuilder,
    PodBuilder,
)
from trainwarden.testing.cluster import NodeBuilder
from world import JSON, World

NS = "team-a"


def policy(action: str, *, enforce: bool = True) -> IdlePolicyBuilder:
    builder = (
        IdlePolicyBuilder("idle")
        .namespaces(NS)
        .signal(window="60s", resolution="10s", threshold=5, warmup="1s")
        .grace("30s")
        .action(action)
    )
    return builder.enforce() if enforce else builder


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def pod(world: World, name: str, owner: JSON | None = None, gpus: int = 2) -> JSON:
    builder = PodBuilder(name, NS).gpus(gpus).started(world.now - timedelta(hours=1))
    return world.put((builder.owned_by(owner) if owner else builder).build())


def idle(world: World, builder: IdlePolicyBuilder, *pods: str) -> Idle:
    """The policy, with these pods idle, evaluated until their grace period ran out."""
    subject = Idle(world, builder)
    for name in pods:
        subject.utilization.values[(NS, name)] = 0.0
    subject.evaluate()
    world.advance(GRACE.total_seconds())
    return subject


def pending(subject: Idle) -> list[str]:
    return list(subject.status().get("pendingActions", []))


def test_delete_evicts_a_bare_pod_and_reports_it(world: World) -> None:
    pod(world, "notebook", gpus=4)
    subject = idle(world, policy("Delete"), "notebook")
    subject.evaluate()
    [evict] = world.fake.writes_to("Pod", "notebook", "evict")
    assert evict.outcome == "changed"
    assert world.fake.read("v1", "Pod", NS, "notebook") is None
    assert world.fake.reasons("Pod", "notebook")[-1] == "IdleReclaimed"
    [message] = [e.message for e in world.fake.events_for("IdleReclaimPolicy", "idle")]
    assert "evicted Pod/team-a/notebook" in message
    # The mark after the eviction finds the pod gone: not an error.
    assert world.fake.writes_to("Pod", "notebook", "patch")[-1].outcome == "Gone"
    assert subject.status()["actionsTaken"] == 1


def test_an_eviction_refused_by_a_disruption_budget_is_retried_soon(world: World) -> None:
    pod(world, "guarded")
    world.fake.block_eviction(NS, "guarded")
    subject = idle(world, policy("Delete"), "guarded")
    due = subject.evaluate()
    assert world.fake.read("v1", "Pod", NS, "guarded") is not None
    [line] = pending(subject)
    assert line.startswith("deferred Pod/team-a/guarded")
    assert due == world.now + RETRY
    assert "IdleReclaimed" not in world.fake.reasons()
    world.fake.allow_eviction(NS, "guarded")
    world.advance(RETRY.total_seconds())
    subject.evaluate()
    assert world.fake.read("v1", "Pod", NS, "guarded") is None, "still warned: reclaimed"


def test_scale_down_scales_the_deployment_through_its_replica_set(world: World) -> None:
    deploy = world.put(DeploymentBuilder("serve", NS).gpus(2).replicas(3).build())
    rs = world.put(ObjectBuilder("apps/v1", "ReplicaSet", "serve-1", NS).owned_by(deploy).build())
    pod(world, "serve-1-a", rs)
    subject = idle(world, policy("ScaleDown"), "serve-1-a")
    subject.evaluate()
    stored = world.read("apps/v1", "Deployment", NS, "serve")
    assert stored["spec"]["replicas"] == 0
    assert stored["metadata"]["annotations"]["trainwarden.dev/scaled-down-from"] == "3"
    assert "IdleReclaimed" in world.fake.reasons("Deployment", "serve")
    world.advance(10)
    subject.evaluate()
    assert len(world.fake.writes_to("Deployment", "serve", "patch")) == 1, "reclaimed once"


def test_a_deployment_already_at_zero_counts_as_done(world: World) -> None:
    """Its pods may still be terminating: nothing to scale, nothing to report."""
    deploy = world.put(DeploymentBuilder("serve", NS).gpus(2).replicas(0).build())
    pod(world, "serve-0", deploy)
    subject = idle(world, policy("ScaleDown"), "serve-0")
    subject.evaluate()
    assert world.fake.writes_to("Deployment", "serve") == []
    assert "IdleReclaimed" not in world.fake.reasons()
    assert not pending(subject)


def test_a_warning_is_withdrawn_when_utilization_recovers(world: World) -> None:
    pod(world, "train-0", world.put(JobBuilder("train", NS).gpus(2).build()))
    subject = Idle(world, policy("Suspend"))
    subject.utilization.values[(NS, "train-0")] = 0.0
    subject.evaluate()
    assert "trainwarden.dev/idle-warned-at" in annotations(world, "train-0")
    subject.utilization.values[(NS, "train-0")] = 90.0
    world.advance(10)
    subject.evaluate()
    assert world.fake.reasons("Pod", "train-0")[-1] == "IdleWarningWithdrawn"
    assert "trainwarden.dev/idle-warned-at" not in annotations(world, "train-0")
    world.advance(GRACE.total_seconds())
    subject.evaluate()
    assert not world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend")


def annotations(world: World, pod_name: str) -> dict[str, str]:
    return dict(world.read("v1", "Pod", NS, pod_name)["metadata"].get("annotations") or {})


def test_scale_down_of_a_jobs_pod_is_refused(world: World) -> None:
    pod(world, "train-0", world.put(JobBuilder("train", NS).gpus(2).build()))
    subject = idle(world, policy("ScaleDown"), "train-0")
    subject.evaluate()
    assert pending(subject) == [
        "cannot scale down Pod/team-a/train-0: no Deployment or StatefulSet runs it"
    ]
    assert [w for w in world.fake.writes if w.kind == "Job"] == []


def test_suspend_of_a_deployments_pod_is_refused(world: World) -> None:
    pod(world, "serve-0", world.put(DeploymentBuilder("serve", NS).gpus(2).build()))
    subject = idle(world, policy("Suspend"), "serve-0")
    subject.evaluate()
    assert pending(subject) == [
        "cannot suspend Deployment/team-a/serve: its owner Deployment has no suspend field "
        "(use ScaleDown or Delete)"
    ]
    assert [w for w in world.fake.writes if w.kind == "Deployment"] == []


def test_a_kueue_job_is_not_suspended_behind_kueues_back(world: World) -> None:
    pod(world, "queued-0", world.put(JobBuilder("queued", NS).gpus(2).queue("lq").build()))
    subject = idle(world, policy("Suspend"), "queued-0")
    subject.evaluate()
    assert pending(subject) == [
        "cannot suspend Job/team-a/queued: managed by Kueue, which owns spec.suspend"
    ]
    assert [w for w in world.fake.writes if w.kind == "Job"] == []


def test_a_job_suspended_meanwhile_counts_as_done(world: World) -> None:
    job = world.put(JobBuilder("train", NS).gpus(2).build())
    pod(world, "train-0", job)
    subject = idle(world, policy("Suspend"), "train-0")
    world.fake.edit("batch/v1", "Job", NS, "train", {"spec": {"suspend": True}})
    world.sync()
    subject.evaluate()
    assert world.fake.writes_to("Job", "train", "patch") == []
    assert "IdleReclaimed" not in world.fake.reasons()
    assert not pending(subject)


def test_a_job_changed_under_the_suspension_is_deferred_then_suspended(world: World) -> None:
    job = world.put(JobBuilder("train", NS).gpus(2).build())
    pod(world, "train-0", job)
    subject = idle(world, policy("Suspend"), "train-0")

    def user_edits(fake: FakeKube) -> None:
        fake.edit("batch/v1", "Job", NS, "train", {"metadata": {"labels": {"edited": "yes"}}})

    world.fake.on_next("patch", "Job", user_edits, name="train")
    subject.evaluate()
    assert not world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend")
    assert pending(subject)[0].startswith("deferred Job/team-a/train: ")
    world.advance(RETRY.total_seconds())
    subject.evaluate()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True


def test_reclaimed_hours_end_at_the_jobs_deadline(world: World) -> None:
    """A Job that would have been stopped in 30 minutes anyway frees 30 minutes, not the
    policy's whole estimate horizon."""
    started = world.now - timedelta(minutes=30)
    job = world.put(JobBuilder("train", NS).gpus(2).active_deadline(3600).started(started).build())
    pod(world, "train-0", job)
    subject = idle(world, policy("Suspend").estimate_horizon("24h"), "train-0")
    subject.evaluate()
    assert subject.status()["acceleratorHoursReclaimed"] == pytest.approx(
        2 * (30 * 60 - GRACE.total_seconds()) / 3600, abs=1e-3
    )


def test_the_cap_defers_reclaims_beyond_it(world: World) -> None:
    for name in ("a", "b"):
        pod(world, name, world.put(JobBuilder(name, NS).gpus(2).build()))
    subject = idle(world, policy("Suspend").max_actions_per_minute(1), "a", "b")
    subject.evaluate()
    suspended = [
        n for n in ("a", "b") if world.read("batch/v1", "Job", NS, n)["spec"].get("suspend")
    ]
    assert len(suspended) == 1
    assert any("over 1 reclaims per minute" in line for line in pending(subject))


class Unavailable:
    async def idle_window(self, query: str, **_: object) -> IdleWindow:
        raise MetricsUnavailable("prometheus: connection refused")


def test_unavailable_metrics_judge_nothing_and_are_announced_once(world: World) -> None:
    job = world.put(JobBuilder("train", NS).gpus(2).build())
    pod(world, "train-0", job)
    subject = Idle(world, policy("Suspend"))
    subject.utilization = Unavailable()  # type: ignore[assignment]
    subject.evaluate()
    world.advance(60)
    subject.evaluate()
    status = subject.status()
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["MetricsAvailable"]["status"] == "False"
    assert "connection refused" in conditions["MetricsAvailable"]["message"]
    assert status["podsUnknown"] == 1
    assert world.fake.reasons("IdleReclaimPolicy", "idle") == ["PrometheusUnavailable"]
    assert [w for w in world.fake.writes if w.kind in ("Pod", "Job")] == []


def test_an_exempt_workload_exempts_its_pods_where_the_policy_allows_it(world: World) -> None:
    job = world.put(JobBuilder("train", NS).gpus(2).exempt().build())
    pod(world, "train-0", job)
    subject = idle(world, policy("Suspend").allow_opt_out(), "train-0")
    subject.evaluate()
    assert subject.status()["podsExempt"] == 1
    assert world.fake.reasons("Pod", "train-0") == []
    assert not world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend")


def test_an_opt_out_the_policy_does_not_allow_is_announced_once(world: World) -> None:
    job = world.put(JobBuilder("train", NS).gpus(2).exempt().build())
    pod(world, "train-0", job)
    subject = idle(world, policy("Suspend"), "train-0")
    world.advance(10)
    subject.evaluate()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
    assert world.fake.reasons("Pod", "train-0").count("AnnotationIgnored") == 1


def test_pods_outside_the_scope_or_without_accelerators_are_not_watched(world: World) -> None:
    world.put(NamespaceBuilder("elsewhere").build())
    world.put(PodBuilder("cpu", NS).cpu("4").started(world.now).build())
    world.put(PodBuilder("pending", NS).gpus(1).build())
    world.put(PodBuilder("other", "elsewhere").gpus(1).started(world.now).build())
    subject = Idle(world, policy("Suspend"))
    subject.evaluate()
    assert subject.utilization.queries == 0, "nothing watched: nothing to ask"
    status = subject.status()
    assert status.get("podsWatched", 0) == 0
    assert {c["type"]: c["status"] for c in status["conditions"]}["MetricsAvailable"] == "True"


def test_idle_nodes_are_listed_in_status_and_wake_the_policy_when_due(world: World) -> None:
    world.put(NodeBuilder("gpu-0").gpus(8).build())
    builder = policy("NotifyOnly", enforce=False).idle_nodes(after="600s", cordon=True)
    subject = Idle(world, builder)
    due = subject.evaluate()
    assert due == world.now + RESYNC, "not yet idle: the resync comes first"
    assert not subject.status().get("idleNodes")
    world.advance(600 - RESYNC.total_seconds() / 2)
    due = subject.evaluate()
    assert due == world.now + RESYNC / 2, "woken when the node's quiet matures"
    world.advance(RESYNC.total_seconds() / 2)
    subject.evaluate()
    assert [n["name"] for n in subject.status()["idleNodes"]] == ["gpu-0"]
    assert pending(subject) == ["would cordon Node/gpu-0"]
    world.advance(10)
    subject.memory.node_since = None  # a restart: an idle node's quiet is read from status
    subject.evaluate()
    assert [n["name"] for n in subject.status()["idleNodes"]] == ["gpu-0"]
    assert world.fake.writes_to("Node") == []
