"""The policy controllers, driven with asyncio and no kopf: which policy events lead to an
evaluation (not the echo of our own status write), what a failing evaluation costs (a
retry, never the worker), that workers wait for the cache, that a slow policy does not
hold up the others nor get a second worker; and the budget and idle controllers' wiring
(budget index and label reporter; earlier idle policies govern shared pods)."""

import asyncio
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from fakekube import CLUSTER_SCOPED, FakeKube
from trainwarden.adapters.kube import JSON, Conflict, Gone, Unreachable
from trainwarden.api.v1alpha1.names import INSTANCE_LABEL
from trainwarden.budget.controller import BudgetController
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.base import (
    INTERRUPTED_RETRY,
    PolicyController,
)
from trainwarden.controllers.queue import BACKOFF_BASE
from trainwarden.controllers.status import INTERRUPTION_SHOWN_AFTER, RESYNC, LastWrite
from trainwarden.idle.controller import IdleController
from trainwarden.testing.builders import (
    BudgetBuilder,
    IdlePolicyBuilder,
    JobBuilder,
    NamespaceBuilder,
    PodBuilder,
)
from world import T0, World

KIND = "TestPolicy"
TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
IRP = ("trainwarden.dev/v1alpha1", "IdleReclaimPolicy")
NS = "team-a"


def policy(name: str, *, rv: str = "1", generation: int = 1, instance: str | None = None) -> JSON:
    meta: JSON = {"name": name, "resourceVersion": rv, "generation": generation}
    if instance is not None:
        meta["labels"] = {INSTANCE_LABEL: instance}
    return {"apiVersion": "trainwarden.dev/v1alpha1", "kind": KIND, "metadata": meta}


class Recorder(PolicyController[LastWrite]):
    """Records what it is asked; `outcomes` says what each evaluation of a policy does."""

    kind = KIND

    def __init__(self, *, instance: str | None = None, workers: int = 2) -> None:
        kube = FakeKube(cluster_scoped={*CLUSTER_SCOPED, ("trainwarden.dev/v1alpha1", KIND)})
        super().__init__(kube, ClusterCache(), instance=instance, workers=workers, clock=lambda: T0)
        self.calls: list[str] = []
        self.specs: list[tuple[str, int | None]] = []
        self.raises: dict[str, BaseException] = {}
        self.hold: dict[str, asyncio.Event] = {}
        self.evaluated: dict[str, asyncio.Event] = {}

    def new_memory(self) -> LastWrite:
        return LastWrite()

    def spec_changed(self, name: str, body: JSON | None) -> None:
        self.specs.append((name, None if body is None else body["metadata"]["generation"]))

    def signal(self, name: str) -> asyncio.Event:
        return self.evaluated.setdefault(name, asyncio.Event())

    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        self.calls.append(name)
        self.signal(name).set()
        if name in self.hold:
            await self.hold[name].wait()
        if name in self.raises:
            raise self.raises[name]
        return now + RESYNC


async def drain(controller: PolicyController[Any]) -> list[str]:
    """Take every queued name (as a worker would, then done): what was queued."""
    names = []
    while len(controller.queue):
        names.append(await controller.queue.get())
        controller.queue.done(names[-1])
    return names


def test_spec_changes_status_changes_echoes_and_deletion() -> None:
    async def scenario() -> None:
        c = Recorder()
        c.policy_event("ADDED", policy("p", rv="1"))
        assert c.specs == [("p", 1)]
        assert await drain(c) == ["p"]
        c.policy_event("MODIFIED", policy("p", rv="2"))  # someone else's status write
        assert c.specs == [("p", 1)], "the spec did not change"
        assert await drain(c) == ["p"], "but it is evaluated again"
        c.memory["p"].written = policy("p", rv="3")  # our own status write...
        c.memory["p"].replaced_rv = "2"
        c.policy_event("MODIFIED", policy("p", rv="3"))  # ...and its echo
        assert await drain(c) == [], "the echo of our own write is no news"
        c.policy_event("MODIFIED", policy("p", rv="4", generation=2))
        assert c.specs == [("p", 1), ("p", 2)]
        assert c.policies["p"]["metadata"]["resourceVersion"] == "4"
        c.policy_event("DELETED", policy("p", rv="4", generation=2))
        assert (c.policies, c.memory) == ({}, {})
        assert c.specs[-1] == ("p", None)
        assert list(c.departed) == ["p"], "what it did is released next"
        c.policy_event("DELETED", policy("p", rv="4"))
        assert c.specs == [("p", 1), ("p", 2), ("p", None)], "forgotten once"
        assert await drain(c) == ["p"]
        await c._evaluate("p")
        assert (c.departed, c.calls) == ({}, []), "released, never evaluated"

    asyncio.run(scenario())


