"""The runs that will need a receipt, gathered while their pods exist.

A cache listener after the budget index (whose charges it reads): one accumulator
(core/runs.py Run) per live top-level workload whose pods a budget of this instance
charges and that requested accelerators, fed by pod and workload events. A run is
*closed* (`closed(uid)`) once it finished or was deleted; its accumulator is dropped when
its receipt is written (`written`). Memory is bounded by the runs that exist now.

After a restart nothing is remembered: `rebuild()` gathers again what still exists, and
a run observed late says so in its receipt (partial).
"""

from collections.abc import Callable, Mapping
from datetime import datetime

from trainwarden.api.v1alpha1.names import CHECKPOINT_PATH, RECLAIMED_BY, SUSPENDED_BY
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import ledger
from trainwarden.core.accounting import Charge
from trainwarden.core.pods import PodFacts
from trainwarden.core.receipts import attribution
from trainwarden.core.runs import (
    MAX_PODS,
    MAX_SUSPENSIONS,
    PodRecord,
    Run,
    mounted,
    pod_record,
)
from trainwarden.core.workloads import WorkloadFacts, top_level
from trainwarden.receipts.repeats import Repeats


class RunIndex:
    def __init__(
        self,
        cache: ClusterCache,
        budgets: BudgetIndex,
        closed: Callable[[str], None],
        clock: Callable[[], datetime],
        repeats: Repeats | None = None,
    ) -> None:
        """`closed(uid)`: a run finished or was deleted (said again on later events).
        `repeats`: told of every pod and workload, for the Event of a repeat."""
        self.cache = cache
        self.budgets = budgets
        self.runs: dict[str, Run] = {}
        self.done: set[str] = set()
        """Runs whose receipt exists and whose workload still does: not tracked again."""
        self._pod_runs: dict[str, str] = {}
        self._closed = closed
        self._repeats = repeats
        self._clock = clock
        self.synced = False

    # --- what the controller says ----------------------------------------------------

    def rebuild(self) -> None:
        """From the synced cache: every pod as it is now. Again after a budget's spec
        changed (kopf may report the budgets after the cache synced, after a restart):
        the controller coalesces those into one pass (`rescan`)."""
        self.synced = True
        for pod in self.cache.pods_now():
            self.pod_changed(None, pod)

    def written(self, uid: str) -> None:
        """Its receipt exists: drop the accumulator, remember not to start another."""
        run = self.runs.pop(uid, None)
        for pod in run.pods if run is not None else ():
            self._pod_runs.pop(pod, None)
        if uid in self.cache.workloads or uid in self.cache.pods:
            self.done.add(uid)

    # --- cache events ----------------------------------------------------------------

    def namespace_changed(self, name: str) -> None:
        """Namespaces change which budgets charge a pod: the budget index follows."""

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        if not self.synced:
            return
        pod = new or old
        assert pod is not None
        uid = pod.snapshot.uid
        if self._repeats is not None:
            self._repeats.seen(uid, new)
        if new is None:
            self._pod_gone(pod)
            return
        run = self._run_for(new)
        if run is None:
            return
        charges = self._charges(uid)
        record = pod_record(new.snapshot.name, new.restarts, charges)
        if record is None:
            return
        if uid not in run.pods and len(run.pods) >= MAX_PODS:
            run.dropped += 1
            return
        run.pods[uid] = record
        self._pod_runs[uid] = run.uid
        mounted(run, new.claims)
        for key, value in attribution(self._label_keys(charges), new.snapshot.labels).items():
            run.labels.setdefault(key, value)
        if new.owner is None:
            run.declared = _declared(new.annotations)
        if new.owner is None and record.outcome != "Running":  # a bare pod ended
            run.result, run.finished_at = record.outcome, record.end
        self._maybe_closed(run)

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        either = new or old
        if self._repeats is not None and either is not None:
            self._repeats.seen(either.uid, new)
        if new is None:
            assert old is not None
            self.done.discard(old.uid)
            run = self.runs.get(old.uid)
            if run is not None and run.result is None:
                run.result, run.finished_at = "Deleted", self._now()
            if run is not None:
                self._maybe_closed(run)
            return
        run = self.runs.get(new.uid)
        if run is not None:
            self._seen(run, old, new)

    def _seen(self, run: Run, old: WorkloadFacts | None, new: WorkloadFacts) -> None:
        _marks(run, old, new, self._now())
        run.checkpoint_path = new.annotations.get(CHECKPOINT_PATH)
        run.declared = _declared(new.annotations)
        if new.result is not None and run.result is None:
            outcome, at = new.result
            run.result, run.finished_at = outcome, (at.timestamp() if at else self._now())
        self._maybe_closed(run)

    # --- the parts -------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock().timestamp()

    def _charges(self, pod_uid: str) -> dict[str, Charge]:
        return {
            name: members.live[pod_uid]
            for name, members in self.budgets.budgets.items()
            if pod_uid in members.live
        }

    def _label_keys(self, charges: Mapping[str, Charge]) -> list[str]:
        keys: list[str] = []
        for name in charges:
            members = self.budgets.budgets.get(name)
            keys += [k for k in members.label_keys if k not in keys] if members else []
        return keys

    def _run_for(self, pod: PodFacts) -> Run | None:
        """The run a pod belongs to, started if it is new and holds accelerators."""
        uid = self._pod_runs.get(pod.snapshot.uid)
        if uid is not None:
            return self.runs.get(uid)
        if pod.owner is None:
            workload = None
            key = pod.snapshot.uid
        else:
            workload = top_level(pod.owner, pod.snapshot.namespace, self.cache.workload)
            if workload is None:
                return None  # a Deployment's, or an owner not cached: no run of ours
            key = workload.uid
        if key in self.done:
            return None
        found = self.runs.get(key)
        if found is not None:
            return found
        charges = self._charges(pod.snapshot.uid)
        if not any(c.rate.accelerator_total > 0 for c in charges.values()):
            return None
        run = _new_run(pod, workload, self._now())
        self.runs[key] = run
        if workload is not None:
            self._seen(run, None, workload)
        return run

    def _pod_gone(self, pod: PodFacts) -> None:
        """A pod that vanished while holding its requests held them until then (or until
        the pod watch failed: an outage is never charged as if it ran through)."""
        self.done.discard(pod.snapshot.uid)  # a bare pod's run
        run_uid = self._pod_runs.pop(pod.snapshot.uid, None)
        run = self.runs.get(run_uid or "")
        if run is None:
            return
        record = run.pods.get(pod.snapshot.uid)
        if record is not None and record.end is None:
            now = self._now()
            unwatched = self.cache.interruptions.since("pods")
            end = min(now, unwatched.timestamp()) if unwatched else now
            run.pods[record.uid] = _ended(record, max(end, record.start))
        if pod.owner is None and run.result is None:
            run.result, run.finished_at = "Deleted", self._now()
        self._maybe_closed(run)

    def _maybe_closed(self, run: Run) -> None:
        if run.result is not None:
            self._closed(run.uid)


