"""The budget reconciler's writes, against the fake API server: what it suspends, what it
records first, what it resumes (only its own), what it writes to status and when."""

from datetime import timedelta
from typing import Any

import pytest

from trainwarden.adapters.kube import Conflict
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.budget.decide import Memory
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.budget.record import CHURN_INTERVAL
from trainwarden.budget.status import urgency
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.controllers.status import STATUS_INTERVAL
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from world import JSON, World, run

TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
NS = "team-a"


class Budgets:
    """One budget under test, evaluated as the controller would."""

    def __init__(self, world: World, builder: BudgetBuilder) -> None:
        self.world = world
        self.index = BudgetIndex(world.cache, lambda _: None, world.clock)
        world.cache.listeners.add(self.index)
        self.body = world.put(builder.build())
        self.name = self.body["metadata"]["name"]
        self.index.set_budget(self.name, TrainingBudgetSpec.model_validate(self.body["spec"]))
        self.memory = Memory()

    def evaluate(self, own: frozenset[str] = frozenset()) -> Any:
        body = self.world.read(*TB, None, self.name)
        members = self.index.budgets.get(self.name)
        cache, fake, memory, now = self.world.cache, self.world.fake, self.memory, self.world.now
        due = run(reconcile(body, members, cache, fake, memory, now, Sources(own=own)))
        self.world.sync()
        return due

    def status(self) -> JSON:
        return dict(self.world.read(*TB, None, self.name).get("status") or {})

    def restart(self) -> None:
        """A new process: memory and the index are rebuilt; status is all that is left."""
        self.memory = Memory()
        self.index = BudgetIndex(self.world.cache, lambda _: None, self.world.clock)
        self.world.cache.listeners.add(self.index)
        self.index.set_budget(self.name, TrainingBudgetSpec.model_validate(self.body["spec"]))


def job_with_pod(world: World, name: str, gpus: int, started_ago: float, **labels: str) -> JSON:
    job = world.put(JobBuilder(name, NS).gpus(gpus).labels(labels).build())
    pod = PodBuilder(f"{name}-0", NS).gpus(gpus).owned_by(job).labels(labels)
    world.put(
        pod.started(
            world.now.__class__.fromtimestamp(world.now.timestamp() - started_ago, world.now.tzinfo)
        ).build()
    )
    return job


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def suspend_writes(world: World) -> list[Any]:
    return [w for w in world.fake.writes if w.kind == "Job" and w.verb == "patch"]


def test_an_exhausted_budget_records_then_suspends_then_reports(world: World) -> None:
    job = job_with_pod(world, "train", 8, 3600)
    budget = Budgets(
        world, BudgetBuilder("b").namespaces(NS).accelerator_hours(4).enforce().grace("0s")
    )
    budget.evaluate()
    writes = [(w.kind, w.subresource) for w in world.fake.writes if w.verb == "patch"]
    assert writes == [("TrainingBudget", "status"), ("Job", None)], "the record first"
    intent = world.fake.writes[[w.kind for w in world.fake.writes].index("TrainingBudget")]
    assert intent.body["status"]["suspended"][0]["ref"]["uid"] == job["metadata"]["uid"]
    stored = world.read("batch/v1", "Job", NS, "train")
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["labels"]["trainwarden.dev/suspended-by"] == "b"
    assert "SuspendedByBudget" in world.fake.reasons("Job", "train")
    status = budget.status()
    assert [s["ref"]["name"] for s in status["suspended"]] == ["train"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Exhausted"] == "True"


def test_a_forged_suspended_by_label_is_neither_resumed_nor_fatal(world: World) -> None:
    """A tenant labels its own Job as suspended by the budget, with garbage annotations:
    the budget reads only its own record, so it neither resumes the Job nor fails."""
    world.put(
        JobBuilder("forged", NS)
        .gpus(1)
        .suspended()
        .labels({"trainwarden.dev/suspended-by": "b"})
        .annotations(
            {"trainwarden.dev/suspended-at": "last Tuesday", "trainwarden.dev/suspended-in": "x/y"}
        )
        .build()
    )
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100).enforce())
    budget.evaluate()
    assert world.read("batch/v1", "Job", NS, "forged")["spec"]["suspend"] is True
    assert budget.status()["suspended"] == [] if "suspended" in budget.status() else True
    assert {c["type"]: c["status"] for c in budget.status()["conditions"]}["Ready"] == "True"


