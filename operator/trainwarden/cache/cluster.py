"""The operator's view of the objects it has many of: pods, workloads, namespaces, nodes,
and the budgets as their objects publish them (what the webhook decides on).

Fed by the informers (adapters/informer.py) on the event loop, so it needs no locks; read
by the controllers between awaits. It keeps small records, indexed the ways the
controllers ask (pods by namespace, workloads by uid), and tells listeners what changed,
so a controller re-evaluates only the policies a change touches.
"""

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from trainwarden import metrics
from trainwarden.cache.grouped import Grouped
from trainwarden.cache.kueue import AdmissionCheckFacts, KueueIndex
from trainwarden.cache.listeners import Listeners
from trainwarden.core.admission import BudgetView
from trainwarden.core.claims import ClaimFacts, updated
from trainwarden.core.keep import LABEL_VALUE, Keep, bounded, kept_labels
from trainwarden.core.kueue import KueueWorkload
from trainwarden.core.ledger import Earlier
from trainwarden.core.nodes import NodeFacts
from trainwarden.core.pods import PodFacts
from trainwarden.core.shapes import mapping
from trainwarden.core.workloads import WorkloadFacts

T = TypeVar("T")
MAX_RECEIPTS = 20_000
"""RunReceipts the repeat check keeps at most, in all (about 1.3 KiB each, measured: 26 MiB
at most); past it a receipt is not kept and its repeats are not noticed (fails open)."""
CLAIMS = "persistentvolumeclaims"
"""The claims' source (budget storage, docs/storage.md)."""
GONE_CLAIMS = 10_000
GONE_KEPT = timedelta(hours=1)
"""Claims seen gone are kept this long, at most GONE_CLAIMS of them, for the budgets
to charge up to their deletion (each evaluates at least every 30 s)."""


@dataclass(frozen=True, slots=True)
class NamespaceFacts:
    name: str
    labels: Mapping[str, str]
    """Only those namespace selectors read (`Keep.namespace_labels`)."""


def namespace_facts(obj: Mapping[str, Any], keep: Keep) -> NamespaceFacts:
    meta = mapping(obj.get("metadata"))
    return NamespaceFacts(
        bounded(meta.get("name") or "", LABEL_VALUE),
        kept_labels(meta.get("labels"), keep.namespace_labels),
    )


@dataclass(frozen=True, slots=True)
class PublishedBudget:
    """A budget of this instance as its object says, read in every replica."""

    name: str
    view: BudgetView | None
    """What the webhook decides on; None for a spec or status it cannot use."""
    reads: Keep | None
    """What its spec reads of the cached objects (core/reads.py); None: an invalid spec."""


Changed = Callable[[PublishedBudget | None, PublishedBudget | None], None]


class Listener(Protocol):
    """What a controller hears from the cache. `new` is None when the object is gone
    (deleted, or missing from a relist)."""

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None: ...

    def namespace_changed(self, name: str) -> None: ...

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Interruption:
    source: str
    since: datetime
    reason: str

    def describe(self) -> str:
        return (
            f"the operator has not seen every change of {self.source} since "
            f"{self.since:%Y-%m-%dT%H:%M:%SZ} ({self.reason})"
        )


class Interruptions:
    """Sources whose list or watch failed and that have not been listed since: what the
    cache says of them may be stale, so nothing may act on it."""

    def __init__(self) -> None:
        self._open: dict[str, Interruption] = {}
        self._listed: set[str] = set()
        self.caught_up: Listeners[Callable[[], None]] = Listeners("cache caught up")
        """Told when the last open interruption ends: what was held for it may act now."""

    def listed(self, source: str) -> None:
        """`source` was listed: what the cache holds of it is the cluster's, until it fails."""
        self._listed.add(source)
        self.end(source)

    def current(self, source: str) -> bool:
        """Listed at least once and not interrupted since."""
        return source in self._listed and source not in self._open

    def begin(self, source: str, since: datetime, reason: str) -> None:
        if source not in self._open:  # the first failure is when staleness began
            self._open[source] = Interruption(source, since, reason)
            metrics.report_cache_current(source, current=False)

    def end(self, source: str) -> None:
        ended = self._open.pop(source, None) is not None
        metrics.report_cache_current(source, current=True)
        if ended and not self._open:
            self.caught_up.notify(lambda listener: listener())

    def since(self, source: str) -> datetime | None:
        """When `source` stopped being watched, while it is interrupted."""
        found = self._open.get(source)
        return found.since if found is not None else None

    def oldest(self) -> Interruption | None:
        return min(self._open.values(), key=lambda i: i.since, default=None)


