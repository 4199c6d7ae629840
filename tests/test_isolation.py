"""Isolation: a hostile policy costs only itself.

Any spec the CRD schema admits, for each of the three kinds (drawn from crds/ by
tests/crdgen.py), and any status the schema admits where another path reads it, goes
through every path that reads policies (tests/isolation_world.py): the reconcilers through
their controllers on the fake API server, the admission webhook's view and decision,
Kueue's AdmissionCheck, receipts, `trainwarden report` and `trainwarden estimate`. No path
raises or works on one policy for more than two seconds; every write is storable JSON; the
hostile policy is reported Ready=False/InvalidSpec when its spec is invalid; and the
reference policy beside it (valid, governing team-a) gets exactly what it gets alone:
status and writes, admission verdict, check state, receipts, report and estimate entries
and rows.

A hostile policy that is valid and governs team-a's namespace too may change what the
reference gets, legitimately (two budgets covering one Job): equality is asserted only
when it does not. Half the hostile specs are aimed at team-h, whose Jobs they then govern
(and a CheckpointPolicy's status then names team-h's checkpoint location, which team-h's
receipt reads), and half (with their status) are made valid by leaving out what the model
refuses, so that valid hostile policies do their arithmetic on real pods and the readers
of a status get one the model accepts.

The CEL rules of the CRDs are not applied to what is drawn (Python cannot evaluate CEL):
some drawn specs would be refused by the API server. Each CEL rule has a pydantic mirror
(tests/test_parse_sites.py), so they are invalid specs here as well.
"""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import isolation_world as w
from crdgen import admitted, pruned
from fakeprometheus import FakeBusy
from trainwarden.api.v1alpha1 import CheckpointPolicySpec, IdleReclaimPolicySpec, TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import TrainingBudgetStatus
from trainwarden.api.v1alpha1.checkpoint_status import CheckpointPolicyStatus
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicyStatus
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.budget.controller import BudgetController
from trainwarden.checkpoints.controller import CheckpointController
from trainwarden.checkpoints.pruner import PrunerSettings
from trainwarden.core.scope import in_scope
from trainwarden.idle.controller import IdleController
from trainwarden.testing.builders import BudgetBuilder
from world import JSON, World

CASES = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
Paths = Callable[[JSON | None], Coroutine[Any, Any, dict[str, Any]]]
ALONE: dict[str, dict[str, Any]] = {}


MODELS: dict[str, type[BaseModel]] = {
    "TrainingBudget": TrainingBudgetSpec,
    "IdleReclaimPolicy": IdleReclaimPolicySpec,
    "CheckpointPolicy": CheckpointPolicySpec,
}
STATUSES: dict[str, type[BaseModel]] = {
    "TrainingBudget": TrainingBudgetStatus,
    "IdleReclaimPolicy": IdleReclaimPolicyStatus,
    "CheckpointPolicy": CheckpointPolicyStatus,
}


async def evaluated(controller: Any, world: World, name: str) -> None:
    """One evaluation as the controller's worker makes it, minus its catch-all."""
    with w.bounded(f"the {controller.kind} reconciler"):
        await controller.evaluate(name, controller.policies[name], world.now)
    world.sync()


def settle(world: World, controller: Any, kind: str, name: str) -> None:
    """kopf reports the policy as stored now (after a status write: its echo)."""
    controller.policy_event(None, world.read(w.GROUP, kind, None, name))


def judged(world: World, kind: str) -> bool:
    """The hostile policy's own verdict once evaluated: Ready=False/InvalidSpec if its
    spec is invalid, never otherwise; whether it was invalid."""
    body = world.read(w.GROUP, kind, None, w.HOSTILE)
    condition = w.ready(body)
    invalid = isinstance(parse_spec(MODELS[kind], body["spec"]), list)
    if invalid:
        assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec"), condition
    else:
        assert condition["reason"] != "InvalidSpec", condition
    w.storable(world)
    return invalid


