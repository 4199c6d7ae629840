"""Idle accelerator nodes against the fake API server: reported after `after` without
accelerator pods, cordoned and labelled in one patch with an Event per action, released
only from our own cordon, described but untouched in DryRun, and deferred (not fatal)
when the node changes or goes away under the patch."""

from datetime import datetime, timedelta

import pytest

from fakekube import FakeKube
from trainwarden.adapters.kube import Conflict
from trainwarden.api.v1alpha1.idle import IdleNodes
from trainwarden.api.v1alpha1.names import CORDONED_BY, IDLE_NODE_LABEL
from trainwarden.idle.nodes import Found, idle_nodes
from trainwarden.testing.builders import IdlePolicyBuilder, NamespaceBuilder, PodBuilder
from trainwarden.testing.cluster import NodeBuilder
from world import JSON, World, run

NS, POLICY, GPU = "team-a", "idle", "nvidia.com/gpu"
AFTER = timedelta(minutes=10)


def wanted(
    *,
    cordon: bool = True,
    label: bool = True,
    node_labels: dict[str, str] | None = None,
    world: World | None = None,
) -> IdleNodes:
    """The policy's idleNodes; stored in `world` if given (what the cache keeps of nodes
    follows the policies stored: a node selector's keys)."""
    builder = IdlePolicyBuilder(POLICY).namespaces(NS)
    builder.idle_nodes(after="600s", cordon=cordon, label=label, node_labels=node_labels)
    if world is not None:
        world.put(builder.build())
    found = builder.model().spec.idle_nodes
    assert found is not None
    return found


class Nodes:
    """Evaluations of one policy's idle nodes, carrying `since` as the policy's memory does."""

    def __init__(self, world: World, want: IdleNodes, *, enforce: bool = True) -> None:
        self.world, self.want, self.enforce = world, want, enforce
        self.known: dict[str, datetime] = {}

    def evaluate(self) -> Found:
        found: Found = run(
            idle_nodes(
                self.world.fake,
                self.world.cache,
                self.want,
                policy=POLICY,
                resources=[GPU],
                known=self.known,
                enforce=self.enforce,
                now=self.world.now,
            )
        )
        self.known = found.since
        self.world.sync()
        return found


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    w.put(NodeBuilder("gpu-0").gpus(8).build())
    return w


def node(world: World, name: str = "gpu-0") -> JSON:
    return world.read("v1", "Node", None, name)


def gpu_pod(world: World, name: str, node_name: str, **options: object) -> None:
    pod = PodBuilder(name, NS).gpus(1).node(node_name).started(world.now)
    if options.get("deleting"):
        pod.deleting(world.now)
    if options.get("finished"):
        pod.finished(world.now)
    world.put(pod.build())


def test_a_quiet_node_is_reported_then_cordoned_and_labelled_in_one_patch(world: World) -> None:
    nodes = Nodes(world, wanted())
    first = nodes.evaluate()
    assert (first.idle, first.pending, world.fake.writes) == ([], [], [])
    assert first.since == {"gpu-0": world.now}
    quiet_since = world.now
    world.advance(AFTER.total_seconds())
    found = nodes.evaluate()
    assert [(n.name, n.since) for n in found.idle] == [("gpu-0", quiet_since)]
    [write] = world.fake.writes_to("Node", "gpu-0")
    assert write.verb == "patch"
    assert write.outcome == "changed"
    stored = node(world)
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"][CORDONED_BY] == POLICY
    assert stored["metadata"]["labels"][IDLE_NODE_LABEL] == "true"
    assert world.fake.reasons("Node", "gpu-0") == ["IdleNodeCordon", "IdleNodeLabel"]
    event = world.fake.events_for("Node", "gpu-0")[0]
    assert event.uid == stored["metadata"]["uid"], "so `kubectl describe node` lists it"
    assert quiet_since.isoformat(timespec="seconds") in event.message
    world.advance(60)
    assert nodes.evaluate().pending == []
    assert len(world.fake.writes) == 1, "nothing more to do on a node already marked"


def test_only_running_accelerator_pods_keep_a_node_busy(world: World) -> None:
    for name in ("cpu-0", "leaving-0", "done-0", "busy-0"):
        world.put(NodeBuilder(name).gpus(8).build())
    world.put(PodBuilder("cpu-only", NS).cpu("4").node("cpu-0").started(world.now).build())
    gpu_pod(world, "leaving", "leaving-0", deleting=True)
    gpu_pod(world, "done", "done-0", finished=True)
    gpu_pod(world, "busy", "busy-0")
    world.put(NodeBuilder("no-gpus").cpu("64").build())
    nodes = Nodes(world, wanted(cordon=False, label=False))
    nodes.evaluate()
    world.advance(AFTER.total_seconds())
    found = nodes.evaluate()
    assert [n.name for n in found.idle] == ["cpu-0", "done-0", "gpu-0", "leaving-0"]
    assert world.fake.writes == [], "reported only: the policy neither cordons nor labels"