def test_an_instance_governs_only_its_own_policies() -> None:
    async def scenario() -> None:
        default, blue = Recorder(), Recorder(instance="blue")
        for c in (default, blue):
            c.policy_event("ADDED", policy("plain"))
            c.policy_event("ADDED", policy("labelled", instance="blue"))
        assert sorted(default.policies) == ["plain"]
        assert sorted(blue.policies) == ["labelled"]
        default.policy_event("MODIFIED", policy("plain", rv="2", instance="blue"))
        assert default.policies == {}, "relabelled to another instance: let go"
        assert default.specs[-1] == ("plain", None)

    asyncio.run(scenario())


def last_evaluated(name: str) -> float | None:
    return REGISTRY.get_sample_value(
        "trainwarden_policy_last_evaluated_timestamp_seconds", {"kind": KIND, "name": name}
    )


def test_what_an_evaluation_failure_costs() -> None:
    """Conflict: read the stored policy and evaluate it now (kopf's copy may lag for a
    minute after an outage; ours would conflict again and again); Gone: wait for the
    deletion event; anything else: counted as an error and retried after a backoff."""

    async def scenario() -> None:
        c = Recorder()
        for name in ("conflict", "gone", "broken", "fine"):
            c.policy_event("ADDED", policy(name))
        stored = c.kube.put(policy("conflict", generation=2))  # type: ignore[attr-defined]
        c.raises = {
            "conflict": Conflict("changed"),
            "gone": Gone("deleted"),
            "broken": RuntimeError("bug"),
        }
        errors = REGISTRY.get_sample_value("trainwarden_reconcile_errors_total", {"kind": KIND})
        assert await c._evaluate("conflict") == T0
        assert await c._evaluate("gone") == T0 + RESYNC
        assert await c._evaluate("broken") == T0 + timedelta(seconds=BACKOFF_BASE)
        assert await c._evaluate("fine") == T0 + RESYNC
        assert await c._evaluate("unknown") == T0 + RESYNC
        assert c.calls == ["conflict", "gone", "broken", "fine"], "no body: not evaluated"
        assert c.policies["conflict"] == stored, "the stored policy is evaluated next"
        after = REGISTRY.get_sample_value("trainwarden_reconcile_errors_total", {"kind": KIND})
        assert (after or 0) - (errors or 0) == 1
        assert c.last_cycle == T0
        evaluated = {n: last_evaluated(n) for n in ("conflict", "gone", "broken", "fine")}
        assert {n for n, stamp in evaluated.items() if stamp} == {"fine"}, "only a success"
        c.policy_event("DELETED", policy("fine"))
        assert last_evaluated("fine") is None, "a deleted policy leaves no series"

    asyncio.run(scenario())


def test_a_failing_policy_backs_off_alone_and_a_success_resets_it() -> None:
    """Each failure in a row doubles that policy's retry delay (1, 2, 4, 8 s); another
    policy failing meanwhile starts from the base; one success starts over, and a deleted
    policy leaves no count behind."""

    async def scenario() -> None:
        c = Recorder()
        for name in ("broken", "other"):
            c.policy_event("ADDED", policy(name))
        c.raises = {"broken": RuntimeError("bug"), "other": Unreachable("refused")}
        delays = [(await c._evaluate("broken") - T0).total_seconds() for _ in range(4)]
        assert delays == [1.0, 2.0, 4.0, 8.0]
        assert await c._evaluate("other") == T0 + timedelta(seconds=1), "its own backoff"
        del c.raises["broken"]
        assert await c._evaluate("broken") == T0 + RESYNC
        c.raises["broken"] = RuntimeError("again")
        assert await c._evaluate("broken") == T0 + timedelta(seconds=1), "reset by a success"
        c.policy_event("DELETED", policy("broken"))
        assert c.queue.failures("broken") == 0, "a deleted policy's count is dropped"

    asyncio.run(scenario())


