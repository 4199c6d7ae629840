"""The idle reclaim controller: evaluates each IdleReclaimPolicy when it is due.

Pod events do not wake it: utilization arrives continuously, so each evaluation says when
it next matters (a warm-up ending, a suspicion maturing, a grace period running out) and
only policies that are due, or changed, are evaluated. That keeps Prometheus at one query
per policy per evaluation however busy the pods are.
"""

from datetime import UTC, datetime
from typing import Any

import kopf

from trainwarden.adapters.kube import Kube
from trainwarden.adapters.prometheus import Prometheus
from trainwarden.handlers.loop import Controller
from trainwarden.reconcile.idle import Memory, reconcile
from trainwarden.reconcile.inventory import Inventory
from trainwarden.reconcile.status import RESYNC


class IdleController(Controller[Memory]):
    kind = "IdleReclaimPolicy"

    def __init__(
        self,
        kube: Kube,
        inventory: Inventory,
        policies: kopf.Index[str, Any],
        prometheus: Prometheus | None,
    ) -> None:
        super().__init__(kube, inventory, policies)
        self.prometheus = prometheus
        self.due: dict[str, datetime] = {}
        self.seen: dict[str, str] = {}

    def new_memory(self) -> Memory:
        return Memory()

    async def cycle(self) -> datetime:
        now = datetime.now(UTC)
        policies = self.snapshot()
        claimed: set[str] = set()
        for gone in set(self.due) - set(policies):
            self.due.pop(gone, None)
            self.seen.pop(gone, None)
        for name, body in sorted(policies.items()):
            version = body["metadata"].get("resourceVersion", "")
            changed = self.seen.get(name) != version
            if not changed and self.due.get(name, now) > now:
                # Not due: its pods stay claimed, so a later policy cannot take them over.
                claimed |= {uid for uid in self.memory[name].states}
                continue
            evaluation = reconcile(
                body, self.inventory, self.kube, self.prometheus, self.memory[name], now, claimed
            )
            self.due[name] = await self.guarded(name, evaluation, now)
            written = self.memory[name].written
            self.seen[name] = (written or body)["metadata"].get("resourceVersion", "")
        return min([now + RESYNC, *self.due.values()])
