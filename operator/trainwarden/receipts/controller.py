"""The receipt controller: writes each closed run's receipt, and keeps the ledger bounded.

Keyed by the run's uid in a work queue, one worker (receipts are not urgent, and one at a
time keeps Prometheus at one query in flight). A run closes when it finished or was
deleted; its receipt waits until its pods have ended (at most SETTLE), so that held time
is the pods' own. A run that names a checkpoint location a CheckpointPolicy scans waits
for a scan after its last failure or suspension (at most the setting `checkpoint_wait`),
so that the checkpoint written just before it is seen. Prometheus failing is retried
METRICS_TRIES times, then the receipt is written with used and idle unknown; any other
failure is retried, then the run dropped (said in the log), so nothing grows without
bound. Without the key that seals receipts (its Secret unreadable), nothing is written or
removed: runs wait (bounded by the runs that exist), and the log and a metric say why.
"""

import asyncio
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import Busy
from trainwarden.api.v1alpha1.names import RECEIPT_KIND
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.base import COALESCE, Clock, utcnow
from trainwarden.controllers.links import Links
from trainwarden.controllers.queue import WorkQueue
from trainwarden.core.receipts import Located, awaits_scan
from trainwarden.core.runs import Run
from trainwarden.receipts import repeats
from trainwarden.receipts.identity import Keyring
from trainwarden.receipts.ledger import Bounds, Identity, Oldest, load_keyring, remove, sweep
from trainwarden.receipts.locations import located
from trainwarden.receipts.reconcile import Ledger, ReceiptSettings, write
from trainwarden.receipts.repeats import Repeats
from trainwarden.receipts.runs import RunIndex

log = logs.get(__name__)
SETTLE = timedelta(seconds=60)
"""How long a closed run waits for its pods to end before its receipt is written."""
RETRY = timedelta(seconds=5)
METRICS_TRIES = 3
TRIES = 8
SCAN_POLL = timedelta(seconds=10)
"""How often a receipt waiting for a checkpoint scan looks at the policy's status again."""
RESCAN = "rescan"
"""The queue key for "find the runs again" (never a uid): budgets' specs changed."""
SWEEP_KEY = "sweep:"
"""The queue key of a namespace's sweep for the cap (never a uid), before its name."""
SWEEP = timedelta(minutes=30)
"""How often every namespace's receipts are checked against the TTL and the cap (and the
seal's Secret read again: a rotated key is used from then on)."""
KEY_RETRY = timedelta(seconds=60)
"""How soon a run waiting for the seal's key (its Secret unreadable) is tried again."""


