"""The process: its metrics and health, the replica (every replica's loop, cache and
webhook), and, while it leads (leadership.py), kopf and the controllers on that loop."""

import signal
import threading
from importlib.metadata import version
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

from trainwarden import cluster_access, failpoints, logs, metrics
from trainwarden.adapters.kube_client import named_client
from trainwarden.api.v1alpha1.crd import KINDS
from trainwarden.handlers import operator as handlers
from trainwarden.leadership import Election, identity, run_as_leader
from trainwarden.replica import Replica
from trainwarden.runtime import Settings, bootstrap

log = logs.get(__name__)


def run(settings: Settings, stop_flag: threading.Event | None = None) -> None:
    logs.configure(settings.log_level)
    failpoints.configure(dict(settings.failpoints))
    metrics.report_build(version("trainwarden"), tuple(kind.name for kind in KINDS))
    start_http_server(settings.metrics_port, addr=settings.metrics_address)
    cluster_access.load(settings.kubeconfig, settings.context)  # once, for every client
    replica = Replica(named_client(), settings.instance)
    replica.start(settings.webhook)
    log.info(
        "starting trainwarden",
        version=version("trainwarden"),
        metrics=f"{settings.metrics_address}:{settings.metrics_port}",
        health=f"{settings.health_address}:{settings.health_port}",
        prometheus=settings.prometheus_url,
        leader_election=settings.leader_election,
        instance=settings.instance,
        webhook=f"{settings.webhook.address}:{settings.webhook.port}" if settings.webhook else None,
    )
    if not settings.leader_election:
        metrics.report_leader(is_leader=True)
        _operate(settings, replica, stop_flag or _stop_on_signals())
        return
    run_as_leader(
        Election(settings.lease_name, settings.lease_namespace),
        (settings.health_address, settings.health_port),
        lambda stop: _operate(settings, replica, stop),
    )


def _stop_on_signals() -> threading.Event:
    """kopf handles no signal off the main thread: SIGTERM and SIGINT set its stop flag."""
    stop = threading.Event()
    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, lambda *_: stop.set())
    return stop


def _operate(settings: Settings, replica: Replica, stop_flag: threading.Event) -> None:
    """kopf and the controllers, on the replica's loop, until `stop_flag` is set."""
    runtime = bootstrap(settings, named_client(), replica)
    replica.run(
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
