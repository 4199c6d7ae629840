"""One active replica: a coordination.k8s.io Lease decides which process runs the operator.

kopf's peering is a keep-alive record, not a lease: replicas of the same priority all pause,
and a killed leader blocks the others for about a minute. This uses the official client's
leader election on a Lease instead. The leader gives up acting *before* its lease can
expire (renewDeadline < leaseDuration): a leader that cannot renew exits rather than risk
acting next to its successor; a leader stopped gracefully releases the Lease, so the
standby takes over at once.
"""

import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from trainwarden import logs, metrics
from trainwarden.adapters.kube_client import named_client

log = logs.get(__name__)


@dataclass(frozen=True)
class Election:
    name: str = "trainwarden"
    namespace: str = "default"
    lease_duration: int = 10
    """Seconds a standby waits after the last renewal it saw before taking over."""
    renew_deadline: int = 7
    """Seconds a leader keeps trying to renew before it stops acting (and exits)."""
    retry_period: int = 2


def identity() -> str:
    """The pod name in a cluster (HOSTNAME), plus the pid so two local processes differ."""
    return f"{socket.gethostname()}-{os.getpid()}"


class _Standby(BaseHTTPRequestHandler):
    """Liveness while waiting: a standby is healthy, it just does not act."""

    def do_GET(self) -> None:
        body = json.dumps({"role": "standby"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


def _release(election: Election, holder: str) -> None:
    """Hand the Lease back (only if still ours) so the standby need not wait it out."""
    api = client.CoordinationV1Api(named_client())
    try:
        lease = api.read_namespaced_lease(election.name, election.namespace)
        if lease.spec and lease.spec.holder_identity == holder:
            lease.spec.holder_identity = None
            api.replace_namespaced_lease(election.name, election.namespace, lease)
            log.info("leader lease released", lease=f"{election.namespace}/{election.name}")
    except client.ApiException as error:
        log.warning("leader lease not released", status=error.status)


def run_as_leader(
    election: Election,
    health: tuple[str, int],
    operate: Callable[[threading.Event], None],
) -> None:
    """Wait for the Lease, then `operate` until it returns (stop requested); never returns
    while following. `operate` gets the stop flag that SIGTERM sets."""
    # The client logs every renewal (each retry period) at INFO; transitions are ours.
    logging.getLogger("leaderelection").setLevel(logging.WARNING)
    holder = identity()
    stop = threading.Event()
    leading = threading.Event()
    standby = ThreadingHTTPServer(health, _Standby)
    threading.Thread(target=standby.serve_forever, daemon=True).start()
    metrics.report_leader(is_leader=False)
    lease = f"{election.namespace}/{election.name}"
    log.info("waiting for the leader lease", lease=lease, identity=holder)

    def on_term(*_: Any) -> None:
        if not leading.is_set():
            os._exit(0)  # a standby has nothing to finish
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def lead() -> None:
        leading.set()
        standby.shutdown()
        standby.server_close()
        metrics.report_leader(is_leader=True)
        log.info("leading", identity=holder, since=datetime.now(UTC).isoformat())
        operate(stop)
        _release(election, holder)
        log.info("stopped leading", identity=holder)
        os._exit(0)  # the election loop in the main thread would otherwise renew forever

    def lost() -> None:
        log.error("leader lease lost: exiting so that only one replica acts", identity=holder)
        os._exit(1)

    # The client's leader election is untyped.
    lock = LeaseLock(election.name, election.namespace, holder)  # type: ignore[no-untyped-call]
    lock.api_instance = client.CoordinationV1Api(named_client())  # its writes: trainwarden's
    settings = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock,
        lease_duration=election.lease_duration,
        renew_deadline=election.renew_deadline,
        retry_period=election.retry_period,
        onstarted_leading=lead,
        onstopped_leading=lost,
    )
    leaderelection.LeaderElection(settings).run()  # type: ignore[no-untyped-call]
