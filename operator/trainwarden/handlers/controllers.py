"""kopf glue for the controllers: tiny indices of pods, namespaces, nodes and policies,
stateless event handlers that wake the controllers, and their start, stop and liveness.

No timers or daemons on the policies (they would put finalizers on them), no handlers that
store state on pods: pods are only read, through an index and a stateless event handler.
"""

import asyncio
import contextlib
from typing import Any

import kopf
from kubernetes import client, config

from trainwarden.adapters.kube_client import KubeClient
from trainwarden.adapters.prometheus import Prometheus
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.core.locations import CHECKPOINT_PATH, TrainingJob, training_job
from trainwarden.core.nodes import NodeFacts, node_facts
from trainwarden.core.pods import PodFacts, facts
from trainwarden.handlers.budgets import BudgetController
from trainwarden.handlers.checkpoints import CheckpointController
from trainwarden.handlers.idle import IdleController
from trainwarden.handlers.loop import Controller
from trainwarden.reconcile.inventory import Inventory
from trainwarden.reconcile.pruner import PrunerSettings


def _controllers(memo: kopf.Memo) -> list[Controller[Any]]:
    found: list[Controller[Any]] = memo.get("controllers") or []
    return found


def register(
    registry: kopf.OperatorRegistry,
    *,
    prometheus_url: str | None,
    pruner: PrunerSettings | None = None,
    kill_switch: tuple[str, str] | None = None,
) -> None:
    @kopf.index("pods", registry=registry, id="pods_index")
    def pods_index(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, PodFacts]:
        return {namespace or "": facts(dict(body))}

    @kopf.index("namespaces", registry=registry, id="namespaces_index")
    def namespaces_index(name: str, labels: kopf.Labels, **_: Any) -> dict[str, dict[str, str]]:
        return {name: dict(labels)}

    @kopf.index("nodes", registry=registry, id="nodes_index")
    def nodes_index(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeFacts]:
        return {name: node_facts(dict(body))}

    @kopf.index(GROUP, VERSION, "trainingbudgets", registry=registry, id="budgets_index")
    def budgets_index(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {name: dict(body)}

    @kopf.index(GROUP, VERSION, "idlereclaimpolicies", registry=registry, id="idle_index")
    def idle_index(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {name: dict(body)}

    @kopf.index(GROUP, VERSION, "checkpointpolicies", registry=registry, id="checkpoint_index")
    def checkpoint_index(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {name: dict(body)}

    # Only Jobs that name a checkpoint directory: the index stays as small as they are few.
    @kopf.index(
        "batch",
        "v1",
        "jobs",
        registry=registry,
        id="checkpoint_jobs_index",
        annotations={CHECKPOINT_PATH: kopf.PRESENT},
    )
    def checkpoint_jobs_index(
        namespace: str | None, name: str, body: kopf.Body, **_: Any
    ) -> dict[str, TrainingJob]:
        return {f"{namespace}/{name}": training_job(dict(body))}

    @kopf.on.startup(registry=registry)
    async def start_controllers(memo: kopf.Memo, **indices: Any) -> None:
        """kopf passes every index to startup handlers as a keyword named after it."""
        config.load_config()  # type: ignore[no-untyped-call]
        kube = KubeClient(client.ApiClient())
        inventory = Inventory(
            indices["pods_index"], indices["namespaces_index"], indices["nodes_index"]
        )
        memo.budgets = BudgetController(kube, inventory, indices["budgets_index"])
        memo.idle = IdleController(
            kube,
            inventory,
            indices["idle_index"],
            Prometheus(prometheus_url) if prometheus_url else None,
        )
        memo.checkpoints = CheckpointController(
            kube,
            inventory,
            indices["checkpoint_index"],
            indices["checkpoint_jobs_index"],
            pruner,
            kill_switch,
        )
        memo.controllers = [memo.budgets, memo.idle, memo.checkpoints]
        memo.tasks = [asyncio.create_task(c.run()) for c in memo.controllers]

    @kopf.on.probe(registry=registry, id="controllers")
    def controllers_alive(memo: kopf.Memo, **_: Any) -> dict[str, str | None]:
        """Liveness: fails (HTTP 500 on /healthz) if a controller task ever stops."""
        tasks: list[asyncio.Task[None]] = memo.get("tasks") or []
        if any(task.done() for task in tasks):
            raise RuntimeError("a controller task has stopped")
        return {
            c.kind: c.last_cycle.isoformat() if c.last_cycle else None for c in _controllers(memo)
        }

    @kopf.on.cleanup(registry=registry)
    async def stop_controllers(memo: kopf.Memo, **_: Any) -> None:
        for task in memo.get("tasks") or []:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # async, so they run on the event loop that owns the controllers' asyncio.Events.
    @kopf.on.event("pods", registry=registry)
    async def pod_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:  # noqa: A002
        for controller in _controllers(memo):
            controller.indexed.set()  # kopf runs handlers only once every index is populated
        budgets: BudgetController = memo.budgets
        if type == "DELETED":
            budgets.pod_gone(body)
        else:
            budgets.wake.set()

    @kopf.on.event("namespaces", registry=registry)
    async def namespace_changed(memo: kopf.Memo, **_: Any) -> None:
        """Namespace labels decide namespaceSelector scopes. And a cluster always has
        namespaces, so this also tells an empty cluster's controllers that indexing is done."""
        for controller in _controllers(memo):
            controller.indexed.set()
        memo.budgets.wake.set()

    @kopf.on.event(GROUP, VERSION, "trainingbudgets", registry=registry)
    async def budget_changed(memo: kopf.Memo, **_: Any) -> None:
        memo.budgets.indexed.set()
        memo.budgets.wake.set()

    @kopf.on.event(GROUP, VERSION, "idlereclaimpolicies", registry=registry)
    async def idle_policy_changed(memo: kopf.Memo, **_: Any) -> None:
        memo.idle.indexed.set()
        memo.idle.wake.set()

    @kopf.on.event(GROUP, VERSION, "checkpointpolicies", registry=registry)
    async def checkpoint_policy_changed(memo: kopf.Memo, **_: Any) -> None:
        memo.checkpoints.indexed.set()
        memo.checkpoints.wake.set()

    @kopf.on.event(
        "batch", "v1", "jobs", registry=registry, annotations={CHECKPOINT_PATH: kopf.PRESENT}
    )
    async def checkpoint_job_changed(memo: kopf.Memo, **_: Any) -> None:
        """A job that names a checkpoint directory started or finished: its rules may change."""
        memo.checkpoints.wake.set()