def test_a_node_busy_again_is_released_from_our_cordon_only(world: World) -> None:
    """Our cordon and label are lifted; an admin's cordon on another node is neither
    taken over while idle nor lifted once busy."""
    world.put(NodeBuilder("admin").gpus(8).unschedulable().build())
    nodes = Nodes(world, wanted())
    nodes.evaluate()
    world.advance(AFTER.total_seconds())
    nodes.evaluate()
    admin = node(world, "admin")
    assert CORDONED_BY not in (admin["metadata"].get("annotations") or {})
    assert admin["metadata"]["labels"][IDLE_NODE_LABEL] == "true", "labelled: it is idle"
    gpu_pod(world, "train-0", "gpu-0")
    gpu_pod(world, "train-1", "admin")
    found = nodes.evaluate()
    assert found.idle == []
    assert found.pending == []
    released = node(world)
    assert released["spec"]["unschedulable"] is False
    assert CORDONED_BY not in (released["metadata"].get("annotations") or {})
    assert IDLE_NODE_LABEL not in (released["metadata"].get("labels") or {})
    assert world.fake.reasons("Node", "gpu-0")[-2:] == ["IdleNodeUncordon", "IdleNodeUnlabel"]
    admin = node(world, "admin")
    assert admin["spec"]["unschedulable"] is True, "not ours to lift"
    assert IDLE_NODE_LABEL not in (admin["metadata"].get("labels") or {})
    assert nodes.known == {}, "busy nodes are forgotten: their quiet starts over"


def test_dry_run_says_what_it_would_do_and_writes_nothing(world: World) -> None:
    nodes = Nodes(world, wanted(), enforce=False)
    nodes.evaluate()
    world.advance(AFTER.total_seconds())
    found = nodes.evaluate()
    assert [n.name for n in found.idle] == ["gpu-0"]
    assert found.pending == ["would cordon Node/gpu-0", "would label Node/gpu-0"]
    assert (world.fake.writes, world.fake.events) == ([], [])


def test_the_node_selector_limits_the_nodes_considered(world: World) -> None:
    world.put(NodeBuilder("pool-b").gpus(8).labels(pool="b").build())
    nodes = Nodes(world, wanted(node_labels={"pool": "b"}, world=world))
    nodes.evaluate()
    world.advance(AFTER.total_seconds())
    assert [n.name for n in nodes.evaluate().idle] == ["pool-b"]
    assert [w.name for w in world.fake.writes] == ["pool-b"]


def test_a_failed_patch_is_deferred_and_does_not_stop_the_other_nodes(world: World) -> None:
    world.put(NodeBuilder("gpu-1").gpus(8).build())
    world.put(NodeBuilder("gpu-2").gpus(8).build())
    nodes = Nodes(world, wanted())
    nodes.evaluate()
    world.advance(AFTER.total_seconds())
    world.fake.fail_next("patch", "Node", Conflict("the node changed"), name="gpu-0")
    world.fake.on_next("patch", "Node", lambda f: f.drop("v1", "Node", None, "gpu-1"), name="gpu-1")
    found = nodes.evaluate()
    assert found.pending[0] == "deferred: cordon and label Node/gpu-0: the node changed"
    assert found.pending[1].startswith("deferred: cordon and label Node/gpu-1: ")
    assert len(found.pending) == 2
    assert world.fake.reasons("Node", "gpu-0") == []
    assert world.fake.reasons("Node", "gpu-1") == []
    assert node(world, "gpu-2")["spec"]["unschedulable"] is True, "the others go on"
    assert [n.name for n in found.idle] == ["gpu-0", "gpu-1", "gpu-2"]
    world.advance(10)
    assert nodes.evaluate().pending == [], "the next evaluation cordons it"
    assert node(world, "gpu-0")["spec"]["unschedulable"] is True


def test_an_admin_cordon_racing_ours_is_never_lifted_by_us(world: World) -> None:
    """The admin cordons the node between the cache's view and our patch: the patch must
    not claim their cordon as ours (we would lift it once the node is busy again)."""
    nodes = Nodes(world, wanted(label=False))
    nodes.evaluate()
    world.advance(AFTER.total_seconds())

    def admin_cordons(fake: FakeKube) -> None:
        fake.edit("v1", "Node", None, "gpu-0", {"spec": {"unschedulable": True}})

    world.fake.on_next("patch", "Node", admin_cordons, name="gpu-0")
    found = nodes.evaluate()
    assert [line.split(":")[0] for line in found.pending] == ["deferred"]
    assert CORDONED_BY not in (node(world)["metadata"].get("annotations") or {})
    gpu_pod(world, "train-0", "gpu-0")
    nodes.evaluate()
    assert node(world)["spec"]["unschedulable"] is True, "the admin's cordon stays"
