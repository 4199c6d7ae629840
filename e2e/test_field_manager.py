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

from harness import Cluster, Operator, create_budget, get_budget, gpu_job, wait_for
from trainwarden.adapters import workloads
from trainwarden.adapters.kube_client import KubeClient
from trainwarden.api.v1alpha1.names import SUSPENDED_BY
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
    assert managers(raw, f'"f:{SUSPENDED_BY}"') == {FIELD_MANAGER}
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


def test_a_budget_s_suspension_by_the_running_operator_is_trainwarden_s(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """`trainwarden run` itself: the Job its exhausted budget suspended, and the budget's
    status, name trainwarden as the manager of what the operator wrote."""
    batch = client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("train", 1))
    name = f"{namespace}-tb"
    create_budget(cluster, name, namespace, 0.0001)  # 0.36 GPU-seconds
    wait_for(
        lambda: batch.read_namespaced_job("train", namespace).spec.suspend,
        timeout=60,
        what="the Job suspended by its exhausted budget",
    )
    kube = KubeClient(cluster.api)
    job = asyncio.run(kube.get("batch/v1", "Job", namespace, "train"))
    assert job is not None
    assert managers(job, '"f:suspend"') == {FIELD_MANAGER}
    assert managers(job, f'"f:{SUSPENDED_BY}"') == {FIELD_MANAGER}
    status = {
        e["manager"]
        for e in get_budget(cluster, name)["metadata"]["managedFields"]
        if e.get("subresource") == "status"
    }
    assert status == {FIELD_MANAGER}
