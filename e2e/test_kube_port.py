"""The Kube port's client (adapters/kube_client.py) against the real API server, where the
answer is the API server's own: what the reconcilers read must be what it means."""

import asyncio

import pytest
from kubernetes import client

from harness import Cluster, wait_for
from trainwarden.adapters.kube import Gone
from trainwarden.adapters.kube_client import KubeClient

FINALIZER = "e2e.trainwarden.dev/hold"


def test_a_create_in_a_namespace_being_deleted_is_gone_not_forbidden(
    cluster: Cluster, namespace: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The NamespaceLifecycle admission answers 403: the port says Gone (the receipt or
    pruner Job has no home any more), never a permission the operator lacks."""
    core = client.CoreV1Api(cluster.api)
    held = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="held", finalizers=[FINALIZER]), data={}
    )
    core.create_namespaced_config_map(namespace, held)
    core.delete_namespace(namespace)
    wait_for(
        lambda: core.read_namespace(namespace).status.phase == "Terminating",
        timeout=30,
        what="the namespace to be Terminating (a ConfigMap's finalizer holds it)",
    )
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "new", "namespace": namespace},
    }
    kube = KubeClient(cluster.api)
    try:
        with pytest.raises(Gone, match="its namespace is being deleted"):
            asyncio.run(kube.create(body))
        # An Event there is best effort, and not a permission error either: no raise.
        asyncio.run(kube.event(body, type_="Normal", reason="Test", message="m", action="Test"))
    finally:
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
