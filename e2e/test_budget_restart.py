"""SIGKILL the operator mid-period: usage is neither double counted nor lost.

The reference ("without a kill") is computed from the pods' own lifetimes as the API server
recorded them; the operator's figure after a kill and restart is compared with it.
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import Cluster, create_budget, gpu_job, start_operator, wait_for
from trainwarden.budget.record import CHURN_INTERVAL
from trainwarden.controllers.status import STATUS_INTERVAL

GPU = "nvidia.com/gpu"
RUNS_FOR = CHURN_INTERVAL + timedelta(seconds=20)
"""How long the pod that finishes while the operator is down runs: past the interval in
which a change of running pods reaches status (at 12 s, the 2 + 1 + 4 GPUs were never in
one status write once that interval became 30 s, and the test waited for them in vain)."""


def gpu_seconds(pod: client.V1Pod, until: datetime) -> float:
    """What the pod really held, from the API server's own record of it."""
    start = pod.status.start_time
    finished = [
        cs.state.terminated.finished_at
        for cs in pod.status.container_statuses or []
        if cs.state and cs.state.terminated
    ]
    end = max(finished) if finished else until
    return float(pod.spec.containers[0].resources.requests[GPU]) * (end - start).total_seconds()


def test_sigkill_neither_loses_nor_double_counts(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    batch = client.BatchV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    custom = client.CustomObjectsApi(cluster.api)
    name = f"{namespace}-tb"
    create_budget(cluster, name, namespace, 1000, mode="DryRun")
    operator = start_operator(cluster.kubeconfig, tmp_path / "operator.log")
    request.addfinalizer(operator.stop)  # a failed wait must not leave it acting on later tests
    batch.create_namespaced_job(
        namespace,
        gpu_job(
            "finishes-while-down",
            2,
            annotations={"sim.trainwarden.dev/complete-after": f"{RUNS_FOR.total_seconds():g}s"},
        ),
    )
    batch.create_namespaced_job(namespace, gpu_job("keeps-running", 1))
    batch.create_namespaced_job(namespace, gpu_job("deleted-while-down", 4))

    def budget() -> dict[str, Any]:
        obj: dict[str, Any] = custom.get_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", "trainingbudgets", name
        )
        return obj

    wait_for(
        lambda: budget().get("status", {}).get("burnRatePerHour", {}).get("acceleratorHours") == 7,
        timeout=60,
        what="the operator to charge all three pods (2 + 1 + 4 GPUs) in status",
    )
    pods_before = {
        p.metadata.labels["job-name"]: p for p in core.list_namespaced_pod(namespace).items
    }
    operator.stop(kill=True)
    killed_at = datetime.now(UTC)

    # While nobody watches: one pod finishes, one Job is deleted with its pod.
    wait_for(
        lambda: (
            core.read_namespaced_pod(
                pods_before["finishes-while-down"].metadata.name, namespace
            ).status.phase
            == "Succeeded"
        ),
        timeout=60,
        what="the pod to finish while the operator is down",
    )
    deleted = core.read_namespaced_pod(pods_before["deleted-while-down"].metadata.name, namespace)
    batch.delete_namespaced_job("deleted-while-down", namespace, propagation_policy="Foreground")
    wait_for(
        lambda: (
            not any(
                p.metadata.uid == deleted.metadata.uid
                for p in core.list_namespaced_pod(namespace).items
            )
        ),
        timeout=60,
        what="the deleted Job's pod to be gone",
    )
    deleted_at = datetime.now(UTC)

    restarted_at = datetime.now(UTC)
    restarted = start_operator(cluster.kubeconfig, tmp_path / "operator.log")
    request.addfinalizer(restarted.stop)
    status = wait_for(
        lambda: (
            (s := budget()["status"])
            and datetime.fromisoformat(s["lastEvaluated"].replace("Z", "+00:00")) > restarted_at
            and s
        ),
        timeout=60,
        what="an evaluation after the restart",
    )
    evaluated = datetime.fromisoformat(status["lastEvaluated"].replace("Z", "+00:00"))
    restarted.stop()

    existing = core.list_namespaced_pod(namespace).items
    reference_existing = sum(gpu_seconds(p, evaluated) for p in existing)
    reference_deleted = 4 * (deleted_at - deleted.status.start_time).total_seconds()
    charged = status["used"]["acceleratorHours"] * 3600
    # Charged up to the last status write before the kill: at most a status interval before.
    lost_bound = 4 * (deleted_at - killed_at).total_seconds() + 4 * STATUS_INTERVAL.total_seconds()
    print(
        f"\nwithout a kill (reference): {reference_existing + reference_deleted:.1f} GPU-s "
        f"(existing pods {reference_existing:.1f}, pod deleted while down {reference_deleted:.1f})"
        f"\nwith a SIGKILL + restart:   {charged:.1f} GPU-s "
        f"(operator down {(restarted_at - killed_at).total_seconds():.1f}s)"
        f"\nof which estimated (the pod deleted while down): "
        f"{status['ledger']['estimated']['acceleratorHours'] * 3600:.1f} GPU-s"
    )
    # Pods that still exist (running, or finished while the operator was down) are exact to
    # within a second per pod (their start and finish times have 1 s resolution).
    # The pod deleted while down is the estimate status names (ledger.estimated).
    charged_deleted = status["ledger"]["estimated"]["acceleratorHours"] * 3600
    charged_existing = charged - charged_deleted
    assert abs(charged_existing - reference_existing) <= 1.0 * 3 + 1e-6
    # A pod deleted while nobody watched is charged up to the last status write that saw
    # it: never more than it used, and less by at most the time it went unobserved.
    assert charged_deleted <= reference_deleted + 4.0
    assert reference_deleted - charged_deleted <= lost_bound
