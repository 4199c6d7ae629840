"""The one listener mechanism (cache/listeners.py) and the order runtime.wire gives it:
listeners are told in the order they were added, one raising stops none of the others
(nor the rest of a relist), and the root adds the indexes before what reads them."""

import asyncio
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from structlog.testing import capture_logs

from trainwarden.budget.controller import BudgetController
from trainwarden.cache.cluster import ClusterCache
from trainwarden.cache.listeners import Listeners
from trainwarden.cache.reads import PolicyReads
from trainwarden.checkpoints.controller import CheckpointController
from trainwarden.controllers.links import Links
from trainwarden.core.kueue import CHECK_CONTROLLER
from trainwarden.core.pods import PodFacts, facts
from trainwarden.core.reads import CODE
from trainwarden.core.workloads import WorkloadFacts
from trainwarden.idle.controller import IdleController
from trainwarden.kueue.controller import KueueController
from trainwarden.receipts.controller import ReceiptController
from trainwarden.receipts.reconcile import ReceiptSettings
from trainwarden.replica import Replica
from trainwarden.runtime import Settings, bootstrap, wire
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from world import T0, World

NS = "team-a"


class Recorder:
    """A cache listener that writes down what it was told, and raises if told to."""

    def __init__(self, name: str, told: list[tuple[str, str]], *, fails: bool = False) -> None:
        self.name, self.told, self.fails = name, told, fails

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        pod = new or old
        assert pod is not None
        self.told.append((self.name, pod.snapshot.name))
        if self.fails:
            raise RuntimeError(f"{self.name} is broken")

    def namespace_changed(self, name: str) -> None:
        """Not under test."""

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        """Not under test."""


def pod(name: str) -> PodFacts:
    return facts(PodBuilder(name, NS).gpus(1).started(T0).build(), CODE)


def test_a_listener_raising_stops_neither_the_others_nor_the_rest_of_a_relist() -> None:
    """On main the first listener's exception left the informer's callback: the second
    listener never heard of the first pod, and nobody of the pods after it."""
    cache = ClusterCache()
    told: list[tuple[str, str]] = []
    cache.listeners.add(Recorder("broken", told, fails=True), Recorder("fine", told))
    with capture_logs() as logs:
        cache.pod_sink().replace("pods", {"u1": pod("p1"), "u2": pod("p2")})
    assert told == [("broken", "p1"), ("fine", "p1"), ("broken", "p2"), ("fine", "p2")]
    assert set(cache.pods) == {"u1", "u2"}
    failed = [e for e in logs if e["event"] == "listener failed"]
    assert [(e["topic"], e["listener"], e["log_level"]) for e in failed] == [
        ("cluster", "Recorder", "error")
    ] * 2


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.booleans(), max_size=8))
def test_every_listener_is_told_once_in_order_whichever_raise(fails: list[bool]) -> None:
    listeners: Listeners[int] = Listeners("test")
    listeners.add(*range(len(fails)))
    told: list[int] = []

    def tell(listener: int) -> None:
        told.append(listener)
        if fails[listener]:
            raise ValueError(listener)

    with capture_logs() as logs:
        listeners.notify(tell)
    assert told == list(range(len(fails)))
    assert len([e for e in logs if e["event"] == "listener failed"]) == sum(fails)


def test_the_root_adds_the_indexes_before_what_reads_them() -> None:
    """runtime.wire's order, and why it matters: the runs (receipts) read the charges the
    budget index keeps, so a pod's first event reaches them after the index charged it.
    In the other order that event found no charge and the run was not tracked."""
    world = World(T0)
    world.put(NamespaceBuilder(NS).build())
    fake, cache, clock, links = world.fake, world.cache, world.clock, Links()
    checkpoints = CheckpointController(fake, cache, None, None, clock=clock)
    budgets = BudgetController(fake, cache, clock=clock, links=links)
    idle = IdleController(fake, cache, None, clock=clock)
    kueue = KueueController(fake, cache, links, controller=CHECK_CONTROLLER, clock=clock)
    settings = ReceiptSettings()
    receipts = ReceiptController(fake, cache, budgets.index, None, settings, links=links)
    wire(cache, budgets, idle, checkpoints, kueue, receipts, PolicyReads(), links)

    assert list(cache.listeners) == [
        budgets.index,
        budgets.holds,
        budgets.labels,
        receipts.index,
        checkpoints,
    ]
    assert list(cache.kueue.listeners) == [kueue]
    assert list(budgets.listeners) == [kueue.budgets_changed]
    assert list(budgets.spec_listeners) == [receipts.budgets_changed]
    assert (links.budget_views, links.pruner_jobs, links.checkpoint_scans) == (
        budgets,
        checkpoints,
        checkpoints,
    )

    async def charged_pod_starts() -> None:  # the queues want a running loop
        body = BudgetBuilder("b").namespaces(NS).accelerator_hours(100).build()
        budgets.policy_event("ADDED", world.put(body))
        receipts.index.rebuild()  # synced, as the controller's start does
        job = world.put(JobBuilder("train", NS).gpus(2).build())
        started = world.now - timedelta(minutes=1)
        world.put(PodBuilder("train-0", NS).gpus(2).owned_by(job).started(started).build())
        assert job["metadata"]["uid"] in receipts.index.runs

    asyncio.run(charged_pod_starts())


def test_trainwarden_run_is_wired_by_the_root_in_that_order() -> None:
    """bootstrap (no cluster is called while wiring): the same order, one registry."""
    replica = Replica(client.ApiClient(), None)  # not started: no loop, no informer
    built = bootstrap(Settings(), client.ApiClient(), replica)
    b, r = built.budgets, built.receipts
    assert list(built.cache.listeners) == [b.index, b.holds, b.labels, r.index, built.checkpoints]
    assert list(built.cache.kueue.listeners) == [built.kueue]
    assert list(b.listeners) == [built.kueue.budgets_changed]
    assert list(b.spec_listeners) == [r.budgets_changed]
    assert b.links is built.kueue.links is r.links
    assert b.links.pruner_jobs is built.checkpoints
    for controller in built.controllers:
        assert list(controller.spec_hooks) == [built.reads.policy]
