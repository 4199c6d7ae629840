"""What every replica runs, leader or standby (replica.py): the webhook decides from the
one cache the leader's controllers read, its namespaces kept with the labels the budgets'
scopes select, whether or not this replica leads."""

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from trainwarden import replica as replica_module
from trainwarden.adapters.informer import Source
from trainwarden.admission.review import review_response
from trainwarden.admission.view import BUDGETS, NAMESPACES, AdmissionView, published_budget
from trainwarden.api.v1alpha1.names import DATA_VERSION, PARAMS
from trainwarden.core import ledger
from trainwarden.replica import Replica
from trainwarden.runtime import Settings, bootstrap
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder
from world import JSON, T0

UNTIL = "2026-12-01T13:00:00Z"


def exhausted(name: str, team: str) -> JSON:
    body = BudgetBuilder(name).namespace_selector({"team": team}).accelerator_hours(1).enforce()
    found = body.build()
    found["metadata"].update(uid=f"uid-{name}", generation=1)
    found["status"] = {"admission": {"holding": True, "holdUntil": UNTIL, "observedGeneration": 1}}
    return found


class Cluster:
    """Informers that list what is here (once, on the loop) and watch nothing."""

    def __init__(self, unlisted: tuple[str, ...] = (), **objects: list[JSON]) -> None:
        self.objects = objects
        self.unlisted = unlisted
        """Sources whose list never comes (a missing CRD, a role that may not list it)."""
        self.lists: list[str] = []

    def informer(
        self, source: Source, project: Callable[[JSON], Any], sink: Any, synced: Any = None
    ) -> Any:
        synced = synced or asyncio.Event()

        def deliver() -> None:
            self.lists.append(source.name)
            found = self.objects.get(source.name, [])
            sink.replace(source.name, {o["metadata"]["uid"]: project(o) for o in found})
            synced.set()

        if source.name not in self.unlisted:
            asyncio.get_running_loop().call_soon(deliver)
        return SimpleNamespace(source=source, synced=synced, stop=lambda: None)


def standby(cluster: Cluster, instance: str | None = None) -> Replica:
    """A replica that does not lead: its sources on its loop, no controllers."""
    replica = Replica(None, instance)  # type: ignore[arg-type]  # no API: the informers are fake
    replica.informer = cluster.informer  # type: ignore[method-assign]

    async def started() -> None:
        await replica.sources(None)
        await replica.namespaces_synced.wait()

    replica.loop.run_until_complete(asyncio.wait_for(started(), 5))
    return replica


def job_review(namespace: str) -> JSON:
    job = JobBuilder("train", namespace).gpus(1).build()
    return {"request": {"uid": "r", "operation": "CREATE", "namespace": namespace, "object": job}}


def namespace(name: str, team: str) -> JSON:
    body = NamespaceBuilder(name).labels({"team": team}).build()
    body["metadata"]["uid"] = f"uid-{name}"
    return body


def test_a_standby_holds_from_its_cache_with_the_namespace_labels_its_budgets_select() -> None:
    """No controller runs in a standby: only its budgets say that namespaces' `team`
    label must be kept, or no namespace would be in any label-selected scope."""
    cluster = Cluster(
        **{
            BUDGETS.name: [exhausted("team-a", "a")],
            NAMESPACES.name: [namespace("ns-a", "a"), namespace("ns-b", "b")],
        }
    )
    replica = standby(cluster)
    assert cluster.lists == [BUDGETS.name, "runreceipts", NAMESPACES.name], "the budgets first"
    view = AdmissionView(replica.cache)
    assert view.current()
    assert replica.cache.namespace_labels("ns-a") == {"team": "a"}
    assert review_response(job_review("ns-a"), view, T0)[1] == "held"
    assert review_response(job_review("ns-b"), view, T0)[1] == "allowed"


