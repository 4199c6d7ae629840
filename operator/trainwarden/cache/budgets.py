"""Which pods each TrainingBudget charges, kept current from pod events.

The index from pod to budgets: a pod event updates only the budgets whose scope covers the
pod, and only when what they charge changed (a pod starting, ending, relabelled; not its
conditions or annotations), and marks those budgets dirty. An evaluation then reads its
members and the pods gone since, without scanning the cluster.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core.accounting import Charge, NodePrices, PriceTable, charge
from trainwarden.core.budgets import prices
from trainwarden.core.pods import PodFacts
from trainwarden.core.scope import in_scope, selects
from trainwarden.core.workloads import WorkloadFacts


@dataclass
class Members:
    """One budget's charged pods: live ones by uid, and those gone since the last
    evaluation took them (`take_gone`)."""

    spec: TrainingBudgetSpec
    prices: PriceTable
    label_keys: tuple[str, ...]
    live: dict[str, Charge] = field(default_factory=dict)
    facts: dict[str, PodFacts] = field(default_factory=dict)
    gone: list[Charge] = field(default_factory=list)
    gone_names: dict[str, tuple[str, str]] = field(default_factory=dict)
    """(namespace, name) of the pods in `gone` by uid: what the series of a catch-up after
    a restart must not charge a second time (core/catchup.py), and what efficiency
    measures them by."""

    @classmethod
    def of(cls, spec: TrainingBudgetSpec, nodes: NodePrices | None = None) -> "Members":
        table = replace(prices(spec), nodes=nodes)
        return cls(spec, table, tuple(spec.attribution_labels))

    def take_gone(self) -> list[Charge]:
        taken, self.gone = self.gone, []
        self.gone_names = {}
        return taken


class BudgetIndex:
    """A cache listener; `dirty(name)` is called for every budget a change touches."""

    def __init__(
        self, cache: ClusterCache, dirty: Callable[[str], None], clock: Callable[[], datetime]
    ) -> None:
        self.cache = cache
        self.budgets: dict[str, Members] = {}
        self._dirty = dirty
        self._clock = clock
        self._by_namespace: dict[str, tuple[str, ...]] = {}

    # --- budgets ---------------------------------------------------------------------

    def set_budget(
        self, name: str, spec: TrainingBudgetSpec, nodes: NodePrices | None = None
    ) -> None:
        """A new or changed spec, or (`nodes`) new per-node prices: its members are
        recomputed from the cache (the pods it charged before and no longer covers drop
        out; those gone stay in its ledger)."""
        members = Members.of(spec, nodes)
        old = self.budgets.get(name)
        if old is not None:
            members.gone, members.gone_names = old.gone, old.gone_names
        self.budgets[name] = members
        self._by_namespace.clear()
        for namespace in list(self.cache.pods_by_namespace):
            if name in self._covering(namespace):
                for pod in self.cache.pods_in(namespace):
                    self._update(name, members, pod)
        self._dirty(name)

    def forget_budget(self, name: str) -> None:
        self.budgets.pop(name, None)
        self._by_namespace.clear()

    def _covering(self, namespace: str) -> tuple[str, ...]:
        """Budgets whose namespace scope includes `namespace` (cached until a namespace
        or a budget changes)."""
        found = self._by_namespace.get(namespace)
        if found is None:
            labels = self.cache.namespace_labels(namespace)
            found = tuple(
                name
                for name, m in self.budgets.items()
                if namespace in m.spec.scope.namespaces
                or (
                    m.spec.scope.namespace_selector is not None
                    and selects(m.spec.scope.namespace_selector, labels)
                )
            )
            self._by_namespace[namespace] = found
        return found

    # --- cache events ----------------------------------------------------------------

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        if new is None:
            assert old is not None
            self._pod_gone(old)
            return
        covering = self._covering(new.snapshot.namespace)
        for name in covering:
            self._update(name, self.budgets[name], new)
        if old is not None and old.snapshot.labels != new.snapshot.labels:
            for name, members in self.budgets.items():  # it may have left a scope
                if name not in covering and new.snapshot.uid in members.live:
                    del members.live[new.snapshot.uid]
                    members.facts.pop(new.snapshot.uid, None)
                    self._dirty(name)

    def namespace_changed(self, name: str) -> None:
        """Namespace labels decide namespaceSelector scopes: re-derive the budgets with
        one (rare: namespaces are relabelled by admins)."""
        self._by_namespace.clear()
        for budget, members in list(self.budgets.items()):
            if members.spec.scope.namespace_selector is not None:
                self.set_budget(budget, members.spec)

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        """Workloads do not change what is charged (the controller reads them itself)."""

    def _update(self, name: str, members: Members, pod: PodFacts) -> None:
        snap = pod.snapshot
        covered = in_scope(
            members.spec.scope,
            snap.namespace,
            self.cache.namespace_labels(snap.namespace),
            snap.labels,
        )
        new = (
            charge(
                snap,
                self.cache.node_labels(pod.node),
                accelerators=members.spec.accelerators,
                prices=members.prices,
                label_keys=members.label_keys,
                node=pod.node or "",
            )
            if covered
            else None
        )
        before = members.live.get(snap.uid)
        if new is None:
            if before is not None:
                del members.live[snap.uid]
                members.facts.pop(snap.uid, None)
                self._dirty(name)
            return
        members.facts[snap.uid] = pod
        if new != before:
            members.live[snap.uid] = new
            self._dirty(name)

    def _pod_gone(self, pod: PodFacts) -> None:
        """A pod's charge ends when it vanished: now for a deletion the watch saw; for one
        found missing by the list after a failed watch, when the watch failed (the last
        time it is known to have run: an outage is never charged as if it ran through)."""
        uid = pod.snapshot.uid
        now = self._clock().timestamp()
        unwatched = self.cache.interruptions.since("pods")
        if unwatched is not None:
            now = min(now, unwatched.timestamp())
        for name, members in self.budgets.items():
            final = members.live.pop(uid, None)
            members.facts.pop(uid, None)
            if final is None:
                continue
            if final.end is None:  # it held its requests until it vanished
                final = _ended(final, now)
            members.gone.append(final)
            members.gone_names[uid] = (pod.snapshot.namespace, pod.snapshot.name)
            self._dirty(name)


def _ended(c: Charge, at: float) -> Charge:
    return Charge(c.uid, c.namespace, c.start, max(at, c.start), c.outcome, c.labels, c.rate)
