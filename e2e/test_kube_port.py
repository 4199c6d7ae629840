"""The Kube port's client (adapters/kube_client.py) against the real API server, where the
answer is the API server's own: what the reconcilers read must be what it means."""

import asyncio

import pytest
from kubernetes import client

from harness import Cluster, wait_for
from trainwarden.adapters.kube import Gone, Refused
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


def test_a_create_an_admission_policy_denies_is_refused_with_its_message(
    cluster: Cluster, namespace: str
) -> None:
    """A ValidatingAdmissionPolicy's 403 (the chart's confinement refusing a pruner Job)
    is Refused, carrying the policy's message for the location's status."""
    admission = client.AdmissionregistrationV1Api(cluster.api)
    name = f"deny-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                     "resources": ["configmaps"]}
                ]
            },
            "validations": [{"expression": "false", "message": "no ConfigMaps here"}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": namespace},
    }
    kube = KubeClient(cluster.api)
    try:

        def refused() -> str | None:
            try:
                asyncio.run(kube.create(body))
            except Refused as error:
                return str(error)
            client.CoreV1Api(cluster.api).delete_namespaced_config_map("x", namespace)
            return None  # the binding is not in force yet

        message = wait_for(refused, timeout=30, what="the policy in force")
        assert "no ConfigMaps here" in message
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
