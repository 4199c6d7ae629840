"""The loop every policy controller runs: evaluate, sleep until the next evaluation is due or
something wakes it, and never die.

Controllers are long-lived tasks started at operator startup rather than kopf timers or
daemons on the policy objects, which would put finalizers on them (kopf #833, #1001).
"""

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

import kopf

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.reconcile.inventory import Inventory
from trainwarden.reconcile.status import RESYNC, LastWrite

log = logs.get(__name__)
ERROR_BACKOFF = timedelta(seconds=5)
M = TypeVar("M", bound=LastWrite)


class Controller(ABC, Generic[M]):
    kind: ClassVar[str]

    def __init__(self, kube: Kube, inventory: Inventory, policies: kopf.Index[str, Any]) -> None:
        self.kube = kube
        self.inventory = inventory
        self.policies = policies
        self.memory: dict[str, M] = {}
        self.wake = asyncio.Event()
        self.indexed = asyncio.Event()
        self.last_cycle: datetime | None = None

    @abstractmethod
    def new_memory(self) -> M: ...

    @abstractmethod
    async def cycle(self) -> datetime:
        """Evaluate what is due; return when the next evaluation is due."""

    def snapshot(self) -> dict[str, JSON]:
        """A copy of the policy index (kopf changes it while evaluations await the API),
        each entry at least as new as our own last status write; forgets deleted ones."""
        current = {}
        for name in list(self.policies):
            for body in list(self.policies.get(name, ())):
                memory = self.memory.setdefault(name, self.new_memory())
                current[name] = memory.freshest(body)
        for gone in set(self.memory) - set(current):
            del self.memory[gone]
            metrics.forget_policy(self.kind, gone)
        return current

    async def guarded(self, name: str, evaluation: Awaitable[datetime], now: datetime) -> datetime:
        """One policy's evaluation; whatever fails, the others and the loop carry on."""
        obj = f"{self.kind}/{name}"
        started = asyncio.get_running_loop().time()
        failed = False
        try:
            due = await evaluation
        except Conflict as error:
            log.info("policy changed during evaluation", object=obj, error=str(error))
            due = now
        except Gone:
            log.info("policy deleted during evaluation", object=obj)
            due = now + RESYNC
        except Exception:
            failed = True
            log.exception("policy evaluation failed", object=obj)
            due = now + ERROR_BACKOFF
        elapsed = asyncio.get_running_loop().time() - started
        metrics.report_reconcile(self.kind, elapsed, failed=failed)
        return due

    async def run(self) -> None:
        await self.indexed.wait()
        log.info("controller started", kind=self.kind)
        while True:
            try:
                due = await self.cycle()
                self.last_cycle = datetime.now(UTC)
            except Exception:
                # The task must never die: a dead task would silently stop every policy of
                # its kind while the operator still looks healthy.
                log.exception("controller cycle failed", kind=self.kind)
                due = datetime.now(UTC) + ERROR_BACKOFF
            delay = max(0.0, (due - datetime.now(UTC)).total_seconds())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=delay)
            self.wake.clear()
            # Let a burst of events settle into one evaluation.
            await asyncio.sleep(0.1)
