"""Failure waste for real: the demo trainer on the real node writes a Hugging Face checkpoint
to a PVC every 10 s, which a DryRun CheckpointPolicy scans every 10 s (its pruner Jobs
report when each complete checkpoint was written). The test SIGKILLs the trainer's process
between two checkpoints (a crash: nothing saved), the Job retries and resumes from the
last one; later it is suspended (the trainer saves on SIGTERM), resumed, and finishes.

Its RunReceipt names both: the crash lost the time since the last periodic checkpoint times
its GPU, to within the seconds the API and the status round to; the suspension lost
nothing. The DCGM stand-in reports each trainer pod's GPU 80 % busy, so the receipt's used
and idle come from the real Prometheus. The operator runs with an instance of its own,
its budget and policy labelled.
"""

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    REAL_NODE_TOLERATION,
    TRAINER_UID,
    Cluster,
    Operator,
    budget,
    checkpoint_steps,
    create_policy,
    events_for,
    publish_utilization,
    start_operator,
    trainer_job,
    wait_for,
)
from trainwarden.testing.builders import CheckpointPolicyBuilder

GROUP, VERSION = "trainwarden.dev", "v1alpha1"
SAVE_STEPS = 50
"""A checkpoint every 10 s (5 steps a second)."""
MAX_STEPS = 200
BUSY = 80
"""Percent: what the DCGM stand-in reports for each trainer pod's GPU."""


@pytest.fixture
def waste_operator(
    cluster: Cluster, crds: None, image: str, namespace: str, tmp_path: Path
) -> Iterator[tuple[Operator, str]]:
    instance = f"waste-{namespace}"
    running = start_operator(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        prometheus_url=cluster.prometheus_url,
        args=(
            f"--instance={instance}",
            f"--pruner-image={image}",
            f"--pruner-run-as-user={TRAINER_UID}",
            f"--pruner-tolerations={json.dumps([REAL_NODE_TOLERATION])}",
            "--receipt-checkpoint-wait=2m",
            "--receipt-resolution=10s",
        ),
    )
    yield running, instance
    running.stop()


def trainer_pid(pod: str) -> int | None:
    """The trainer's process on this machine (the real node): the one whose HOSTNAME is
    the pod's name and whose command is the demo trainer."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"HOSTNAME={pod}".encode() in environ and b"demo-trainer" in command:
            return int(entry.name)
    return None


def written_at(directory: Path) -> float:
    """When a checkpoint was complete: its newest file's mtime, as the layouts read it."""
    return max(f.stat().st_mtime for f in directory.rglob("*") if f.is_file())