def test_the_operators_own_pruner_is_never_suspended_a_lookalike_is(world: World) -> None:
    """The pruner Job the operator created (its uid on a CheckpointPolicy's record) runs on
    in an exhausted namespace; a tenant's Job wearing the pruner's labels is suspended."""
    pruner_labels = {"app.kubernetes.io/name": "trainwarden-pruner"}
    pruner = job_with_pod(world, "trainwarden-prune-x", 0, 60, **pruner_labels)
    job_with_pod(world, "lookalike", 8, 3600, **pruner_labels)
    budget = Budgets(
        world, BudgetBuilder("b").namespaces(NS).accelerator_hours(4).enforce().grace("0s")
    )
    budget.evaluate(own=frozenset({pruner["metadata"]["uid"]}))
    assert world.read("batch/v1", "Job", NS, "lookalike")["spec"]["suspend"] is True
    assert not world.read("batch/v1", "Job", NS, "trainwarden-prune-x")["spec"].get("suspend")
    assert [s["ref"]["name"] for s in budget.status()["suspended"]] == ["lookalike"]


def test_raising_the_limit_resumes_only_what_the_budget_suspended(world: World) -> None:
    job_with_pod(world, "train", 8, 3600)
    world.put(JobBuilder("theirs", NS).gpus(1).suspended().build())
    budget = Budgets(
        world, BudgetBuilder("b").namespaces(NS).accelerator_hours(4).enforce().grace("0s")
    )
    budget.evaluate()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True
    raised = BudgetBuilder("b").namespaces(NS).accelerator_hours(1000).enforce().grace("0s").build()
    budget.body = world.fake.edit(*TB, None, "b", {"spec": raised["spec"]})
    budget.index.set_budget("b", TrainingBudgetSpec.model_validate(raised["spec"]))
    world.advance(5)
    budget.evaluate()
    resumed = world.read("batch/v1", "Job", NS, "train")
    assert not resumed["spec"]["suspend"]
    assert "trainwarden.dev/suspended-by" not in (resumed["metadata"].get("labels") or {})
    assert world.read("batch/v1", "Job", NS, "theirs")["spec"]["suspend"] is True
    assert budget.status().get("suspended", []) == []


def test_dry_run_plans_the_same_and_changes_nothing(world: World) -> None:
    job_with_pod(world, "train", 8, 3600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(4).grace("0s"))
    budget.evaluate()
    assert suspend_writes(world) == []
    assert any(
        line.startswith("would suspend Job/team-a/train")
        for line in budget.status()["pendingActions"]
    )
    assert world.fake.reasons("TrainingBudget", "b").count("WouldSuspend") == 1
    world.advance(1)
    budget.evaluate()
    assert world.fake.reasons("TrainingBudget", "b").count("WouldSuspend") == 1, "announced once"


def test_status_is_written_when_it_matters_not_at_every_evaluation(world: World) -> None:
    job_with_pod(world, "train", 1, 60)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1000))

    def status_writes() -> int:
        return sum(1 for w in world.fake.writes if w.kind == "TrainingBudget")

    budget.evaluate()
    assert status_writes() == 1
    world.advance(5)
    budget.evaluate()
    assert status_writes() == 1, "only the clock moved: no write before the status interval"
    world.advance(STATUS_INTERVAL.total_seconds())
    budget.evaluate()
    assert status_writes() == 2
    job_with_pod(world, "second", 2, 0)
    world.advance(1)
    due = budget.evaluate()
    assert status_writes() == 2, "a new pod waits for the churn interval"
    assert due <= world.now + CHURN_INTERVAL


def test_a_change_of_running_pods_never_waits_longer_than_the_status_interval(
    world: World,
) -> None:
    """`--status-interval 10s`, under the 30-s churn interval: a new pod is written within
    10 s, as a clock-only change would be (it waited 30 s: "soon" was later than "later")."""
    job_with_pod(world, "train", 1, 60)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1000))
    budget.memory.status_interval = timedelta(seconds=10)

    def status_writes() -> int:
        return sum(1 for w in world.fake.writes if w.kind == "TrainingBudget")

    budget.evaluate()
    job_with_pod(world, "second", 2, 0)
    world.advance(10)
    budget.evaluate()
    assert status_writes() == 2


def test_a_shorter_status_interval_writes_clock_only_totals_that_often(world: World) -> None:
    """`trainwarden run --status-interval 30s`: the controller gives each policy's memory
    its interval, and the running totals follow it."""
    job_with_pod(world, "train", 1, 60)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1000))
    budget.memory.status_interval = timedelta(seconds=30)

    def status_writes() -> int:
        return sum(1 for w in world.fake.writes if w.kind == "TrainingBudget")

    budget.evaluate()
    world.advance(29)
    budget.evaluate()
    assert status_writes() == 1
    world.advance(1)
    budget.evaluate()
    assert status_writes() == 2, "the totals written after 30 s, not 5 minutes"


