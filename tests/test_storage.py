"""Storage in budgets (docs/storage.md): what the cache keeps of a claim, and what a
budget charges, says and publishes for the webhook (tests/test_storage_admission.py: what
the webhook refuses; e2e/test_budget_storage.py: both on the real API server)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from test_budget_reconcile import Budgets
from trainwarden.budget import storage as st
from trainwarden.budget.holding import HOLD_LEASE, RENEW_BEFORE
from trainwarden.cache.cluster import CLAIMS, GONE_KEPT, ClusterCache
from trainwarden.controllers.status import STATUS_INTERVAL
from trainwarden.core.claims import MAX_BYTES, MAX_REQUESTS, claim_facts, request_bytes, updated
from trainwarden.core.keep import Keep
from trainwarden.core.reads import CODE
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from trainwarden.testing.cluster import PVCBuilder
from world import JSON, World

NS = "team-a"
GIB = 2**30
T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("10Gi", 10 * GIB),
        ("1.5", 2),  # whole bytes, rounded up as the API does
        ("1e400", MAX_BYTES),
        ("99999Ei", MAX_BYTES),
        (10**30, MAX_BYTES),
        ("-5Gi", 0),
        ("0", 0),
        ("ten", 0),
        ("NaN", 0),
        (True, 0),
        (None, 0),
        (["1Gi"], 0),
        ("1" * 100, 0),
    ],
)
def test_a_request_is_read_exactly_and_bounded(quantity: Any, expected: int) -> None:
    assert request_bytes(quantity) == expected


def test_a_claim_keeps_only_what_is_read_each_string_bounded() -> None:
    obj = PVCBuilder("x" * 400, NS).size("1Gi").storage_class("fast" * 100).build()
    obj["metadata"].update(uid="u1", creationTimestamp="2026-12-01T12:00:00Z")
    obj["metadata"]["labels"] = {"team": "a", **{f"k{i}": "v" * 5000 for i in range(1000)}}
    facts = claim_facts(obj, Keep(pod_labels=frozenset({"team"})))
    assert facts is not None
    assert facts.labels == {"team": "a"}
    assert len(facts.name) < 20
    assert facts.name.startswith("~")
    assert facts.storage_class.startswith("~")
    assert facts.requests == ((T.timestamp(), GIB),)
    assert claim_facts({"metadata": {"uid": "u"}}, CODE) is None  # no creation time: none


def test_the_history_of_requests_is_bounded_and_never_undercharges() -> None:
    obj = PVCBuilder("data", NS).size("1Gi").build()
    obj["metadata"].update(uid="u1", creationTimestamp="2026-12-01T12:00:00Z")
    facts = claim_facts(obj, CODE)
    assert facts is not None
    for i in range(2, 10):
        obj["spec"]["resources"]["requests"]["storage"] = f"{i}Gi"
        new = claim_facts(obj, CODE)
        assert new is not None
        facts = updated(facts, new, T + timedelta(minutes=i))
    assert len(facts.requests) == MAX_REQUESTS
    assert facts.request == 9 * GIB
    assert facts.requests[0] == (T.timestamp(), 6 * GIB)  # merged into the larger


def test_a_claim_gone_is_charged_to_its_deletion_and_forgotten_after_an_hour() -> None:
    now = [T]
    cache = ClusterCache()
    cache.clock = lambda: now[0]
    sink = cache.claim_sink()
    obj = PVCBuilder("data", NS).build()
    obj["metadata"].update(uid="u1", creationTimestamp="2026-12-01T11:00:00Z")
    sink.replace(CLAIMS, {"u1": claim_facts(obj, CODE)})
    obj["metadata"]["deletionTimestamp"] = "2026-12-01T11:30:00Z"
    sink.apply(CLAIMS, "MODIFIED", "u1", claim_facts(obj, CODE))
    sink.replace(CLAIMS, {})  # gone from a relist
    [(gone, end)] = cache.claims_gone_now()
    assert (gone.uid, end) == ("u1", datetime(2026, 12, 1, 11, 30, tzinfo=UTC).timestamp())
    now[0] = datetime(2026, 12, 1, 11, 30, tzinfo=UTC) + GONE_KEPT + timedelta(seconds=1)
    assert cache.claims_gone_now() == []
    assert cache.claims == {}
    assert cache.claims_by_namespace == {}


def test_claims_gone_are_forgotten_after_an_hour_with_no_budget_reading_them() -> None:
    """No storage budget asks for them: each removal drops those gone over an hour."""
    now = [T]
    cache = ClusterCache()
    cache.clock = lambda: now[0]
    sink = cache.claim_sink()
    for i in range(3):
        obj = PVCBuilder(f"data-{i}", NS).build()
        obj["metadata"].update(uid=f"u{i}", creationTimestamp="2026-12-01T11:00:00Z")
        sink.apply(CLAIMS, "ADDED", f"u{i}", claim_facts(obj, CODE))
        sink.apply(CLAIMS, "DELETED", f"u{i}", None)
        now[0] += GONE_KEPT / 2 + timedelta(seconds=1)
    assert [c.uid for c, _ in cache.claims_gone] == ["u1", "u2"]


# --- the budget -------------------------------------------------------------------------


@pytest.fixture
def world() -> World:
    w = World(T)
    w.put(NamespaceBuilder(NS).build())
    w.put(NamespaceBuilder("elsewhere").build())
    return w


def claim(
    world: World, name: str, size: str, ago: float, ns: str = NS, klass: str = "", **labels: str
) -> JSON:
    obj = PVCBuilder(name, ns).size(size).labels(labels).build()
    if klass:
        obj["spec"]["storageClassName"] = klass
    created = world.now - timedelta(seconds=ago)
    obj["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return world.put(obj)


def conditions(status: JSON) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_an_exhausted_storage_limit_refuses_claims_and_suspends_nothing(world: World) -> None:
    """10 GiB for an hour against a limit of 5 GiB-hours: StorageExhausted with its Event
    and a refusal lease in status; the running Job in scope is left alone."""
    claim(world, "data", "10Gi", 3600)
    claim(world, "outside", "100Gi", 3600, ns="elsewhere")
    job = world.put(JobBuilder("train", NS).gpus(1).build())
    world.put(PodBuilder("train-0", NS).gpus(1).owned_by(job).started(T).build())
    builder = BudgetBuilder("b").namespaces(NS).storage_gib_hours(5).enforce().grace("0s")
    budget = Budgets(world, builder)
    budget.evaluate()
    status = budget.status()
    assert status["storage"]["usedGiBHours"] == 10.0
    assert status["storage"]["byClass"] == {"": 10.0}
    assert (status["storage"]["claims"], status["storage"]["requestedGiB"]) == (1, 10.0)
    assert status["remaining"]["storageGiBHours"] == 0.0
    assert conditions(status)["StorageExhausted"] == "True"
    assert conditions(status)["Exhausted"] == "False"
    refusal = status["storageAdmission"]
    assert refusal["refusing"] is True
    assert refusal["message"] == "storageGiBHours at or past 100% of its limit"
    assert refusal["refuseUntil"] == "2026-12-01T12:05:00Z"
    assert "StorageExhausted" in world.fake.reasons("TrainingBudget", "b")
    assert world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend") is not True


def test_a_restart_charges_from_the_status_watermark_once(world: World) -> None:
    claim(world, "data", "6Gi", 3600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).storage_gib_hours(100))
    budget.evaluate()
    world.advance(600)
    budget.restart()
    budget.evaluate()
    world.fake.drop("v1", "PersistentVolumeClaim", NS, "data")
    world.advance(300)
    world.sync()  # gone at the relist: charged up to then, as the cache saw it
    world.advance(300)
    budget.evaluate()
    assert budget.status()["storage"]["usedGiBHours"] == pytest.approx(6 * 1.25, abs=1e-6)


def test_storage_is_priced_by_class_and_counts_in_the_cost_limit(world: World) -> None:
    """A cost limit exhausted by storage's cost alone holds like any cost (Exhausted), and
    refuses new claims too; a class without a rate is free."""
    claim(world, "fast", "4Gi", 3600, klass="fast")
    claim(world, "slow", "100Gi", 3600, klass="slow")
    builder = BudgetBuilder("b").namespaces(NS).cost(1.0).storage_rate(0.5, storage_class="fast")
    budget = Budgets(world, builder)
    budget.evaluate()
    status = budget.status()
    assert status["storage"]["cost"] == 2.0
    assert status["remaining"]["cost"] == 0.0
    assert conditions(status)["Exhausted"] == "True"
    assert status["storageAdmission"]["refusing"] is True


def test_a_claim_is_in_scope_by_the_pods_rule(world: World) -> None:
    """The label selector reads the claim's labels; the budget label names no way around
    a scope."""
    claim(world, "team", "1Gi", 3600, team="a")
    claim(world, "other", "1Gi", 3600, team="b", **{"trainwarden.dev/budget": "b"})
    selector = {"matchLabels": {"team": "a"}}
    builder = BudgetBuilder("b").namespaces(NS).storage_gib_hours(100)
    builder._obj["spec"]["scope"]["selector"] = selector
    budget = Budgets(world, builder)
    budget.evaluate()
    assert budget.status()["storage"]["usedGiBHours"] == 1.0


def test_a_claim_that_leaves_the_scope_and_comes_back_is_not_charged_again(
    world: World,
) -> None:
    """Relabelled out of the selector for an hour, then back for an hour: charged its
    first hour, nothing while out, and its last hour; not again from its creation."""
    claim(world, "data", "1Gi", 3600, team="a")
    builder = BudgetBuilder("b").namespaces(NS).storage_gib_hours(100)
    builder._obj["spec"]["scope"]["selector"] = {"matchLabels": {"team": "a"}}
    budget = Budgets(world, builder)
    budget.evaluate()

    def relabel(team: str) -> None:
        obj = world.read("v1", "PersistentVolumeClaim", NS, "data")
        obj["metadata"]["labels"] = {"team": team}
        world.put(obj)

    for team, used in (("b", 1.0), ("a", 2.0)):
        relabel(team)
        budget.evaluate()
        world.advance(3600)
        budget.evaluate()
        assert budget.status()["storage"]["usedGiBHours"] == pytest.approx(used, abs=1e-6)


def test_nothing_is_charged_while_the_claims_are_not_watched(world: World) -> None:
    claim(world, "data", "1Gi", 3600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).storage_gib_hours(100))
    budget.evaluate()
    world.cache.claims_watch.begin(CLAIMS, world.now, "watch failed")
    world.advance(3600)
    budget.evaluate()
    assert budget.status()["storage"]["usedGiBHours"] == 1.0  # the watermark stayed
    assert conditions(budget.status())["Ready"] == "True"  # the budget is evaluated
    world.cache.claims_watch.listed(CLAIMS)
    world.advance(STATUS_INTERVAL.total_seconds())  # the clock-only figures' next write
    budget.evaluate()
    later = STATUS_INTERVAL.total_seconds() / 3600
    assert budget.status()["storage"]["usedGiBHours"] == pytest.approx(2 + later, abs=1e-6)


def test_a_rolling_window_forgets_what_left_it(world: World) -> None:
    claim(world, "data", "32Gi", 0)
    builder = BudgetBuilder("b").namespaces(NS).period("Rolling", window="32h")
    budget = Budgets(world, builder.storage_gib_hours(10_000))
    for _ in range(40):
        world.advance(3600)
        budget.evaluate()
    assert budget.status()["storage"]["usedGiBHours"] == pytest.approx(32 * 32, rel=1e-6)
    assert len(budget.status()["storage"]["buckets"]) <= st.BUCKETS + 1


def test_an_exhausted_storage_budget_writes_its_status_no_more_often_than_any_other(
    world: World,
) -> None:
    """While storage stays exhausted, the figures move with the clock only: the refusal
    the webhook reads does not change each evaluation, so status is written for the
    figures at most every STATUS_INTERVAL and for the refusal's lease when it is renewed
    (every HOLD_LEASE - RENEW_BEFORE): a write per evaluation was a storm (each write is
    an event), and budgets wrote their figures every minute."""
    claim(world, "data", "10Gi", 3600)
    budget = Budgets(world, BudgetBuilder("b").namespaces(NS).storage_gib_hours(5).enforce())
    budget.evaluate()

    def status_writes() -> int:
        return sum(
            1 for w in world.fake.writes if w.kind == "TrainingBudget" and w.subresource == "status"
        )

    first = status_writes()
    window = timedelta(minutes=10)
    for _ in range(int(window.total_seconds()) // 10):
        world.advance(10)
        budget.evaluate()
    renewals = window / (HOLD_LEASE - RENEW_BEFORE)
    assert 0 < status_writes() - first <= renewals
