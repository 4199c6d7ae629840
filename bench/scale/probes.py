"""Probes that time the operator's reactions under churn, each against a known instant.

Budget crossing: a Job of one pod with G GPUs runs; then a budget (period Total, no grace)
is created whose limit is spent exactly at a chosen instant,
    limit = G x (crossing - pod.status.startTime) / 3600 accelerator-hours
(for the operator's probes the crossing moves later by however much the budget was created
after the pod started: a Total period counts from the budget's creationTimestamp),
the same start time the operator accounts from (1 s resolution). A watch on the Jobs
records when spec.suspend turns true; the latency is that moment minus the crossing.
The operator's probes are Enforce budgets; the janitor's are DryRun for the operator and
labelled for the janitor to enforce, so each is timed on its own Jobs.

Idle window: a pod runs busy (80 % in the DCGM stand-in, scraped by Prometheus); at a
chosen instant its utilization drops to 1 %; the window has elapsed `window` seconds
later. A watch on the pods records when the warning annotation
trainwarden.dev/idle-warned-at appears (an Enforce NotifyOnly policy: warn, never act).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from scale.cluster import Env
from scale.kube import (
    BUDGETS,
    IDLE_POLICIES,
    JOBS,
    NAMESPACES,
    PODS,
    Kube,
    Obj,
    Watcher,
    annotations_of,
    labels_of,
)
from scale.params import Params
from scale.progress import retrying
from scale.world import LABELS, job, namespace, node_name, pod_spec, publish

PROBE = "bench.trainwarden.dev/probe"
PHASE = "bench.trainwarden.dev/phase"
JANITOR = "bench.trainwarden.dev/janitor"
WARNED_AT = "trainwarden.dev/idle-warned-at"
PROBE_GPUS = 4
BUSY, IDLE = 80.0, 1.0


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class Probe:
    name: str
    due: float = 0.0
    """The known instant: the crossing, or the end of the idle window."""
    reacted: float | None = None
    """When the benchmark's watch saw the reaction."""

    @property
    def latency(self) -> float | None:
        return None if self.reacted is None else self.reacted - self.due


def _wait_running(admin: Kube, ns: str, count: int, timeout: float) -> dict[str, Obj]:
    """Running pods of the namespace by their probe label, once all `count` run."""
    deadline = time.monotonic() + timeout
    while True:
        pods = admin.list(PODS, ns)["items"]
        running = {
            labels_of(p).get(PROBE, ""): p
            for p in pods
            if p.get("status", {}).get("phase") == "Running" and "startTime" in p["status"]
        }
        if len(running) >= count:
            return running
        if time.monotonic() > deadline:
            raise TimeoutError(f"probe pods in {ns}: {len(running)}/{count} Running in {timeout}s")
        time.sleep(1)


class CrossingProbes:
    """Budgets crossed at known instants; `who` is "operator" or "janitor"."""

    def __init__(self, admin: Kube, params: Params, phase: str, who: str, count: int) -> None:
        self.admin, self.params, self.phase, self.who = admin, params, phase, who
        self.ns = f"bench-x{who[0]}-{phase}"
        self.probes = [Probe(f"{self.ns}-{i:02d}") for i in range(count)]
        self.starts: dict[int, float] = {}
        self.lock = threading.Lock()
        self.watch = Watcher(admin, JOBS, self._on_job, self.ns)

    def prepare(self) -> None:
        """The probe Jobs, running (before the churn starts)."""
        if not self.probes:
            return
        retrying(partial(self.admin.create, NAMESPACES, namespace(self.ns, **{PHASE: self.phase})))
        for i in range(len(self.probes)):
            body = job(f"probe-{i:02d}", 1, PROBE_GPUS, {PROBE: str(i), "team": self.ns})
            body["spec"]["template"]["spec"]["nodeName"] = node_name(i % self.params.nodes)
            retrying(partial(self.admin.create, JOBS, body, self.ns))
        running = _wait_running(self.admin, self.ns, len(self.probes), 180)
        self.starts = {int(k): epoch(p["status"]["startTime"]) for k, p in running.items()}
        self.watch.start()

    def arm(self, first: float, last: float) -> None:
        """Budgets whose limits are crossed at instants spread over [first, last]."""
        count = len(self.probes)
        for i, probe in enumerate(self.probes):
            probe.due = first + (last - first) * (i / max(1, count - 1))
            limit = PROBE_GPUS * (probe.due - self.starts[i]) / 3600
            labels = {**LABELS, PHASE: self.phase}
            if self.who == "janitor":
                labels[JANITOR] = "enforce"
            body = {
                "apiVersion": "trainwarden.dev/v1alpha1",
                "kind": "TrainingBudget",
                "metadata": {"name": probe.name, "labels": labels},
                "spec": {
                    "mode": "Enforce" if self.who == "operator" else "DryRun",
                    "scope": {
                        "namespaces": [self.ns],
                        "selector": {"matchLabels": {PROBE: str(i)}},
                    },
                    "period": {"type": "Total"},
                    "limits": {"acceleratorHours": limit},
                    "enforcement": {"gracePeriod": "0s"},
                },
            }
            retrying(partial(self.admin.create, BUDGETS, body))
            if self.who == "operator":
                probe.due += self._late_start(probe.name, self.starts[i])

    def _late_start(self, budget: str, start: float) -> float:
        """How much later than the pod the operator's count starts: a Total period starts
        at the budget's creationTimestamp (to the second), so a budget created after its pod
        started spends its limit that much later. (The janitor counts from the pod's start.)"""
        created = (
            (self.admin.get(BUDGETS, budget) or {}).get("metadata", {}).get("creationTimestamp")
        )
        return max(0.0, epoch(created) - start) if created else 0.0

    def _on_job(self, _kind: str, obj: Obj, seen: float) -> None:
        if not obj.get("spec", {}).get("suspend"):
            return
        i = int(labels_of(obj).get(PROBE, "-1"))
        with self.lock:
            if 0 <= i < len(self.probes) and self.probes[i].reacted is None:
                self.probes[i].reacted = seen

    def deadline(self, params: Params) -> float:
        slack = params.reaction_timeout
        if self.who == "janitor":
            slack += 2 * params.janitor_interval
        return max((p.due for p in self.probes), default=0.0) + slack

    def pending(self) -> bool:
        with self.lock:
            return any(p.reacted is None for p in self.probes)

    def stop(self) -> None:
        self.watch.stop()


