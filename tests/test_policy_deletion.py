"""Deleting a policy leaves nothing stuck, against the fake API server, driven as the
controllers are (kopf's DELETED event, then a worker's turn): a deleted budget's holds
start and its suspensions resume, or pass to another Enforce budget that holds the same
scope now; a deleted idle policy's cordons and idle-node labels are lifted. Nothing it
cannot prove it did is touched: a Job its owner suspended and labelled as the budget's, a
node an admin cordoned, another policy's cordon."""

import asyncio
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import (
    CORDONED_BY,
    HELD_AT,
    HELD_BY,
    HOLD_REASON,
    IDLE_NODE_LABEL,
    INSTANCE_LABEL,
    SUSPENDED_BY,
)
from trainwarden.budget.controller import BudgetController
from trainwarden.core.admission import GATE
from trainwarden.core.nodes import NodeFacts, left_behind
from trainwarden.idle.controller import IdleController
from trainwarden.testing.builders import (
    BudgetBuilder,
    IdlePolicyBuilder,
    JobBuilder,
    NamespaceBuilder,
    PodBuilder,
)
from world import JSON, World

TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
IRP = ("trainwarden.dev/v1alpha1", "IdleReclaimPolicy")
JOB = ("batch/v1", "Job")
NS, NS2 = "team-a", "team-b"


def held(world: World, name: str, ns: str, budget: str) -> JSON:
    """A Job as the webhook leaves it when `budget` holds it."""
    marks = {HELD_BY: budget, HOLD_REASON: "exhausted", HELD_AT: world.now.isoformat()}
    return world.put(JobBuilder(name, ns).gpus(1).suspended().annotations(marks).build())


def running(world: World, name: str, ns: str) -> None:
    """A Job whose 8-GPU pod has run for an hour."""
    job = world.put(JobBuilder(name, ns).gpus(8).build())
    start = world.now - timedelta(hours=1)
    world.put(PodBuilder(f"{name}-0", ns).gpus(8).owned_by(job).started(start).build())


async def evaluate(c: BudgetController, world: World, name: str) -> None:
    await c._evaluate(name)
    c.policy_event("MODIFIED", world.read(*TB, None, name))  # kopf delivers the status


def suspended(world: World, name: str, ns: str) -> bool:
    return bool(world.read(*JOB, ns, name)["spec"].get("suspend"))


def marks(world: World, name: str, ns: str) -> tuple[dict[str, str], dict[str, str]]:
    meta = world.read(*JOB, ns, name)["metadata"]
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


def test_a_deleted_budget_starts_what_it_held_resumes_what_it_suspended_or_hands_over() -> None:
    async def scenario() -> None:
        world = World()
        for ns in (NS, NS2):
            world.put(NamespaceBuilder(ns).build())
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        running(world, "train", NS)
        running(world, "train2", NS2)
        a = BudgetBuilder("a").namespaces(NS, NS2).accelerator_hours(4).enforce().grace("0s")
        b = BudgetBuilder("b").namespaces(NS2).accelerator_hours(4).enforce().grace("0s")
        c.policy_event("ADDED", world.put(a.build()))
        await evaluate(c, world, "a")  # exhausted: suspends both Jobs
        assert suspended(world, "train", NS)
        assert suspended(world, "train2", NS2)
        c.policy_event("ADDED", world.put(b.build()))
        await evaluate(c, world, "b")  # exhausted too (train2's hour): holds team-b
        held(world, "later", NS, "a")
        held(world, "queued", NS2, "a")
        pod = PodBuilder("bare", NS).gpus(1).annotations({HELD_BY: "a"}).build()
        pod["spec"]["schedulingGates"] = [{"name": GATE}]
        world.put(pod)
        owners = JobBuilder("mine", NS).gpus(1).suspended().labels({SUSPENDED_BY: "a"})
        world.put(owners.build())  # suspended by its owner, labelled as a's: not a's record
        world.sync()

        final = world.read(*TB, None, "a")
        world.fake.drop(*TB, None, "a")
        c.policy_event("DELETED", final)
        assert "a" in c.departed
        world.fake.fail_next("patch", "Job", ConnectionResetError("unreachable"))
        await c._evaluate("a")
        assert "a" in c.departed, "a failed release is tried again"
        await c._evaluate("a")
        world.sync()
        assert "a" not in c.departed

        assert not suspended(world, "train", NS), "resumed: nothing else holds team-a"
        assert SUSPENDED_BY not in marks(world, "train", NS)[0]
        assert not suspended(world, "later", NS), "started"
        assert HELD_BY not in marks(world, "later", NS)[1]
        bare = world.read("v1", "Pod", NS, "bare")
        assert not bare["spec"].get("schedulingGates")
        assert HELD_BY not in bare["metadata"].get("annotations", {})
        assert suspended(world, "queued", NS2), "b holds team-b: handed over, not started"
        assert marks(world, "queued", NS2)[1][HELD_BY] == "b"
        assert suspended(world, "train2", NS2), "a suspension b would hold becomes b's hold"
        labels, annotations = marks(world, "train2", NS2)
        assert SUSPENDED_BY not in labels
        assert annotations[HELD_BY] == "b"
        assert "was deleted" in annotations[HOLD_REASON]
        assert suspended(world, "mine", NS)
        assert marks(world, "mine", NS)[0] == {SUSPENDED_BY: "a"}
        assert "ResumedByBudget" in world.fake.reasons("Job", "train")
        assert "SuspensionHandedOver" in world.fake.reasons("Job", "train2")
        assert "ReleasedByBudget" in world.fake.reasons("Pod", "bare")
        assert world.fake.reasons("Job", "mine") == []
        assert c.holds.by_budget.get("b", {}).keys() >= {
            world.read(*JOB, NS2, n)["metadata"]["uid"] for n in ("queued", "train2")
        }, "b's held index has them: b starts them when it has room"

    asyncio.run(scenario())