class ClusterCache:
    def __init__(self) -> None:
        self.interruptions = Interruptions()
        self._pods: Grouped[str, PodFacts] = Grouped(lambda p: p.snapshot.namespace)
        self.pods, self.pods_by_namespace = self._pods.by_uid, self._pods.by_key
        self.workloads: dict[str, WorkloadFacts] = {}
        self.namespaces: dict[str, NamespaceFacts] = {}
        self.nodes: dict[str, NodeFacts] = {}
        self._namespace_uids: dict[str, str] = {}
        self._node_uids: dict[str, str] = {}
        self.listeners: Listeners[Listener] = Listeners("cluster")
        """Told of every change, in the order runtime.py `wire` adds them."""
        self.kueue = KueueIndex()
        """Kueue's Workloads and AdmissionChecks; empty where Kueue is not installed."""
        self.published_budgets: dict[str, PublishedBudget] = {}
        self.published = Interruptions()
        """The budgets' source apart: its staleness stops the webhook holding, and nothing
        the controllers do (they read budgets through kopf)."""
        self._receipts: Grouped[tuple[str, str, str], Earlier] = Grouped(lambda e: e.key)
        self.receipts, self._repeats = self._receipts.by_uid, self._receipts.by_key
        """This instance's RunReceipts that recorded a config hash and a data version
        (core/ledger.py `earlier`), by uid: at most the ledger's cap per namespace, and
        MAX_RECEIPTS in all."""
        self.ledger = Interruptions()
        """The receipts' source apart: while stale the repeat check says nothing."""
        self._claims: Grouped[str, ClaimFacts] = Grouped(lambda c: c.namespace)
        self.claims, self.claims_by_namespace = self._claims.by_uid, self._claims.by_key
        self.claims_watch = Interruptions()
        """The claims' source apart: its staleness stops storage accounting only (the
        budgets' watermarks wait), never a policy's evaluation."""
        self.claims_gone: deque[tuple[ClaimFacts, float]] = deque(maxlen=GONE_CLAIMS)
        """(claim, when it stopped being charged): its deletion, else when seen gone."""
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        """When a claim's new request is in force from, and a claim gone without a
        deletion time ended."""

    def pod_sink(self) -> "Sink[PodFacts]":
        return Sink(self._set_pod, self.interruptions)

    def workload_sink(self) -> "Sink[WorkloadFacts]":
        """One per workload kind: each relists only its own kind."""
        return Sink(self._set_workload, self.interruptions)

    def kueue_workload_sink(self) -> "Sink[KueueWorkload]":
        return Sink(self.kueue.set_workload, self.interruptions)

    def admission_check_sink(self) -> "Sink[AdmissionCheckFacts]":
        return Sink(self.kueue.set_check, self.interruptions)

    def namespace_sink(self) -> "Sink[NamespaceFacts]":
        return Sink(self._set_namespace, self.interruptions)

    def node_sink(self) -> "Sink[NodeFacts]":
        return Sink(self._set_node, self.interruptions)

    def claim_sink(self) -> "Sink[ClaimFacts]":
        return Sink(self._set_claim, self.claims_watch)

    def budget_sink(self, changed: Changed | None = None) -> "Sink[PublishedBudget]":
        """This instance's budgets (another instance's project to None: never kept);
        `changed` is told each change (old, new)."""

        def assign(uid: str, new: PublishedBudget | None) -> None:
            old = self.published_budgets.pop(uid, None)
            if new is not None:
                self.published_budgets[uid] = new
            if changed is not None:
                changed(old, new)

        return Sink(assign, self.published)

    def receipt_sink(self) -> "Sink[Earlier]":
        return Sink(self._set_receipt, self.ledger)

    # --- reads -----------------------------------------------------------------------

    def earlier_run(self, key: tuple[str, str, str]) -> Earlier | None:
        """The newest finished run of (namespace, config hash, data version); read from
        the webhook's threads: one copy of one dict."""
        found = list((self._repeats.get(key) or {}).values())
        return max(found, key=lambda e: (e.finished_at, e.receipt), default=None)

    def earlier_runs_in(self, namespace: str) -> dict[tuple[str, str, str], Earlier]:
        """The newest finished run of each of a namespace's (config hash, data version)."""
        keys = [k for k in list(self._repeats) if k[0] == namespace]
        return {k: e for k in keys if (e := self.earlier_run(k)) is not None}

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        found = self.namespaces.get(name)
        return found.labels if found else {}

    def node_labels(self, name: str | None) -> Mapping[str, str]:
        found = self.nodes.get(name or "")
        return found.labels if found else {}

    def pods_in(self, namespace: str) -> Iterator[PodFacts]:
        yield from list(self.pods_by_namespace.get(namespace, {}).values())

    def claims_in(self, namespace: str) -> list[ClaimFacts]:
        return list(self.claims_by_namespace.get(namespace, {}).values())

    def claims_gone_now(self) -> list[tuple[ClaimFacts, float]]:
        """The claims seen gone within GONE_KEPT (older ones are dropped)."""
        self._drop_gone()
        return list(self.claims_gone)

    def _drop_gone(self) -> None:
        """Forget the claims gone longer than GONE_KEPT: at each read and each removal,
        so they do not stay with no storage budget to read them."""
        oldest = (self.clock() - GONE_KEPT).timestamp()
        while self.claims_gone and self.claims_gone[0][1] < oldest:
            self.claims_gone.popleft()

    def budget_views(self) -> list[BudgetView]:
        """A copy, read from the webhook's threads while the loop writes."""
        return [b.view for b in list(self.published_budgets.values()) if b.view is not None]

    def workload(self, uid: str) -> WorkloadFacts | None:
        return self.workloads.get(uid)

    def pods_now(self) -> list[PodFacts]:
        """A copy: the informers change the cache while a controller awaits the API."""
        return list(self.pods.values())

    def nodes_now(self) -> dict[str, NodeFacts]:
        return dict(self.nodes)

    # --- pods ------------------------------------------------------------------------

    def _set_pod(self, uid: str, new: PodFacts | None) -> None:
        old = self._pods.put(uid, new)
        self.listeners.notify(lambda listener: listener.pod_changed(old, new))

    # --- claims ----------------------------------------------------------------------

    def _set_claim(self, uid: str, new: ClaimFacts | None) -> None:
        if new is not None:
            new = updated(self.claims.get(uid), new, self.clock())
        old = self._claims.put(uid, new)
        if new is None and old is not None:
            end = old.deleting_since
            self._drop_gone()
            self.claims_gone.append((old, end if end is not None else self.clock().timestamp()))

    # --- workloads -------------------------------------------------------------------

    def _set_workload(self, uid: str, new: WorkloadFacts | None) -> None:
        old = self.workloads.pop(uid, None)
        if new is not None:
            self.workloads[uid] = new
        self.listeners.notify(lambda listener: listener.workload_changed(old, new))

    # --- receipts --------------------------------------------------------------------

    def _set_receipt(self, uid: str, new: Earlier | None) -> None:
        if new is not None and uid not in self.receipts and len(self.receipts) >= MAX_RECEIPTS:
            return
        self._receipts.put(uid, new)

    # --- namespaces and nodes --------------------------------------------------------

    def _set_namespace(self, uid: str, new: NamespaceFacts | None) -> None:
        name = self._namespace_uids.pop(uid, None) if new is None else new.name
        if new is None:
            self.namespaces.pop(name or "", None)
        else:
            self._namespace_uids[uid] = new.name
            old = self.namespaces.get(new.name)
            self.namespaces[new.name] = new
            if old is not None and old.labels == new.labels:
                return
        self.listeners.notify(lambda listener: listener.namespace_changed(name or ""))

    def _set_node(self, uid: str, new: NodeFacts | None) -> None:
        if new is None:
            self.nodes.pop(self._node_uids.pop(uid, ""), None)
        else:
            self._node_uids[uid] = new.name
            self.nodes[new.name] = new


