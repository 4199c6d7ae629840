"""Which workloads each budget holds, kept current from the cache's events.

A held workload is one the admission webhook created suspended (or, for a bare pod,
behind trainwarden's scheduling gate) and marked with the budget's name. It has no pods,
so the pod-to-budget index never sees it: this index does, for the budget that will
start it. What it holds is bounded by what is held in the cluster now.

The mark is only a claim (anyone who can edit a Job can write it): a budget is shown
only what is in its namespaces, so a workload elsewhere never enters its queue.
"""

import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace

from trainwarden.api.v1alpha1.names import HELD_BY, RECLAIMED_BY, SUSPENDED_BY
from trainwarden.api.v1alpha1.types import Scope
from trainwarden.budget.holding import HeldRef
from trainwarden.core.pods import PodFacts
from trainwarden.core.scope import in_namespaces
from trainwarden.core.workloads import EPOCH, POD, WorkloadFacts


def _held_workload(w: WorkloadFacts | None) -> tuple[str, HeldRef] | None:
    """Held, and by whom: marked, suspended, not Kueue's, not suspended by a budget or
    reclaimed as idle since (those are other records, with other owners)."""
    if w is None or not w.suspended or w.kueue_managed or HELD_BY not in w.annotations:
        return None
    if SUSPENDED_BY in w.labels or RECLAIMED_BY in w.labels:
        return None
    ref = HeldRef(w.api_version, w.kind, w.namespace, w.name, w.uid, w.created)
    return w.annotations[HELD_BY], ref


def _held_pod(p: PodFacts | None) -> tuple[str, HeldRef] | None:
    if p is None or not p.gated or HELD_BY not in p.annotations:
        return None
    s = p.snapshot
    at = p.created or EPOCH
    return p.annotations[HELD_BY], HeldRef(*POD, s.namespace, s.name, s.uid, at)


class HeldIndex:
    """A cache listener; `dirty(budget)` is called for every budget whose holds changed."""

    def __init__(self, dirty: Callable[[str], None]) -> None:
        self._dirty = dirty
        self.by_budget: dict[str, dict[str, HeldRef]] = {}
        self._budget_of: dict[str, str] = {}
        self._events = itertools.count(1)

    def held(
        self, budget: str, scope: Scope | None, namespace_labels: Callable[[str], Mapping[str, str]]
    ) -> list[HeldRef]:
        """What `budget` holds within the namespaces of its `scope` (None: not known yet)."""
        if scope is None:
            return []
        refs = self.by_budget.get(budget, {}).values()
        return [r for r in refs if in_namespaces(scope, r.namespace, namespace_labels(r.namespace))]

    def budgets(self) -> list[str]:
        """Every budget name that holds something (known to this instance or not)."""
        return list(self.by_budget)

    def _set(self, uid: str, found: tuple[str, HeldRef] | None) -> None:
        if found is not None:  # any event may change its cost: judge it again
            found = found[0], replace(found[1], seen=next(self._events))
        before = self._budget_of.pop(uid, None)
        if before is not None:
            held = self.by_budget.get(before, {})
            previous = held.pop(uid, None)
            if not held:
                self.by_budget.pop(before, None)
            if found is not None and (before, previous) == found:
                self.by_budget.setdefault(before, {})[uid] = found[1]
                self._budget_of[uid] = before
                return  # an update that changes nothing held (its status, say)
        if found is not None:
            budget, ref = found
            self.by_budget.setdefault(budget, {})[uid] = ref
            self._budget_of[uid] = budget
        for name in {before, found[0] if found else None} - {None}:
            self._dirty(str(name))

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        workload = new or old
        if workload is None:
            return
        found = _held_workload(new)
        if found is not None or workload.uid in self._budget_of:
            self._set(workload.uid, found)

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        pod = new or old
        if pod is None:
            return
        found = _held_pod(new)
        if found is not None or pod.snapshot.uid in self._budget_of:
            self._set(pod.snapshot.uid, found)

    def namespace_changed(self, name: str) -> None:
        """A relabelled namespace may enter or leave a budget's scope."""
        for budget in list(self.by_budget):
            self._dirty(budget)
