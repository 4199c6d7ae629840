"""Budgets suspend JobSet, Kubeflow PyTorchJob and RayJob through their own suspend fields,
validated by those projects' own published CRD manifests (pinned module versions).

Their controllers are not installed here, so each test stands in for the controller by
creating what it would (a Job owned by the JobSet, a pod owned by the PyTorchJob, a
RayCluster owned by the RayJob and its pod); trainwarden must walk from the pod to the
top-level object and flip the field that object's own controller honours.
"""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import Cluster, Operator, create_budget, pod_template, wait_for

GPU = "nvidia.com/gpu"
# module@version -> CRD manifests inside it: the projects' own published definitions.
THIRD_PARTY_CRDS = {
    "sigs.k8s.io/jobset@v0.10.1": ["config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"],
    "github.com/kubeflow/training-operator@v1.8.1": [
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
    ],
    "github.com/ray-project/kuberay/ray-operator@v1.5.0": [
        "config/crd/bases/ray.io_rayjobs.yaml",
        "config/crd/bases/ray.io_rayclusters.yaml",
    ],
}


def _module_dir(module: str) -> Path:
    result = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
    )
    return Path(json.loads(result.stdout)["Dir"])


@pytest.fixture(scope="module")
def workload_crds(cluster: Cluster) -> None:
    for module, files in THIRD_PARTY_CRDS.items():
        root = _module_dir(module)
        for name in files:
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(root / name))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/jobsets.jobset.x-k8s.io",
        "crd/pytorchjobs.kubeflow.org",
        "crd/rayjobs.ray.io",
        "crd/rayclusters.ray.io",
    )


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
    }


def create(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    out = cluster.kubectl(
        "create", "-n", namespace, "-o", "json", "-f", "-", stdin=json.dumps(manifest)
    )
    created: dict[str, Any] = json.loads(out)
    return created


def owned_pod(cluster: Cluster, namespace: str, name: str, parent: dict[str, Any]) -> None:
    create(
        cluster,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "ownerReferences": [owner(parent)]},
            "spec": pod_template()["spec"],
        },
    )


def test_budget_suspends_jobset_pytorchjob_rayjob_and_deletes_bare_pods(
    cluster: Cluster, operator: Operator, workload_crds: None, namespace: str
) -> None:
    jobset = create(
        cluster,
        namespace,
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 1,
                        "template": {"spec": {"template": pod_template()}},
                    }
                ]
            },
        },
    )
    # As the JobSet controller would: a Job owned by the JobSet; the Job controller makes the pod.
    create(
        cluster,
        namespace,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "js-workers-0", "ownerReferences": [owner(jobset)]},
            "spec": {"backoffLimit": 0, "template": pod_template()},
        },
    )
    pytorchjob = create(
        cluster,
        namespace,
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ptj"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "restartPolicy": "Never", "template": pod_template()}
                }
            },
        },
    )
    owned_pod(cluster, namespace, "ptj-master-0", pytorchjob)
    rayjob = create(
        cluster,
        namespace,
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "rj"},
            "spec": {"entrypoint": "python train.py"},
        },
    )
    raycluster = create(
        cluster,
        namespace,
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "rj-cluster", "ownerReferences": [owner(rayjob)]},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": pod_template()}},
        },
    )
    owned_pod(cluster, namespace, "rj-head", raycluster)
    # A bare pod has nothing to suspend: it is deleted (uid/resourceVersion preconditions).
    create(
        cluster,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "notebook"},
            "spec": pod_template()["spec"],
        },
    )

    core = client.CoreV1Api(cluster.api)
    wait_for(
        lambda: (
            sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 4
        ),
        timeout=60,
        what="the four training pods running",
    )
    name = f"{namespace}-tb"
    create_budget(cluster, name, namespace, 0.003)
    custom = client.CustomObjectsApi(cluster.api)

    def suspended(group: str, version: str, plural: str, obj_name: str, *path: str) -> bool:
        obj = custom.get_namespaced_custom_object(group, version, namespace, plural, obj_name)
        node: Any = obj
        for part in path:
            node = (node or {}).get(part)
        labels = obj["metadata"].get("labels") or {}
        return bool(node) and labels.get("trainwarden.dev/suspended-by") == name

    wait_for(
        lambda: suspended("jobset.x-k8s.io", "v1alpha2", "jobsets", "js", "spec", "suspend"),
        timeout=60,
        what="the JobSet suspended through spec.suspend",
    )
    wait_for(
        lambda: suspended(
            "kubeflow.org", "v1", "pytorchjobs", "ptj", "spec", "runPolicy", "suspend"
        ),
        timeout=60,
        what="the PyTorchJob suspended through spec.runPolicy.suspend",
    )
    wait_for(
        lambda: suspended("ray.io", "v1", "rayjobs", "rj", "spec", "suspend"),
        timeout=60,
        what="the RayJob suspended through spec.suspend",
    )
    wait_for(
        lambda: all(
            p.metadata.name != "notebook" for p in core.list_namespaced_pod(namespace).items
        ),
        timeout=60,
        what="the bare pod deleted",
    )
    # The intermediate objects are left to their owners' controllers, not flipped directly.
    job = client.BatchV1Api(cluster.api).read_namespaced_job("js-workers-0", namespace)
    assert not job.spec.suspend
    assert "trainwarden.dev/suspended-by" not in (job.metadata.labels or {})

    # The operator writes status once per evaluation, after all its actions and their Events:
    # the labels and the deleted pod above are seen before it, so wait for it too.
    def suspended_kinds() -> set[str]:
        status = (
            custom.get_cluster_custom_object(
                "trainwarden.dev", "v1alpha1", "trainingbudgets", name
            ).get("status")
            or {}
        )
        return {s["ref"]["kind"] for s in status.get("suspended") or []}

    wait_for(
        lambda: suspended_kinds() == {"JobSet", "PyTorchJob", "RayJob"},
        timeout=30,
        what="status.suspended listing the JobSet, PyTorchJob and RayJob",
    )
    custom.delete_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", name)
