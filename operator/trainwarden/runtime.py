"""The composition root of `trainwarden run`: settings in, one typed object graph out.

The kubeconfig (or in-cluster credentials) is loaded once, here; every client, the
informers, the controllers and kopf's own login use it. Every replica runs one event
loop with the cache and the webhook on it (replica.py); the leader runs kopf and the
controllers on the same loop, from the same cache.
"""

import asyncio
import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from kubernetes import client

from trainwarden import logs
from trainwarden.adapters.informer import Informer, Sink, Source
from trainwarden.adapters.kube_client import KubeClient
from trainwarden.adapters.projected import Projected
from trainwarden.adapters.prometheus import Prometheus
from trainwarden.admission.webhook import WebhookSettings
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.api.v1alpha1.crd import KINDS
from trainwarden.budget.controller import BudgetController
from trainwarden.cache.cluster import CLAIMS, ClusterCache
from trainwarden.cache.kueue import admission_check
from trainwarden.cache.reads import PolicyReads
from trainwarden.checkpoints.controller import CheckpointController
from trainwarden.checkpoints.pruner import PrunerSettings
from trainwarden.clock import measure
from trainwarden.controllers.base import PolicyController
from trainwarden.controllers.links import Links
from trainwarden.controllers.status import STATUS_INTERVAL
from trainwarden.core.claims import claim_facts
from trainwarden.core.keep import Keep
from trainwarden.core.kueue import API_VERSION as KUEUE_API
from trainwarden.core.kueue import check_controller, kueue_workload
from trainwarden.core.nodes import node_facts
from trainwarden.core.pods import facts
from trainwarden.core.reads import CODE
from trainwarden.core.workloads import KINDS as WORKLOAD_KINDS
from trainwarden.core.workloads import WorkloadKind, workload_facts
from trainwarden.idle.controller import IdleController
from trainwarden.kueue.controller import KueueController
from trainwarden.receipts.controller import ReceiptController
from trainwarden.receipts.reconcile import ReceiptSettings
from trainwarden.replica import Replica
from trainwarden.volumes.controller import VolumeController

