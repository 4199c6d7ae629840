"""The harness's Kueue (issue 15) is the real thing: sigs.k8s.io/kueue's controller-manager,
its CRDs and webhooks, against the real API server (e2e/cluster/README.md, "Kueue").

- a Job labelled with a LocalQueue is suspended by Kueue's webhook, gets a Workload, is
  admitted within the ClusterQueue's quota and unsuspended; its pods run on kwok nodes;
- a ClusterQueue with an AdmissionCheck nobody marks Active admits nothing; once the
  check's controller (played by the test) marks it Active and the Workload's check Ready,
  the Job starts: what trainwarden's budget check will do;
- only namespaces labelled kueue.trainwarden.dev/enabled=true are Kueue's (a harness
  choice: the rest of the suite must not depend on Kueue).
"""

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    GPU,
    Cluster,
    delete_policies_of,
    gpu_job,
    holds,
    read_env,
    wait_for,
)

pytestmark = pytest.mark.harness  # tests the harness, not trainwarden: passes without it
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"  # v1beta2: served, and the storage version
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CHECK_CONTROLLER = "e2e.trainwarden.dev/played-by-the-test"
"""Not trainwarden's own controllerName: an operator running meanwhile must not answer."""
KWOK_NODES = {"gpu-a100-0", "gpu-a100-1", "gpu-h100-0", "gpu-h100-1", "cpu-0"}

Obj = dict[str, Any]
KINDS = {
    "resourceflavors": "ResourceFlavor",
    "clusterqueues": "ClusterQueue",
    "admissionchecks": "AdmissionCheck",
    "workloads": "Workload",
}


class Kueue:
    """Kueue's objects through the API server (custom objects, v1beta2)."""

    def __init__(self, cluster: Cluster) -> None:
        self.api = client.CustomObjectsApi(cluster.api)
        self.created: list[tuple[str, str]] = []  # cluster-scoped (plural, name), to delete

    def create(self, plural: str, name: str, spec: Obj) -> Obj:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KINDS[plural]}
        body |= {"metadata": {"name": name}, "spec": spec}
        obj: Obj = self.api.create_cluster_custom_object(GROUP, VERSION, plural, body)
        self.created.append((plural, name))
        return obj

    def get(self, plural: str, name: str, version: str = VERSION) -> Obj:
        obj: Obj = self.api.get_cluster_custom_object(GROUP, version, plural, name)
        return obj

    def local_queue(self, namespace: str, name: str, cluster_queue: str) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue"}
        body |= {"metadata": {"name": name}, "spec": {"clusterQueue": cluster_queue}}
        self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", body)

    def workload(self, namespace: str, name: str) -> Obj:
        obj: Obj = self.api.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "workloads", name
        )
        return obj

    def workload_of(self, namespace: str, job: client.V1Job) -> Obj | None:
        """The Workload Kueue made for `job` (found by its controller owner reference)."""
        listed = self.api.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")
        for workload in listed["items"]:
            for owner in workload["metadata"].get("ownerReferences", []):
                if owner["kind"] == "Job" and owner["uid"] == job.metadata.uid:
                    result: Obj = workload
                    return result
        return None

    def apply_status(self, plural: str, name: str, status: Obj, namespace: str = "") -> None:
        """Server-side apply of status, as an AdmissionCheck controller does (Kueue's own
        check controllers: SSA on the status subresource, their name as field manager)."""
        kind = KINDS[plural]
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
        body["status"] = status
        kwargs: Obj = {"field_manager": CHECK_CONTROLLER, "force": True}
        kwargs["_content_type"] = "application/apply-patch+yaml"
        if namespace:
            body["metadata"]["namespace"] = namespace
            self.api.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, body, **kwargs
            )
        else:
            self.api.patch_cluster_custom_object_status(
                GROUP, VERSION, plural, name, body, **kwargs
            )

    def delete_created(self) -> None:
        """Newest first (a ClusterQueue before its flavor and check). Kueue's finalizers
        hold them until nothing uses them; the namespace's deletion releases that."""
        for plural, name in reversed(self.created):
            try:
                self.api.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
def kueue(cluster: Cluster) -> Iterator[Kueue]:
    objects = Kueue(cluster)
    yield objects
    objects.delete_created()


