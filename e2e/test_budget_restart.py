"""SIGKILL the operator mid-period: usage is neither double counted nor lost.

The reference ("without a kill") is computed from the pods' own lifetimes as the API server
recorded them; the operator's figure after a kill and restart is compared with it.
"""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from harness import Cluster, create_budget, gpu_job, start_operator, wait_for

GPU = "nvidia.com/gpu"


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
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    batch = client.BatchV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    custom = client.CustomObjectsApi(cluster.api)
    name = f"{namespace}-tb"
    create_budget(cluster, name, namespace, 1000, mode="DryRun")
    operator = start_operator(cluster.kubeconfig, tmp_path / "operator.log")
    batch.create_namespaced_job(
        namespace,
        gpu_job(
            "finishes-while-down", 2, annotations={"sim.trainwarden.dev/complete-after": "12s"}
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
        lambda: len(budget().get("status", {}).get("ledger", {}).get("open", [])) == 3,
        timeout=60,
        what="the operator to charge all three pods",
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

    restarted = start_operator(cluster.kubeconfig, tmp_path / "operator.log")
    restarted_at = datetime.now(UTC)
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
    lost_bound = 4 * (deleted_at - killed_at).total_seconds() + 4 * 2  # + one pre-kill cycle
    print(
        f"\nwithout a kill (reference): {reference_existing + reference_deleted:.1f} GPU-s "
        f"(existing pods {reference_existing:.1f}, pod deleted while down {reference_deleted:.1f})"
        f"\nwith a SIGKILL + restart:   {charged:.1f} GPU-s "
        f"(operator down {(restarted_at - killed_at).total_seconds():.1f}s)"
    )
    # Pods that still exist (running, or finished while the operator was down) are exact to
    # within a second per pod (their start and finish times have 1 s resolution).
    charged_existing = charged - _closed_seconds(status, deleted.metadata.uid, evaluated)
    assert abs(charged_existing - reference_existing) <= 1.0 * 3 + 1e-6
    # A pod deleted while nobody watched is charged up to its last observation: never more
    # than it used, and less by at most the time it went unobserved.
    charged_deleted = _closed_seconds(status, deleted.metadata.uid, evaluated)
    assert charged_deleted <= reference_deleted + 4.0
    assert reference_deleted - charged_deleted <= lost_bound


def _closed_seconds(status: dict[str, Any], uid: str, now: datetime) -> float:
    for entry in status["ledger"]["closed"]:
        if entry["uid"] == uid:
            start = datetime.fromisoformat(entry["start"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(entry["end"].replace("Z", "+00:00"))
            return float(entry["requests"][GPU]) * (end - start).total_seconds()
    raise AssertionError(f"pod {uid} deleted while the operator was down is not in the ledger")