log = logs.get(__name__)
CRDS = Source("crds", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
KUEUE_WORKLOADS = Source("kueue-workloads", f"/apis/{KUEUE_API}/workloads")
KUEUE_CHECKS = Source("kueue-admissionchecks", f"/apis/{KUEUE_API}/admissionchecks")
PODS = ("pod_labels", "resources")
"""What a pod's record depends on: its labels and its requests."""
NODES = ("node_labels", "resources")
CLAIM_FIELDS = ("pod_labels", "claim_labels")
"""A claim keeps the labels scopes read of pods: the same selectors choose both."""
KUEUE = ("pod_labels", "node_labels", "resources")
"""A Workload's pod sets: their labels, node selectors (as rates read them), requests."""


def _served_collections(crd: dict[str, Any]) -> frozenset[str]:
    """The collection paths an Established CRD serves, e.g. /apis/jobset.x-k8s.io/..."""
    spec, status = crd.get("spec") or {}, crd.get("status") or {}
    established = any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not established:
        return frozenset()
    plural = (spec.get("names") or {}).get("plural", "")
    return frozenset(
        f"/apis/{spec.get('group')}/{v.get('name')}/{plural}"
        for v in spec.get("versions") or []
        if v.get("served")
    )


@dataclass(frozen=True)
class Settings:
    """Operator settings, all from the command line; nothing is read at import time."""

    metrics_address: str = "0.0.0.0"  # noqa: S104 - scraped from outside the pod
    metrics_port: int = 8080
    health_address: str = "0.0.0.0"  # noqa: S104 - probed by the kubelet
    health_port: int = 8081
    log_level: str = "INFO"
    prometheus_url: str | None = None
    """Where utilization comes from; without it nothing is judged idle (leases still apply)."""
    leader_election: bool = False
    """Run only while holding a Lease, so that replicas never act at once."""
    lease_name: str = "trainwarden"
    lease_namespace: str = "default"
    pruner: PrunerSettings | None = None
    """How pruner Jobs run (the image, the writer's uid); without it PVCs are not pruned."""
    kill_switch: tuple[str, str] | None = None
    """The ConfigMap (namespace, name) whose `checkpointPruning: paused` stops pruning."""
    instance: str | None = None
    """Govern only policies labelled trainwarden.dev/instance=<instance>; None: those
    without the label. Two operators on one cluster never act on the same policy."""
    failpoints: tuple[tuple[str, str], ...] = ()
    """Armed failpoints (name, action): fault-injection runs only (failpoints.py)."""
    webhook: WebhookSettings | None = None
    """The admission webhook that holds new work of exhausted budgets; served by every
    replica, leader or not. None: new work is never held."""
    receipts: ReceiptSettings = field(default_factory=ReceiptSettings)
    """The run ledger's bounds and how runs are measured."""
    status_interval: timedelta = STATUS_INTERVAL
    """How long a policy's status may lag while only the clock moves it (--status-interval)."""
    volume_reclaim: bool = False
    """Run the VolumeReclaimPolicy controller (chart: volumeReclaim.enabled, which also
    grants delete on PersistentVolumeClaims); off, those policies are not even read."""
    kubeconfig: str | None = None
    context: str | None = None
    """--kubeconfig, --context: None for kubectl's defaults, else in-cluster credentials."""


@dataclass
class Runtime:
    """Everything `trainwarden run` runs, wired once."""

    settings: Settings
    api: client.ApiClient
    cache: ClusterCache
    budgets: BudgetController
    idle: IdleController
    checkpoints: CheckpointController
    kueue: KueueController
    receipts: ReceiptController
    clock: Callable[[], datetime]
    """The API server's time, which the controllers and the informers reckon in."""
    reads: PolicyReads
    """What this instance's policies read: all the cache keeps (core/reads.py)."""
    namespaces_synced: asyncio.Event
    """The namespaces are every replica's (replica.py): set once they were listed."""
    informers: list[Informer[Any]] = field(default_factory=list)
    workload_informers: dict[str, Informer[Any]] = field(default_factory=dict)
    projected: dict[str, Projected[Any]] = field(default_factory=dict)
    """The sources listed again when the policies come to read more of them."""
    kueue_checks: Informer[Any] | None = None
    """Kueue's AdmissionChecks (its Workloads are projected), while Kueue is served."""
    tasks: list["asyncio.Task[None]"] = field(default_factory=list)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    volumes: VolumeController | None = None
    """Only with Settings.volume_reclaim."""

    @property
    def controllers(self) -> list[PolicyController[Any]]:
        found: list[PolicyController[Any]] = [self.budgets, self.idle, self.checkpoints]
        return found + ([self.volumes] if self.volumes is not None else [])

    def _informer(
        self, source: Source, project: Any, sink: Any, synced: asyncio.Event | None = None
    ) -> Informer[Any]:
        loop = asyncio.get_running_loop()
        found: Informer[Any] = Informer(
            self.api, source, project, sink, loop, clock=self.clock, synced=synced
        )
        found.start()
        return found

    def _inform(self, source: Source, project: Any, sink: Any) -> Informer[Any]:
        informer = self._informer(source, project, sink)
        self.informers.append(informer)
        return informer

    def _inform_workloads(self, kind: WorkloadKind) -> Informer[Any]:
        source = Source(kind.plural, kind.collection)
        project = functools.partial(workload_facts, keep=CODE)  # no policy's keys: fixed
        informer = self._inform(source, project, self.cache.workload_sink())
        self.workload_informers[kind.collection] = informer
        return informer

    def _project(
        self, source: Source, project: Callable[[Any, Keep], Any], fields: tuple[str, ...],
        sink: Sink[Any],
    ) -> Informer[Any]:  # fmt: skip
        """Start an informer whose source is listed again when the policies read more."""
        found: Projected[Any] = Projected(source, project, fields, sink, self._informer, self.clock)
        self.projected[source.name] = found
        return found.start(self.reads.keep)

    def keep_changed(self, keep: Keep) -> None:
        """What the policies read changed: list again what now lacks some of it."""
        for projected in list(self.projected.values()):
            projected.update(keep)

    async def _seed(self) -> None:
        """What the policies read, before the first list: kopf delivers the policies only
        once the cache is synced, and every pod listed before would be listed twice."""
        plurals = {kind.name: kind.plural for kind in KINDS}
        for controller in self.controllers:
            try:
                found = await asyncio.to_thread(
                    client.CustomObjectsApi(self.api).list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    plurals[controller.kind],
                )
            except Exception as error:  # their events will tell, and a relist follow
                log.warning("policies not listed", kind=controller.kind, error=str(error)[:300])
                continue
            for body in cast(dict[str, Any], found).get("items") or []:
                if controller.ours(body):
                    self.reads.policy(controller.kind, body["metadata"]["name"], body)
        self.reads.listeners.add(self.keep_changed)

    async def start(self) -> None:
        """Start the informers, then the controllers once the cache holds the cluster."""
        cache = self.cache
        await self._seed()
        first = [
            self._project(Source("pods", "/api/v1/pods"), facts, PODS, cache.pod_sink()),
            self._project(Source("nodes", "/api/v1/nodes"), node_facts, NODES, cache.node_sink()),
            self._inform_workloads(WORKLOAD_KINDS[0]),  # batch/v1 Jobs: always served
            self._inform(CRDS, _served_collections, _CrdSink(self)),
        ]
        # Not waited for: storage is charged only while this source is current
        # (budget/storage_step.py), and a role without the claims' list holds nothing else.
        cache.clock = self.clock
        claims = Source(CLAIMS, "/api/v1/persistentvolumeclaims")
        self._project(claims, claim_facts, CLAIM_FIELDS, cache.claim_sink())
        self.tasks = [asyncio.create_task(c.run(self.synced)) for c in self.controllers]
        self.tasks.append(asyncio.create_task(self.kueue.run(self.synced)))
        self.tasks.append(asyncio.create_task(self.receipts.run(self.synced)))
        await asyncio.gather(self.namespaces_synced.wait(), *(i.synced.wait() for i in first))
        # The workload kinds the CRDs serve were found by the first CRD list: wait for
        # them too, or a JobSet's child Job would look like a top-level workload.
        await asyncio.gather(*(i.synced.wait() for i in self.workload_informers.values()))
        log.info("cache synced", pods=len(cache.pods), workloads=len(cache.workloads))
        self.synced.set()

    def crds_changed(self, served: set[str]) -> None:
        """Start caching a workload kind as soon as its CRD is established (JobSet
        installed after trainwarden), stop when it goes."""
        for kind in WORKLOAD_KINDS[1:]:
            informer = self.workload_informers.get(kind.collection)
            if kind.collection in served and informer is None:
                log.info("caching a newly served workload kind", kind=kind.kind)
                self._inform_workloads(kind)
            elif kind.collection not in served and informer is not None:
                informer.stop()
                del self.workload_informers[kind.collection]
                self.cache.interruptions.end(kind.plural)  # nothing left to be stale about
        self._kueue_served(KUEUE_WORKLOADS.path in served and KUEUE_CHECKS.path in served)

    def _kueue_served(self, served: bool) -> None:
        """Kueue's parts run only while its CRDs (v1beta2) are served."""
        if served and self.kueue_checks is None:
            log.info("Kueue is served: its budget AdmissionCheck and enforcement are on")
            sink = self.cache.kueue_workload_sink()
            self._project(KUEUE_WORKLOADS, kueue_workload, KUEUE, sink)
            checks = self.cache.admission_check_sink()
            self.kueue_checks = self._inform(KUEUE_CHECKS, admission_check, checks)
        elif not served and self.kueue_checks is not None:
            log.info("Kueue is no longer served")
            self.projected.pop(KUEUE_WORKLOADS.name).stop()
            self.kueue_checks.stop()
            self.kueue_checks = None
            for source in (KUEUE_WORKLOADS, KUEUE_CHECKS):
                self.cache.interruptions.end(source.name)
            self.cache.kueue.clear()

    async def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
        for projected in self.projected.values():
            projected.stop()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def alive(self) -> dict[str, str | None]:
        """Liveness: raises if a controller task stopped (the probe then fails)."""
        if any(task.done() for task in self.tasks):
            raise RuntimeError("a controller task has stopped")
        return {
            c.kind: c.last_cycle.isoformat() if c.last_cycle else None for c in self.controllers
        }


class _CrdSink:
    """The CRD informer's sink: which collections are served, kept as a set."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.crds: dict[str, frozenset[str]] = {}
        self.listed = False

    def replace(self, source: str, records: dict[str, frozenset[str]]) -> None:
        self.crds = dict(records)
        self.runtime.crds_changed(set().union(*self.crds.values()))
        self.runtime.cache.interruptions.end(source)
        self.listed = True

    def unchanged(self, source: str) -> None:
        self.runtime.cache.interruptions.end(source)
        self.listed = True

    def apply(self, source: str, event: str, uid: str, record: frozenset[str]) -> None:
        if event == "DELETED":
            self.crds.pop(uid, None)
        else:
            self.crds[uid] = record
        self.runtime.crds_changed(set().union(*self.crds.values()))

    def interrupted(self, source: str, since: datetime, reason: str) -> None:
        """Which workload kinds exist decides which owners are known: as stale as a pod."""
        if self.listed:
            self.runtime.cache.interruptions.begin(source, since, reason)


def wire(
    cache: ClusterCache,
    budgets: BudgetController,
    idle: IdleController,
    checkpoints: CheckpointController,
    kueue: KueueController,
    receipts: ReceiptController,
    reads: PolicyReads,
    links: Links,
) -> None:
    """Every listener and link, in this order (each list is told in the order added): the
    cache tells the indexes first (pod → budget, held), then what reads them (the label
    reporter, the runs: the index's charges), then what only queues (checkpoints); a
    budget's event reaches Kueue's check once the budget is stored (it decides on the
    views), then receipts; a spec change grows what the cache keeps (`spec_hooks`) before
    the controller's own reaction; the policies held by an interrupted cache are queued
    again the moment it is current. docs/architecture.md says why."""
    cache.listeners.add(budgets.index, budgets.holds, budgets.labels, receipts.index, checkpoints)
    cache.kueue.listeners.add(kueue)
    budgets.listeners.add(kueue.budgets_changed)
    budgets.spec_listeners.add(receipts.budgets_changed)
    for controller in (budgets, idle, checkpoints):
        controller.spec_hooks.add(reads.policy)
        cache.interruptions.caught_up.add(controller.cache_current)
    links.budget_views = budgets
    links.pruner_jobs = checkpoints
    links.checkpoint_scans = checkpoints
    links.checkpoint_specs = checkpoints


def bootstrap(settings: Settings, api: client.ApiClient, replica: Replica) -> Runtime:
    """The controllers, on the replica's cache and clock (the API server's time)."""
    kube, cache, links = KubeClient(api), replica.cache, Links()
    prometheus = Prometheus(settings.prometheus_url) if settings.prometheus_url else None
    server = replica.clock
    measure(api, server)  # the replica's client feeds it too
    instance, now = settings.instance, server.now
    checkpoints = CheckpointController(
        kube, cache, settings.pruner, settings.kill_switch, instance=instance, clock=now
    )
    budgets = BudgetController(
        kube, cache, instance=instance, series=prometheus, busy=prometheus, clock=now,
        doubt=server.doubt, links=links, prices=prometheus,
    )  # fmt: skip
    idle = IdleController(kube, cache, prometheus, instance=instance, clock=now, per_gpu=prometheus)
    kueue = KueueController(kube, cache, links, controller=check_controller(instance), clock=now)
    receipts = ReceiptController(
        kube, cache, budgets.index, prometheus, settings.receipts, instance=instance,
        links=links, clock=now,
    )  # fmt: skip
    reads = replica.reads
    wire(cache, budgets, idle, checkpoints, kueue, receipts, reads, links)
    synced = replica.namespaces_synced
    runtime = Runtime(
        settings, api, cache, budgets, idle, checkpoints, kueue, receipts, now, reads, synced
    )
    if settings.volume_reclaim:
        runtime.volumes = VolumeController(kube, cache, instance=instance, clock=now, links=links)
        runtime.volumes.spec_hooks.add(reads.policy)
    for controller in (budgets, idle, checkpoints, runtime.volumes):
        if controller is not None:
            controller.status_interval = settings.status_interval
    return runtime