class ReceiptController:
    kind = RECEIPT_KIND

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        budgets: BudgetIndex,
        busy: Busy | None,
        settings: ReceiptSettings,
        *,
        instance: str | None = None,
        links: Links | None = None,
        clock: Clock = utcnow,
    ) -> None:
        self.cache = cache
        self.clock = clock
        self.links = links or Links()
        """Read: `checkpoint_scans` (what the CheckpointPolicies found at each location)."""
        self.ledger = Ledger(kube, cache, busy, settings, instance)
        self.queue = WorkQueue()
        self.repeats = Repeats(self._repeated, clock)
        """New work the webhook marked as a repeat: its Event (receipts/repeats.py)."""
        self.index = RunIndex(cache, budgets, self._closed, clock, self.repeats)
        """A cache listener after the budget index (runtime.py `wire`)."""
        self.closing: dict[str, datetime] = {}
        self.located: dict[str, Located] = {}
        """A closing run's checkpoint location as its policy's status had it when the run
        closed: a deleted Job's location leaves the status, its receipt still needs it."""
        self.tries: dict[str, int] = {}
        self.ring: Keyring | None = None
        self.ring_read: datetime | None = None
        self.bounds = Bounds()
        self.oldest = Oldest()
        self.last_cycle: datetime | None = None
        self._running = False

    def budgets_changed(self) -> None:
        """What budgets charge changed: one pass over the pods a second later, however
        many budgets kopf reports at once (each pass is over every pod)."""
        if self._running:
            self.queue.add(RESCAN, 1.0)

    def _closed(self, uid: str) -> None:
        if uid not in self.closing:
            self.closing[uid] = self.clock()
            run = self.index.runs.get(uid)
            where = self._located(run) if run is not None else None
            if where is not None:
                self.located[uid] = where
            if self._running:
                self.queue.add(uid, COALESCE)

    def _repeated(self, key: str) -> None:
        if self._running:  # else queued when it starts (`run`)
            self.queue.add(key, COALESCE)

    async def run(self, ready: asyncio.Event) -> None:
        """Write receipts once the cache is synced; runs until cancelled."""
        await ready.wait()
        self.last_cycle = self.clock()
        self._running = True
        self.index.rebuild()
        for uid in self.closing:
            self.queue.add(uid)
        for uid in self.repeats.said:
            self.queue.add(repeats.KEY + uid)
        sweeper = asyncio.create_task(self._sweep_every())
        try:
            while True:
                uid = await self.queue.get()
                try:
                    await self.process(uid)
                finally:
                    self.queue.done(uid)
                self.last_cycle = self.clock()
        finally:
            sweeper.cancel()

    async def _not_a_run(self, key: str) -> bool:
        """The queue's keys that are not runs: a sweep, a rescan, a repeat's Event."""
        if key.startswith(SWEEP_KEY):
            await self._sweep_for_cap(key.removeprefix(SWEEP_KEY))
        elif key == RESCAN:
            self.index.rebuild()
        elif key.startswith(repeats.KEY):
            try:
                await repeats.say(self.ledger.kube, self.cache, key.removeprefix(repeats.KEY))
            except Exception as error:  # an Event is worth no retry
                log.warning("repeat run's Event not posted", error=str(error)[:300])
        else:
            return False
        return True

    async def process(self, uid: str) -> None:
        if await self._not_a_run(uid):
            return
        run = self.index.runs.get(uid)
        closing = self.closing.get(uid)
        if run is None or closing is None:
            self._forget(uid)
            return
        now = self.clock()
        if self.cache.interruptions.oldest() is not None:  # the pods' ends may be unseen
            self.queue.add(uid, RETRY.total_seconds())
            return
        if run.open_pods() and now - closing < SETTLE:
            self.queue.add(uid, RETRY.total_seconds())
            return
        where = self._location(uid)
        if awaits_scan(run, where) and now - closing < self.ledger.settings.checkpoint_wait:
            self.queue.add(uid, SCAN_POLL.total_seconds())
            return
        who = await self._identity()
        if who is None:  # no key: nothing written that could not be told from a forgery
            self.queue.add(uid, KEY_RETRY.total_seconds())
            return
        tries = self.tries.get(uid, 0) + 1
        made: list[JSON] = []
        try:
            done = await write(
                self.ledger,
                who,
                run,
                now.timestamp(),
                located=where,
                give_up_on_metrics=tries >= METRICS_TRIES,
                made=made.append,
            )
        except Exception as error:  # never die; a bounded number of tries
            done = None
            log.warning(
                "run receipt not written",
                object=f"{run.kind}/{run.namespace}/{run.name}",
                attempt=tries,
                error=f"{type(error).__name__}: {error}"[:300],
            )
            if tries >= TRIES:
                log.error("run receipt given up", object=f"{run.kind}/{run.namespace}/{run.name}")
                self.index.written(uid)  # dropped: bounded memory beats a receipt forever late
                self._forget(uid)
                return
        if done is None:
            self.tries[uid] = tries
            self.queue.add(uid, RETRY.total_seconds() * tries)
            return
        self.index.written(uid)
        self._forget(uid)
        self.bounds.wrote(run.namespace)
        if done == "written":
            self.oldest.wrote(run.namespace, who.stored(made[0]) if made else None)
        await self._sweep_for_cap(run.namespace)

    async def _identity(self, *, again: bool = False) -> Identity | None:
        """This operator's identity in the ledger: the seal's keys, read once (while that
        fails, at most every KEY_RETRY) and again at each sweep cycle (`again`); the keys
        read before stay if a later read fails."""
        now = self.clock()
        due = self.ring_read is None or now - self.ring_read >= KEY_RETRY
        if again or (self.ring is None and due):
            self.ring_read = now
            seal = self.ledger.settings.seal
            ring = await load_keyring(self.ledger.kube, *seal)
            if isinstance(ring, Keyring):
                self.ring = ring
            else:
                said = (
                    "run receipts wait: no key to seal them"
                    if self.ring is None
                    else ("the seal's Secret was not read again: the keys read before stay")
                )
                log.error(said, secret="/".join(seal), why=ring)
            metrics.report_receipt_seal(ready=self.ring is not None)
        return Identity(self.ledger.instance, self.ring) if self.ring is not None else None

    def _located(self, run: Run) -> Located | None:
        labels = self.cache.namespace_labels(run.namespace)
        return located(self.links.checkpoint_scans.checkpoint_scans(), run, labels)

    def _location(self, uid: str) -> Located | None:
        """The run's checkpoint location as its policy's status has it now, or as it had
        it when the run closed if the location has left the status since."""
        run = self.index.runs[uid]
        now = self._located(run)
        if now is not None and now.history is not None:
            return now
        return self.located.get(uid, now)

    def _forget(self, uid: str) -> None:
        self.closing.pop(uid, None)
        self.tries.pop(uid, None)
        self.located.pop(uid, None)

    async def _sweep_for_cap(self, namespace: str) -> None:
        """Past the cap, remove the first receipts of a known order (ledger.Oldest); else
        sweep `namespace` if its count may be past the cap: now, or queued for when the
        last sweep is SWEEP_GAP old (ledger.Bounds)."""
        if await self._trim(namespace):
            return
        now = self.clock()
        due = self.bounds.due(namespace, self.ledger.settings.per_namespace, now)
        if due is not None and due > now:
            self.queue.add(SWEEP_KEY + namespace, (due - now).total_seconds())
        elif due is not None and (who := await self._identity()) is not None:
            await self._sweep(namespace, who)

    async def _trim(self, namespace: str) -> bool:
        """Whether `namespace`, past the cap, is back within it by DELETEs of the first
        receipts of its known order (no LIST). A receipt changed since it was read, or a
        failed DELETE, makes order and count unknown: the sweep then restores them."""
        over = self.bounds.kept.get(namespace, 0) - self.ledger.settings.per_namespace
        first = self.oldest.first(namespace, over) if over > 0 else None
        if not first:
            return False
        removed = 0
        try:
            for s in first:
                done = await remove(self.ledger.kube, s)
                if done is False:
                    raise RuntimeError(f"RunReceipt {s.name} changed since it was read")
                self.bounds.removed(namespace)
                removed += done is True
        except Exception as error:
            log.warning("run receipts not removed", namespace=namespace, error=str(error)[:300])
            self.oldest.forget(namespace)
            self.bounds.lost(namespace)
            return False
        finally:
            if removed:
                metrics.report_receipts_removed(removed)
                log.info("run receipts removed", namespace=namespace, removed=removed)
        return True

    async def _sweep(self, namespace: str, who: Identity) -> None:
        settings = self.ledger.settings
        kept = None
        try:
            kept = await sweep(
                self.ledger.kube,
                who,
                namespace,
                now=self.clock(),
                ttl=settings.ttl,
                cap=settings.per_namespace,
            )
        except Exception as error:
            log.warning("run receipts not swept", namespace=namespace, error=str(error)[:300])
        self.bounds.swept(namespace, None if kept is None else len(kept), self.clock())
        if kept is None:
            self.oldest.forget(namespace)
        else:
            self.oldest.known(namespace, kept)

    async def _sweep_every(self) -> None:
        while True:
            who = await self._identity(again=True)
            namespaces = set(self.cache.namespaces)
            self.bounds.keep_only(namespaces)
            self.oldest.keep_only(namespaces)
            for namespace in namespaces:
                if who is not None:
                    await self._sweep(namespace, who)
            await asyncio.sleep(SWEEP.total_seconds())
