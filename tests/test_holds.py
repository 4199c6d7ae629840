"""A budget's holds, against the fake API server: what it publishes for the webhook, what
it says of each held workload, and what it starts (only its own, oldest first, capped,
within what it can pay) once it has room again."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION, HELD_AT, HELD_BY, HOLD_REASON
from trainwarden.api.v1alpha1.types import Scope
from trainwarden.budget.decide import Memory
from trainwarden.budget.holding import HOLD_LEASE
from trainwarden.budget.holds import HeldIndex
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.core.admission import GATE, budget_view
from trainwarden.core.reads import CODE
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from world import JSON, World, run

TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
NS = "team-a"


class Budgets:
    """Budgets evaluated as their controller does, with the held index it keeps."""

    def __init__(self, world: World, *builders: BudgetBuilder) -> None:
        self.world = world
        self.index = BudgetIndex(world.cache, lambda _: None, world.clock)
        self.holds = HeldIndex(lambda _: None)
        world.cache.listeners.add(self.index)
        world.cache.listeners.add(self.holds)
        self.memory: dict[str, Memory] = {}
        for builder in builders:
            body = world.put(builder.build())
            name = body["metadata"]["name"]
            self.index.set_budget(name, TrainingBudgetSpec.model_validate(body["spec"]))
            self.memory[name] = Memory()
        world.sync()

    def evaluate(self, name: str) -> datetime:
        def views() -> list[Any]:
            return [budget_view(self.world.read(*TB, None, n)) for n in self.memory]

        body = self.world.read(*TB, None, name)
        members = self.index.budgets.get(name)
        scope = members.spec.scope if members else None
        held = self.holds.held(name, scope, self.world.cache.namespace_labels)
        sources = Sources(held=held, others=views)
        due: datetime = run(
            reconcile(body, members, self.world.cache, self.world.fake, self.memory[name],
                      self.world.now, sources)
        )  # fmt: skip
        self.world.sync()
        return due

    def admission(self, name: str) -> JSON:
        return dict((self.world.read(*TB, None, name).get("status") or {}).get("admission") or {})

    def raise_limit(self, name: str, hours: float) -> None:
        self.world.fake.edit(*TB, None, name, {"spec": {"limits": {"acceleratorHours": hours}}})
        body = self.world.read(*TB, None, name)
        self.index.set_budget(name, TrainingBudgetSpec.model_validate(body["spec"]))


def spend(world: World, gpus: int, hours: float) -> None:
    """A finished Job that spent `gpus` x `hours` accelerator-hours this period."""
    start = world.now - timedelta(hours=hours)
    job = world.put(JobBuilder(f"spent-{gpus}-{hours}", NS).gpus(gpus).build())
    pod = PodBuilder(f"spent-{gpus}-{hours}-0", NS).gpus(gpus).owned_by(job).started(start)
    world.put(pod.finished(world.now).build())


def held_job(
    world: World,
    name: str,
    budget: str,
    *,
    at: datetime,
    ns: str = NS,
    gpus: int = 8,
    pod_labels: Mapping[str, str] | None = None,
    marks: Mapping[str, str] | None = None,
) -> JSON:
    """A Job as the admission webhook leaves it: created (at `at`) suspended and marked
    (`marks` added to or replacing the webhook's annotations)."""
    held = {HELD_BY: budget, HOLD_REASON: "exhausted", HELD_AT: at.isoformat(), **(marks or {})}
    job = JobBuilder(name, ns).gpus(gpus).suspended().annotations(held).created(at)
    return world.put(job.pod_labels(pod_labels or {}).build())


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def team(name: str = "b", hours: float = 4) -> BudgetBuilder:
    return BudgetBuilder(name).namespaces(NS).accelerator_hours(hours).enforce().grace("0s")


def started(world: World, name: str) -> bool:
    job = world.read("batch/v1", "Job", NS, name)
    return job["spec"].get("suspend") is False and HELD_BY not in job["metadata"].get(
        "annotations", {}
    )


def test_an_exhausted_budget_publishes_a_hold_it_renews_never_past_the_period(
    world: World,
) -> None:
    spend(world, 8, 1)  # 8 of 4 accelerator-hours
    budgets = Budgets(world, team().period("Daily"))
    budgets.evaluate("b")
    first = budgets.admission("b")
    assert first["holding"] is True
    assert first["observedGeneration"] == 1
    assert first["holdUntil"] == (world.now + HOLD_LEASE).isoformat().replace("+00:00", "Z")
    world.advance(60)
    budgets.evaluate("b")
    assert budgets.admission("b")["holdUntil"] == first["holdUntil"], "not renewed every time"
    world.advance(150)  # under three minutes left: renewed
    budgets.evaluate("b")
    assert budgets.admission("b")["holdUntil"] > first["holdUntil"]
    world.now = world.now.replace(hour=23, minute=58)  # two minutes before midnight UTC
    spend(world, 64, 1)
    budgets.evaluate("b")
    assert budgets.admission("b")["holdUntil"].startswith(
        (world.now + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00")
    ), "never past the period's end"


def test_a_budget_holds_while_it_keeps_what_it_suspended_though_usage_reads_lower(
    world: World,
) -> None:
    """Usage that stopped at the limit reads a hair below it once the pod's end time
    (one-second resolution) is in: what stays suspended, new work must not overtake."""
    job = world.put(JobBuilder("train", NS).gpus(1).build())
    start = world.now - timedelta(hours=4.004)  # 100.1% of 4 accelerator-hours
    pod = world.put(PodBuilder("train-0", NS).gpus(1).owned_by(job).started(start).build())
    budgets = Budgets(world, team().period("Daily"))
    budgets.evaluate("b")
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
    assert budgets.admission("b")["holding"] is True
    ended = PodBuilder("train-0", NS).gpus(1).owned_by(job).started(start)
    ended.field("metadata.uid", pod["metadata"]["uid"])  # the same pod, now terminated
    world.put(ended.finished(start + timedelta(hours=3.96)).build())  # 99%
    world.advance(60)
    budgets.evaluate("b")
    status = world.read(*TB, None, "b")["status"]
    assert status["percent"] < 100
    assert budgets.admission("b")["holding"] is True, "still keeps `train` suspended"
    exhausted = {c["type"]: c for c in status["conditions"]}["Exhausted"]
    assert (exhausted["status"], exhausted["reason"]) == ("True", "KeepsSuspended"), exhausted
    assert world.fake.reasons("TrainingBudget").count("BudgetExhausted") == 1, "no flap"
    budgets.raise_limit("b", 8)
    budgets.evaluate("b")
    assert not budgets.admission("b").get("holding"), "a raised limit lets new work start"
    status = world.read(*TB, None, "b")["status"]
    exhausted = {c["type"]: c for c in status["conditions"]}["Exhausted"]
    assert (exhausted["status"], exhausted["reason"]) == ("False", "WithinLimit"), exhausted


def test_held_work_is_announced_once_then_started_oldest_first_when_there_is_room(
    world: World,
) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team().max_suspensions_per_minute(2))
    for i, name in enumerate(["c", "a", "b"]):  # held in this order: c first
        held_job(world, name, "b", at=world.now + timedelta(seconds=i))
    budgets.evaluate("b")
    budgets.evaluate("b")
    assert world.fake.reasons("Job") == ["HeldByBudget"] * 3, "once each"
    assert budgets.admission("b")["held"] == 3
    budgets.raise_limit("b", 100)
    budgets.evaluate("b")
    assert [started(world, n) for n in "cab"] == [True, True, False], "2 a minute, oldest first"
    assert budgets.admission("b") == {
        "held": 1,
        "observedGeneration": 2,
        "holding": False,
        "released": [],
    }
    assert world.fake.reasons("Job", "c")[-1] == "ReleasedByBudget"
    world.advance(61)
    budgets.evaluate("b")
    assert started(world, "b")
    assert "admission" not in (world.read(*TB, None, "b").get("status") or {})


def test_only_what_this_budget_holds_and_still_holds_is_started(world: World) -> None:
    """Neither another budget's hold, nor a user's own suspension, nor a held Job that
    became Kueue's or was suspended by a budget between the cache and the re-read."""
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    for name in ("to-kueue", "to-budget", "kept"):
        held_job(world, name, "b", at=world.now)
    held_job(world, "someone-elses", "other", at=world.now)
    world.put(JobBuilder("users-own", NS).suspended().build())
    budgets.raise_limit("b", 100)
    changes = {
        "to-kueue": {"labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "to-budget": {"labels": {"trainwarden.dev/suspended-by": "b"}},
    }
    for name, meta in changes.items():
        world.fake.on_next(
            "get", "Job", lambda fake, n=name, m=meta: fake.edit(  # type: ignore[misc]
                "batch/v1", "Job", NS, n, {"metadata": m}), name=name)  # fmt: skip
    budgets.evaluate("b")
    for name in ("to-kueue", "to-budget", "someone-elses", "users-own"):
        assert world.read("batch/v1", "Job", NS, name)["spec"]["suspend"] is True, name
    assert started(world, "kept")


def test_a_workload_the_budget_cannot_pay_for_stays_held_and_says_why(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    held_job(world, "huge", "b", at=world.now, marks={EXPECTED_DURATION: "10h"})  # 80 acc-h
    held_job(
        world, "small", "b", at=world.now + timedelta(seconds=1), marks={EXPECTED_DURATION: "1h"}
    )
    budgets.raise_limit("b", 20)  # 12 left
    budgets.evaluate("b")
    assert not started(world, "huge")
    assert started(world, "small"), "the next one that fits goes first"
    pending = world.read(*TB, None, "b")["status"]["pendingActions"]
    assert any("holding Job/team-a/huge: its estimate needs more acceleratorHours" in p
               for p in pending)  # fmt: skip


def test_a_hold_is_handed_to_another_budget_that_still_holds(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team("b"), team("project", hours=1))
    held_job(world, "train", "b", at=world.now)
    budgets.evaluate("project")  # exhausted too: it publishes its hold
    budgets.raise_limit("b", 100)
    budgets.evaluate("b")
    job = world.read("batch/v1", "Job", NS, "train")
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"][HELD_BY] == "project"
    budgets.raise_limit("project", 100)
    budgets.evaluate("project")
    assert started(world, "train")


def test_a_held_bare_pod_is_ungated_keeping_other_gates(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    pod = PodBuilder("debug", NS).gpus(1).annotations({HELD_BY: "b", HELD_AT: "x"}).build()
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}, {"name": GATE}]
    world.put(pod)
    budgets.evaluate("b")
    assert budgets.admission("b")["held"] == 1
    assert world.read("v1", "Pod", NS, "debug") is not None, "held, so never evicted"
    budgets.raise_limit("b", 100)
    budgets.evaluate("b")
    stored = world.read("v1", "Pod", NS, "debug")
    assert stored["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert HELD_BY not in stored["metadata"]["annotations"]


def test_a_held_pod_with_a_foreign_controller_is_started_too(world: World) -> None:
    """The webhook holds a pod whose controller reference names a kind that runs no pods
    (core/admission.py POD_CONTROLLERS): the budget starts it like a bare pod."""
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    cm = world.put(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}}
    )
    held = PodBuilder("odd", NS).gpus(1).owned_by(cm).annotations({HELD_BY: "b", HELD_AT: "x"})
    pod = held.build()
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    world.put(pod)
    budgets.evaluate("b")
    assert budgets.admission("b")["held"] == 1
    budgets.raise_limit("b", 100)
    budgets.evaluate("b")
    assert world.read("v1", "Pod", NS, "odd")["spec"]["schedulingGates"] == []


def test_a_user_flipping_the_job_meanwhile_wins(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    held_job(world, "train", "b", at=world.now)
    budgets.raise_limit("b", 100)

    def user_starts_it(fake: Any) -> None:
        fake.edit("batch/v1", "Job", NS, "train", {"metadata": {"labels": {"mine": "now"}}})

    world.fake.on_next("patch", "Job", user_starts_it)
    budgets.evaluate("b")
    job = world.read("batch/v1", "Job", NS, "train")
    assert job["spec"]["suspend"] is True, "the conditional patch lost: re-read next time"
    budgets.evaluate("b")
    assert started(world, "train")


def test_dry_run_holds_nothing_and_starts_what_it_held_in_enforce(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team().dry_run())
    held_job(world, "train", "b", at=world.now)
    budgets.evaluate("b")
    assert budgets.admission("b")["holding"] is True, "published: the webhook warns"
    assert started(world, "train"), "a DryRun budget holds nothing"
    assert "HeldByBudget" not in world.fake.reasons("Job")


def test_the_held_index_follows_marks_and_wakes_only_the_budgets_concerned() -> None:
    from trainwarden.core.workloads import workload_facts

    dirty: list[str] = []
    index = HeldIndex(dirty.append)
    job = JobBuilder("j", NS).suspended().annotations({HELD_BY: "b"}).build()
    job["metadata"]["uid"] = "u1"
    held = workload_facts(job, CODE)
    index.workload_changed(None, held)
    index.workload_changed(held, held)  # a status update: nothing held changed
    assert (dirty, names(index, "b")) == (["b"], ["j"])
    job["metadata"]["annotations"][HELD_BY] = "project"
    moved = workload_facts(job, CODE)
    index.workload_changed(held, moved)
    assert sorted(dirty[1:]) == ["b", "project"]
    assert (names(index, "b"), names(index, "project")) == ([], ["j"])
    job["spec"]["suspend"] = False
    index.workload_changed(moved, workload_facts(job, CODE))
    assert index.budgets() == []
    index.workload_changed(None, workload_facts(JobBuilder("plain", NS).build(), CODE))
    assert dirty[-1] == "project", "an unheld Job wakes nobody"


def names(index: HeldIndex, budget: str, namespace: str = NS) -> list[str]:
    """What `index` shows `budget` if its scope is `namespace`."""
    return [r.name for r in index.held(budget, Scope(namespaces=[namespace]), lambda _: {})]