async def start(kind: str, controller_of: Callable[[World], Any], hostile: JSON | None) -> Any:
    """The world with the reference policy evaluated once, then the hostile one added."""
    world = w.base_world()
    world.put(w.reference(kind))
    controller = controller_of(world)
    settle(world, controller, kind, w.REF)
    await evaluated(controller, world, w.REF)
    settle(world, controller, kind, w.REF)
    world.fake.writes.clear()
    world.fake.events.clear()
    if hostile is not None:
        world.put(hostile)
        settle(world, controller, kind, w.HOSTILE)
    return world, controller


def rows(table: str, prefix: str) -> list[list[str]]:
    """The reference's rows of a table, word by word (a long hostile key widens the
    columns, which is no change to what the reference's rows say)."""
    return [line.split() for line in table.splitlines() if line.lstrip().startswith(prefix)]


def budget_controller(world: World) -> BudgetController:
    busy = FakeBusy({(ns, "train-0"): (0.5, 1) for ns in (w.NS, w.OTHER)})
    made = BudgetController(world.fake, world.cache, clock=world.clock, busy=busy)
    world.cache.listeners.add(made.index, made.holds, made.labels)  # as runtime.wire does
    return made


async def budget_paths(hostile: JSON | None) -> dict[str, Any]:
    """Webhook, Kueue check, estimate, report, reconciler and receipts."""
    world, budgets = await start("TrainingBudget", budget_controller, hostile)
    seen: dict[str, Any] = {"webhook": w.webhook(w.policies(world, "TrainingBudget"))}
    seen["kueue"] = await w.kueue_check(world, budgets)
    built, table = w.estimated(w.policies(world, "TrainingBudget"))
    seen["estimate"] = [
        [b for b in x["budgets"] if b["budget"] == w.REF] for x in built["workloads"]
    ]
    seen["estimate rows"] = rows(table, f"{w.REF} ")
    built, table = w.reported(world)
    seen["report"] = [b for b in built["spent"] if b["budget"] == w.REF]
    seen["report rows"] = rows(table, f"{w.REF} (")
    await evaluated(budgets, world, w.REF)
    seen["status"] = world.read(w.GROUP, "TrainingBudget", None, w.REF)["status"]
    seen["writes"] = w.writes_but(world, w.HOSTILE)
    if hostile is not None:
        await evaluated(budgets, world, w.HOSTILE)
        seen["invalid"] = judged(world, "TrainingBudget")
    seen["receipts"] = [r["spec"] for r in await w.receipts(world, budgets.index, [])]
    return seen


def idle_controller(world: World) -> IdleController:
    return IdleController(world.fake, world.cache, w.Utilization(), clock=world.clock)


async def idle_paths(hostile: JSON | None) -> dict[str, Any]:
    """Reconciler (the hostile policy, named first, is one of the reference's `earlier`)
    and report."""
    world, idle = await start("IdleReclaimPolicy", idle_controller, hostile)
    await evaluated(idle, world, w.REF)
    seen: dict[str, Any] = {
        "status": world.read(w.GROUP, "IdleReclaimPolicy", None, w.REF)["status"],
        "writes": w.writes_but(world, w.HOSTILE),
    }
    built, table = w.reported(world)
    seen["report"] = [p for p in built["idle"] if p["policy"] == w.REF]
    seen["report rows"] = rows(table, f"{w.REF} (")
    if hostile is not None:
        await evaluated(idle, world, w.HOSTILE)
        seen["invalid"] = judged(world, "IdleReclaimPolicy")
    return seen


def checkpoint_controller(world: World) -> CheckpointController:
    pruner = PrunerSettings("trainwarden:test")
    made = CheckpointController(world.fake, world.cache, pruner, None, clock=world.clock)
    world.cache.listeners.add(made)
    return made