class Sink(Generic[T]):
    """An informer's sink for one source: a relist becomes the changes it implies (what
    is missing from it is gone)."""

    def __init__(
        self, assign: Callable[[str, T | None], None], interruptions: Interruptions
    ) -> None:
        self._assign = assign
        self._interruptions = interruptions
        self._listed = False
        self._uids: set[str] = set()

    def replace(self, source: str, records: dict[str, T | None]) -> None:
        """A record projected to None is not kept (another instance's budget)."""
        kept = {uid: r for uid, r in records.items() if r is not None}
        for uid in self._uids - kept.keys():
            self._assign(uid, None)
        for uid, record in kept.items():
            self._assign(uid, record)
        self._uids = set(kept)
        metrics.report_cache_size(source, len(kept))
        self._interruptions.listed(source)
        self._listed = True

    def unchanged(self, source: str) -> None:
        """A relist found what this sink holds: current again, with no record touched."""
        self._interruptions.listed(source)
        self._listed = True

    def apply(self, source: str, event: str, uid: str, record: T | None) -> None:
        if event == "DELETED" or record is None:
            self._uids.discard(uid)
            self._assign(uid, None)
        else:
            self._uids.add(uid)
            self._assign(uid, record)

    def interrupted(self, source: str, since: datetime, reason: str) -> None:
        """Only what was listed can be stale: a source never listed (a workload kind the
        role may not read) holds no records, and a pod whose owner is unknown is left
        alone; it must not stop every policy."""
        if self._listed:
            self._interruptions.begin(source, since, reason)
