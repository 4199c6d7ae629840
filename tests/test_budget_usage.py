"""BudgetUsage: what a namespace is shown of the budget that charges it (budget/usage.py),
and the writes that keep it so (budget/usage_write.py, over the fake API server)."""

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    ResourceUsage,
    TrainingBudgetStatus,
    UsageBreakdown,
    UsageShare,
)
from trainwarden.api.v1alpha1.types import Condition
from trainwarden.budget.decide import Memory
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.budget.usage import (
    MAX_OBJECTS,
    USAGE_INTERVAL,
    UsageMemory,
    Written,
    copies,
    decide,
    replacing,
    wanted,
)
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.controllers.status import RESYNC, STATUS_INTERVAL
from trainwarden.core.tally import OTHER
from trainwarden.testing.apiserver import apply_merge_patch
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from world import JSON, World, run

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SPEC = TrainingBudgetSpec.model_validate(
    BudgetBuilder("b").namespaces("x").accelerator_hours(10).build()["spec"]
)
NAMESPACES = [f"ns-{i}" for i in range(20)]

hours = st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda h: round(h, 6))


@st.composite
def statuses(draw: Any) -> TrainingBudgetStatus:
    keys = draw(st.lists(st.sampled_from([*NAMESPACES, OTHER]), unique=True, max_size=16))
    shares = [UsageShare(key=k, accelerator_hours=draw(hours), cost=draw(hours)) for k in keys]
    total = sum(s.accelerator_hours for s in shares)
    conditions = [
        Condition(
            type=t,
            status=draw(st.sampled_from(["True", "False"])),
            reason="R",
            last_transition_time=T0,
        )
        for t in draw(st.lists(st.sampled_from(["Ready", "Warning", "Exhausted"]), unique=True))
    ]
    return TrainingBudgetStatus(
        conditions=conditions,
        used=ResourceUsage(accelerator_hours=round(total, 6), cost=draw(hours)),
        percent=draw(st.one_of(st.none(), hours)),
        breakdown=UsageBreakdown(by_namespace=shares),
        last_evaluated=T0 + timedelta(seconds=draw(st.integers(0, 10**6))),
    )


written_maps = st.dictionaries(
    st.sampled_from(NAMESPACES),
    st.builds(
        Written,
        st.one_of(st.none(), st.just({"budget": "b"})),
        st.just("uid"),
        st.integers(0, 3600).map(lambda s: T0 + timedelta(seconds=s)),
    ),
)


@settings(max_examples=1000, deadline=None)
@given(
    statuses(),
    st.sets(st.sampled_from(NAMESPACES)),
    written_maps,
    st.integers(0, 7200).map(lambda s: T0 + timedelta(seconds=s)),
)
def test_each_namespace_is_shown_its_own_share_and_an_unchanged_budget_writes_nothing(
    status: TrainingBudgetStatus, covered: set[str], written: dict[str, Written], now: datetime
) -> None:
    want, left_out = wanted("b", SPEC, status, covered.__contains__)
    plan = decide(want, left_out, written, now, fresh=True)
    assert status.breakdown is not None
    own = {s.key: s for s in status.breakdown.by_namespace}
    charged = {k for k in own if k != OTHER}
    # nothing outside the budget's charged and covered namespaces is written
    assert set(plan.write) <= set(want) <= charged & covered
    assert len(want) == min(MAX_OBJECTS, len(charged & covered))
    assert left_out == len(charged & covered) - len(want)
    # the most used are the ones written
    shown = [own[ns].accelerator_hours for ns in want]
    hidden = [own[ns].accelerator_hours for ns in charged & covered - set(want)]
    assert not hidden or min(shown) >= max(hidden)
    # every object carries only its own namespace's share, and the whole budget's totals
    for namespace, spec in plan.write.items():
        share = spec["namespace"]
        assert (share["acceleratorHours"], share["cost"]) == (
            own[namespace].accelerator_hours,
            own[namespace].cost,
        )
        assert (
            spec["used"]["acceleratorHours"] == (status.used or ResourceUsage()).accelerator_hours
        )
    # what leaves is exactly what was written and is no longer wanted
    assert set(plan.delete) == set(written) - set(want)
    # written now, an unchanged budget writes nothing, however late
    after = {ns: Written(spec, "uid", now) for ns, spec in want.items()}
    for later in (now, now + USAGE_INTERVAL, now + timedelta(days=3)):
        again = decide(want, left_out, after, later, fresh=True)
        assert (again.write, again.delete) == ({}, ())


