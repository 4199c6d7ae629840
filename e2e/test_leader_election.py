"""Two replicas, one Lease: one acts, the other stands by; kill the leader and the standby
takes over within the lease duration; a leader stopped gracefully hands the Lease back."""

import socket
import time
import uuid
from datetime import datetime
from pathlib import Path

from kubernetes import client

from harness import (
    Cluster,
    create_budget,
    get_budget,
    role,
    start_operator,
    wait_for,
)

LEASE_DURATION = 10  # the operator's default, seconds


def holder(cluster: Cluster, lease: str) -> str | None:
    spec = client.CoordinationV1Api(cluster.api).read_namespaced_lease(lease, "default").spec
    return str(spec.holder_identity) if spec.holder_identity else None


def evaluated_after(cluster: Cluster, budget: str, moment: float) -> bool:
    status = get_budget(cluster, budget).get("status", {})
    stamp = status.get("lastEvaluated")
    if not stamp:
        return False
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() > moment


def test_one_replica_acts_and_the_standby_takes_over(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    lease = f"trainwarden-e2e-{uuid.uuid4().hex[:6]}"
    args = ("--leader-election", f"--lease-name={lease}", "--lease-namespace=default")
    first = start_operator(cluster.kubeconfig, tmp_path / "a.log", args=args)
    wait_for(lambda: role(first) == "leader", timeout=60, what="the first replica leading")
    second = start_operator(cluster.kubeconfig, tmp_path / "b.log", args=args)
    try:
        assert role(second) == "standby"
        assert holder(cluster, lease) == f"{socket.gethostname()}-{first.process.pid}"
        budget = f"{namespace}-tb"
        create_budget(cluster, budget, namespace, 5.0, mode="DryRun")
        wait_for(
            lambda: evaluated_after(cluster, budget, 0), timeout=30, what="the leader's evaluation"
        )
        standby_log = (tmp_path / "b.log").read_text()
        assert "controller started" not in standby_log, "the standby never acts"
        assert role(second) == "standby"

        first.stop(kill=True)
        killed = time.time()
        wait_for(lambda: role(second) == "leader", timeout=30, every=0.1, what="the takeover")
        took_over = time.time() - killed
        assert holder(cluster, lease) == f"{socket.gethostname()}-{second.process.pid}"
        wait_for(
            lambda: evaluated_after(cluster, budget, killed),
            timeout=40,
            what="the new leader evaluating the budget",
        )
        acting = time.time() - killed
        print(
            f"\nleader SIGKILLed: standby leading after {took_over:.1f}s, "
            f"its first evaluation {acting:.1f}s after the kill (lease {LEASE_DURATION}s)"
        )
        assert took_over < 15, "handover target: under 15 s"

        second.stop()  # SIGTERM: finish, hand the Lease back, exit 0
        assert second.process.returncode == 0
        assert holder(cluster, lease) is None, "a graceful stop releases the Lease"
    finally:
        for operator in (first, second):
            operator.stop(kill=True)
        client.CoordinationV1Api(cluster.api).delete_namespaced_lease(lease, "default")