def test_a_standby_warns_of_a_repeat_from_the_receipts_it_lists() -> None:
    """Every replica lists this instance's RunReceipts (labelled as its own) for the
    webhook's repeat check (issue 28 item 5)."""
    declared = {PARAMS: "lr=0.1", DATA_VERSION: "v3"}
    key = ledger.repeat_key("ns-b", declared)
    assert key is not None
    spec = {
        "workload": {"kind": "Job", "name": "train"},
        "outcome": "Succeeded",
        "cost": 2.5,
        "finishedAt": "2026-12-01T10:00:00Z",
        "experiment": {"configHash": key[1], "dataVersion": "v3"},
    }
    receipt = {"metadata": {"name": "job-train-1", "namespace": "ns-b", "uid": "r1"}, "spec": spec}
    cluster = Cluster(
        **{
            BUDGETS.name: [exhausted("team-a", "a")],
            NAMESPACES.name: [namespace("ns-a", "a"), namespace("ns-b", "b")],
            "runreceipts": [receipt],
        }
    )
    sources: list[Source] = []
    informer = cluster.informer

    def seen(source: Source, *args: Any, **kwargs: Any) -> Any:
        sources.append(source)
        return informer(source, *args, **kwargs)

    cluster.informer = seen  # type: ignore[method-assign]
    replica = standby(cluster, instance="blue")
    (listed,) = [s for s in sources if s.name == "runreceipts"]
    assert (
        listed.label_selector
        == "app.kubernetes.io/managed-by=trainwarden,trainwarden.dev/instance=blue"
    )
    review = job_review("ns-b")
    review["request"]["object"]["metadata"]["annotations"] = declared
    answer, outcome = review_response(review, AdmissionView(replica.cache), T0)
    assert outcome == "repeat"
    assert (
        "RunReceipt job-train-1 (Job/train, Succeeded, cost 2.50"
        in answer["response"]["warnings"][0]
    )


def test_a_budget_that_comes_to_select_another_label_lists_the_namespaces_again() -> None:
    """Until they are listed again, the namespaces' records lack the new label: the
    webhook holds nothing (fails open) rather than miss the scope."""
    cluster = Cluster(**{NAMESPACES.name: [namespace("ns-a", "a")]})
    replica = standby(cluster)
    view = AdmissionView(replica.cache)
    assert replica.cache.namespace_labels("ns-a") == {}, "no budget reads `team` yet"
    sink = replica.cache.budget_sink(replica._budget_changed)

    async def select() -> None:
        budget = exhausted("team-a", "a")
        sink.apply(BUDGETS.name, "ADDED", "uid-team-a", published_budget(budget, None))
        assert not replica.cache.interruptions.current(NAMESPACES.name), "listing again"
        assert review_response(job_review("ns-a"), view, T0)[1] == "unknown"
        await asyncio.sleep(0)  # the new list is delivered

    replica.loop.run_until_complete(select())
    assert cluster.lists.count(NAMESPACES.name) == 2
    assert replica.cache.namespace_labels("ns-a") == {"team": "a"}


def test_the_leaders_controllers_read_the_cache_the_webhook_reads() -> None:
    replica = standby(Cluster())
    api = SimpleNamespace(rest_client=SimpleNamespace(request=None))  # measured, never called
    runtime = bootstrap(Settings(), api, replica)  # type: ignore[arg-type]
    assert runtime.cache is replica.cache
    assert runtime.reads is replica.reads
    assert runtime.clock == replica.clock.now


def test_budgets_never_listed_do_not_keep_the_namespaces_from_being_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader's controllers wait for the namespaces: a budgets' list that never comes
    must not stop them; the webhook holds nothing meanwhile."""
    monkeypatch.setattr(replica_module, "BUDGETS_FIRST", 0.05)
    replica = standby(Cluster((BUDGETS.name,), **{NAMESPACES.name: [namespace("ns-a", "a")]}))
    assert replica.cache.interruptions.current(NAMESPACES.name)
    assert not AdmissionView(replica.cache).current()
