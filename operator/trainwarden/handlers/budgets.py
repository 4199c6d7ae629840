"""kopf glue for budgets: tiny indices of pods, namespaces, nodes and budgets, and one
controller task that evaluates every budget when something changes or a forecast is due.

No timers or daemons on the budgets (they would put finalizers on them), no handlers that
store state on pods: pods are only read, through an index and a stateless event handler.
"""

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from kubernetes import client, config

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import Conflict, Gone, Kube
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core.pods import PodFacts, facts, snapshot
from trainwarden.reconcile.budget import (
    RESYNC,
    Inventory,
    Memory,
    reconcile,
    report_label_problems,
)

log = logs.get(__name__)
ERROR_BACKOFF = timedelta(seconds=5)


class BudgetController:
    """Evaluates every budget in one loop; pod events wake it, forecasts schedule it."""

    def __init__(self, kube: Kube, inventory: Inventory, budgets: kopf.Index[str, Any]) -> None:
        self.kube = kube
        self.inventory = inventory
        self.budgets = budgets
        self.memory: dict[str, Memory] = {}
        self.wake = asyncio.Event()
        self.indexed = asyncio.Event()
        self.reported: set[str] = set()
        self.last_cycle: datetime | None = None

    def pod_gone(self, pod: kopf.Body) -> None:
        node_labels = self.inventory.node_labels((pod.get("spec") or {}).get("nodeName"))
        final = snapshot(dict(pod), node_labels, gone_at=datetime.now(UTC))
        for memory in self.memory.values():
            memory.gone[final.uid] = final
        self.wake.set()

    def _body(self, name: str, indexed: dict[str, Any]) -> dict[str, Any]:
        """The index may lag behind our own last write; never evaluate an older version."""
        memory = self.memory.setdefault(name, Memory())
        if (
            memory.written is not None
            and indexed["metadata"]["resourceVersion"] == memory.replaced_rv
        ):
            return memory.written
        return indexed

    def _snapshot(self) -> dict[str, dict[str, Any]]:
        """A copy of the budgets index: kopf changes it while evaluations await the API."""
        return {
            name: self._body(name, body)
            for name in list(self.budgets)
            for body in list(self.budgets.get(name, ()))
        }

    async def _report_labels(self, budgets: dict[str, dict[str, Any]]) -> None:
        scopes = {}
        for name, body in budgets.items():
            spec = parse_spec(TrainingBudgetSpec, body.get("spec") or {})
            if not isinstance(spec, list):
                scopes[name] = spec.scope
        await report_label_problems(scopes, self.inventory, self.kube, self.reported)

    async def _evaluate(
        self, name: str, body: dict[str, Any], now: datetime, ours: list[dict[str, Any]]
    ) -> datetime:
        """One budget's evaluation; whatever fails, the others and the loop carry on."""
        started = asyncio.get_running_loop().time()
        failed = False
        try:
            due = await reconcile(body, self.inventory, self.kube, self.memory[name], now, ours)
        except Conflict as error:
            log.info(
                "budget changed during evaluation; re-evaluating",
                object=f"TrainingBudget/{name}",
                error=str(error),
            )
            due = now
        except Gone:
            log.info("budget deleted during evaluation", object=f"TrainingBudget/{name}")
            due = now + RESYNC
        except Exception:
            failed = True
            log.exception("budget evaluation failed", object=f"TrainingBudget/{name}")
            due = now + ERROR_BACKOFF
        metrics.report_reconcile(
            "TrainingBudget", asyncio.get_running_loop().time() - started, failed=failed
        )
        return due

    async def _cycle(self) -> datetime:
        now = datetime.now(UTC)
        budgets = self._snapshot()
        for gone in set(self.memory) - set(budgets):
            del self.memory[gone]
            metrics.forget_policy("TrainingBudget", gone)
        due = now + RESYNC
        suspended = await workloads.suspended_by_budgets(self.kube) if budgets else {}
        for name, body in sorted(budgets.items()):
            ours = suspended.get(workloads.label_value(name), [])
            due = min(due, await self._evaluate(name, body, now, ours))
        try:
            await self._report_labels(budgets)
        except Exception:
            log.exception("reporting budget labels failed")
        return due

    async def run(self) -> None:
        await self.indexed.wait()
        log.info("budget controller started")
        while True:
            try:
                due = await self._cycle()
                self.last_cycle = datetime.now(UTC)
            except Exception:
                # The controller task must never die: a dead task would silently stop every
                # budget while the operator still looks healthy.
                log.exception("budget cycle failed")
                due = datetime.now(UTC) + ERROR_BACKOFF
            delay = max(0.0, (due - datetime.now(UTC)).total_seconds())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=delay)
            self.wake.clear()
            # Let a burst of pod events settle into one evaluation.
            await asyncio.sleep(0.1)


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.index("pods", registry=registry, id="pods_index")
    def pods_index(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, PodFacts]:
        return {namespace or "": facts(dict(body))}

    @kopf.index("namespaces", registry=registry, id="namespaces_index")
    def namespaces_index(name: str, labels: kopf.Labels, **_: Any) -> dict[str, dict[str, str]]:
        return {name: dict(labels)}

    @kopf.index("nodes", registry=registry, id="nodes_index")
    def nodes_index(name: str, labels: kopf.Labels, **_: Any) -> dict[str, dict[str, str]]:
        return {name: dict(labels)}

    @kopf.index(GROUP, VERSION, "trainingbudgets", registry=registry, id="budgets_index")
    def budgets_index(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {name: dict(body)}

    @kopf.on.startup(registry=registry)
    async def start_budgets(memo: kopf.Memo, **indices: Any) -> None:
        """kopf passes every index to startup handlers as a keyword named after it."""
        config.load_config()  # type: ignore[no-untyped-call]
        controller = BudgetController(
            Kube(client.ApiClient()),
            Inventory(indices["pods_index"], indices["namespaces_index"], indices["nodes_index"]),
            indices["budgets_index"],
        )
        memo.budgets = controller
        memo.budget_task = asyncio.create_task(controller.run())

    @kopf.on.probe(registry=registry, id="budget_controller")
    def budget_controller_alive(memo: kopf.Memo, **_: Any) -> str | None:
        """Liveness: fails (HTTP 500 on /healthz) if the controller task ever stops."""
        task: asyncio.Task[None] | None = memo.get("budget_task")
        if task is not None and task.done():
            raise RuntimeError("the budget controller task has stopped")
        controller: BudgetController | None = memo.get("budgets")
        last = controller.last_cycle if controller else None
        return last.isoformat() if last else None

    @kopf.on.cleanup(registry=registry)
    async def stop_budgets(memo: kopf.Memo, **_: Any) -> None:
        memo.budget_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await memo.budget_task

    # async, so they run on the event loop that owns the controller's asyncio.Event.
    @kopf.on.event("pods", registry=registry)
    async def pod_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:  # noqa: A002
        controller: BudgetController = memo.budgets
        controller.indexed.set()  # kopf runs handlers only once every index is populated
        if type == "DELETED":
            controller.pod_gone(body)
        else:
            controller.wake.set()

    @kopf.on.event("namespaces", registry=registry)
    async def namespace_changed(memo: kopf.Memo, **_: Any) -> None:
        """Namespace labels decide namespaceSelector scopes. And a cluster always has
        namespaces, so this also tells an empty cluster's controller that indexing is done."""
        controller: BudgetController = memo.budgets
        controller.indexed.set()
        controller.wake.set()

    @kopf.on.event(GROUP, VERSION, "trainingbudgets", registry=registry)
    async def budget_changed(memo: kopf.Memo, **_: Any) -> None:
        controller: BudgetController = memo.budgets
        controller.indexed.set()
        controller.wake.set()
