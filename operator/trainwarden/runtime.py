"""The composition root of `trainwarden run`: settings in, one typed object graph out.

The kubeconfig (or in-cluster credentials) is loaded once, here; every client, the
informers, the controllers and kopf's own login use it.
"""

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, cast

import kopf
from kubernetes import client, config
from prometheus_client import start_http_server

from trainwarden import logs, metrics
from trainwarden.adapters.informer import Informer, Source, served
from trainwarden.adapters.kube_client import KubeClient
from trainwarden.adapters.prometheus import Prometheus
from trainwarden.api.v1alpha1.crd import KINDS
from trainwarden.cache.cluster import ClusterCache, NamespaceFacts
from trainwarden.controllers.base import PolicyController
from trainwarden.controllers.budgets import BudgetController
from trainwarden.controllers.checkpoints import CheckpointController
from trainwarden.controllers.idle import IdleController
from trainwarden.core.nodes import node_facts
from trainwarden.core.pods import facts, interned
from trainwarden.core.workloads import KINDS as WORKLOAD_KINDS
from trainwarden.core.workloads import WorkloadKind, workload_facts
from trainwarden.handlers import operator as handlers
from trainwarden.leadership import Election, identity, run_as_leader
from trainwarden.reconcile.pruner import PrunerSettings

log = logs.get(__name__)
DISCOVERY_INTERVAL = 300.0
"""Seconds between looks for workload kinds installed after startup (a JobSet CRD)."""


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


def _namespace(obj: dict[str, Any]) -> NamespaceFacts:
    meta = obj.get("metadata") or {}
    return NamespaceFacts(str(meta.get("name") or ""), interned(meta.get("labels") or {}))


@dataclass
class Runtime:
    """Everything `trainwarden run` runs, wired once."""

    settings: Settings
    api: client.ApiClient
    cache: ClusterCache
    budgets: BudgetController
    idle: IdleController
    checkpoints: CheckpointController
    informers: list[Informer[Any]] = field(default_factory=list)
    tasks: list["asyncio.Task[None]"] = field(default_factory=list)
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def controllers(self) -> list[PolicyController[Any]]:
        return [self.budgets, self.idle, self.checkpoints]

    def _inform(self, source: Source, project: Any, sink: Any) -> Informer[Any]:
        informer: Informer[Any] = Informer(
            self.api, source, project, sink, asyncio.get_running_loop()
        )
        informer.start()
        self.informers.append(informer)
        return informer

    def _inform_workloads(self, kind: WorkloadKind) -> Informer[Any]:
        source = Source(kind.plural, kind.collection)
        return self._inform(source, workload_facts, self.cache.workload_sink())

    async def start(self) -> None:
        """Start the informers, then the controllers once the cache holds the cluster."""
        cache = self.cache
        first = [
            self._inform(Source("pods", "/api/v1/pods"), facts, cache.pod_sink()),
            self._inform(
                Source("namespaces", "/api/v1/namespaces"), _namespace, cache.namespace_sink()
            ),
            self._inform(Source("nodes", "/api/v1/nodes"), node_facts, cache.node_sink()),
        ]
        watched = {"batch/v1/Job"}
        first.append(self._inform_workloads(WORKLOAD_KINDS[0]))
        for kind in WORKLOAD_KINDS[1:]:
            if await asyncio.to_thread(served, self.api, kind.collection):
                first.append(self._inform_workloads(kind))
                watched.add(f"{kind.api_version}/{kind.kind}")
        self.tasks = [asyncio.create_task(c.run(self.synced)) for c in self.controllers]
        self.tasks.append(asyncio.create_task(self._discover(watched)))
        await asyncio.gather(*(i.synced.wait() for i in first))
        log.info("cache synced", pods=len(cache.pods), workloads=len(cache.workloads))
        self.synced.set()

    async def _discover(self, watched: set[str]) -> None:
        """Watch workload kinds whose CRDs were installed after startup."""
        while True:
            await asyncio.sleep(DISCOVERY_INTERVAL)
            for kind in WORKLOAD_KINDS:
                key = f"{kind.api_version}/{kind.kind}"
                if key not in watched and await asyncio.to_thread(
                    served, self.api, kind.collection
                ):
                    log.info("watching a newly served workload kind", kind=key)
                    self._inform_workloads(kind)
                    watched.add(key)

    async def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
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


def bootstrap(settings: Settings, api: client.ApiClient) -> Runtime:
    kube = KubeClient(api)
    cache = ClusterCache()
    prometheus = Prometheus(settings.prometheus_url) if settings.prometheus_url else None
    return Runtime(
        settings,
        api,
        cache,
        BudgetController(kube, cache, instance=settings.instance),
        IdleController(kube, cache, prometheus, instance=settings.instance),
        CheckpointController(
            kube, cache, settings.pruner, settings.kill_switch, instance=settings.instance
        ),
    )


def run(settings: Settings, stop_flag: threading.Event | None = None) -> None:
    logs.configure(settings.log_level)
    metrics.report_build(version("trainwarden"), tuple(kind.name for kind in KINDS))
    start_http_server(settings.metrics_port, addr=settings.metrics_address)
    config.load_config()  # type: ignore[no-untyped-call]  # once, for every client
    log.info(
        "starting trainwarden",
        version=version("trainwarden"),
        metrics=f"{settings.metrics_address}:{settings.metrics_port}",
        health=f"{settings.health_address}:{settings.health_port}",
        prometheus=settings.prometheus_url,
        leader_election=settings.leader_election,
        instance=settings.instance,
    )
    if not settings.leader_election:
        metrics.report_leader(is_leader=True)
        _operate(settings, stop_flag)
        return
    run_as_leader(
        Election(settings.lease_name, settings.lease_namespace),
        (settings.health_address, settings.health_port),
        lambda stop: _operate(settings, stop),
    )


def _operate(settings: Settings, stop_flag: threading.Event | None) -> None:
    runtime = bootstrap(settings, client.ApiClient())
    asyncio.run(
        kopf.operator(
            registry=handlers.registry(runtime),
            clusterwide=True,
            standalone=True,  # no kopf peering: leadership.py decides who acts
            # kopf would otherwise look the user up in /etc/passwd, where a non-root uid
            # without an entry (the chart's 65532) is missing: it crashed at startup.
            identity=cast(Any, identity()),  # kopf's Identity NewType is private
            liveness_endpoint=f"http://{settings.health_address}:{settings.health_port}/healthz",
            stop_flag=stop_flag,
        )
    )
