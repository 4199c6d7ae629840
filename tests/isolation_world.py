"""The world of the Isolation suite (tests/test_isolation.py): two teams, their GPU Jobs,
reference policies that govern team-a, and every path that reads policies, run the way
the operator runs it (controllers on the fake API server, the webhook's view, Kueue's
check, receipts, report, estimate).

A path is run with the reference policies alone or with one hostile policy beside them
(named "hostile": it sorts first wherever policies go by name); each returns what the
reference policies got, so that the two can be compared.
"""

import contextlib
import json
import signal
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fakeprometheus import FakeBusy
from trainwarden import estimates, report
from trainwarden.adapters.idle_window import IdleWindow
from trainwarden.api.v1alpha1.names import CHECK_CONTROLLER, HELD_AT, HELD_BY
from trainwarden.budget.controller import BudgetController
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.controllers.links import Links
from trainwarden.core.admission import Verdict, admit
from trainwarden.core.runs import Run
from trainwarden.estimate_inputs import NAME_LABEL, Manifest
from trainwarden.kueue.controller import CHECKS, KueueController
from trainwarden.receipts.controller import ReceiptController
from trainwarden.receipts.locations import located
from trainwarden.receipts.reconcile import ReceiptSettings
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import (
    AdmissionCheckBuilder,
    BudgetBuilder,
    CheckpointPolicyBuilder,
    IdlePolicyBuilder,
    JobBuilder,
    NamespaceBuilder,
    NodeBuilder,
    PodBuilder,
    PVCBuilder,
    WorkloadBuilder,
)
from trainwarden.testing.windows import grid, summary
from webhook_views import fed_view
from world import JSON, T0, Scanned, World

NS, OTHER = "team-a", "team-h"
REF, HOSTILE = "ref", "hostile"
GROUP = "trainwarden.dev/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
HOUR = timedelta(hours=1)
CKPT = "ckpt:/runs"
SLOW = 2.0
"""Seconds one path may take for one policy: more starves every other policy (the
controllers share one event loop)."""


class TooSlow(Exception):
    """A path worked on one policy for longer than SLOW."""


@contextlib.contextmanager
def bounded(path: str) -> Iterator[None]:
    def expired(*_: object) -> None:
        raise TooSlow(f"{path} took over {SLOW} s for one policy")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, SLOW)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def labels_of(namespace: str) -> dict[str, str]:
    return {NAME_LABEL: namespace, "team": namespace}


def new_job() -> JSON:
    annotations = {"trainwarden.dev/expected-duration": "2h"}
    return JobBuilder("incoming", NS).gpus(1).annotations(annotations).build()


def base_world() -> World:
    """Two teams, each with a GPU Job that writes checkpoints to a PVC and has run for two
    hours, and a Job held by a budget (in team-a by the reference, in team-h by the hostile
    one); a node; a Kueue Workload in team-a waiting on our AdmissionCheck."""
    world = World()
    world.put(NodeBuilder("gpu-0").gpus(8).labels({"nvidia.com/gpu.product": "A100"}).build())
    for ns in (NS, OTHER):
        world.put(NamespaceBuilder(ns).labels(labels_of(ns)).build())
        world.put(PVCBuilder("ckpt", ns).labels({"checkpoints": "yes"}).bound().build())
        world.advance(-7200)
        job = world.put(JobBuilder("train", ns).gpus(1).checkpoint_path(CKPT).build())
        world.advance(7200)
        pod = PodBuilder("train-0", ns).gpus(1).owned_by(job).node("gpu-0")
        world.put(pod.started(T0 - 2 * HOUR).build())
        held = {HELD_BY: REF if ns == NS else HOSTILE, HELD_AT: rfc3339(T0 - HOUR)}
        world.put(JobBuilder("held", ns).gpus(1).suspended().annotations(held).build())
    world.put(AdmissionCheckBuilder("budget").build())
    queued = world.put(JobBuilder("queued", NS).gpus(1).queue("lq").suspended().build())
    workload = WorkloadBuilder("job-queued", NS).for_job(queued).reserved("cq", T0)
    workload = workload.check("budget", "Pending", T0 - timedelta(minutes=1))
    world.put(workload.max_execution(1800).build())
    return world


def reference(kind: str) -> JSON:
    if kind == "TrainingBudget":  # exhausted (2 GPU-hours of 1), holding new work
        return BudgetBuilder(REF).namespaces(NS).accelerator_hours(1).enforce().grace("0s").build()
    if kind == "IdleReclaimPolicy":
        idle = IdlePolicyBuilder(REF).namespaces(NS).enforce().action("Suspend").grace("1m")
        return idle.signal(window="10m", resolution="1m", warmup="1m").build()
    builder = CheckpointPolicyBuilder(REF).namespaces(NS).enforce().keep_last(1)
    return builder.pvc(labels={"checkpoints": "yes"}).build()


def storable(world: World) -> None:
    """Every write must be JSON the API server can store: no NaN, no infinity."""
    for w in world.fake.writes:
        json.dumps(w.body, allow_nan=False)