def test_a_budget_deleted_and_created_again_keeps_its_holds() -> None:
    async def scenario() -> None:
        world = World()
        world.put(NamespaceBuilder(NS).build())
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)
        budget = BudgetBuilder("a").namespaces(NS).accelerator_hours(4).enforce()
        c.policy_event("ADDED", world.put(budget.build()))
        held(world, "later", NS, "a")
        final = world.read(*TB, None, "a")
        world.fake.drop(*TB, None, "a")
        c.policy_event("DELETED", final)
        c.policy_event("ADDED", world.put(budget.build()))  # before the release ran
        await c._evaluate("a")  # the release comes first
        assert "a" not in c.departed
        assert suspended(world, "later", NS), "the new budget of that name holds it"
        assert world.fake.reasons("Job", "later") == []

    asyncio.run(scenario())


def test_a_policy_handed_to_another_instance_releases_nothing() -> None:
    async def scenario() -> None:
        world = World()
        world.put(NamespaceBuilder(NS).build())
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)
        budget = BudgetBuilder("a").namespaces(NS).accelerator_hours(4)
        c.policy_event("ADDED", world.put(budget.build()))
        held(world, "later", NS, "a")
        moved = world.fake.edit(*TB, None, "a", {"metadata": {"labels": {INSTANCE_LABEL: "b"}}})
        c.policy_event("MODIFIED", moved)
        assert "a" not in c.departed
        assert "a" not in c.policies
        assert suspended(world, "later", NS)

    asyncio.run(scenario())


def node(world: World, name: str, *, cordoned_by: str | None = None, idle: bool = False) -> None:
    labels = {IDLE_NODE_LABEL: "true"} if idle else {}
    annotations = {CORDONED_BY: cordoned_by} if cordoned_by else {}
    body: JSON = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"unschedulable": cordoned_by is not None or name == "admin"},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    world.put(body)


def test_a_deleted_idle_policy_lifts_its_cordons_and_labels_only() -> None:
    async def scenario() -> None:
        world = World()
        c = IdleController(world.fake, world.cache, None, clock=world.clock)
        node(world, "mine", cordoned_by="p", idle=True)
        node(world, "shared", idle=True)  # reported idle by p and by q
        node(world, "theirs", cordoned_by="q", idle=True)
        node(world, "admin")  # cordoned by an admin: no mark
        p = world.put(IdlePolicyBuilder("p").namespaces(NS).build())
        q = world.put(IdlePolicyBuilder("q").namespaces(NS).build())
        p["status"] = {"idleNodes": [{"name": n, "since": "2026-01-01T00:00:00Z"} for n in
                                     ("mine", "shared", "gone")]}  # fmt: skip
        q["status"] = {"idleNodes": [{"name": "shared", "since": "2026-01-01T00:00:00Z"}]}
        c.policy_event("ADDED", q)
        c.policy_event("ADDED", p)
        world.fake.drop(*IRP, None, "p")
        c.policy_event("DELETED", p)
        await c._evaluate("p")
        assert "p" not in c.departed

        def read(name: str) -> JSON:
            return world.read("v1", "Node", None, name)

        assert read("mine")["spec"]["unschedulable"] is False
        assert CORDONED_BY not in read("mine")["metadata"].get("annotations", {})
        assert IDLE_NODE_LABEL not in read("mine")["metadata"].get("labels", {})
        assert read("shared")["metadata"]["labels"][IDLE_NODE_LABEL] == "true", "q reports it"
        assert read("theirs")["spec"]["unschedulable"] is True
        assert read("admin")["spec"]["unschedulable"] is True
        assert world.fake.reasons("Node", "mine") == ["IdleNodeUncordon", "IdleNodeUnlabel"]

    asyncio.run(scenario())


names = st.sampled_from(["p", "q", "r", ""])
facts = st.builds(
    NodeFacts,
    labels=st.dictionaries(
        st.sampled_from([IDLE_NODE_LABEL, "x"]), st.sampled_from(["true", "no"])
    ),
    unschedulable=st.booleans(),
    cordoned_by=st.none() | names,
)


@settings(max_examples=1000)
@given(
    nodes=st.dictionaries(st.sampled_from("abcdef"), facts),
    reported=st.sets(st.sampled_from("abcdefg")),
    kept=st.sets(st.sampled_from("abcdefg")),
)
def test_a_deleted_policy_lifts_only_its_own_marks(
    nodes: dict[str, NodeFacts], reported: set[str], kept: set[str]
) -> None:
    """Invariant: every cordon lifted names the deleted policy; every idle-node label
    removed is on a node it reported idle, nobody else does, and that carries it."""
    acts = left_behind(nodes, "p", reported, kept)
    assert not acts.cordon
    assert not acts.label
    assert set(acts.uncordon) == {n for n, f in nodes.items() if f.cordoned_by == "p"}
    assert set(acts.unlabel) == {
        n for n in reported - kept if n in nodes and nodes[n].labels.get(IDLE_NODE_LABEL) == "true"
    }
