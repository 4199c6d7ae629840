"""Containment on the real API server (issue 25): owner references a tenant writes do not
take running pods out of an exhausted Enforce budget's reach.

The Job, ReplicaSet and garbage-collector controllers are real; JobSet is its published
CRD without a controller (a tenant-made "suspended JobSet" above a running Job). Every
running pod the budget charges ends evicted, under an ancestor the budget suspended, or
named in the budget's status and a CannotStop Event.
"""

from typing import Any

import pytest
from kubernetes import client

from harness import Cluster, Operator, create_budget, get_budget, pod_template, wait_for
from test_admission import exhaust, webhook  # noqa: F401 - fixture
from test_budget_workload_kinds import create, owner, workload_crds  # noqa: F401 - fixture

SETTLE = 60  # budget/containment.py: how long a suspended parent or a Kueue label is trusted


def _job(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **meta},
        "spec": {"backoffLimit": 0, "template": pod_template()},
    }


def _stage(cluster: Cluster, ns: str) -> None:
    """What a tenant can write: a pod under their ConfigMap, a Job under their suspended
    Job, a Job under their suspended JobSet, a Job labelled for a Kueue queue in a
    namespace Kueue does not manage, and a Deployment (which budgets do not scale)."""
    cm = create(cluster, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})
    sneaky = {"name": "sneaky", "ownerReferences": [owner(cm)]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": sneaky, "spec": pod_template()["spec"]}
    create(cluster, ns, pod)
    parent = create(cluster, ns, _job("parent") | {"spec": _job("x")["spec"] | {"suspend": True}})
    create(cluster, ns, _job("under-job", ownerReferences=[owner(parent)]))
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"suspend": True, "replicatedJobs": []},
    }
    js = create(cluster, ns, jobset)
    create(cluster, ns, _job("under-jobset", ownerReferences=[owner(js)]))
    create(cluster, ns, _job("queued", labels={"kueue.x-k8s.io/queue-name": "lq"}))
    template = pod_template(labels={"app": "serve"})
    template["spec"]["restartPolicy"] = "Always"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": template,
        },
    }
    create(cluster, ns, deployment)


@pytest.mark.usefixtures("workload_crds")
def test_owner_chains_a_tenant_writes_do_not_escape_an_exhausted_budget(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _stage(cluster, namespace)
    core = client.CoreV1Api(cluster.api)
    batch = client.BatchV1Api(cluster.api)

    def running() -> list[Any]:
        pods = core.list_namespaced_pod(namespace).items
        return [
            p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]

    wait_for(lambda: len(running()) == 5, timeout=90, what="the five tenant pods running")
    name = f"{namespace}-tb"
    create_budget(cluster, name, namespace, 0.003)

    def suspended(job: str) -> bool:
        return bool(batch.read_namespaced_job(job, namespace).spec.suspend)

    what = "the Job under a suspended Job (its parent's controller had SETTLE to stop it)"
    wait_for(lambda: suspended("under-job"), timeout=SETTLE + 60, what=what)
    what = "the Job under a suspended JobSet"
    wait_for(lambda: suspended("under-jobset"), timeout=SETTLE + 60, what=what)
    wait_for(
        lambda: all(p.metadata.name != "sneaky" for p in running()),
        timeout=60,
        what="the pod under a ConfigMap evicted",
    )
    wait_for(
        lambda: suspended("queued"),
        timeout=SETTLE + 60,
        what="the Job labelled for a Kueue queue Kueue does not manage",
    )

    def named() -> list[str]:
        pending = get_budget(cluster, name).get("status", {}).get("pendingActions", [])
        return [p for p in pending if p.startswith(f"cannot stop Pod/{namespace}/serve-")]

    wait_for(named, timeout=60, what="the Deployment's pod named in status")
    assert "run by ReplicaSet serve-" in named()[0]
    [serve] = [p.metadata.name for p in running()]

    def said() -> list[str]:
        found = core.list_namespaced_event(namespace, field_selector="reason=CannotStop").items
        return [e.involved_object.name for e in found]

    wait_for(lambda: said() == [serve], timeout=30, what="one CannotStop Event on its pod")
    parent = batch.read_namespaced_job("parent", namespace).metadata.labels or {}
    assert "trainwarden.dev/suspended-by" not in parent, "a suspended parent is left as it is"


@pytest.mark.usefixtures("webhook")
def test_a_pod_under_a_foreign_controller_is_held_a_jobs_pod_is_not(
    cluster: Cluster, namespace: str
) -> None:
    """The chart's matchConditions (CEL, evaluated by the API server) send a pod whose
    controller reference names a ConfigMap to the webhook, which holds it behind the
    budget's gate; a pod naming a Job as its controller is never sent."""
    exhaust(cluster, namespace)
    cm = create(
        cluster, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    )
    job = create(cluster, namespace, _job("real") | {"spec": _job("x")["spec"] | {"suspend": True}})
    for name, parent in (("under-cm", cm), ("under-job", job)):
        meta = {"name": name, "ownerReferences": [owner(parent)]}
        create(
            cluster,
            namespace,
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_template()["spec"]},
        )
    core = client.CoreV1Api(cluster.api)

    def gates(name: str) -> list[str]:
        pod = core.read_namespaced_pod(name, namespace)
        return [g.name for g in pod.spec.scheduling_gates or []]

    assert gates("under-cm") == ["trainwarden.dev/budget"]
    assert gates("under-job") == []