def test_the_next_evaluation_starts_from_our_own_write() -> None:
    """kopf's index may still hold the version our status write replaced."""

    async def scenario() -> None:
        c = Recorder()
        c.policy_event("ADDED", policy("p", rv="1"))
        written = policy("p", rv="2")
        written["status"] = {"ours": True}

        async def writes(name: str, body: JSON, now: datetime) -> datetime:
            c.memory[name].written, c.memory[name].replaced_rv = written, "1"
            return now

        c.evaluate = writes  # type: ignore[method-assign]
        await c._evaluate("p")
        assert c.policies["p"] is written

    asyncio.run(scenario())


def test_workers_start_when_the_cache_is_ready_and_survive_failures() -> None:
    async def scenario() -> None:
        c = Recorder(workers=1)
        c.policy_event("ADDED", policy("broken"))
        c.policy_event("ADDED", policy("fine"))
        c.raises["broken"] = RuntimeError("bug")
        ready = asyncio.Event()
        runner = asyncio.create_task(c.run(ready))

        async def cache_synced() -> None:
            assert c.calls == [], "nothing is evaluated before the cache is synced"
            assert c.last_cycle is None
            ready.set()

        await asyncio.gather(cache_synced(), c.signal("fine").wait())
        assert c.calls == ["broken", "fine"], "one failing policy does not stop the worker"
        assert c.last_cycle == T0
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        assert runner.cancelled()

    asyncio.run(scenario())


def test_a_slow_policy_holds_up_neither_the_others_nor_a_second_worker() -> None:
    async def scenario() -> None:
        c = Recorder(workers=2)
        c.policy_event("ADDED", policy("slow"))
        c.policy_event("ADDED", policy("fast"))
        c.hold["slow"] = asyncio.Event()
        ready = asyncio.Event()
        ready.set()
        runner = asyncio.create_task(c.run(ready))
        await c.signal("slow").wait()
        await c.signal("fast").wait()
        assert c.calls == ["slow", "fast"]
        c.signal("slow").clear()
        c.queue.add("slow")  # a change while it is being evaluated
        c.queue.add("fast")
        c.signal("fast").clear()
        await c.signal("fast").wait()
        assert c.calls.count("slow") == 1, "not given to the idle worker while busy"
        c.hold["slow"].set()
        await c.signal("slow").wait()
        assert c.calls.count("slow") == 2, "evaluated again once done"
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())


# --- the budget controller ---------------------------------------------------------------


def budget_world() -> World:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    return world


def test_a_budget_is_indexed_evaluated_and_woken_by_its_pods() -> None:
    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        body = world.put(BudgetBuilder("b").namespaces(NS).accelerator_hours(10).build())
        c.policy_event("ADDED", body)
        assert "b" in c.index.budgets
        assert await drain(c) == ["b"]
        world.put(PodBuilder("train-0", NS).gpus(2).started(world.now).build())
        assert await drain(c) == ["b"], "a pod it charges wakes it"
        await c._evaluate("b")
        status = world.read(*TB, None, "b")["status"]
        assert {x["type"]: x["status"] for x in status["conditions"]}["Ready"] == "True"
        assert [p.snapshot.name for p in c.index.budgets["b"].facts.values()] == ["train-0"]
        c.policy_event("DELETED", body)
        assert "b" not in c.index.budgets
        assert await drain(c) == ["b"], "its release"
        await c._evaluate("b")
        world.put(PodBuilder("train-1", NS).gpus(2).started(world.now).build())
        assert await drain(c) == [], "a deleted budget is not woken"

    asyncio.run(scenario())


