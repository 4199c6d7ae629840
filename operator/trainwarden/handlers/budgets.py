"""The budget controller: evaluates every TrainingBudget when pods change or a forecast,
grace period or period end is due."""

from datetime import UTC, datetime
from typing import Any

import kopf

from trainwarden import logs
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import Kube
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core.pods import snapshot
from trainwarden.handlers.loop import Controller
from trainwarden.reconcile.budget import Memory, reconcile, report_label_problems
from trainwarden.reconcile.inventory import Inventory
from trainwarden.reconcile.status import RESYNC

log = logs.get(__name__)


class BudgetController(Controller[Memory]):
    kind = "TrainingBudget"

    def __init__(self, kube: Kube, inventory: Inventory, policies: kopf.Index[str, Any]) -> None:
        super().__init__(kube, inventory, policies)
        self.reported: set[str] = set()

    def new_memory(self) -> Memory:
        return Memory()

    def pod_gone(self, pod: kopf.Body) -> None:
        node_labels = self.inventory.node_labels((pod.get("spec") or {}).get("nodeName"))
        final = snapshot(dict(pod), node_labels, gone_at=datetime.now(UTC))
        for memory in self.memory.values():
            memory.gone[final.uid] = final
        self.wake.set()

    async def _report_labels(self, budgets: dict[str, dict[str, Any]]) -> None:
        scopes = {}
        for name, body in budgets.items():
            spec = parse_spec(TrainingBudgetSpec, body.get("spec") or {})
            if not isinstance(spec, list):
                scopes[name] = spec.scope
        await report_label_problems(scopes, self.inventory, self.kube, self.reported)

    async def cycle(self) -> datetime:
        now = datetime.now(UTC)
        budgets = self.snapshot()
        due = now + RESYNC
        suspended = await workloads.suspended_by_budgets(self.kube) if budgets else {}
        for name, body in sorted(budgets.items()):
            ours = suspended.get(workloads.label_value(name), [])
            evaluation = reconcile(body, self.inventory, self.kube, self.memory[name], now, ours)
            due = min(due, await self.guarded(name, evaluation, now))
        try:
            await self._report_labels(budgets)
        except Exception:
            log.exception("reporting budget labels failed")
        return due
