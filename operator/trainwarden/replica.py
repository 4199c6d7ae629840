"""What every replica runs, leader or standby: one event loop, one informer cache, the
webhook.

This is controller-runtime's model: caches start in every replica, webhooks are served
by all of them, and only the controllers wait for the Lease (leadership.py). The loop
runs in a thread of its own, started once by `process.run`; the main thread keeps the
signals and the leader election, and hands the loop kopf and the controllers when this
replica comes to lead (`Replica.run`).

Here, in every replica: this instance's budgets as their objects publish them, and the
namespaces (with the label keys the policies' scopes read), both the cache's own sources
(cache/cluster.py). The budgets' specs also tell the cache which namespace labels to
keep, so a standby keeps those its webhook needs. The pods, workloads, nodes and Kueue's
objects are listed by the leader only (runtime.py): docs/architecture.md says why.
"""

import asyncio
import contextlib
import functools
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from kubernetes import client

from trainwarden import logs
from trainwarden.adapters.informer import Informer, Sink, Source
from trainwarden.adapters.projected import Projected
from trainwarden.admission.view import (
    BUDGETS,
    NAMESPACES,
    AdmissionView,
    published_budget,
    receipts,
)
from trainwarden.admission.webhook import Webhook, WebhookSettings
from trainwarden.cache.cluster import ClusterCache, PublishedBudget, namespace_facts
from trainwarden.cache.reads import PolicyReads
from trainwarden.clock import ServerClock, measure
from trainwarden.core import ledger

log = logs.get(__name__)
T = TypeVar("T")
NAMESPACE_READS = ("namespace_labels",)
"""What a namespace's record depends on (core/keep.py)."""
BUDGETS_FIRST = 30.0
"""Seconds the namespaces wait for the budgets' first list (a missing CRD, a role that
may not list them must not keep the leader's controllers from starting)."""


class Replica:
    """The loop, the cache and what reads it in every replica."""

    def __init__(self, api: client.ApiClient, instance: str | None) -> None:
        self.api = api
        self.instance = instance
        self.loop = asyncio.new_event_loop()
        self.cache = ClusterCache()
        self.reads = PolicyReads()
        """What this instance's policies read: its budgets' specs here, every kind's
        from their controllers while leading."""
        self.clock = ServerClock()
        self.namespaces_synced = asyncio.Event()
        """Set once the namespaces were first listed (the leader's start waits for it)."""
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, webhook: WebhookSettings | None) -> None:
        """Start the loop's thread and, on it, the cache's sources and the webhook."""
        measure(self.api, self.clock)
        threading.Thread(target=self.loop.run_forever, name="event-loop", daemon=True).start()
        self.run(self.sources(webhook))

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` on the loop from another thread, and wait for its result."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def informer(
        self, source: Source, project: Any, sink: Sink[Any], synced: asyncio.Event | None = None
    ) -> Informer[Any]:
        """An informer delivering on this loop, started (on the loop only)."""
        found: Informer[Any] = Informer(
            self.api, source, project, sink, self.loop, clock=self.clock.now, synced=synced
        )
        found.start()
        return found

    async def sources(self, webhook: WebhookSettings | None) -> None:
        """The budgets first: their specs say which namespace labels to keep."""
        project = functools.partial(published_budget, instance=self.instance)
        budgets = self.informer(BUDGETS, project, self.cache.budget_sink(self._budget_changed))
        self.informer(receipts(self.instance), ledger.earlier, self.cache.receipt_sink())
        if webhook is not None:
            server = Webhook(webhook, self.api, AdmissionView(self.cache))
            self.tasks.append(asyncio.create_task(server.serve()))
        self.tasks.append(asyncio.create_task(self._namespaces(budgets)))

    async def _namespaces(self, budgets: Informer[Any]) -> None:
        """After the budgets' first list, or BUDGETS_FIRST seconds without one (the
        budgets listed later only list the namespaces again): the leader waits for them."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(budgets.synced.wait(), BUDGETS_FIRST)
        sink = self.cache.namespace_sink()
        found: Projected[Any] = Projected(
            NAMESPACES, namespace_facts, NAMESPACE_READS, sink, self.informer, self.clock.now
        )
        found.start(self.reads.keep, self.namespaces_synced)
        self.reads.listeners.add(found.update)

    def _budget_changed(self, old: PublishedBudget | None, new: PublishedBudget | None) -> None:
        """A budget's spec may read other namespace labels: the cache keeps them."""
        if old is not None and new is not None and old.reads == new.reads:
            return  # its status changed: most changes are
        if new is not None:
            self.reads.read("TrainingBudget", new.name, new.reads)
        elif old is not None:
            self.reads.read("TrainingBudget", old.name, None)