class IdleProbes:
    """Pods whose accelerators turn idle at known instants, under one NotifyOnly policy."""

    def __init__(self, env: Env, admin: Kube, params: Params, phase: str) -> None:
        self.env, self.admin, self.params, self.phase = env, admin, params, phase
        self.ns = f"bench-ip-{phase}"
        self.window = params.idle_window_seconds
        self.probes = [Probe(f"idle-{i:02d}") for i in range(params.idle_probes)]
        self.lock = threading.Lock()
        self.watch = Watcher(admin, PODS, self._on_pod, self.ns)
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self.errors: list[str] = []

    def prepare(self) -> None:
        if not self.probes:
            return
        retrying(partial(self.admin.create, NAMESPACES, namespace(self.ns, **{PHASE: self.phase})))
        for i, probe in enumerate(self.probes):
            body = {
                "metadata": {"name": probe.name, "labels": {**LABELS, PROBE: str(i)}},
                "spec": pod_spec(1, node=node_name(i % self.params.nodes)),
            }
            retrying(partial(self.admin.create, PODS, body, self.ns))
        _wait_running(self.admin, self.ns, len(self.probes), 180)
        for i, probe in enumerate(self.probes):
            self._publish(i, probe, BUSY)
        policy = {
            "apiVersion": "trainwarden.dev/v1alpha1",
            "kind": "IdleReclaimPolicy",
            "metadata": {"name": self.ns, "labels": {**LABELS, PHASE: self.phase}},
            "spec": {
                "mode": "Enforce",
                "scope": {"namespaces": [self.ns]},
                "signal": {
                    "threshold": 5,
                    "window": f"{self.window}s",
                    "resolution": "10s",
                    "warmup": "5s",
                },
                "action": "NotifyOnly",
                "gracePeriod": "1h",
            },
        }
        retrying(partial(self.admin.create, IDLE_POLICIES, policy))
        self.watch.start()

    def arm(self, first: float, last: float) -> None:
        """Each pod turns idle at an instant in [first, last]; its window ends `window` later."""
        count = len(self.probes)
        starts = [first + (last - first) * (i / max(1, count - 1)) for i in range(count)]
        for probe, start in zip(self.probes, starts, strict=True):
            probe.due = start + self.window

        def turn_idle() -> None:
            for i, (probe, start) in enumerate(zip(self.probes, starts, strict=True)):
                if self._stop.wait(max(0.0, start - time.time())):
                    return
                published = time.time()
                if self._publish(i, probe, IDLE):
                    probe.due = published + self.window

        self._timer = threading.Thread(target=turn_idle, daemon=True)
        self._timer.start()

    def _publish(self, i: int, probe: Probe, percent: float) -> bool:
        try:
            node = node_name(i % self.params.nodes)
            publish(self.env, f"{self.ns}/{probe.name}", percent, node, 1)
        except OSError as error:
            self.errors.append(f"{probe.name}: {error}")
            return False
        return True

    def _on_pod(self, _kind: str, obj: Obj, seen: float) -> None:
        if WARNED_AT not in annotations_of(obj):
            return
        i = int(labels_of(obj).get(PROBE, "-1"))
        with self.lock:
            if 0 <= i < len(self.probes) and self.probes[i].reacted is None:
                self.probes[i].reacted = seen

    def deadline(self, params: Params) -> float:
        return max((p.due for p in self.probes), default=0.0) + params.reaction_timeout

    def pending(self) -> bool:
        with self.lock:
            return any(p.reacted is None for p in self.probes)

    def stop(self) -> None:
        self._stop.set()
        self.watch.stop()


def remove_phase(admin: Kube, phase: str) -> None:
    """The probes' policies and namespaces (not waited for)."""
    selector = f"{PHASE}={phase}"
    for res in (BUDGETS, IDLE_POLICIES):
        admin.delete_collection(res, labelSelector=selector)
    for ns in admin.list(NAMESPACES, labelSelector=selector)["items"]:
        name = ns["metadata"]["name"]
        admin.delete_collection(PODS, name, gracePeriodSeconds=0)
        admin.delete(NAMESPACES, name)
