"""What every policy controller does: keep the policies kopf reports, evaluate each one when
it is due or something it depends on changed, and never die.

Controllers are long-lived tasks started with the operator rather than kopf timers or
daemons on the policy objects, which would put finalizers on them (kopf #833, #1001).
Several policies are evaluated at once (one slow S3 prefix or API call does not hold up
the others), each by one worker at a time.
"""

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Generic, TypeVar

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube, Unreachable
from trainwarden.api.v1alpha1.names import INSTANCE_LABEL
from trainwarden.api.v1alpha1.types import API_VERSION
from trainwarden.cache.cluster import ClusterCache, Interruption
from trainwarden.cache.listeners import Listeners
from trainwarden.controllers.queue import WorkQueue
from trainwarden.controllers.status import (
    RESYNC,
    STATUS_INTERVAL,
    LastWrite,
    report_interrupted,
)

log = logs.get(__name__)
INTERRUPTED_RETRY = timedelta(seconds=2)
"""How soon a policy held back by an interrupted cache is tried again: a relist after a
failed watch takes about that long."""
COALESCE = 0.05
"""Seconds a change waits for the changes that come with it (a Job's pods, a burst)."""
M = TypeVar("M", bound=LastWrite)
Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class PolicyController(ABC, Generic[M]):
    kind: ClassVar[str]

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        *,
        instance: str | None = None,
        workers: int = 4,
        clock: Clock = utcnow,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.instance = instance
        self.workers = workers
        self.clock = clock
        self.policies: dict[str, JSON] = {}
        self.memory: dict[str, M] = {}
        self.queue = WorkQueue(urgent=self.urgent)
        self.status_interval = STATUS_INTERVAL
        """How long clock-only status changes wait (`--status-interval`), for every policy."""
        self.last_cycle: datetime | None = None
        self.departed: dict[str, JSON] = {}
        """Policies deleted with what they did still to undo (`release`), by name, as their
        DELETED event left them: bounded by the policies deleted while their release fails."""
        self.freeing: dict[str, asyncio.Future[None]] = {}
        """Each evaluation running, by name: done when its worker may take the next key
        (`hand_off`, or the evaluation's end)."""
        self.running: set[asyncio.Task[None]] = set()
        """The evaluations running: at most one per policy, each holding its worker
        until it is done or handed off."""
        self.held: set[str] = set()
        """Policies whose last evaluation the interrupted cache held back: evaluated as
        soon as it is current again (`cache_current`), not INTERRUPTED_RETRY later."""
        self.spec_hooks: Listeners[Callable[[str, str, JSON | None], None]] = Listeners("specs")
        """Told (kind, name, body or None) after a policy of this instance was added,
        changed its spec, or went away: what the cache keeps follows (runtime.py)."""

    @abstractmethod
    def new_memory(self) -> M: ...

    @abstractmethod
    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        """Evaluate one policy; return when it next needs evaluating."""

    def spec_changed(self, name: str, body: JSON | None) -> None:
        """A policy was added, changed its spec, or (None) went away."""

    def urgent(self, name: str) -> bool:
        """Whether `name`'s evaluation, due now, may act: taken before routine ones
        (controllers/queue.py). A deleted policy's release, and a policy past the time
        its last evaluation foresaw it acting (`LastWrite.acts_at`)."""
        memory = self.memory.get(name)
        at = memory.acts_at if memory is not None else None
        return name in self.departed or (at is not None and at <= self.clock())

    async def release(self, name: str, body: JSON, now: datetime) -> bool:
        """Undo what the deleted policy `body` left on the cluster (its holds, suspensions,
        cordons): True once nothing is left to do, False to be called again later."""
        return True

    def _spec_changed(self, name: str, body: JSON | None) -> None:
        # first: what the cache keeps grows before any use
        self.spec_hooks.notify(lambda hook: hook(self.kind, name, body))
        self.spec_changed(name, body)

    # --- policy events (from kopf) ---------------------------------------------------

    def ours(self, body: JSON) -> bool:
        """Whether this instance governs the policy: the one its instance label names,
        or the default instance (no --instance) for policies without the label."""
        labels = (body.get("metadata") or {}).get("labels") or {}
        return labels.get(INSTANCE_LABEL) == self.instance

    def policy_event(self, event: str | None, body: JSON) -> None:
        name = body["metadata"]["name"]
        if event == "DELETED" or not self.ours(body):
            if self.policies.pop(name, None) is not None:
                self.memory.pop(name, None)
                self.queue.forget(name)
                metrics.forget_policy(self.kind, name)
                self._spec_changed(name, None)
                if event == "DELETED":  # not a policy handed to another instance
                    self.departed[name] = body
                    self.queue.add(name, COALESCE)
            return
        previous = self.policies.get(name)
        memory = self.memory.get(name)
        if memory is None:
            memory = self.memory[name] = self.new_memory()
            memory.status_interval = self.status_interval
        self.policies[name] = memory.freshest(body)
        if previous is not None and _rv(memory.written) == _rv(body):
            return  # the echo of our own status write
        if previous is None or _generation(previous) != _generation(body):
            self._spec_changed(name, body)
        self.queue.add(name, COALESCE)

    # --- the loop --------------------------------------------------------------------

    async def _evaluate(self, name: str) -> datetime:
        now = self.clock()
        departed = self.departed.get(name)
        if departed is not None:  # first, even if a policy of that name exists again
            return await self._release(name, departed, now)
        body = self.policies.get(name)
        if body is None:
            return now + RESYNC
        obj = f"{self.kind}/{name}"
        started = asyncio.get_running_loop().time()
        failed = evaluated = False
        interruption = self.cache.interruptions.oldest()
        if interruption is not None:  # decisions on a stale view are never made
            self.held.add(name)
            await self._held(name, body, interruption, now)
            self.last_cycle = self.clock()  # held, not stuck
            return now + INTERRUPTED_RETRY
        try:
            due = await self.evaluate(name, body, now)
            evaluated = True
            self.queue.succeeded(name)
        except Conflict as error:
            log.info("policy changed during evaluation", object=obj, error=str(error))
            due = await self._read_again(name, now)
        except Gone:
            log.info("policy deleted during evaluation", object=obj)
            due = now + RESYNC
        except Unreachable as error:  # an outage: one line per policy, not a traceback
            failed = True
            log.warning("API server unreachable", object=obj, error=str(error))
            due = self._retry(name, now)
        except Exception:
            failed = True
            log.exception("policy evaluation failed", object=obj)
            due = self._retry(name, now)
        metrics.report_reconcile(
            self.kind, asyncio.get_running_loop().time() - started, failed=failed
        )
        if evaluated and name in self.policies:  # a deleted policy's series stay gone
            metrics.report_evaluated(self.kind, name)
        written = self.memory[name].written if name in self.memory else None
        if written is not None and name in self.policies:
            self.policies[name] = self.memory[name].freshest(self.policies[name])
        self.last_cycle = self.clock()
        return due

    async def _release(self, name: str, body: JSON, now: datetime) -> datetime:
        """Release what a deleted policy left, once the cache is current (never on a stale
        view), retried with the policy's own backoff until done."""
        if self.cache.interruptions.oldest() is not None:
            self.held.add(name)
            return now + INTERRUPTED_RETRY
        try:
            done = await self.release(name, body, now)
        except Exception as error:  # an outage or a refusal: one line, and later again
            log.warning(
                "deleted policy's release failed",
                object=f"{self.kind}/{name}",
                error=f"{type(error).__name__}: {error}"[:300],
            )
            return self._retry(name, now)
        if not done:
            return self._retry(name, now)
        self.departed.pop(name, None)
        if name in self.policies:  # created again meanwhile: its evaluation comes next
            return now
        self.queue.forget(name)
        metrics.forget_policy(self.kind, name)
        return now + RESYNC

    def cache_current(self) -> None:
        """The cache is current again (a relist delivered): the policies held for it are
        evaluated now (the cache's `interruptions.caught_up`, runtime.py `wire`)."""
        for name in self.held:
            self.queue.add(name)
        self.held.clear()

    def _retry(self, name: str, now: datetime) -> datetime:
        """When a failed evaluation is tried again: its own backoff (controllers/queue.py),
        never another policy's."""
        return now + timedelta(seconds=self.queue.failed(name))

    async def _held(self, name: str, body: JSON, interruption: Interruption, now: datetime) -> None:
        """Say why the policy is not evaluated; best effort and quiet: the API server is
        often what is unreachable, and the informers already log the cause."""
        try:
            await report_interrupted(self.kube, body, interruption, self.memory[name], now)
        except Exception as error:
            log.debug(
                "held policy's status not written",
                object=f"{self.kind}/{name}",
                error=f"{type(error).__name__}: {error}"[:300],
            )

    async def _read_again(self, name: str, now: datetime) -> datetime:
        """Our copy of the policy is older than the stored one. kopf's watch delivers the new
        one, but it may be reconnecting with a backoff of up to a minute (after an API
        outage): evaluating our copy again would only conflict again, at once, every time."""
        try:
            stored = await self.kube.get(API_VERSION, self.kind, None, name)
        except Exception as error:  # the API server is unreachable: a retry later
            log.info("policy not read again", object=f"{self.kind}/{name}", error=str(error))
            return self._retry(name, now)
        if stored is None:
            return now + RESYNC  # deleted: kopf reports it
        if name in self.policies and self.ours(stored):
            self.policies[name] = stored
        return now

    def hand_off(self, name: str) -> None:
        """`name`'s evaluation has acted: what is left of it (its status, Events, usage)
        goes on without its worker, which takes the next key, so an acting key queued
        behind never waits for those writes. The key stays busy until the evaluation
        ends: the policy's next evaluation starts from its last write, after it, and a
        conflict still means evaluating it again."""
        freed = self.freeing.get(name)
        if freed is not None and not freed.done():
            freed.set_result(None)

    async def _worker(self) -> None:
        while True:
            name = await self.queue.get()
            freed = asyncio.get_running_loop().create_future()
            self.freeing[name] = freed
            task = asyncio.create_task(self._evaluate_key(name, freed))
            self.running.add(task)
            task.add_done_callback(self.running.discard)
            await freed
            if task.done():
                task.result()  # what _evaluate did not catch stops the worker, as before

    async def _evaluate_key(self, name: str, freed: asyncio.Future[None]) -> None:
        try:
            due = await self._evaluate(name)
        finally:
            self.freeing.pop(name, None)
            self.queue.done(name)
            if not freed.done():
                freed.set_result(None)
        if name in self.policies or name in self.departed:
            self.queue.add(name, max(0.0, (due - self.clock()).total_seconds()))

    async def run(self, ready: asyncio.Event) -> None:
        """Evaluate once the cache is synced; runs until cancelled."""
        await ready.wait()
        self.last_cycle = self.clock()  # alive from here: the probe reports it
        log.info("controller started", kind=self.kind, policies=len(self.policies))
        for name in list(self.policies):
            self.queue.add(name)
        tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            tasks += self.running
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.gather(*tasks, return_exceptions=True)


def _rv(body: JSON | None) -> str | None:
    return None if body is None else (body.get("metadata") or {}).get("resourceVersion")


def _generation(body: JSON) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)
