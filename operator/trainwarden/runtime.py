"""The composition root of `trainwarden run`: settings, logging, metrics, kopf."""

import asyncio
import threading
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

from trainwarden import logs, metrics
from trainwarden.api.v1alpha1.crd import KINDS
from trainwarden.handlers import controllers
from trainwarden.leadership import Election, identity, run_as_leader
from trainwarden.reconcile.pruner import PrunerSettings

log = logs.get(__name__)


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


def _configure_kopf(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Only warnings and errors become Kubernetes Events through kopf's logger; trainwarden
    # posts its own deliberate Events for actions.
    settings.posting.level = 30
    # Server-side watch timeout below typical load-balancer idle cuts, and a client
    # timeout above it, so a silently stalled watch is noticed and restarted (kopf #585).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # Back off on API errors instead of hammering a struggling API server.
    settings.networking.error_backoffs = [1, 2, 5, 10, 30, 60]
    settings.persistence.finalizer = "trainwarden.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix="trainwarden.dev"
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="trainwarden.dev"
    )


def registry(settings: Settings) -> kopf.OperatorRegistry:
    """Every handler the operator runs, registered explicitly rather than by import."""
    reg = kopf.OperatorRegistry()
    # kubeconfig or in-cluster credentials, through the official client.
    kopf.on.login(registry=reg)(kopf.login_via_client)
    kopf.on.startup(registry=reg)(_configure_kopf)
    controllers.register(
        reg,
        prometheus_url=settings.prometheus_url,
        pruner=settings.pruner,
        kill_switch=settings.kill_switch,
    )
    return reg


def run(settings: Settings, stop_flag: threading.Event | None = None) -> None:
    logs.configure(settings.log_level)
    metrics.report_build(version("trainwarden"), tuple(kind.name for kind in KINDS))
    start_http_server(settings.metrics_port, addr=settings.metrics_address)
    log.info(
        "starting trainwarden",
        version=version("trainwarden"),
        metrics=f"{settings.metrics_address}:{settings.metrics_port}",
        health=f"{settings.health_address}:{settings.health_port}",
        prometheus=settings.prometheus_url,
        leader_election=settings.leader_election,
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
    asyncio.run(
        kopf.operator(
            registry=registry(settings),
            clusterwide=True,
            standalone=True,  # no kopf peering: leadership.py decides who acts
            # kopf would otherwise look the user up in /etc/passwd, where a non-root uid
            # without an entry (the chart's 65532) is missing: it crashed at startup.
            identity=cast(Any, identity()),  # kopf's Identity NewType is private
            liveness_endpoint=f"http://{settings.health_address}:{settings.health_port}/healthz",
            stop_flag=stop_flag,
        )
    )
