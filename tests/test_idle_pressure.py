"""reclaimWhen: UnderPressure against the fake API server: an idle Job nobody waits for is
kept warm (said once, in status and an Event), and reclaimed once a pod the scheduler
could not place for minPending would fit in what it frees, the demand named; what does
not fit, its own pods, DryRun, and the per-minute cap."""

from datetime import timedelta

import pytest

from test_idle_reconcile import GRACE, Idle, policy
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder
from trainwarden.testing.cluster import NodeBuilder
from world import JSON, World

NS, OTHER = "team-a", "team-b"
MIN_PENDING = timedelta(minutes=1)
HOSTNAME = "kubernetes.io/hostname"


def idle_job(world: World, name: str, node: str, started_ago: timedelta) -> JSON:
    job = world.put(JobBuilder(name, NS).gpus(4).build())
    pod = PodBuilder(f"{name}-0", NS).gpus(4).cpu("8").owned_by(job).node(node)
    world.put(pod.started(world.now - started_ago).build())
    return job


@pytest.fixture
def world() -> World:
    w = World()
    for ns in (NS, OTHER):
        w.put(NamespaceBuilder(ns).build())
    gpu_node(w, "gpu-0")
    idle_job(w, "train", "gpu-0", timedelta(hours=2))
    return w


def gpu_node(world: World, name: str) -> None:
    node = NodeBuilder(name).gpus(4).cpu("64").memory("256Gi").product("A100")
    world.put(node.labels({HOSTNAME: name}).build())


def pressed(world: World, *, enforce: bool = True) -> Idle:
    idle = Idle(world, policy(enforce=enforce).under_pressure(min_pending="1m"))
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()  # warned
    world.advance(GRACE.total_seconds())
    return idle


def wait(world: World, name: str, gpus: int = 4, *, ns: str = OTHER, **selector: str) -> JSON:
    """A pod the scheduler could not place for `MIN_PENDING` already."""
    pod = PodBuilder(name, ns).gpus(gpus).cpu("8").unschedulable(world.now - MIN_PENDING)
    return world.put(pod.node_selector(selector).build())


def suspended(world: World, job: str = "train") -> bool:
    return bool(world.read("batch/v1", "Job", NS, job)["spec"].get("suspend"))


def test_an_idle_job_nobody_waits_for_is_kept_warm_and_says_so_once(world: World) -> None:
    idle = pressed(world)
    idle.evaluate()
    idle.evaluate()
    assert not suspended(world)
    status = idle.status()
    assert status["pendingActions"] == [
        "kept warm Pod/team-a/train-0: idle, but no pending pod wants nvidia.com/gpu "
        "in what reclaiming it would free: kept warm"
    ]
    [entry] = status["idlePods"]
    assert entry["state"] == "Warned"
    assert entry["message"].endswith("kept warm")
    assert world.fake.reasons("Pod", "train-0").count("IdleKeptWarm") == 1
    (warm,) = [e for e in world.fake.events if e.reason == "IdleKeptWarm"]
    assert warm.type == "Normal", "news, not a problem: the idle warning was the Warning"
    assert status["actionsTaken"] == 0


def test_a_pod_that_would_fit_after_min_pending_gets_the_idle_job_reclaimed(world: World) -> None:
    idle = pressed(world)
    young = PodBuilder("wait-0", OTHER).gpus(4).unschedulable(world.now - timedelta(seconds=50))
    world.put(young.node_selector({"nvidia.com/gpu.product": "A100"}).build())
    due = idle.evaluate()
    assert not suspended(world)
    assert due == world.now + timedelta(seconds=10), "it wakes when the pod has waited enough"
    world.advance(10)
    idle.evaluate()
    assert suspended(world)
    [event] = [e for e in world.fake.events_for("Job", "train") if e.reason == "IdleReclaimed"]
    assert (
        "and 1 pending pod in team-b wants nvidia.com/gpu (team-b/wait-0, unschedulable for 60s)"
        in event.message
    )
    annotations = world.read("batch/v1", "Job", NS, "train")["metadata"]["annotations"]
    assert "1 pending pod in team-b" in annotations["trainwarden.dev/reclaim-reason"]


@pytest.mark.parametrize(
    ("gpus", "selector", "why"),
    [
        (8, {}, "more than the node has"),
        (4, {"nvidia.com/gpu.product": "H100"}, "another GPU model"),
    ],
)
def test_a_pod_the_reclaim_would_not_make_room_for_keeps_it_warm(
    world: World, gpus: int, selector: dict[str, str], why: str
) -> None:
    idle = pressed(world)
    wait(world, "wait-0", gpus, **selector)
    idle.evaluate()
    assert not suspended(world), why
    assert idle.status()["pendingActions"][0].startswith("kept warm")


def test_a_pod_that_fits_elsewhere_already_waits_for_something_else(world: World) -> None:
    gpu_node(world, "gpu-1")
    idle = pressed(world)
    wait(world, "wait-0", 2)  # gpu-1 has room for it: the scheduler will place it
    idle.evaluate()
    assert not suspended(world)


def test_a_pending_pod_of_the_idle_job_itself_is_no_reason(world: World) -> None:
    idle = pressed(world)
    job = world.read("batch/v1", "Job", NS, "train")
    pod = PodBuilder("train-1", NS).gpus(4).owned_by(job).unschedulable(world.now - MIN_PENDING)
    world.put(pod.build())
    idle.evaluate()
    assert not suspended(world)


def test_dry_run_names_the_demand_and_changes_nothing(world: World) -> None:
    idle = pressed(world, enforce=False)
    idle.evaluate()
    assert any(line.startswith("kept warm") for line in idle.status()["pendingActions"])
    assert "IdleKeptWarm" in world.fake.reasons("IdleReclaimPolicy", "idle")
    wait(world, "wait-0")
    idle.evaluate()
    [line] = idle.status()["pendingActions"]
    assert line.startswith("would suspend Job/team-a/train")
    assert "1 pending pod in team-b wants nvidia.com/gpu" in line
    assert [w for w in world.fake.writes if w.kind in ("Pod", "Job")] == []


def test_a_reclaim_kept_warm_leaves_its_slot_in_the_cap_to_a_wanted_one(world: World) -> None:
    gpu_node(world, "gpu-1")
    idle_job(world, "second", "gpu-1", timedelta(hours=1))
    idle = Idle(world, policy().under_pressure(min_pending="1m").max_actions_per_minute(1))
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    world.advance(15)  # the second is idle for less long: the cap would reclaim train first
    idle.utilization.values[(NS, "second-0")] = 1.0
    idle.evaluate()
    world.advance(GRACE.total_seconds())
    wait(world, "wait-0", 4, **{HOSTNAME: "gpu-1"})
    idle.evaluate()
    assert suspended(world, "second")
    assert not suspended(world, "train")
    assert idle.status()["pendingActions"][0].startswith("kept warm Pod/team-a/train-0")