def test_a_change_in_the_claims_charged_is_written_soon_not_with_the_clock() -> None:
    """Storage's own burn rate: a claim created or deleted is like a pod starting."""
    old = {"storage": {"claims": 1, "requestedGiB": 2.0, "usedGiBHours": 0.5}}
    assert urgency(old, {"storage": {**old["storage"], "usedGiBHours": 0.6}}) == "later"
    assert urgency(old, {"storage": {**old["storage"], "claims": 2, "requestedGiB": 3}}) == "soon"
    assert urgency(old, {"storage": {**old["storage"], "requestedGiB": 4.0}}) == "soon"


def test_fields_that_become_empty_are_removed(world: World) -> None:
    """The stale-status bug: when the last pod ends, the forecast must go, not linger."""
    job_with_pod(world, "train", 8, 60)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100))
    budget.evaluate()
    assert "projectedExhaustion" in budget.status()
    world.fake.drop("v1", "Pod", NS, "train-0")
    world.sync()
    world.advance(STATUS_INTERVAL.total_seconds())
    budget.evaluate()
    status = budget.status()
    assert "projectedExhaustion" not in status
    assert status["burnRatePerHour"]["acceleratorHours"] == 0


def test_a_conflicting_status_write_is_re_evaluated_not_forced(world: World) -> None:
    job_with_pod(world, "train", 1, 60)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(100))
    world.fake.on_next(
        "patch",
        "TrainingBudget",
        lambda fake: fake.edit(*TB, None, "b", {"metadata": {"labels": {"x": "y"}}}),
    )
    with pytest.raises(Conflict):
        budget.evaluate()


def _restart_scenario(world: World, *, deleted_after_listing: bool) -> JSON:
    job_with_pod(world, "stays", 2, 600)
    job_with_pod(world, "goes", 4, 600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1000))
    budget.evaluate()
    assert budget.status()["used"]["acceleratorHours"] == pytest.approx(6 * 600 / 3600, abs=1e-6)
    world.fake.drop("v1", "Pod", NS, "goes-0")
    world.advance(60)
    if deleted_after_listing:
        budget.restart()  # the new process listed the pod, then saw it deleted
        world.sync()
    else:
        world.sync()  # deleted while the operator was down: the new process never sees it
        budget.restart()
    budget.evaluate()
    return budget.status()


def test_a_restart_estimates_pods_deleted_while_down_up_to_the_last_write(world: World) -> None:
    status = _restart_scenario(world, deleted_after_listing=False)
    assert status["ledger"]["estimated"]["acceleratorHours"] == pytest.approx(
        4 * 600 / 3600, abs=1e-6
    )
    assert status["used"]["acceleratorHours"] == pytest.approx((4 * 600 + 2 * 660) / 3600, abs=1e-6)


def test_a_pod_deleted_just_after_a_restart_is_charged_once_to_its_end(world: World) -> None:
    status = _restart_scenario(world, deleted_after_listing=True)
    assert "estimated" not in status["ledger"]
    assert status["used"]["acceleratorHours"] == pytest.approx((4 * 660 + 2 * 660) / 3600, abs=1e-6)


def test_a_pod_deleted_while_down_goes_uncharged_at_most_a_status_interval_more(
    world: World,
) -> None:
    """The bound a restart keeps (docs/budgets.md): a pod deleted while the operator is
    down is charged up to the last status write that saw it, and the clock-only running
    totals are written at most every STATUS_INTERVAL, so beyond the time it went
    unobserved it loses at most one interval (accelerators are caught up from their
    series when Prometheus is configured: tests/test_catchup.py)."""
    job_with_pod(world, "stays", 2, 600)
    job_with_pod(world, "goes", 4, 600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(1000))
    budget.evaluate()  # the last status write that sees "goes" running
    quiet = int(STATUS_INTERVAL.total_seconds()) - 30
    for _ in range(quiet // 30):  # evaluated every 30 s: only the clock moves
        world.advance(30)
        budget.evaluate()
    world.fake.drop("v1", "Pod", NS, "goes-0")  # deleted, and the operator down 60 s
    world.advance(60)
    world.sync()
    budget.restart()
    budget.evaluate()
    status = budget.status()
    charged = status["ledger"]["estimated"]["acceleratorHours"] * 3600
    assert charged == pytest.approx(4 * 600, abs=0.01), "up to the last write that saw it"
    lost = 4 * (600 + quiet) - charged
    assert 0 < lost <= 4 * (STATUS_INTERVAL.total_seconds() + 60)


def test_what_was_announced_is_forgotten_once_it_no_longer_holds(world: World) -> None:
    """The memory of DryRun announcements never outgrows the current plan."""
    job_with_pod(world, "train", 8, 3600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).accelerator_hours(4).grace("0s"))
    budget.evaluate()
    assert len(budget.memory.announced) == 1
    world.fake.drop("v1", "Pod", NS, "train-0")
    world.sync()
    world.advance(1)
    budget.evaluate()
    assert len(budget.memory.announced) == 0
