"""reclaimWhen: UnderPressure on the real control plane: an idle Job that fills a kwok GPU
node is kept warm while nobody waits for its GPUs; once the real scheduler finds no node for
a pod that asks for them, the operator suspends the Job, its Event names the demand, and
the waiting pod lands where the idle one was.

The node is the test's own (tainted, selected by a label of its own): no other test's pod
can fill it or take what the reclaim frees. The operator is this module's own instance.
"""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from harness import (
    Cluster,
    Operator,
    create_policy,
    events_for,
    get_policy,
    gpu_job,
    holds,
    idle_policy,
    publish_utilization,
    start_operator,
    wait_for,
)
from trainwarden.testing.builders import PodBuilder
from trainwarden.testing.cluster import NodeBuilder

PLURAL = "idlereclaimpolicies"
NODE_LABEL = "trainwarden.dev/e2e-node"


@pytest.fixture(scope="module")
def instance() -> str:
    return f"pressure-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def pressure_operator(
    cluster: Cluster, crds: None, instance: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """Governs only this module's policies (labelled with its instance)."""
    running = start_operator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        prometheus_url=cluster.prometheus_url,
        args=(f"--instance={instance}",),
    )
    yield running
    running.stop()


@pytest.fixture
def node(cluster: Cluster) -> Iterator[str]:
    """A kwok node with 2 GPUs that only this test's pods tolerate and select."""
    tag = uuid.uuid4().hex[:6]
    name = f"tw-pressure-{tag}"
    built = NodeBuilder(name).kwok().labels({NODE_LABEL: tag}).taint("e2e", tag)
    core = client.CoreV1Api(cluster.api)
    core.create_node(built.cpu("8").memory("64Gi").pods(110).gpus(2).build())
    yield tag
    core.delete_node(name)


def on_node(manifest: dict[str, Any], tag: str) -> dict[str, Any]:
    spec = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
    spec["nodeSelector"] = {NODE_LABEL: tag}
    spec["tolerations"] = [
        {"key": "e2e", "operator": "Equal", "value": tag, "effect": "NoSchedule"}
    ]
    return manifest


def test_an_idle_job_is_kept_warm_until_a_pending_pod_wants_its_gpus(
    cluster: Cluster,
    pressure_operator: Operator,
    instance: str,
    namespace: str,
    node: str,
) -> None:
    core, batch = client.CoreV1Api(cluster.api), client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, on_node(gpu_job("idle", gpus=2), node))
    pod = wait_for(
        lambda: next(
            (
                p
                for p in core.list_namespaced_pod(namespace, label_selector="job-name=idle").items
                if p.status.phase == "Running"
            ),
            None,
        ),
        timeout=60,
        what="the idle Job's pod running",
    )
    publish_utilization(cluster, namespace, pod.metadata.name, 0.0, gpus=2)
    policy = f"{namespace}-idle"
    manifest = idle_policy(policy, namespace).under_pressure(min_pending="5s").instance(instance)
    create_policy(cluster, PLURAL, manifest.build())

    def status() -> dict[str, Any]:
        return dict(get_policy(cluster, PLURAL, policy).get("status") or {})

    def kept_warm() -> bool:
        return any(line.startswith("kept warm") for line in status().get("pendingActions", []))

    wait_for(kept_warm, timeout=120, what="the idle Job kept warm past its grace period")
    [entry] = status()["idlePods"]
    assert entry["state"] == "Warned"
    assert "no pending pod wants nvidia.com/gpu" in entry["message"]
    reasons = {e.reason for e in events_for(cluster, namespace, pod.metadata.name)}
    assert "IdleKeptWarm" in reasons

    def running() -> bool:
        return not batch.read_namespaced_job("idle", namespace).spec.suspend

    holds(running, duration=10, what="the idle Job running while nobody waits")

    other = f"{namespace}-b"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        waiting = PodBuilder("wants-gpus", other).gpus(2).cpu("1").termination_grace(0).build()
        core.create_namespaced_pod(other, on_node(waiting, node))
        wait_for(
            lambda: batch.read_namespaced_job("idle", namespace).spec.suspend,
            timeout=60,
            what="the idle Job suspended for the pending pod",
        )
        [event] = [e for e in events_for(cluster, namespace, "idle") if e.reason == "IdleReclaimed"]
        assert f"1 pending pod in {other} wants nvidia.com/gpu ({other}/wants-gpus" in event.message
        bound = wait_for(
            lambda: core.read_namespaced_pod("wants-gpus", other).spec.node_name,
            timeout=60,
            what="the pending pod scheduled onto the freed node",
        )
        assert bound == f"tw-pressure-{node}"
    finally:
        core.delete_namespace(other)