def _declared(annotations: Mapping[str, str]) -> dict[str, str]:
    """The ledger's annotations of the top-level workload (a bare pod's own): never its
    pods' (a template's copies would cost the cache their size once per pod)."""
    return {k: annotations[k] for k in ledger.ANNOTATIONS if k in annotations}


def _new_run(pod: PodFacts, workload: WorkloadFacts | None, now: float) -> Run:
    if workload is None:
        snap = pod.snapshot
        created = snap.start.timestamp() if snap.start else now
        return Run("v1", "Pod", snap.namespace, snap.name, snap.uid, created, now)
    w = workload
    return Run(w.api_version, w.kind, w.namespace, w.name, w.uid, w.created.timestamp(), now)


def _marks(run: Run, old: WorkloadFacts | None, new: WorkloadFacts, now: float) -> None:
    """Suspensions as transitions; the operator's own labels counted when they appear
    (on first sight too: they say a suspension happened, if not when)."""
    fresh = new.suspended and not run.suspended and old is not None
    if fresh and len(run.suspensions) < MAX_SUSPENSIONS:
        run.suspensions.append(now)
    run.suspended = new.suspended
    before = old.labels if old is not None else {}
    if SUSPENDED_BY in new.labels and SUSPENDED_BY not in before:
        run.budget_suspensions += 1
    if RECLAIMED_BY in new.labels and RECLAIMED_BY not in before:
        run.idle_reclaims += 1


def _ended(record: PodRecord, at: float) -> PodRecord:
    return PodRecord(
        record.uid,
        record.name,
        record.start,
        at,
        record.outcome,
        record.accelerators,
        record.restarts,
        record.rates,
    )
