"""Every write the operator makes is managed by `trainwarden`, on the real API server.

GitOps tools (Argo CD's and Flux's drift detection, `kubectl apply --server-side`) tell
who changed a field by its manager in managedFields: a Job a budget suspended must say
trainwarden changed spec.suspend, not "OpenAPI-Generator" (the kubernetes client's
User-Agent, which the API server uses when a write names no fieldManager). The writes go
through the operator's own code: KubeClient, the suspension of adapters/workloads.py, the
Event it posts, and the client the leader election writes its Lease with.
"""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config

from harness import Cluster, wait_for
from trainwarden.adapters import workloads
from trainwarden.adapters.kube_client import KubeClient
from trainwarden.testing.builders import JobBuilder

FIELD_MANAGER = "trainwarden"


def managers(obj: dict[str, Any], field: str) -> set[str]:
    """The managers of the managedFields entries that own `field` (an f: path)."""
    return {
        entry["manager"]
        for entry in obj["metadata"].get("managedFields") or []
        if field in json.dumps(entry.get("fieldsV1") or {})
    }


def test_a_job_the_operator_creates_and_suspends_is_managed_by_trainwarden(
    cluster: Cluster, namespace: str
) -> None:
    kube = KubeClient(cluster.api)
    body = JobBuilder("train", namespace).build()
    body["spec"]["suspend"] = False
    assert asyncio.run(kube.create(body)) is not None
    labels, annotations = workloads.budget_marks("team", "Exhausted", 1, datetime.now(UTC))

    def suspend() -> dict[str, Any] | None:
        """As a budget does: the version read, or Conflict (the Job controller wrote its
        status meanwhile) and again."""
        current = asyncio.run(kube.get("batch/v1", "Job", namespace, "train"))
        assert current is not None
        return asyncio.run(workloads.suspend(kube, current, labels, annotations))

    suspended = wait_for(suspend, timeout=30, what="the Job suspended")
    assert suspended["spec"]["suspend"] is True

    raw = asyncio.run(kube.get("batch/v1", "Job", namespace, "train"))
    assert raw is not None
    assert managers(raw, '"f:suspend"') == {FIELD_MANAGER}
    assert managers(raw, f'"f:{workloads.SUSPENDED_BY}"') == {FIELD_MANAGER}
    every = {e["manager"] for e in raw["metadata"]["managedFields"]}
    assert every <= {FIELD_MANAGER, "kube-controller-manager"}, every  # the Job controller

    reason = "BudgetExhausted"  # none of the Job controller's own Events
    asyncio.run(kube.event(raw, type_="Normal", reason=reason, message="m", action="Suspend"))
    events = client.CoreV1Api(cluster.api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name=train,reason={reason}"
    )
    assert [{e.manager for e in event.metadata.managed_fields or []} for event in events.items] == [
        {FIELD_MANAGER}
    ]


def test_writes_made_by_a_library_for_the_operator_are_managed_by_trainwarden(
    cluster: Cluster, namespace: str
) -> None:
    """The leader election's Lease is written by the kubernetes library without a
    fieldManager: the client the operator gives it names trainwarden in its User-Agent."""
    from trainwarden.adapters.kube_client import named_client

    config.load_kube_config(config_file=str(cluster.kubeconfig))  # what named_client uses
    leases = client.CoordinationV1Api(named_client())
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="leader"), spec=client.V1LeaseSpec(holder_identity="a")
    )
    created = leases.create_namespaced_lease(namespace, lease)
    created.spec.holder_identity = "b"
    replaced = leases.replace_namespaced_lease("leader", namespace, created)
    assert {e.manager for e in replaced.metadata.managed_fields} == {FIELD_MANAGER}