def test_a_crash_loses_the_work_since_the_last_checkpoint_and_a_save_on_sigterm_nothing(
    cluster: Cluster,
    namespace: str,
    volume: Path,
    image: str,
    waste_operator: tuple[Operator, str],
) -> None:
    _, instance = waste_operator
    charges = budget(f"{namespace}-b", namespace, 100).instance(instance)
    create_policy(cluster, "trainingbudgets", charges.build())
    scans = (
        CheckpointPolicyBuilder(f"{namespace}-ckpt")
        .instance(instance)
        .dry_run()
        .namespaces(namespace)
        .pvc()
        .layout("HuggingFace")
        .keep_last(2)
        .every("10s")
    )
    create_policy(cluster, "checkpointpolicies", scans.build())
    job = trainer_job(
        "train",
        image,
        save_steps=SAVE_STEPS,
        max_steps=MAX_STEPS,
        checkpoint_path="checkpoints:/checkpoints",
        retries=1,
    )
    batch, core = client.BatchV1Api(cluster.api), client.CoreV1Api(cluster.api)
    batch.create_namespaced_job(namespace, job)

    def running_pod(*other_than: str) -> str | None:
        """The Job's running pod (other than those named), its GPU reported BUSY % busy."""
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        running = [
            p.metadata.name
            for p in pods
            if p.status.phase == "Running"
            and not p.metadata.deletion_timestamp
            and p.metadata.name not in other_than
        ]
        if running:
            publish_utilization(cluster, namespace, running[0], BUSY)
        return running[0] if running else None

    def ended(pod: str) -> bool:
        """The pod has ended: gone from the API, or its phase terminal."""
        try:
            phase = core.read_namespaced_pod(pod, namespace).status.phase
        except client.ApiException as error:
            return error.status == 404
        return phase in ("Succeeded", "Failed")

    # The crash: 6 s after checkpoint-50 was complete, before checkpoint-100.
    first = wait_for(running_pod, timeout=90, what="the trainer pod to run")
    wait_for(lambda: SAVE_STEPS in checkpoint_steps(volume), timeout=60, what="checkpoint-50")
    saved = written_at(volume / f"checkpoint-{SAVE_STEPS}")
    time.sleep(max(0.0, saved + 6 - time.time()))  # the crash comes at a set time: a test input
    pid = wait_for(lambda: trainer_pid(first), timeout=10, what="the trainer's process")
    os.kill(pid, signal.SIGKILL)
    crashed = time.time()
    assert checkpoint_steps(volume)[-1] == SAVE_STEPS, "no checkpoint after the one before"

    # The retry resumes from checkpoint-50; suspended between two checkpoints, it saves.
    second = wait_for(lambda: running_pod(first), timeout=90, what="the retried pod")
    wait_for(
        lambda: checkpoint_steps(volume)[-1] >= 2 * SAVE_STEPS, timeout=60, what="checkpoint-100"
    )
    time.sleep(3)  # the suspension comes between two periodic checkpoints: a test input
    batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": True}})
    # A deleted pod stops "running" at once; its trainer saves on SIGTERM after that. Its
    # checkpoint is read once the pod has ended (terminal or gone), not when it was asked to.
    wait_for(lambda: ended(second), timeout=60, what="the suspended pod to end")
    on_sigterm = checkpoint_steps(volume)[-1]
    assert on_sigterm % SAVE_STEPS, f"checkpoint-{on_sigterm}: written on SIGTERM"
    batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": False}})
    third = wait_for(lambda: running_pod(first, second), timeout=90, what="the resumed pod")
    print(f"\npods {first} (crashed), {second} (suspended at step {on_sigterm}), {third}")

    def receipt() -> dict[str, Any] | None:
        found = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, "runreceipts"
        )["items"]
        return found[0] if found else None

    got = wait_for(receipt, timeout=180, what="the Job to finish and its RunReceipt")["spec"]
    print(json.dumps(got, indent=2))
    assert got["outcome"] == "Succeeded"
    assert got["pods"]["failed"] == 1
    assert got["interruptions"]["suspensions"] == 1
    assert got["checkpoints"]["policy"] == f"{namespace}-ckpt"
    hours = got["acceleratorHours"]
    measured = hours["used"] + hours["idle"]
    assert measured > 0.3 * hours["held"], "short pods, 10 s steps: most of them measured"
    assert hours["used"] / measured == pytest.approx(BUSY / 100, abs=0.05)
    waste = got["failureWaste"]
    failed, suspended = waste["losses"]
    assert (failed["reason"], suspended["reason"]) == ("Failed", "Suspended")
    # The API says when the pod failed to the second, the status keeps checkpoints' times
    # to the second: the crash lost what ran since checkpoint-50, give or take two seconds.
    assert failed["seconds"] == pytest.approx(crashed - saved, abs=2)
    assert failed["accelerators"] == 1
    assert suspended["seconds"] == 0, "the checkpoint written on SIGTERM lost nothing"
    assert not failed["upperBound"]
    assert not suspended["upperBound"]
    assert waste["acceleratorHours"] == pytest.approx(failed["seconds"] / 3600, abs=1e-5)
    (event,) = wait_for(
        lambda: [e for e in events_for(cluster, namespace, "train") if e.reason == "RunReceipt"],
        timeout=10,
        what="the RunReceipt Event (posted after the receipt)",
    )
    assert "lost since the last checkpoint" in event.message
    print(event.message)
