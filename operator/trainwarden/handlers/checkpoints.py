"""The checkpoint pruning controller: evaluates every CheckpointPolicy on its schedule, when
a training job that names a checkpoint directory finishes, and while its pruners run."""

from datetime import UTC, datetime
from typing import Any

import kopf

from trainwarden import logs
from trainwarden.adapters.kube import Kube
from trainwarden.core.locations import TrainingJob
from trainwarden.handlers.loop import Controller
from trainwarden.reconcile.checkpoints import Context, Memory, reconcile
from trainwarden.reconcile.inventory import Inventory
from trainwarden.reconcile.pruner import PrunerSettings
from trainwarden.reconcile.status import RESYNC

log = logs.get(__name__)
KILL_SWITCH_KEY = "checkpointPruning"


class CheckpointController(Controller[Memory]):
    kind = "CheckpointPolicy"

    def __init__(
        self,
        kube: Kube,
        inventory: Inventory,
        policies: kopf.Index[str, Any],
        jobs: kopf.Index[str, TrainingJob],
        settings: PrunerSettings | None,
        kill_switch: tuple[str, str] | None,
    ) -> None:
        super().__init__(kube, inventory, policies)
        self.jobs = jobs
        self.settings = settings
        self.kill_switch = kill_switch

    def new_memory(self) -> Memory:
        return Memory()

    async def paused(self) -> str | None:
        """The kill switch: a ConfigMap with checkpointPruning: paused stops every new pruner
        Job from the next cycle on (within seconds), without touching any policy."""
        if self.kill_switch is None:
            return None
        namespace, name = self.kill_switch
        found = await self.kube.get("v1", "ConfigMap", namespace, name)
        value = ((found or {}).get("data") or {}).get(KILL_SWITCH_KEY, "")
        if value.strip().lower() != "paused":
            return None
        return (
            f"checkpoint pruning is paused cluster-wide by ConfigMap {namespace}/{name} "
            f"({KILL_SWITCH_KEY}: paused): no pruner Job starts until it is removed"
        )

    async def cycle(self) -> datetime:
        now = datetime.now(UTC)
        policies = self.snapshot()
        jobs = [job for store in list(self.jobs.values()) for job in list(store)]
        context = Context(jobs, self.settings, await self.paused() if policies else None)
        due = [now + RESYNC]
        for name, body in sorted(policies.items()):
            evaluation = reconcile(body, self.inventory, self.kube, self.memory[name], now, context)
            due.append(await self.guarded(name, evaluation, now))
        return min(due)