@settings(max_examples=1000, deadline=None)
@given(statuses(), hours, st.integers(0, 3599))
def test_a_change_only_the_clock_made_waits_and_a_state_change_does_not(
    status: TrainingBudgetStatus, more: float, seconds: int
) -> None:
    covered = set(NAMESPACES)
    want, left_out = wanted("b", SPEC, status, covered.__contains__)
    after = {ns: Written(spec, "uid", T0) for ns, spec in want.items()}
    now = T0 + timedelta(seconds=seconds)
    moved = status.model_copy(
        update={"used": ResourceUsage(accelerator_hours=more + 1), "percent": more + 1}
    )
    want2, _ = wanted("b", SPEC, moved, covered.__contains__)
    writes = decide(want2, left_out, after, now, fresh=True).write
    assert writes == ({} if now - T0 < USAGE_INTERVAL else want2)
    # only with a status write: the copies ride the budget's writes
    assert decide(want2, left_out, after, now, fresh=False).write == {}
    flipped = moved.model_copy(
        update={
            "conditions": [
                Condition(type="Exhausted", status="True", reason="R", last_transition_time=T0)
            ]
        }
    )
    want3, _ = wanted("b", SPEC, flipped, covered.__contains__)
    changed = {ns for ns in want3 if want[ns]["state"] != "Exhausted"}
    for fresh in (True, False):  # a state change is written at once, status write or not
        assert set(decide(want3, left_out, after, now, fresh=fresh).write) >= changed


# --- the shell, over the fake API server ---------------------------------------------------

TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
BU = ("trainwarden.dev/v1alpha1", "BudgetUsage")


class Budget:
    """One budget over two namespaces with a running pod each, evaluated as the controller
    would."""

    def __init__(self, world: World, *namespaces: str) -> None:
        self.world = world
        self.index = BudgetIndex(world.cache, lambda _: None, world.clock)
        world.cache.listeners.add(self.index)
        self.body = world.put(
            BudgetBuilder("team").namespaces(*namespaces).accelerator_hours(100).build()
        )
        self.memory = Memory()
        self.scope(*namespaces)

    def scope(self, *namespaces: str) -> None:
        scope = {"spec": {"scope": {"namespaces": list(namespaces)}}}
        self.body = self.world.fake.edit(*TB, None, "team", scope)
        self.index.set_budget("team", TrainingBudgetSpec.model_validate(self.body["spec"]))

    def evaluate(self) -> None:
        body = self.world.read(*TB, None, "team")
        members = self.index.budgets.get("team")
        w = self.world
        run(reconcile(body, members, w.cache, w.fake, self.memory, w.now, Sources(instance=None)))
        w.sync()

    def usage_writes(self) -> list[Any]:
        return [w for w in self.world.fake.writes if w.kind == "BudgetUsage"]


def running(world: World, namespace: str, gpus: int) -> None:
    world.put(NamespaceBuilder(namespace).build())
    job = world.put(JobBuilder("train", namespace).gpus(gpus).build())
    started = world.now - timedelta(hours=1)
    world.put(PodBuilder("train-0", namespace).gpus(gpus).owned_by(job).started(started).build())


