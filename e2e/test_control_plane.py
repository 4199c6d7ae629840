"""The control plane is real: the scheduler places GPU pods, kwok runs them, Jobs complete."""

import urllib.request
import uuid

import pytest
from kubernetes import client

from harness import Cluster, gpu_job, holds, wait_for

pytestmark = pytest.mark.harness  # tests the harness, not trainwarden: passes without it


def job_condition(cluster: Cluster, namespace: str, name: str, kind: str) -> bool:
    job = client.BatchV1Api(cluster.api).read_namespaced_job_status(name, namespace)
    return any(c.type == kind and c.status == "True" for c in job.status.conditions or [])


def test_gpu_job_is_scheduled_on_a_kwok_gpu_node_and_completes(
    cluster: Cluster, namespace: str
) -> None:
    batch = client.BatchV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    batch.create_namespaced_job(
        namespace, gpu_job("train", annotations={"sim.trainwarden.dev/complete-after": "5s"})
    )

    def running_pod() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod = wait_for(running_pod, timeout=60, what="the GPU pod to run")
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert node.metadata.labels["nvidia.com/gpu.product"].startswith("NVIDIA-")
    assert int(node.status.allocatable["nvidia.com/gpu"]) >= 1
    print(f"\npod {pod.metadata.name} running on {node.metadata.name}")

    wait_for(
        lambda: job_condition(cluster, namespace, "train", "Complete"),
        timeout=90,
        what="the Job controller to mark the Job Complete",
    )
    finished = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert finished.status.phase == "Succeeded"
    print(f"job train Complete; pod phase {finished.status.phase}")


def test_failing_pod_fails_its_job(cluster: Cluster, namespace: str) -> None:
    client.BatchV1Api(cluster.api).create_namespaced_job(
        namespace, gpu_job("crash", annotations={"sim.trainwarden.dev/fail-after": "3s"})
    )
    wait_for(
        lambda: job_condition(cluster, namespace, "crash", "Failed"),
        timeout=90,
        what="the Job controller to mark the Job Failed",
    )


def test_unannotated_training_pod_keeps_running(cluster: Cluster, namespace: str) -> None:
    """Training runs until told otherwise: no stage completes a pod on its own."""
    core = client.CoreV1Api(cluster.api)
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, gpu_job("long"))
    pod = wait_for(
        lambda: next(
            (
                p
                for p in core.list_namespaced_pod(namespace, label_selector="job-name=long").items
                if p.status.phase == "Running"
            ),
            None,
        ),
        timeout=60,
        what="the pod to run",
    )
    # kwok's own completion stages fire at once; watch for 5 s that none of them does.
    holds(
        lambda: (
            not job_condition(cluster, namespace, "long", "Complete")
            and core.read_namespaced_pod(pod.metadata.name, namespace).status.phase == "Running"
        ),
        duration=5,
        what="the unannotated pod running",
    )


def test_pod_too_big_for_any_node_stays_pending(cluster: Cluster, namespace: str) -> None:
    """The real scheduler honours extended-resource capacity: 9 GPUs fit on no 8-GPU node."""
    core = client.CoreV1Api(cluster.api)
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, gpu_job("huge", 9))

    def unschedulable() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=huge").items
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for p in pods
            for c in p.status.conditions or []
        )

    wait_for(unschedulable, timeout=60, what="the scheduler to report Unschedulable")


def test_prometheus_scrapes_the_dcgm_exporter(cluster: Cluster) -> None:
    pod = f"util-{uuid.uuid4().hex[:6]}"
    body = b'{"utilization": 42.5, "gpus": 2, "hostname": "gpu-a100-0"}'
    request = urllib.request.Request(
        f"{cluster.dcgm_exporter_url}/gpus/smoke/{pod}", data=body, method="PUT"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status in (200, 204)
    series = wait_for(
        lambda: cluster.prometheus_query(f'DCGM_FI_DEV_GPU_UTIL{{namespace="smoke",pod="{pod}"}}'),
        timeout=60,
        what="Prometheus to scrape the utilization series",
    )
    assert len(series) == 2
    assert len({s["metric"]["gpu"] for s in series}) == 2, "one series per GPU"
    assert all(float(s["value"][1]) == 42.5 for s in series)
    assert {"UUID", "Hostname", "modelName", "container", "device"} <= set(series[0]["metric"])