def labelled_namespace(cluster: Cluster, prefix: str) -> Iterator[str]:
    """A namespace Kueue manages (labelled; the harness's webhooks select it), removed
    with the policies named after it."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(cluster.api)
    label = read_env(CLUSTER_DIR / "cluster.env")["KUEUE_NAMESPACE_LABEL"]
    labels = {label: "true", "team": name}
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    )
    yield name
    delete_policies_of(cluster, name)
    core.delete_namespace(name)


@pytest.fixture
def kueue_namespace(cluster: Cluster) -> Iterator[str]:
    yield from labelled_namespace(cluster, "tw-kueue")


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind:
            result: Obj = found
            return result
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found["status"] == "True"


def quota(namespace: str, flavor: str, gpus: int = 8) -> Obj:
    """A ClusterQueue spec: `gpus` nvidia.com/gpu, 32 CPUs, 128Gi in one flavor, for one
    namespace (so no other test's LocalQueue can use it)."""
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "32"},
                            {"name": "memory", "nominalQuota": "128Gi"},
                            {"name": GPU, "nominalQuota": gpus},
                        ],
                    }
                ],
            }
        ],
    }


def queued_job(cluster: Cluster, namespace: str, name: str, queue: str, gpus: int) -> client.V1Job:
    """A simulated GPU Job created *unsuspended* with the queue label: Kueue's webhook
    must suspend it on the way in."""
    manifest = gpu_job(name, gpus)
    manifest["metadata"]["labels"] = {QUEUE_LABEL: queue}
    job: client.V1Job = client.BatchV1Api(cluster.api).create_namespaced_job(namespace, manifest)
    return job


def job_suspended(cluster: Cluster, namespace: str, name: str) -> bool:
    job = client.BatchV1Api(cluster.api).read_namespaced_job(name, namespace)
    return bool(job.spec.suspend)


def running_pods(cluster: Cluster, namespace: str, job: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={job}"
    )
    return [pod for pod in pods.items if pod.status.phase == "Running"]


def cluster_queue_active(kueue: Kueue, name: str) -> Callable[[], bool]:
    return lambda: is_true(kueue.get("clusterqueues", name), "Active")


def test_job_is_suspended_queued_admitted_and_started_by_kueue(
    cluster: Cluster, kueue: Kueue, kueue_namespace: str
) -> None:
    ns = kueue_namespace
    flavor, cq, lq = f"{ns}-gpu", ns, "team-queue"
    kueue.create("resourceflavors", flavor, {"nodeLabels": {"type": "kwok"}})
    kueue.create("clusterqueues", cq, quota(ns, flavor))
    kueue.local_queue(ns, lq, cq)
    wait_for(cluster_queue_active(kueue, cq), timeout=30, what=f"ClusterQueue {cq} Active")

    job = queued_job(cluster, ns, "train", lq, gpus=2)
    assert job.spec.suspend is True, "Kueue's mutating webhook suspends a queued Job on create"

    workload = wait_for(lambda: kueue.workload_of(ns, job), timeout=30, what="the Job's Workload")
    assert workload["spec"]["queueName"] == lq
    [pod_set] = workload["spec"]["podSets"]
    assert pod_set["count"] == 1
    requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests[GPU] == "2"

    name = workload["metadata"]["name"]
    admitted = wait_for(
        lambda: (wl := kueue.workload(ns, name)) and is_true(wl, "Admitted") and wl,
        timeout=30,
        what=f"Workload {name} Admitted",
    )
    assert is_true(admitted, "QuotaReserved")
    admission = admitted["status"]["admission"]
    assert admission["clusterQueue"] == cq
    assert admission["podSetAssignments"][0]["flavors"][GPU] == flavor

    wait_for(lambda: not job_suspended(cluster, ns, "train"), timeout=30, what="Job unsuspended")
    [pod] = wait_for(lambda: running_pods(cluster, ns, "train"), timeout=60, what="pod Running")
    assert pod.spec.node_name in KWOK_NODES
    assert (pod.spec.node_selector or {}).get("type") == "kwok", "the flavor's nodeLabels"

    usage = wait_for(
        lambda: (
            (status := kueue.get("clusterqueues", cq)["status"])["admittedWorkloads"] == 1
            and status
        ),
        timeout=30,
        what="ClusterQueue counts the admitted Workload",
    )
    used = {r["name"]: r["total"] for r in usage["flavorsUsage"][0]["resources"]}
    assert used[GPU] == "2"

    # v1beta1 is still served: the API server converts through Kueue's /convert webhook.
    old = kueue.get("clusterqueues", cq, version="v1beta1")
    assert old["apiVersion"] == f"{GROUP}/v1beta1"
    assert old["spec"]["resourceGroups"][0]["flavors"][0]["name"] == flavor