def test_a_budget_past_its_forecast_crossing_goes_ahead_of_routine_ones() -> None:
    """Five budgets with room to spare and one that its last evaluation foresaw crossing
    its enforce threshold 15 minutes on: once that time has passed, a burst that queues
    all six evaluates the one that may act first (before, it came sixth)."""

    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        world.put(PodBuilder("train-0", NS).gpus(8).started(world.now).build())
        routine = [f"routine-{i}" for i in range(5)]
        for name in routine:
            body = BudgetBuilder(name).namespaces(NS).accelerator_hours(1000)
            c.policy_event("ADDED", world.put(body.build()))
        near = BudgetBuilder("near").namespaces(NS).accelerator_hours(2).enforce()
        c.policy_event("ADDED", world.put(near.build()))
        for name in await drain(c):
            await c._evaluate(name)
        for name in [*routine, "near"]:
            c.queue.add(name)
        assert await drain(c) == [*routine, "near"], "not yet: in the order they fell due"
        world.advance(20 * 60)  # 8 accelerators reach 2 accelerator-hours after 15 minutes
        for name in [*routine, "near"]:
            c.queue.add(name)
        assert await drain(c) == ["near", *routine]

    asyncio.run(scenario())


def test_a_policy_held_by_a_failed_watch_is_evaluated_as_soon_as_the_relist_lands() -> None:
    """Held policies are queued again the moment the cache is current (the relist
    delivered), not INTERRUPTED_RETRY (2 s) after they were held."""

    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        world.cache.interruptions.caught_up.add(c.cache_current)
        body = BudgetBuilder("b").namespaces(NS).accelerator_hours(4)
        c.policy_event("ADDED", world.put(body.build()))
        assert await drain(c) == ["b"]
        world._pods.interrupted("pods", world.now, "ProtocolError: reset by peer")
        due = await c._evaluate("b")
        c.queue.add("b", (due - world.now).total_seconds())  # as the worker does
        assert c.queue.take_due() == [], "held: tried again in 2 s"
        world.sync()  # the relist
        assert c.queue.take_due() == ["b"], "the cache is current: evaluated now"

    asyncio.run(scenario())


def test_nothing_is_decided_on_a_view_that_missed_changes() -> None:
    """After a failed watch the cache may lack what changed meanwhile (a Job deleted, a
    pod finished): an exhausted budget must not suspend from it. It waits for the relist,
    says why once the wait is long enough to matter, and acts as soon as the view is
    current again."""

    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        job = world.put(JobBuilder("train", NS).gpus(8).build())
        started = world.now - timedelta(hours=1)
        world.put(PodBuilder("train-0", NS).gpus(8).owned_by(job).started(started).build())
        body = BudgetBuilder("b").namespaces(NS).accelerator_hours(4).enforce().grace("0s")
        c.policy_event("ADDED", world.put(body.build()))
        world._pods.interrupted("pods", world.now, "ProtocolError: reset by peer")
        assert await c._evaluate("b") == world.now + INTERRUPTED_RETRY
        assert "status" not in world.read(*TB, None, "b"), "a blip writes nothing"
        world.advance(INTERRUPTION_SHOWN_AFTER.total_seconds())
        c.policy_event("MODIFIED", world.read(*TB, None, "b"))
        world.fake.fail_next("patch", "TrainingBudget", ConnectionResetError("unreachable"))
        assert await c._evaluate("b") == world.now + INTERRUPTED_RETRY, "saying so may fail"
        await c._evaluate("b")
        ready = {x["type"]: x for x in world.read(*TB, None, "b")["status"]["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "ClusterViewInterrupted")
        assert "pods" in ready["message"]
        assert "reset by peer" in ready["message"]
        assert not world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend")
        world.sync()  # the relist
        c.policy_event("MODIFIED", world.read(*TB, None, "b"))
        await c._evaluate("b")
        assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
        conditions = world.read(*TB, None, "b")["status"]["conditions"]
        assert {x["type"]: x["status"] for x in conditions}["Ready"] == "True"

    asyncio.run(scenario())


def test_a_pod_gone_while_unwatched_is_charged_until_the_watch_failed() -> None:
    """A pod deleted during a partition is found missing only by the list after it: charged
    until then, it would count the whole outage (the fault suite saw a budget suspend a Job
    for the pods of another, deleted as the partition began)."""

    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        c.policy_event(
            "ADDED", world.put(BudgetBuilder("b").namespaces(NS).accelerator_hours(9).build())
        )
        world.put(PodBuilder("train-0", NS).gpus(2).started(world.now).build())
        world.advance(10)
        world._pods.interrupted("pods", world.now, "ProtocolError: reset by peer")
        world.fake.drop("v1", "Pod", NS, "train-0")
        world.advance(120)
        world.sync()  # the list after the outage: train-0 is gone
        [charge] = c.index.budgets["b"].gone
        assert charge.end - charge.start == 10, "charged until the watch failed"

    asyncio.run(scenario())


def test_an_invalid_budget_charges_nothing_and_says_so() -> None:
    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        valid = world.put(BudgetBuilder("b").namespaces(NS).accelerator_hours(10).build())
        c.policy_event("ADDED", valid)
        invalid = world.fake.edit(*TB, None, "b", {"spec": {"limits": {"acceleratorHours": -1}}})
        c.policy_event("MODIFIED", invalid)
        assert "b" not in c.index.budgets
        await c._evaluate("b")
        conditions = world.read(*TB, None, "b")["status"]["conditions"]
        assert {x["type"]: x["status"] for x in conditions}["Ready"] == "False"
        assert "InvalidSpec" in world.fake.reasons("TrainingBudget", "b")

    asyncio.run(scenario())


def test_a_label_naming_a_deleted_budget_is_reported() -> None:
    """The controller tells the label reporter when budgets change."""

    async def scenario() -> None:
        world = budget_world()
        c = BudgetController(world.fake, world.cache, clock=world.clock)
        world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
        body = world.put(BudgetBuilder("b").namespaces(NS).accelerator_hours(10).build())
        c.policy_event("ADDED", body)
        world.put(PodBuilder("train-0", NS).gpus(1).budget("b").started(world.now).build())
        c.policy_event("DELETED", body)
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not asyncio.current_task()))
        assert world.fake.reasons("Pod", "train-0") == ["UnknownBudget"]

    asyncio.run(scenario())


