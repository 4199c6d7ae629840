"""The budget label reporter: a pod whose trainwarden.dev/budget label names a budget that
cannot charge it is reported once (a Warning Event on the pod and a metric), again only
when the label changes, and forgotten with the pod; valid labels are never reported."""

import asyncio

from prometheus_client import REGISTRY

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.budget.labels import LabelReporter
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.testing.builders import BudgetBuilder, NamespaceBuilder, PodBuilder
from world import World

NS, OTHER = "team-a", "team-b"
PROBLEMS = "trainwarden_budget_label_problems_total"


class Reporting:
    """A world whose cache feeds a budget index and the reporter, as the controller wires them."""

    def __init__(self) -> None:
        self.world = World()
        self.world.put(NamespaceBuilder(NS).labels(team="a").build())
        self.world.put(NamespaceBuilder(OTHER).labels(team="b").build())
        self.index = BudgetIndex(self.world.cache, lambda _: None, self.world.clock)
        self.reporter = LabelReporter(self.world.fake, self.world.cache, self.index)
        self.world.cache.listeners.add(self.index)
        self.world.cache.listeners.add(self.reporter)

    def budget(self, builder: BudgetBuilder) -> None:
        body = self.world.put(builder.build())  # the cache keeps what its scope reads
        spec = TrainingBudgetSpec.model_validate(body["spec"])
        self.index.set_budget(body["metadata"]["name"], spec)
        self.reporter.budgets_changed()

    def forget(self, name: str) -> None:
        self.index.forget_budget(name)
        self.reporter.budgets_changed()

    def pod(self, name: str, budget: str | None, namespace: str = NS) -> None:
        builder = PodBuilder(name, namespace).gpus(1).started(self.world.now)
        self.world.put((builder.budget(budget) if budget else builder).build())

    def relabel(self, name: str, budget: str | None) -> None:
        patch = {"metadata": {"labels": {"trainwarden.dev/budget": budget}}}
        self.world.fake.edit("v1", "Pod", NS, name, patch)
        self.world.sync()

    def reported(self, name: str) -> list[str]:
        return [e.message for e in self.world.fake.events_for("Pod", name) if e.type == "Warning"]


async def settled() -> None:
    """Let the reporter's drain task finish (it posts from the running loop)."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.gather(*others)


def problems() -> float:
    return REGISTRY.get_sample_value(PROBLEMS) or 0.0


def test_an_unknown_budget_is_reported_once_on_the_pod() -> None:
    async def scenario() -> None:
        r = Reporting()
        r.budget(BudgetBuilder("a").namespaces(NS).accelerator_hours(10))
        before = problems()
        r.pod("train-0", "nope")
        await settled()
        [event] = r.world.fake.events_for("Pod", "train-0", NS)
        assert (event.type, event.reason, event.action) == ("Warning", "UnknownBudget", "Account")
        assert event.uid == r.world.read("v1", "Pod", NS, "train-0")["metadata"]["uid"]
        assert "'nope' ignored (no such budget); charged by scope to a" in event.message
        assert problems() == before + 1
        r.pod("train-1", None)  # another pod arrives: every pod is seen again by the cache
        r.budget(BudgetBuilder("c").namespaces(OTHER).accelerator_hours(10))
        await settled()
        assert len(r.reported("train-0")) == 1, "reported once, not at every change"
        assert r.reported("train-1") == []
        assert problems() == before + 1

    asyncio.run(scenario())


def test_a_budget_that_does_not_cover_the_pod_is_reported_not_charged() -> None:
    """Naming another team's budget spends nothing of it: the label is reported."""

    async def scenario() -> None:
        r = Reporting()
        r.budget(BudgetBuilder("theirs").namespaces(OTHER).accelerator_hours(10))
        r.pod("train-0", "theirs")
        await settled()
        [message] = r.reported("train-0")
        assert "(the pod is outside its scope); charged by scope to no budget" in message
        assert "train-0" not in {p.snapshot.name for p in r.index.budgets["theirs"].facts.values()}

    asyncio.run(scenario())


def test_a_valid_label_is_silent_until_its_budget_goes_away() -> None:
    async def scenario() -> None:
        r = Reporting()
        r.budget(BudgetBuilder("a").namespaces(NS).accelerator_hours(10))
        r.pod("train-0", "a")
        await settled()
        assert r.world.fake.events == []
        r.forget("a")
        await settled()
        [message] = r.reported("train-0")
        assert "'a' ignored (no such budget)" in message

    asyncio.run(scenario())


def test_a_namespace_leaving_the_scope_makes_the_label_wrong() -> None:
    """Budgets are rechecked when namespace labels change (namespaceSelector scopes)."""

    async def scenario() -> None:
        r = Reporting()
        r.budget(BudgetBuilder("a").namespace_selector({"team": "a"}).accelerator_hours(10))
        r.pod("train-0", "a")
        await settled()
        assert r.reported("train-0") == []
        r.world.fake.edit("v1", "Namespace", None, NS, {"metadata": {"labels": {"team": "x"}}})
        r.world.sync()
        await settled()
        [message] = r.reported("train-0")
        assert "outside its scope" in message

    asyncio.run(scenario())


def test_a_changed_label_is_judged_again_and_a_removed_one_forgotten() -> None:
    async def scenario() -> None:
        r = Reporting()
        r.budget(BudgetBuilder("a").namespaces(NS).accelerator_hours(10))
        r.pod("train-0", "nope")
        await settled()
        r.relabel("train-0", "still-nope")
        await settled()
        assert len(r.reported("train-0")) == 2, "a new wrong label is a new problem"
        assert "'still-nope'" in r.reported("train-0")[1]
        r.relabel("train-0", "a")
        await settled()
        assert len(r.reported("train-0")) == 2, "a label fixed is not reported"
        r.relabel("train-0", None)
        uid = r.world.read("v1", "Pod", NS, "train-0")["metadata"]["uid"]
        assert uid not in r.reporter.labelled
        r.forget("a")  # the label is gone: losing the budget is nothing to report
        await settled()
        assert len(r.reported("train-0")) == 2

    asyncio.run(scenario())


def test_a_deleted_pod_is_forgotten_even_before_its_report_is_posted() -> None:
    """Memory is bounded by live pods; a pod gone before the drain runs is not reported."""

    async def scenario() -> None:
        r = Reporting()
        r.pod("reported", "nope")
        await settled()
        assert len(r.reported("reported")) == 1
        r.pod("short-lived", "nope")  # queued, not yet posted
        r.world.fake.drop("v1", "Pod", NS, "short-lived")
        r.world.fake.drop("v1", "Pod", NS, "reported")
        r.world.sync()
        await settled()
        assert r.reported("short-lived") == []
        assert (r.reporter.labelled, len(r.reporter.reported)) == ({}, 0)

    asyncio.run(scenario())


def test_pods_seen_before_the_loop_runs_are_reported_when_budgets_change() -> None:
    """At startup the cache may fill before the event loop runs the reporter: nothing is
    posted then, and nothing is lost either."""
    r = Reporting()
    r.pod("train-0", "nope")
    assert r.world.fake.events == []

    async def later() -> None:
        r.budget(BudgetBuilder("a").namespaces(NS).accelerator_hours(10))
        await settled()

    asyncio.run(later())
    assert len(r.reported("train-0")) == 1