def test_each_namespace_gets_its_share_owned_by_the_budget_and_nothing_when_unchanged() -> None:
    world = World()
    running(world, "team-a", 2)
    running(world, "team-b", 6)
    budget = Budget(world, "team-a", "team-b")
    budget.evaluate()
    status = world.read(*TB, None, "team")["status"]
    by_ns = {s["key"]: s for s in status["breakdown"]["byNamespace"]}
    for ns in ("team-a", "team-b"):
        obj = world.read(*BU, ns, "team")
        spec = obj["spec"]
        assert spec["namespace"]["acceleratorHours"] == by_ns[ns]["acceleratorHours"] > 0
        assert spec["used"] == status["used"]
        assert spec["budget"] == "team"
        meta = obj["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "trainwarden"
        assert meta["labels"]["trainwarden.dev/budget"] == "team"
        assert meta["ownerReferences"][0]["uid"] == budget.body["metadata"]["uid"]
    before = len(budget.usage_writes())
    budget.evaluate()  # same moment: nothing changed
    world.advance(30)
    budget.evaluate()  # the clock moved the figures: held back
    assert len(budget.usage_writes()) == before
    world.advance(STATUS_INTERVAL.total_seconds())
    budget.evaluate()  # the budget's status says so with its next write
    assert world.read(*TB, None, "team")["status"]["budgetUsages"] == {
        "namespaces": 2,
        "missing": [],
    }


def test_a_namespace_that_leaves_the_scope_loses_its_object_and_a_tenants_copy_stays() -> None:
    world = World()
    running(world, "team-a", 2)
    running(world, "team-b", 6)
    running(world, "team-c", 1)
    tenant = {
        "apiVersion": BU[0],
        "kind": BU[1],
        "metadata": {
            "name": "team",
            "namespace": "team-c",
            "labels": {
                "app.kubernetes.io/managed-by": "trainwarden",
                "trainwarden.dev/budget": "team",
            },
        },
        "spec": {"budget": "team", "mode": "Enforce", "state": "Ready"},
    }
    world.put(tenant)
    budget = Budget(world, "team-a", "team-b", "team-c")
    budget.evaluate()
    assert world.read(*BU, "team-c", "team")["spec"] == tenant["spec"]  # never touched
    budget.scope("team-a", "team-c")
    world.sync()
    budget.evaluate()
    assert world.fake.read(*BU, "team-b", "team") is None
    assert world.read(*BU, "team-c", "team")["spec"] == tenant["spec"]
    assert {w.namespace for w in budget.usage_writes() if w.verb == "delete"} == {"team-b"}
    world.advance(STATUS_INTERVAL.total_seconds())
    budget.evaluate()
    assert world.read(*TB, None, "team")["status"]["budgetUsages"] == {
        "namespaces": 1,
        "missing": ["a BudgetUsage the operator did not write is in the way in team-c"],
    }


def test_the_status_says_which_charged_namespaces_have_no_budget_usage() -> None:
    memory = UsageMemory(written={"a": Written(None, "u", T0)}, foreign={"c": T0}, left_out=3)
    shares = [UsageShare(key="a", accelerator_hours=1), UsageShare(key=OTHER, cost=2)]
    shown = copies(memory, UsageBreakdown(by_namespace=shares))
    assert shown.namespaces == 1
    assert shown.missing == [
        'namespaces in "(other)" (past the most used) have none',
        f"3 namespaces past the {MAX_OBJECTS} most used have none",
        "a BudgetUsage the operator did not write is in the way in c",
    ]
    assert copies(UsageMemory(), UsageBreakdown(by_namespace=shares[:1])).missing == []


def test_after_a_restart_the_objects_an_earlier_process_wrote_are_found_and_kept_right() -> None:
    world = World()
    running(world, "team-a", 2)
    running(world, "team-b", 6)
    budget = Budget(world, "team-a", "team-b")
    budget.evaluate()
    budget.scope("team-a")
    budget.memory = Memory()  # a new process
    world.sync()
    budget.evaluate()
    assert world.fake.read(*BU, "team-b", "team") is None
    assert world.read(*BU, "team-a", "team")["spec"]["budget"] == "team"


def test_a_tenants_edit_is_overwritten_and_never_read_as_truth() -> None:
    world = World()
    running(world, "team-a", 2)
    budget = Budget(world, "team-a")
    budget.evaluate()
    forged = {"spec": {"namespace": {"acceleratorHours": 0}, "forged": {"by": "tenant"}}}
    world.fake.edit(*BU, "team-a", "team", forged)
    world.advance(USAGE_INTERVAL.total_seconds())
    budget.evaluate()
    status = world.read(*TB, None, "team")["status"]
    shown = world.read(*BU, "team-a", "team")["spec"]["namespace"]["acceleratorHours"]
    assert shown == status["breakdown"]["byNamespace"][0]["acceleratorHours"] > 0
    assert "forged" not in world.read(*BU, "team-a", "team")["spec"]


json_values = st.recursive(
    st.one_of(st.integers(), st.text(max_size=3), st.booleans()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=2), json_values, max_size=4)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.none(), json_values), json_objects)
