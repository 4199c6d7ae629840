"""Pods that name a budget it cannot charge them to: reported once each (an Event on the
pod, a log line, a metric), never a reason to stop accounting.

Event-driven: a pod is checked when it appears or is relabelled, and every labelled pod
when a budget changes. What has been reported is remembered only while the pod exists, so
the memory is bounded by the live pods, not by every pod ever seen.
"""

import asyncio
import contextlib

from trainwarden import logs, metrics
from trainwarden.adapters.kube import Kube
from trainwarden.api.v1alpha1.names import BUDGET_LABEL
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core.announce import Announcements
from trainwarden.core.pods import PodFacts
from trainwarden.core.scope import charge
from trainwarden.core.workloads import WorkloadFacts

log = logs.get(__name__)
STALE_RETRY = 1.0
"""Seconds between looks while the cache may be stale: nothing is reported meanwhile."""


class LabelReporter:
    def __init__(self, kube: Kube, cache: ClusterCache, index: BudgetIndex) -> None:
        self.kube = kube
        self.cache = cache
        self.index = index
        self.labelled: dict[str, str] = {}
        """uid -> the budget the pod's label names, for live pods that carry one."""
        self.reported = Announcements()
        self._pending: dict[str, PodFacts] = {}
        self._drain: asyncio.Task[None] | None = None

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        if new is None:
            if old is not None:
                uid = old.snapshot.uid
                self.labelled.pop(uid, None)
                self.reported.forget(uid)
                self._pending.pop(uid, None)
            return
        asked = new.snapshot.labels.get(BUDGET_LABEL)
        uid = new.snapshot.uid
        if asked is None:
            self.labelled.pop(uid, None)
            return
        if self.labelled.get(uid) != asked:
            self.labelled[uid] = asked
            self.reported.forget(uid)
            self._check(new)

    def namespace_changed(self, name: str) -> None:
        self.budgets_changed()

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        """Workloads carry no budget labels that matter here."""

    def budgets_changed(self) -> None:
        for uid in list(self.labelled):
            pod = self.cache.pods.get(uid)
            if pod is not None and uid not in self.reported:
                self._check(pod)

    def _check(self, pod: PodFacts) -> None:
        self._pending[pod.snapshot.uid] = pod
        if self._drain is None or self._drain.done():
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to post from
                self._drain = asyncio.get_running_loop().create_task(self._report())

    async def _report(self) -> None:
        while self._pending:
            if self.cache.interruptions.oldest() is not None:
                # No scope is judged while the cache may be stale (or listed again for
                # a policy that reads more of the pods: adapters/projected.py).
                await asyncio.sleep(STALE_RETRY)
                continue
            uid, seen = self._pending.popitem()
            pod = self.cache.pods.get(uid, seen)  # as listed again, if it was
            snap = pod.snapshot
            scopes = {name: m.spec.scope for name, m in self.index.budgets.items()}
            labels = self.cache.namespace_labels(snap.namespace)
            verdict = charge(scopes, snap.namespace, labels, snap.labels)
            if verdict.problem is None or not self.reported.first(uid):
                continue
            log.warning(
                "budget label ignored",
                object=f"Pod/{snap.namespace}/{snap.name}",
                problem=verdict.problem,
            )
            metrics.report_label_problem()
            ref = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": snap.name, "namespace": snap.namespace, "uid": uid},
            }
            await self.kube.event(
                ref,
                type_="Warning",
                reason="UnknownBudget",
                message=verdict.problem,
                action="Account",
            )