def writes_but(world: World, name: str) -> list[tuple[Any, ...]]:
    """Every write and Event of the code under test, but those on the policy `name`."""
    storable(world)
    writes = [
        (w.verb, w.kind, w.namespace, w.name, w.subresource, w.body, w.outcome)
        for w in world.fake.writes
        if w.name != name
    ]
    events = [
        (e.kind, e.namespace, e.name, e.type, e.reason, e.message)
        for e in world.fake.events
        if e.name != name
    ]
    return writes + events


def ready(body: Mapping[str, Any]) -> dict[str, Any]:
    conditions = (body.get("status") or {}).get("conditions") or []
    found: dict[str, Any] = next(c for c in conditions if c["type"] == "Ready")
    return found


def policies(world: World, kind: str) -> list[JSON]:
    return sorted(
        (o for k, o in world.fake.store.items() if k[:2] == (GROUP, kind)),
        key=lambda o: str(o["metadata"]["name"]),
    )


# --- the paths ---------------------------------------------------------------------------


def webhook(budgets: list[JSON]) -> Verdict:
    """The webhook's view, fed as its informers feed it, and its verdict on a new Job."""
    with bounded("the webhook's informer"):
        view = fed_view(budgets, {ns: labels_of(ns) for ns in (NS, OTHER)})
    assert view.current()
    with bounded("the webhook"):
        return admit(new_job(), view.namespace_labels(NS), view.budgets(), T0)


async def kueue_check(world: World, budgets: BudgetController) -> JSON:
    checks = KueueController(
        world.fake,
        world.cache,
        Links(budget_views=budgets),
        controller=CHECK_CONTROLLER,
        clock=world.clock,
    )
    workload = world.read(KUEUE, "Workload", NS, "job-queued")
    with bounded("the Kueue check"):
        await checks.process([CHECKS, workload["metadata"]["uid"]])
    world.sync()
    entries = world.read(KUEUE, "Workload", NS, "job-queued")["status"]["admissionChecks"]
    found: JSON = next(c for c in entries if c["name"] == "budget")
    return found


def estimated(budgets: list[JSON]) -> tuple[JSON, str]:
    with bounded("trainwarden estimate"):
        built = estimates.build(
            [Manifest("job.yaml", 1, new_job())],
            budgets,
            {NS: labels_of(NS)},
            default_namespace=NS,
            now=T0,
            budget_source="cluster",
        )
        return built, estimates.table(built)


def reported(world: World) -> tuple[JSON, str]:
    with bounded("trainwarden report"):
        built = report.build(
            policies(world, "TrainingBudget"),
            policies(world, "IdleReclaimPolicy"),
            policies(world, "CheckpointPolicy"),
            now=world.now,
        )
        return built, report.table(built)


async def receipts(world: World, index: BudgetIndex, checkpoints: list[JSON]) -> list[JSON]:
    """Both teams' Jobs finish; their receipts, as the receipt controller writes them."""
    settings = ReceiptSettings(resolution=timedelta(seconds=60))
    busy = FakeBusy({(NS, "train-0"): (0.5, 1), (OTHER, "train-0"): (0.5, 1)})
    controller = ReceiptController(
        world.fake,
        world.cache,
        index,
        busy,
        settings,
        links=Links(checkpoint_scans=Scanned(lambda: checkpoints)),
        clock=world.clock,
    )
    world.cache.listeners.add(controller.index)
    controller.index.rebuild()
    for ns in (NS, OTHER):
        finish(world, ns)
    with bounded("receipts"):
        for uid in sorted(controller.closing):
            await controller.process(uid)
    world.sync()
    return [o for k, o in world.fake.store.items() if k[1] == "RunReceipt" and k[2] == NS]
    # team-h's receipt was written too (or not): only not raising is asked of it


def finish(world: World, ns: str) -> None:
    at = rfc3339(world.now)
    terminated = {"exitCode": 0, "finishedAt": at}
    statuses = [{"name": "trainer", "restartCount": 0, "state": {"terminated": terminated}}]
    world.fake.edit(
        "v1",
        "Pod",
        ns,
        "train-0",
        {"status": {"phase": "Succeeded", "containerStatuses": statuses}},
    )
    condition = {"type": "Complete", "status": "True", "lastTransitionTime": at}
    world.fake.edit("batch/v1", "Job", ns, "train", {"status": {"conditions": [condition]}})
    world.sync()


def location_of_ref(checkpoints: list[JSON]) -> Any:
    """The checkpoint location a team-a run names, as receipts look it up."""
    run = Run("batch/v1", "Job", NS, "train", "uid-train", T0.timestamp(), T0.timestamp())
    run.checkpoint_path = CKPT
    with bounded("receipts' checkpoint lookup"):
        return located(Scanned(lambda: checkpoints).checkpoint_scans(), run, labels_of(NS))


class Utilization:
    """Prometheus for idle policies: every pod 1 % busy at every step of the window."""

    async def idle_window(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        at: datetime,
        window: timedelta,
        resolution: timedelta,
        threshold: float,
        min_samples: int = 1,
    ) -> IdleWindow:
        steps = grid(at, window, resolution)
        steady, coverage = summary([(t, 1.0) for t in steps], steps, threshold)
        return IdleWindow(steady, {(ns, "train-0"): coverage for ns in (NS, OTHER)})