def test_the_patch_turns_whatever_is_stored_into_what_is_wanted(old: Any, new: JSON) -> None:
    assert apply_merge_patch({"spec": old}, {"spec": replacing(old, new)}) == {"spec": new}


def test_at_rest_a_budget_with_running_pods_costs_a_status_write_per_status_interval() -> None:
    """Issue 30: at rest (running pods, nothing changing) a budget evaluated every RESYNC
    for 10 minutes sends at most 2 status writes and rewrites each BudgetUsage at most
    twice, in the same evaluations: clock-only figures follow one rule for every kind
    (controllers/status.py STATUS_INTERVAL). Budgets wrote their totals every minute."""
    world = World()
    running(world, "team-a", 2)
    running(world, "team-b", 6)
    budget = Budget(world, "team-a", "team-b")
    budget.evaluate()  # the first evaluation writes status and creates both copies
    world.fake.writes.clear()
    world.fake.gets, world.fake.lists[:] = 0, []
    steps = int(timedelta(minutes=10) / RESYNC)
    when: dict[str, set[datetime]] = {"TrainingBudget": set(), "BudgetUsage": set()}
    for _ in range(steps):
        world.advance(RESYNC.total_seconds())
        before = len(world.fake.writes)
        budget.evaluate()
        for w in world.fake.writes[before:]:
            when[w.kind].add(world.now)
    status = world.fake.writes_to("TrainingBudget")
    usage = budget.usage_writes()
    assert len(status) <= 2, [w.verb for w in status]
    assert len(usage) <= 2 * 2, [(w.verb, w.namespace) for w in usage]
    assert when["BudgetUsage"] <= when["TrainingBudget"], "the copies ride the status writes"
    fake = world.fake
    requests = len(fake.writes) + fake.gets + len(fake.lists) + len(fake.events)
    assert requests <= 2 + 2 * 2, requests  # a copy's rewrite: one PATCH, no read before it


def test_a_copy_someone_changed_is_read_and_replaced_whole() -> None:
    """A copy is rewritten with one PATCH conditional on the version the operator's last
    write left; edited since (a tenant who may write BudgetUsages in its namespace), the
    PATCH conflicts and the copy is read and replaced: nothing the tenant added stays."""
    world = World()
    running(world, "team-a", 2)
    budget = Budget(world, "team-a")
    budget.evaluate()
    forged = {"spec": {"percent": 1, "forged": "yes"}, "metadata": {"labels": {"x": "y"}}}
    world.fake.edit(*BU, "team-a", "team", forged)
    world.sync()
    world.fake.writes.clear()
    world.advance(STATUS_INTERVAL.total_seconds())
    budget.evaluate()
    copy_writes = [(w.verb, w.outcome) for w in budget.usage_writes()]
    assert copy_writes == [("patch", "Conflict"), ("patch", "changed")], copy_writes
    status = world.read(*TB, None, "team")["status"]
    spec = world.read(*BU, "team-a", "team")["spec"]
    assert "forged" not in spec
    assert spec["percent"] == status["percent"]
    assert spec["evaluatedAt"] == status["lastEvaluated"]
