"""The real node: a kubelet with containerd and runc beside the kwok nodes, where pods run.

A command's output comes back through `kubectl logs` (API server -> kubelet), and a Job of
the demo trainer writes Hugging Face checkpoints to a PersistentVolume, is suspended
(its pod gets SIGTERM and saves a final checkpoint), resumed, and continues from the step it
reached. The steps are read from the files on the host.
"""

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from harness import (
    CLUSTER_DIR,
    GPU,
    REAL_NODE_LABEL,
    Cluster,
    checkpoint_steps,
    on_real_node,
    trainer_job,
    trainer_state,
    wait_for,
)

NODE = os.environ.get("TRAINWARDEN_REAL_NODE_NAME", "real-0")
LABEL = REAL_NODE_LABEL


def pod_phase(cluster: Cluster, namespace: str, name: str) -> str:
    pod = client.CoreV1Api(cluster.api).read_namespaced_pod(name, namespace)
    return str(pod.status.phase)


def test_real_node_is_ready_beside_the_kwok_nodes(cluster: Cluster, image: str) -> None:
    nodes = {n.metadata.name: n for n in client.CoreV1Api(cluster.api).list_node().items}
    ready = {
        name
        for name, n in nodes.items()
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    }
    kwok = {name for name, n in nodes.items() if n.metadata.labels.get("type") == "kwok"}
    assert kwok, "the kwok nodes are there"
    assert kwok <= ready
    assert NODE in ready
    real = nodes[NODE]
    info = real.status.node_info
    assert info.kubelet_version == "v1.34.4"
    assert info.container_runtime_version.startswith("containerd://")
    assert real.metadata.labels[LABEL] == "true"
    assert [(t.key, t.value, t.effect) for t in real.spec.taints] == [(LABEL, "true", "NoSchedule")]
    assert real.status.capacity[GPU] == real.status.allocatable[GPU] == "4"
    print()
    print(cluster.kubectl("get", "nodes", "-o", "wide"))


def test_a_pod_runs_a_command_and_its_logs_come_back(
    cluster: Cluster, namespace: str, image: str
) -> None:
    token = uuid.uuid4().hex
    script = (
        "import os, platform, sys; "
        f"print('{token}', platform.node(), sys.version.split()[0], os.getpid())"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hello"},
        "spec": on_real_node(
            {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", script],
                    }
                ],
            }
        ),
    }
    client.CoreV1Api(cluster.api).create_namespaced_pod(namespace, pod)
    wait_for(
        lambda: pod_phase(cluster, namespace, "hello") == "Succeeded",
        timeout=60,
        what="the pod to run to completion on the real node",
    )
    logs = cluster.kubectl("logs", "-n", namespace, "hello")
    print(f"\nkubectl logs hello: {logs.strip()}")
    words = logs.split()
    assert words[0] == token
    assert words[2].startswith("3.11.")  # Debian's python in the image, not the host's
    assert words[3] == "1", "PID 1 of its own PID namespace: a real container"


def test_simulated_pods_never_land_on_the_real_node(
    cluster: Cluster, namespace: str, image: str
) -> None:
    """The taint keeps kwok's training pods (which request GPUs) off the real node."""
    core = client.CoreV1Api(cluster.api)
    for i in range(4):
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"sim-{i}"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "example.invalid/trainer:1",
                            "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                        }
                    ],
                },
            },
        )

    def placed() -> list[str] | None:
        nodes = [p.spec.node_name for p in core.list_namespaced_pod(namespace).items]
        return nodes if all(nodes) else None

    nodes = wait_for(placed, timeout=60, what="the simulated pods to be scheduled")
    assert NODE not in nodes


# --- the demo trainer as a Job, suspended and resumed ------------------------------------------


def json_lines(process: "subprocess.Popen[str]") -> Iterator[dict[str, Any]]:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("{"):
            yield json.loads(line)


def test_trainer_job_is_suspended_and_resumes_from_its_checkpoint(
    cluster: Cluster, namespace: str, image: str, volume: Path
) -> None:
    batch = client.BatchV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    batch.create_namespaced_job(namespace, trainer_job("train", image))

    def running_pod() -> str | None:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        running = [
            p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]
        return running[0].metadata.name if running else None

    first_pod = wait_for(running_pod, timeout=60, what="the trainer pod to run")
    # Follow its output (through the API server and kubelet) until the container ends.
    follow = subprocess.Popen(
        [
            str(CLUSTER_DIR / "bin" / "kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "logs",
            "-f",
            "-n",
            namespace,
            first_pod,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    events: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: events.extend(json_lines(follow)), daemon=True)
    reader.start()
    # Periodic checkpoints every 20 steps (5 steps a second); suspend between two of them,
    # so the SIGTERM checkpoint is one of its own.
    wait_for(
        lambda: any(e["event"] == "epoch" and e["step"] >= 45 for e in events),
        timeout=60,
        what="the trainer to reach step 45",
    )
    before = checkpoint_steps(volume)
    assert before[:2] == [20, 40], before

    suspended_at = time.time()
    batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": True}})
    follow.wait(timeout=60)
    reader.join(timeout=10)
    assert {"event": "signal", "signal": "SIGTERM"} in events, events
    stopped = events[-1]
    assert stopped["event"] == "stopped", events
    reached = stopped["step"]
    assert reached >= 45
    wait_for(
        lambda: not core.list_namespaced_pod(namespace, label_selector="job-name=train").items,
        timeout=60,
        what="the suspended Job's pod to go away",
    )
    on_disk = checkpoint_steps(volume)
    assert on_disk[-1] == reached, "the final checkpoint is the step it stopped at"
    assert reached % 20, "not a periodic checkpoint: the one written on SIGTERM"
    final = volume / f"checkpoint-{reached}"
    assert final.stat().st_mtime >= suspended_at - 1, "written on SIGTERM, after the suspension"
    assert trainer_state(volume, reached)["global_step"] == reached
    job = batch.read_namespaced_job_status("train", namespace)
    assert not any(
        c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or []
    ), "a suspended Job is neither complete nor failed"
    print(f"\nperiodic checkpoints {before}; SIGTERM at step {reached}; on disk {on_disk}")

    batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": False}})
    second_pod = wait_for(running_pod, timeout=60, what="a new trainer pod after resuming")
    assert second_pod != first_pod
    wait_for(
        lambda: checkpoint_steps(volume)[-1] > reached,
        timeout=60,
        what="a checkpoint after the resumed step",
    )
    logs = cluster.kubectl("logs", "-n", namespace, second_pod)
    resumed = json.loads(logs.splitlines()[0])
    assert resumed == {
        "event": "resumed",
        "step": reached,
        "checkpoint": f"/data/checkpoints/checkpoint-{reached}",
    }
    after = checkpoint_steps(volume)
    next_step = after[after.index(reached) + 1]
    history = trainer_state(volume, next_step)["log_history"]
    eval_steps = [e["step"] for e in history if "eval_loss" in e]
    assert eval_steps == sorted(set(eval_steps)), "no step trained twice, none lost"
    assert set(on_disk) <= set(eval_steps), "the history before the suspension is kept"
    print(f"resumed from step {reached} in pod {second_pod}; checkpoints now {after}")