# --- the idle controller -----------------------------------------------------------------


def idle_policy(name: str) -> IdlePolicyBuilder:
    return IdlePolicyBuilder(name).namespaces(NS).lease("1h")


def test_a_shared_pod_is_governed_by_the_first_valid_policy_by_name() -> None:
    async def scenario() -> None:
        world = budget_world()
        world.put(PodBuilder("train-0", NS).gpus(1).started(world.now).build())
        c = IdleController(world.fake, world.cache, None, clock=world.clock)
        for name in ("b", "a"):
            c.policy_event("ADDED", world.put(idle_policy(name).build()))
        await drain(c)

        async def watched(name: str) -> int:
            await c._evaluate(name)
            return int(world.read(*IRP, None, name)["status"].get("podsWatched", 0))

        assert (await watched("a"), await watched("b")) == (1, 0)
        invalid = world.fake.edit(*IRP, None, "a", {"spec": {"action": "Explode"}})
        c.policy_event("MODIFIED", invalid)
        assert sorted(await drain(c)) == ["a", "b"], "the policy after it is re-evaluated"
        assert await watched("b") == 1, "an invalid policy governs nothing"
        c.policy_event("MODIFIED", world.fake.edit(*IRP, None, "b", {"spec": {"lease": None}}))
        assert await drain(c) == ["b"], "policies before it do not depend on it"

    asyncio.run(scenario())


def test_a_source_never_listed_holds_nothing_back() -> None:
    """A workload kind the role may not list fails from the start: its workloads are
    unknown (their pods left alone), which must not stop every policy."""
    cache = ClusterCache()
    forbidden = cache.workload_sink()
    forbidden.interrupted("rayjobs", T0, "ApiException: (403) Forbidden")
    assert cache.interruptions.oldest() is None
    listed = cache.pod_sink()
    listed.replace("pods", {})
    listed.interrupted("pods", T0, "ProtocolError")
    assert cache.interruptions.oldest() is not None
    listed.replace("pods", {})
    assert cache.interruptions.oldest() is None


def test_an_unreachable_api_server_is_a_retry_and_one_line() -> None:
    """During an outage every policy fails its writes: a warning each, no traceback."""

    async def scenario() -> None:
        c = Recorder()
        c.policy_event("ADDED", policy("p"))
        c.raises = {"p": Unreachable("MaxRetryError: connection refused")}
        with capture_logs() as logs:
            assert await c._evaluate("p") == T0 + timedelta(seconds=BACKOFF_BASE)
        [line] = [entry for entry in logs if entry.get("object") == f"{KIND}/p"]
        assert (line["event"], line["log_level"]) == ("API server unreachable", "warning")
        assert "exc_info" not in line

    asyncio.run(scenario())
