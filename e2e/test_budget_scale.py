"""Thousands of short pods through one Monthly budget: its status stays bounded and its
usage equals the sum computed from the pods' own timestamps, while they exist and after
they are deleted (folded into the ledger)."""

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from harness import Cluster, Operator, create_budget, get_budget, wait_for

GPU = "nvidia.com/gpu"
PODS = 2000
STATUS_LIMIT = 64 * 1024


def node(tag: str) -> dict[str, Any]:
    """A kwok node roomy enough for every pod at once, tainted so nothing else lands."""
    capacity = {"cpu": "10000", "memory": "100Ti", "pods": "5000", GPU: "5000"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"tw-scale-{tag}",
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"trainwarden.dev/e2e-scale": tag},
        },
        "spec": {"taints": [{"key": "e2e-scale", "value": tag, "effect": "NoSchedule"}]},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def pod(i: int, tag: str) -> dict[str, Any]:
    gpus = 1 + i % 4
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"short-{i}",
            "labels": {"e2e-scale": tag, "team": f"team-{i % 3}", "experiment": f"exp-{i}"},
            "annotations": {"sim.trainwarden.dev/complete-after": f"{2 + i % 5}s"},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"trainwarden.dev/e2e-scale": tag},
            "tolerations": [{"key": "e2e-scale", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "example.invalid/trainer:1",
                    "resources": {
                        "requests": {"cpu": "1", GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
        },
    }


def gpu_seconds(p: client.V1Pod) -> float:
    """What the pod held, from the API server's own record of it."""
    finished = max(cs.state.terminated.finished_at for cs in p.status.container_statuses)
    gpus = float(p.spec.containers[0].resources.requests[GPU])
    return gpus * (finished - p.status.start_time).total_seconds()


def used_seconds(status: dict[str, Any]) -> float:
    return float(status["used"]["acceleratorHours"]) * 3600


def test_thousands_of_short_pods_leave_a_bounded_exact_budget(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    core = client.CoreV1Api(cluster.api)
    tag = uuid.uuid4().hex[:6]
    name = f"{namespace}-scale"
    create_budget(
        cluster,
        name,
        namespace,
        1e6,
        mode="DryRun",
        period={"type": "Monthly"},
        attributionLabels=["team", "experiment"],
    )
    core.create_node(node(tag))
    try:
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(lambda i: core.create_namespaced_pod(namespace, pod(i, tag)), range(PODS))
            )

        def finished() -> list[client.V1Pod] | None:
            pods = core.list_namespaced_pod(namespace, label_selector=f"e2e-scale={tag}").items
            done = [p for p in pods if p.status.phase == "Succeeded"]
            return done if len(done) == PODS else None

        pods = wait_for(finished, timeout=600, every=5, what=f"{PODS} short pods to finish")
        truth = sum(gpu_seconds(p) for p in pods)

        def settled(*, folded: bool) -> dict[str, Any] | None:
            """The status once it charges every pod; `folded`: every pod in the ledger's
            closed tally (they are gone). Status is written only when it changes, so its
            lastEvaluated may predate the wait: the figures themselves are the evidence."""
            status = get_budget(cluster, name).get("status") or {}
            closed = ((status.get("ledger") or {}).get("closed") or {}).get("total") or {}
            in_ledger = float(closed.get("acceleratorHours", 0)) * 3600
            charged = (
                in_ledger
                if folded
                else float((status.get("used") or {}).get("acceleratorHours", 0)) * 3600
            )
            return status if abs(charged - truth) < 0.01 else None

        live = wait_for(lambda: settled(folded=False), timeout=120, what="usage of the pods")
        core.delete_collection_namespaced_pod(
            namespace, label_selector=f"e2e-scale={tag}", grace_period_seconds=0
        )
        wait_for(
            lambda: (
                not core.list_namespaced_pod(namespace, label_selector=f"e2e-scale={tag}").items
            ),
            timeout=300,
            every=5,
            what="every pod deleted",
        )
        folded = wait_for(
            lambda: settled(folded=True), timeout=120, what="every gone pod folded into the ledger"
        )
        assert used_seconds(folded) == pytest.approx(truth, abs=0.01)
    finally:
        core.delete_node(f"tw-scale-{tag}")
    size = len(json.dumps(folded, separators=(",", ":")))
    experiments = folded["ledger"]["closed"]["breakdown"]["byLabel"]["experiment"]
    print(
        f"\n{PODS} pods: truth {truth:.1f} GPU-s; charged while they existed "
        f"{used_seconds(live):.1f}, after they were deleted {used_seconds(folded):.1f}; "
        f"status {size} bytes, {len(experiments)} experiment keys in the ledger"
    )
    assert size < STATUS_LIMIT
    assert len(experiments) <= 12
    assert any(e["key"] == "(other)" for e in experiments)
    shown = sum(e["acceleratorHours"] for e in experiments) * 3600
    assert shown == pytest.approx(truth, abs=0.05), "the capped breakdown still adds up"