async def checkpoint_paths(hostile: JSON | None) -> dict[str, Any]:
    """Reconciler, the pruners the budgets leave alone (from every status), report,
    receipts (their checkpoint locations from every status), the hostile policy's own
    evaluation last."""
    world, checkpoints = await start("CheckpointPolicy", checkpoint_controller, hostile)
    await evaluated(checkpoints, world, w.REF)
    seen: dict[str, Any] = {
        "status": world.read(w.GROUP, "CheckpointPolicy", None, w.REF)["status"],
        "writes": w.writes_but(world, w.HOSTILE),
        "located": w.location_of_ref(w.policies(world, "CheckpointPolicy")),
    }
    ours = {e.get("prunerUid") for e in seen["status"].get("locations", [])} - {None, ""}
    with w.bounded("the budgets' view of pruners"):
        seen["pruners"] = sorted(ours & checkpoints.pruner_uids())
    built, _ = w.reported(world)
    seen["report"] = [p for p in built["pruned"] if p["policy"] == w.REF]
    ledger = BudgetController(world.fake, world.cache, clock=world.clock)  # runs need one
    world.cache.listeners.add(ledger.index)
    charging = BudgetBuilder("ledger").namespaces(w.NS, w.OTHER).accelerator_hours(1e6)
    ledger.policy_event(None, world.put(charging.build()))
    found = await w.receipts(world, ledger.index, w.policies(world, "CheckpointPolicy"))
    seen["receipts"] = [r["spec"] for r in found]
    if hostile is not None:  # last: its status as drawn is what the others read
        await evaluated(checkpoints, world, w.HOSTILE)
        seen["invalid"] = judged(world, "CheckpointPolicy")
    return seen


def hostile(kind: str, spec: JSON, status: JSON | None, aim: bool, prune: bool) -> JSON:
    if aim:
        spec = {**spec, "scope": {"namespaces": [w.OTHER]}}
    if aim and kind == "CheckpointPolicy" and status and status.get("locations"):
        here = {"source": "PVC", "namespace": w.OTHER, "pvc": "ckpt", "path": "/runs"}
        status = {**status, "locations": [{**status["locations"][0], **here}]}
    if prune:
        spec = pruned(MODELS[kind], spec)
        status = pruned(STATUSES[kind], status) if status is not None else None
    body: JSON = {"apiVersion": w.GROUP, "kind": kind, "metadata": {"name": w.HOSTILE}}
    return {**body, "spec": spec, **({"status": status} if status is not None else {})}


def drawn(kind: str) -> st.SearchStrategy[JSON]:
    """A hostile policy of `kind`: a spec and a status (or none) the schema admits."""
    statuses = st.none() | admitted(kind, "status")
    return st.builds(hostile, st.just(kind), admitted(kind), statuses, st.booleans(), st.booleans())


def shares_team_a(kind: str, body: JSON) -> bool:
    """Valid, and governing team-a's namespace (whatever its label selector says)."""
    spec = parse_spec(MODELS[kind], body["spec"])
    if isinstance(spec, list):
        return False
    scope = spec.scope.model_copy(update={"selector": None})  # type: ignore[attr-defined]
    return in_scope(scope, w.NS, w.labels_of(w.NS), {})


def check(kind: str, paths: Paths, body: JSON) -> None:
    seen = asyncio.run(paths(body))
    invalid = seen.pop("invalid")
    if kind not in ALONE:
        ALONE[kind] = asyncio.run(paths(None))
    shares = shares_team_a(kind, body)
    event(f"{'invalid' if invalid else 'valid'} spec{', governs team-a too' if shares else ''}")
    if not shares:
        assert seen == ALONE[kind]


@CASES
@given(drawn("TrainingBudget"))
def test_a_hostile_budget_costs_only_itself(body: JSON) -> None:
    check("TrainingBudget", budget_paths, body)


@CASES
@given(drawn("IdleReclaimPolicy"))
def test_a_hostile_idle_policy_costs_only_itself(body: JSON) -> None:
    check("IdleReclaimPolicy", idle_paths, body)


@CASES
@given(drawn("CheckpointPolicy"))
def test_a_hostile_checkpoint_policy_costs_only_itself(body: JSON) -> None:
    check("CheckpointPolicy", checkpoint_paths, body)
