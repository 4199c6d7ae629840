"""The Kueue AdmissionCheck controller: decides trainwarden's budget check on every Workload
that waits on it, when the Workload changes, when a budget does, and every RESYNC while it
waits (forecasts move with the clock).

Keyed by Workload uid in a work queue, decided one pass at a time by a single worker, so
that two Workloads decided back to back never both count on the same room in a budget:
what a pass lets through is promised before the next decision, and remembered (`recent`)
until the cache shows it. Nothing else is kept: the check states are on the Workloads.
"""

import asyncio
from datetime import datetime, timedelta

from trainwarden import logs
from trainwarden.adapters.kube import Conflict, Gone, Kube, Unreachable
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.base import Clock, utcnow
from trainwarden.controllers.links import Links
from trainwarden.controllers.queue import WorkQueue
from trainwarden.core.accounting import Usage
from trainwarden.core.kueue import KueueWorkload, passed, to_decide
from trainwarden.kueue import reconcile as checks

log = logs.get(__name__)
CHECKS = "admission-checks"
"""The queue key for "set our AdmissionChecks Active" (never a uid)."""
RESYNC = timedelta(seconds=30)
RETRY = timedelta(seconds=5)
"""How soon keys held back by an interrupted cache are tried again (failures back off)."""
RECENT = timedelta(minutes=5)
"""How long a Ready we wrote counts as promised while the cache does not show it."""


class KueueController:
    kind = "KueueAdmissionCheck"

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        links: Links,
        *,
        controller: str,
        clock: Clock = utcnow,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.links = links
        """Read: `budget_views` (this instance's budgets as their status says)."""
        self.controller = controller
        self.clock = clock
        self.queue = WorkQueue()
        self.recent: dict[str, datetime] = {}
        self.last_cycle: datetime | None = None

    @property
    def ours(self) -> frozenset[str]:
        return self.cache.kueue.ours(self.controller)

    def _add(self, key: str, delay: timedelta = timedelta(0)) -> None:
        self.queue.add(key, delay.total_seconds())

    def _retry(self, key: str) -> None:
        """A failed pass or decision: `key` again after its own backoff (controllers/queue.py)."""
        self.queue.add(key, self.queue.failed(key))

    def workload_changed(self, old: KueueWorkload | None, new: KueueWorkload | None) -> None:
        if new is None:
            if old is not None:
                self.recent.pop(old.uid, None)
                self.queue.forget(old.uid)
                if passed(old, self.ours):
                    self.budgets_changed()  # its promise is gone: others may fit now
            return
        ours = self.ours
        if new.uid in self.recent and passed(new, ours):
            del self.recent[new.uid]  # the cache shows our Ready now
        if to_decide(new, ours):
            self._add(new.uid)
        elif old is not None and passed(old, ours) and not passed(new, ours):
            self.budgets_changed()  # finished or deactivated: what it promised is free

    def checks_changed(self) -> None:
        """An AdmissionCheck changed: ours are set Active again if need be."""
        self._add(CHECKS)

    def budgets_changed(self) -> None:
        """A budget changed (spec or status): decide every waiting Workload again."""
        ours = self.ours
        for w in list(self.cache.kueue.workloads.values()):
            if to_decide(w, ours):
                self._add(w.uid)

    async def run(self, ready: asyncio.Event) -> None:
        """Decide once the cache is synced; runs until cancelled."""
        await ready.wait()
        self.last_cycle = self.clock()
        self._add(CHECKS)
        self.budgets_changed()
        while True:
            first = await self.queue.get()
            keys = [first, *self.queue.take_due()]
            try:
                await self.process(keys)
            except Exception:  # never die: the next change or resync tries again
                log.exception("admission check pass failed", workloads=len(keys))
                for key in keys:
                    self._retry(key)
            finally:
                for key in keys:
                    self.queue.done(key)
            self.last_cycle = self.clock()

    async def process(self, keys: list[str]) -> None:
        """One pass over due keys: our AdmissionChecks Active, then each Workload decided."""
        now = self.clock()
        if self.cache.interruptions.oldest() is not None:  # never decide on a stale view
            for key in keys:
                self._add(key, RETRY)
            return
        if CHECKS in keys:
            await checks.activate(self.kube, self.cache, self.controller, now)
            self.queue.succeeded(CHECKS)
        uids = [k for k in keys if k != CHECKS]
        if not uids:
            return
        self.recent = {u: t for u, t in self.recent.items() if now - t < RECENT}
        ctx = checks.Checks(
            self.kube, self.cache, self.controller, self.links.budget_views.budget_views(), now
        )
        ours = self.ours
        promises = checks.promised(ctx, ours, self.recent)
        for uid in uids:
            w = self.cache.kueue.workloads.get(uid)
            if w is None or uid in self.recent:
                continue
            for check in to_decide(w, ours):
                await self._decide(ctx, w, check, promises)

    async def _decide(
        self, ctx: checks.Checks, w: KueueWorkload, check: str, promises: dict[str, Usage]
    ) -> None:
        try:
            verdict = await checks.decide_one(ctx, w, check, promises)
        except Conflict:
            return  # Kueue changed it: the watch brings the new version, decided then
        except Gone:
            return
        except Unreachable as error:
            log.warning("API server unreachable", object=str(w), error=str(error))
            self._retry(w.uid)
            return
        self.queue.succeeded(w.uid)
        if verdict.state == "Ready":
            self.recent[w.uid] = ctx.now
            checks.promise(ctx, promises, w, None)
        elif verdict.state == "Pending":
            self._add(w.uid, RESYNC)
