"""The world the operator governs: kwok GPU nodes, namespaces, policies, Jobs, pods.

Everything the benchmark creates carries the label bench.trainwarden.dev/scale, which is
what scale.cleanup deletes (and what --cleanup-only finds after an interrupted run).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import zlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from scale.cluster import BENCH_LABEL, Env
from scale.kube import (
    BUDGETS,
    CHECKPOINT_POLICIES,
    IDLE_POLICIES,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    Kube,
    Obj,
    Watcher,
    key_of,
    labels_of,
)
from scale.params import Params
from scale.progress import Progress, parallel, wait_until

GPU = "nvidia.com/gpu"
WORLD = "bench.trainwarden.dev/world"
NODE_PREFIX = "bench-gpu-"
GPU_CYCLE = (1, 2, 1, 4, 1, 2, 8, 1)
"""GPUs of the k-th bare pod on a node: 20 GPUs for 8 pods, so 10 pods fit 64 GPUs."""
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")
LABELS = {BENCH_LABEL: "true"}
TOLERATION = {"key": BENCH_LABEL, "operator": "Exists", "effect": "NoSchedule"}


def node_name(i: int) -> str:
    return f"{NODE_PREFIX}{i:04d}"


def namespace_name(i: int) -> str:
    return f"bench-w-{i:03d}"


def node(i: int, gpus: int) -> Obj:
    capacity = {"cpu": "256", "memory": "4Ti", "pods": "250", GPU: str(gpus)}
    return {
        "metadata": {
            "name": node_name(i),
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                **LABELS,
                "type": "kwok",
                "kubernetes.io/hostname": node_name(i),
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": PRODUCTS[i % 2],
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "spec": {"taints": [{"key": BENCH_LABEL, "value": "true", "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def namespace(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": {**LABELS, "team": name, **labels}}}


def pod_spec(gpus: int, *, node: str | None = None) -> Obj:
    spec: Obj = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "tolerations": [TOLERATION],
        "containers": [
            {
                "name": "trainer",
                "image": "example.invalid/trainer:1",
                "resources": {
                    "requests": {"cpu": "1", "memory": "8Gi", GPU: str(gpus)},
                    "limits": {GPU: str(gpus)},
                },
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {BENCH_LABEL: "true"}
    return spec


def pod_labels(namespace: str, i: int, **extra: str) -> dict[str, str]:
    return {
        **LABELS,
        "team": namespace,
        "project": f"project-{i % 5}",
        "experiment": f"exp-{i % 20}",
        **extra,
    }


def bare_pod(i: int, params: Params) -> tuple[str, Obj]:
    ns = namespace_name(i % params.namespaces)
    per_node_index = i // params.nodes
    body = {
        "metadata": {"name": f"w-{i:05d}", "labels": pod_labels(ns, i, **{WORLD: "true"})},
        "spec": pod_spec(
            GPU_CYCLE[per_node_index % len(GPU_CYCLE)], node=node_name(i % params.nodes)
        ),
    }
    return ns, body


def create_pod(admin: Kube, namespace: str, body: Obj) -> None:
    admin.create(PODS, body, namespace)


def job(name: str, pods: int, gpus: int, labels: dict[str, str], **template: Any) -> Obj:
    return {
        "metadata": {"name": name, "labels": {**LABELS, **labels}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {**LABELS, **labels}},
                "spec": {**pod_spec(gpus), **template},
            },
        },
    }


def budget(i: int, params: Params) -> Obj:
    ns = namespace_name(i % params.namespaces)
    spec: Obj = {
        "mode": "DryRun",
        "scope": {"namespaces": [ns]},
        "period": {"type": "Monthly"},
        "limits": {"acceleratorHours": 1_000_000},
    }
    if i % 2:
        spec["limits"]["cost"] = 5_000_000
        spec["rates"] = {
            "acceleratorHour": [
                {"nodeSelector": {"nvidia.com/gpu.product": PRODUCTS[1]}, "price": 3.9},
                {"price": 1.8},
            ],
            "cpuCoreHour": 0.04,
        }
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "TrainingBudget",
        "metadata": {"name": f"bench-w-{i:03d}", "labels": LABELS},
        "spec": spec,
    }


def idle_policy(i: int, params: Params) -> Obj:
    namespaces = [namespace_name(j) for j in range(i, params.namespaces, params.idle_policies)]
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "IdleReclaimPolicy",
        "metadata": {"name": f"bench-w-{i:03d}", "labels": LABELS},
        "spec": {
            "mode": "DryRun",
            "scope": {"namespaces": namespaces or [namespace_name(0)]},
            "signal": {"threshold": 5, "window": "30m", "resolution": "1m", "warmup": "10m"},
            "action": "Suspend",
            "gracePeriod": "15m",
        },
    }


def checkpoint_policy(i: int, params: Params) -> Obj:
    namespaces = sorted({namespace_name((2 * i + k) % params.namespaces) for k in (0, 1)})
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {"name": f"bench-w-{i:03d}", "labels": LABELS},
        "spec": {
            "mode": "DryRun",
            "scope": {"namespaces": namespaces},
            "storage": {
                "pvc": {"selector": {"matchLabels": {"checkpoints": "hf"}}, "path": "/checkpoints"}
            },
            "layout": {"type": "HuggingFace"},
            "retention": {"keepLast": 3, "minAge": "15m"},
            "schedule": {"interval": "10m"},
        },
    }


@dataclass
class WorldPods:
    """Running world pods as a watch sees them: key -> (node, gpus)."""

    running: dict[str, tuple[str, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_event(self, kind: str, obj: Obj, _seen: float) -> None:
        if labels_of(obj).get(WORLD) != "true":
            return
        key = key_of(obj)
        with self.lock:
            if kind == "DELETED" or obj.get("status", {}).get("phase") != "Running":
                self.running.pop(key, None)
                return
            limits = obj["spec"]["containers"][0]["resources"].get("limits", {})
            self.running[key] = (obj["spec"].get("nodeName", ""), int(limits.get(GPU, "0")))

    def count(self) -> int:
        with self.lock:
            return len(self.running)


def ready_nodes(admin: Kube) -> int:
    listed = admin.list(NODES, labelSelector=BENCH_LABEL)
    return sum(
        1
        for n in listed["items"]
        for c in n.get("status", {}).get("conditions", [])
        if c["type"] == "Ready" and c["status"] == "True"
    )


def build(env: Env, admin: Kube, params: Params) -> WorldPods:
    """Create the world and wait until every pod runs; returns the running pods."""
    progress = Progress("setup")
    try:
        return _build(env, admin, params, progress)
    finally:
        progress.done()


def _build(env: Env, admin: Kube, params: Params, progress: Progress) -> WorldPods:
    deadline = time.monotonic() + params.setup_timeout
    nodes = params.nodes
    parallel(
        (partial(admin.create, NODES, node(i, params.gpus_per_node)) for i in range(nodes)),
        progress,
        "nodes created",
        nodes,
    )

    def nodes_ready() -> bool:
        count = ready_nodes(admin)
        progress.set("nodes Ready", f"{count}/{nodes}")
        return count >= nodes

    wait_until("every node Ready", nodes_ready, deadline, progress)
    ns_count = params.namespaces
    parallel(
        (partial(admin.create, NAMESPACES, namespace(namespace_name(i))) for i in range(ns_count)),
        progress,
        "namespaces",
        ns_count,
    )
    policies = (
        [(BUDGETS, budget(i, params)) for i in range(params.budgets)]
        + [(IDLE_POLICIES, idle_policy(i, params)) for i in range(params.idle_policies)]
        + [
            (CHECKPOINT_POLICIES, checkpoint_policy(i, params))
            for i in range(params.checkpoint_policies)
        ]
    )
    parallel(
        (partial(admin.create, res, body) for res, body in policies),
        progress,
        "policies",
        len(policies),
    )
    world = WorldPods()
    pod_watch = Watcher(admin, PODS, world.on_event, labelSelector=WORLD)
    pod_watch.start()
    job_pods = min(params.job_pods_per_namespace, params.pods // max(1, ns_count))
    jobs = ns_count if job_pods else 0
    parallel(
        (
            partial(
                admin.create,
                JOBS,
                job("train", job_pods, 2, pod_labels(namespace_name(i), i, **{WORLD: "true"})),
                namespace_name(i),
            )
            for i in range(jobs)
        ),
        progress,
        "jobs",
        jobs,
    )
    bare = params.pods - jobs * job_pods
    parallel(
        (partial(create_pod, admin, *bare_pod(i, params)) for i in range(bare)),
        progress,
        "pods created",
        bare,
    )

    def all_running() -> bool:
        count = world.count()
        progress.set("pods Running", f"{count}/{params.pods}")
        return count >= params.pods

    wait_until("every pod Running", all_running, deadline, progress)
    pod_watch.stop()
    if params.utilization:
        with world.lock:
            running = dict(world.running)
        parallel(
            (
                partial(
                    publish,
                    env,
                    key,
                    2.0 if zlib.crc32(key.encode()) % 20 == 0 else 60.0,
                    *node_gpus,
                )
                for key, node_gpus in running.items()
            ),
            progress,
            "utilization published",
            len(running),
        )
    return world


def publish(env: Env, key: str, percent: float, hostname: str, gpus: int) -> None:
    """What the DCGM exporter stand-in reports for a pod's GPUs from now on."""
    body = json.dumps({"utilization": percent, "gpus": max(1, gpus), "hostname": hostname})
    request = urllib.request.Request(f"{env.dcgm_url}/gpus/{key}", data=body.encode(), method="PUT")
    urllib.request.urlopen(request, timeout=30).close()