def check_state(workload: Obj, check: str) -> str | None:
    for state in (workload.get("status") or {}).get("admissionChecks") or []:
        if state["name"] == check:
            result: str = state["state"]
            return result
    return None


def test_admission_check_holds_the_job_until_its_controller_says_ready(
    cluster: Cluster, kueue: Kueue, kueue_namespace: str
) -> None:
    ns = kueue_namespace
    flavor, cq, lq, check = f"{ns}-gpu", ns, "team-queue", f"{ns}-budget"
    kueue.create("admissionchecks", check, {"controllerName": CHECK_CONTROLLER})
    kueue.create("resourceflavors", flavor, {"nodeLabels": {"type": "kwok"}})
    spec = quota(ns, flavor) | {"admissionChecksStrategy": {"admissionChecks": [{"name": check}]}}
    kueue.create("clusterqueues", cq, spec)
    kueue.local_queue(ns, lq, cq)

    # Nobody marks the check Active: the ClusterQueue is inactive, so it reserves nothing.
    inactive = wait_for(
        lambda: (c := condition(kueue.get("clusterqueues", cq), "Active")) and c,
        timeout=30,
        what=f"ClusterQueue {cq} Active condition",
    )
    assert inactive["status"] == "False"
    assert inactive["reason"] == "AdmissionCheckInactive", inactive
    job = queued_job(cluster, ns, "train", lq, gpus=1)
    assert job.spec.suspend is True
    workload = wait_for(lambda: kueue.workload_of(ns, job), timeout=30, what="the Job's Workload")
    name = workload["metadata"]["name"]
    pending = wait_for(
        lambda: (wl := kueue.workload(ns, name)) and condition(wl, "QuotaReserved") and wl,
        timeout=30,
        what="Workload evaluated (QuotaReserved condition)",
    )
    assert condition(pending, "QuotaReserved")["status"] == "False", pending  # type: ignore[index]
    holds(
        lambda: (
            job_suspended(cluster, ns, "train")
            and not is_true(kueue.workload(ns, name), "QuotaReserved")
        ),
        duration=3,
        what="Job suspended, no quota reserved, while the check is inactive",
    )

    # The check's controller comes up: marks the AdmissionCheck Active.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    active = {"type": "Active", "status": "True", "reason": "Active", "message": "test"}
    kueue.apply_status(
        "admissionchecks", check, {"conditions": [active | {"lastTransitionTime": now}]}
    )
    wait_for(cluster_queue_active(kueue, cq), timeout=30, what=f"ClusterQueue {cq} Active")

    # Quota is reserved, the check is Pending: still not admitted, the Job stays suspended.
    reserved = wait_for(
        lambda: (wl := kueue.workload(ns, name)) and is_true(wl, "QuotaReserved") and wl,
        timeout=30,
        what="quota reserved once the check is Active",
    )
    assert check_state(reserved, check) == "Pending", reserved["status"]
    # No Admitted condition at all yet: Kueue adds it only on the first transition
    # (workload.SyncAdmittedCondition), i.e. when quota and every check are Ready.
    assert condition(reserved, "Admitted") is None, reserved["status"]
    holds(
        lambda: job_suspended(cluster, ns, "train"),
        duration=3,
        what="Job suspended while its check is Pending",
    )

    # The controller decides: Ready. Kueue admits the Workload and starts the Job.
    ready = {"name": check, "state": "Ready", "message": "within budget", "lastTransitionTime": now}
    kueue.apply_status("workloads", name, {"admissionChecks": [ready]}, namespace=ns)
    wait_for(
        lambda: is_true(kueue.workload(ns, name), "Admitted"),
        timeout=30,
        what="Workload Admitted after its check is Ready",
    )
    wait_for(lambda: not job_suspended(cluster, ns, "train"), timeout=30, what="Job unsuspended")
    wait_for(lambda: running_pods(cluster, ns, "train"), timeout=60, what="pod Running")


def test_namespaces_without_the_label_are_not_kueues(cluster: Cluster, namespace: str) -> None:
    """The harness's choice: Kueue's Job webhooks and job controller only see labelled
    namespaces, so a queue label elsewhere changes nothing."""
    job = queued_job(cluster, namespace, "plain", "no-such-queue", gpus=1)
    assert job.spec.suspend is False
    wait_for(lambda: running_pods(cluster, namespace, "plain"), timeout=60, what="pod Running")
    assert job_suspended(cluster, namespace, "plain") is False
