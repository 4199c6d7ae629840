"""CheckpointPolicy end to end on the real node: the demo trainer writes Hugging Face
checkpoints to a PVC, and pruner Jobs (the trainwarden image, no API token) delete what the
policy says, reporting back into the policy's status.

The files are read on the host, where the hostPath PersistentVolume keeps them.
"""

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    REAL_NODE_TOLERATION,
    ROOT,
    TRAINER_UID,
    Cluster,
    Operator,
    checkpoint_steps,
    create_policy,
    events_for,
    get_policy,
    holds,
    own,
    start_operator,
    trainer_job,
    trainer_state,
    wait_for,
)
from trainwarden.testing.builders import (
    CheckpointPolicyBuilder,
    JobBuilder,
    PVCBuilder,
    VolumeSnapshotBuilder,
    VolumeSnapshotClassBuilder,
)

PLURAL = "checkpointpolicies"
PIN = ".trainwarden-pin"
KILL_SWITCH = "trainwarden-e2e-kill-switch"


@pytest.fixture(scope="module")
def pruning_operator(
    cluster: Cluster, crds: None, image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The operator with pruner Jobs: the node's image, as the trainers' uid (never root),
    tolerating the real node's taint; a kill switch of its own."""
    running = start_operator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        args=(
            f"--pruner-image={image}",
            f"--pruner-run-as-user={TRAINER_UID}",
            f"--pruner-tolerations={json.dumps([REAL_NODE_TOLERATION])}",
            f"--kill-switch=default/{KILL_SWITCH}",
        ),
    )
    yield running
    running.stop()


def policy(name: str, namespace: str) -> CheckpointPolicyBuilder:
    """Enforce on Hugging Face checkpoints in the namespace: keep the newest 2 of those
    older than 3 s, every 10 s. The caller says where they are (pvc() or snapshots())."""
    return (
        CheckpointPolicyBuilder(name)
        .enforce()
        .namespaces(namespace)
        .layout("HuggingFace")
        .keep_last(2)
        .min_age("3s")
        .every("10s")
    )


def location(cluster: Cluster, name: str) -> dict[str, Any]:
    status = get_policy(cluster, PLURAL, name).get("status") or {}
    found: list[dict[str, Any]] = status.get("locations") or []
    return found[0] if found else {}


def pruner_pods(cluster: Cluster, namespace: str) -> list[client.V1Pod]:
    pods: list[client.V1Pod] = (
        client.CoreV1Api(cluster.api)
        .list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=trainwarden-pruner")
        .items
    )
    return pods


def annotated_job(name: str, path: str) -> dict[str, Any]:
    """A suspended Job that only names a checkpoint directory (it never runs)."""
    return JobBuilder(name).suspended().checkpoint_path(path).image("none").build()


def write_checkpoints(directory: Path, losses: dict[int, float], age_seconds: float) -> int:
    """Hugging Face checkpoints as the Trainer leaves them; returns their total size."""
    total = 0
    for step, loss in losses.items():
        ckpt = directory / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        state = {
            "global_step": step,
            "log_history": [{"step": step, "loss": loss * 1.1}, {"step": step, "eval_loss": loss}],
        }
        (ckpt / "trainer_state.json").write_text(json.dumps(state))
        (ckpt / "model.safetensors").write_bytes(b"\0" * 4096)
        total += sum(f.stat().st_size for f in ckpt.iterdir())
        stamp = time.time() - age_seconds
        for path in (*ckpt.iterdir(), ckpt):
            os.utime(path, (stamp, stamp))
    own(directory)
    return total


def test_training_run_is_pruned_while_it_runs_and_strictly_after_it_finishes(
    cluster: Cluster, pruning_operator: Operator, image: str, namespace: str, volume: Path
) -> None:
    job = trainer_job(
        "train", image, save_steps=10, max_steps=150, checkpoint_path="checkpoints:/checkpoints"
    )
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, job)
    wait_for(lambda: 10 in checkpoint_steps(volume), timeout=90, what="the first checkpoint")
    (volume / "checkpoint-10" / PIN).touch()  # an engineer pins the first one
    name = f"{namespace}-ckpt"
    create_policy(
        cluster,
        PLURAL,
        policy(name, namespace)
        .pvc()
        .keep_best("eval_loss", order="Min")
        .after_completion(keep_last=1, keep_best="eval_loss", order="Min", delay="1s")
        .build(),
    )

    # While it runs: pruned, but never its newest two, nor the pinned one.
    running = wait_for(
        lambda: (e := location(cluster, name)).get("deleted") and e["jobState"] == "Running" and e,
        timeout=120,
        what="a pruner run while the job runs",
    )
    print(f"\nwhile running: {running}")
    assert 10 in checkpoint_steps(volume)
    pod = pruner_pods(cluster, namespace)[0]
    assert pod.spec.automount_service_account_token is False
    assert not [v for v in pod.spec.volumes if v.projected], "no API token in the pruner"
    assert pod.spec.containers[0].security_context.read_only_root_filesystem

    # After it finished: only the final checkpoint, the best and the pinned one are left.
    wait_for(
        lambda: (
            client.BatchV1Api(cluster.api).read_namespaced_job("train", namespace).status.succeeded
        ),
        timeout=150,
        what="the training job to finish",
    )
    final = max(checkpoint_steps(volume))
    # The trainer's own record of its best checkpoint, to check keepBest against.
    best_step = int(Path(trainer_state(volume, final)["best_model_checkpoint"]).name.split("-")[1])
    done = wait_for(
        lambda: (
            (e := location(cluster, name)).get("jobState") == "Finished"
            and set(checkpoint_steps(volume)) == {10, final, best_step}
            and e.get("lastJob") != running.get("lastJob")
            and e
        ),
        timeout=90,
        what="the stricter rule after the job finished",
    )
    print(f"after finishing: kept steps {sorted({10, final, best_step})}: {done}")
    status = get_policy(cluster, PLURAL, name)["status"]
    assert status["bytesFreed"] > 0
    assert status["bytesFreed"] == sum(e["bytesFreed"] for e in status["locations"])
    reasons = {e.reason for e in events_for(cluster, namespace, "checkpoints")}
    assert "CheckpointsPruned" in reasons
    pvc = client.CoreV1Api(cluster.api).read_namespaced_persistent_volume_claim(
        "checkpoints", namespace
    )
    assert pvc.metadata.annotations["trainwarden.dev/pruned-by"] == f"CheckpointPolicy/{name}"


def test_dry_run_lists_exactly_what_it_would_delete_and_deletes_nothing(
    cluster: Cluster, pruning_operator: Operator, namespace: str, volume: Path
) -> None:
    losses = {100: 0.9, 200: 0.2, 300: 0.5, 400: 0.7, 500: 0.6}
    write_checkpoints(volume, losses, age_seconds=3600)
    (volume / "tmp-checkpoint-600").mkdir()  # the Trainer's staging directory: being written
    client.BatchV1Api(cluster.api).create_namespaced_job(
        namespace,
        annotated_job("finished-run", "checkpoints:/checkpoints"),
    )
    name = f"{namespace}-dry"
    create_policy(
        cluster,
        PLURAL,
        policy(name, namespace).pvc().dry_run().keep_best("eval_loss").min_age("1m").build(),
    )
    entry = wait_for(
        lambda: location(cluster, name).get("lastJob") and location(cluster, name),
        timeout=90,
        what="the DryRun pruner's report",
    )
    assert entry["deletedNames"] == ["checkpoint-100", "checkpoint-300"]
    assert entry["deleted"] == 2
    assert entry["scanned"] == 6
    assert sorted(p.name for p in volume.iterdir()) == [
        *(f"checkpoint-{s}" for s in losses),
        "tmp-checkpoint-600",
    ]
    assert get_policy(cluster, PLURAL, name)["status"]["bytesFreed"] == 0
    reasons = {e.reason for e in events_for(cluster, namespace, "checkpoints")}
    assert "CheckpointsWouldBePruned" in reasons


def test_kill_switch_stops_pruning_within_a_cycle(
    cluster: Cluster, pruning_operator: Operator, namespace: str, volume: Path
) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_config_map(
        "default",
        {"metadata": {"name": KILL_SWITCH}, "data": {"checkpointPruning": "paused"}},
    )
    try:
        write_checkpoints(volume, {1: 1.0, 2: 1.0, 3: 1.0}, age_seconds=3600)
        client.BatchV1Api(cluster.api).create_namespaced_job(
            namespace,
            annotated_job("run", "checkpoints:/checkpoints"),
        )
        name = f"{namespace}-paused"
        create_policy(cluster, PLURAL, policy(name, namespace).pvc().build())

        def pruning() -> dict[str, Any] | None:
            conditions = (get_policy(cluster, PLURAL, name).get("status") or {}).get("conditions")
            return next((c for c in conditions or [] if c["type"] == "Pruning"), None)

        paused = wait_for(
            lambda: (c := pruning()) and c["reason"] == "KillSwitch" and c,
            timeout=30,
            what="Pruning=False KillSwitch",
        )
        assert paused["status"] == "False"
        assert f"default/{KILL_SWITCH}" in paused["message"]
        holds(lambda: not pruner_pods(cluster, namespace), duration=15, what="no pruner started")
    finally:
        core.delete_namespaced_config_map(KILL_SWITCH, "default")
    wait_for(
        lambda: location(cluster, name).get("deleted") == 1,
        timeout=60,
        what="pruning once the kill switch is off",
    )
    assert sorted(p.name for p in volume.iterdir()) == ["checkpoint-2", "checkpoint-3"]


def test_a_malformed_checkpoint_path_is_reported_on_the_job(
    cluster: Cluster, pruning_operator: Operator, namespace: str
) -> None:
    client.BatchV1Api(cluster.api).create_namespaced_job(
        namespace,
        annotated_job("typo", "checkpoints/../etc"),
    )
    name = f"{namespace}-{uuid.uuid4().hex[:4]}"
    create_policy(cluster, PLURAL, policy(name, namespace).pvc().build())
    event = wait_for(
        lambda: next(
            (e for e in events_for(cluster, namespace, "typo") if e.reason == "AnnotationIgnored"),
            None,
        ),
        timeout=30,
        what="the AnnotationIgnored Event on the Job",
    )
    assert 'must be "<pvc>:<path>"' in event.message
    assert location(cluster, name) == {}


@pytest.fixture(scope="module")
def snapshot_crds(cluster: Cluster) -> None:
    """external-snapshotter's own CRDs; this cluster has no snapshot controller, so the test
    writes each snapshot's status as the controller would once the CSI driver cut it."""
    subprocess.run([str(ROOT / "e2e/cluster/snapshot-crds.sh")], check=True, cwd=ROOT)


SNAPSHOTS = ("snapshot.storage.k8s.io", "v1")


def snapshot_class(cluster: Cluster, name: str, deletion_policy: str) -> None:
    body = VolumeSnapshotClassBuilder(name).deletion_policy(deletion_policy).build()
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        *SNAPSHOTS, "volumesnapshotclasses", body
    )


def cut_snapshot(
    cluster: Cluster,
    namespace: str,
    name: str,
    klass: str,
    *,
    step: int,
    loss: float,
    hours_ago: float,
    ready: bool = True,
) -> None:
    """A snapshot of the PVC `checkpoints`, cut `hours_ago` (its status written as the
    snapshot controller would: created without it, then patched)."""
    api = client.CustomObjectsApi(cluster.api)
    body = (
        VolumeSnapshotBuilder(name)
        .labels(checkpoints="snap")
        .step(step)
        .metric("eval_loss", loss)
        .snapshot_class(klass)
        .ready(datetime.now(UTC) - timedelta(hours=hours_ago), ready=ready)
        .build()
    )
    status = {"status": body.pop("status")}
    api.create_namespaced_custom_object(*SNAPSHOTS, namespace, "volumesnapshots", body)
    api.patch_namespaced_custom_object_status(
        *SNAPSHOTS, namespace, "volumesnapshots", name, status
    )


def snapshot_names(cluster: Cluster, namespace: str) -> list[str]:
    found = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        *SNAPSHOTS, namespace, "volumesnapshots"
    )
    return sorted(
        s["metadata"]["name"] for s in found["items"] if not s["metadata"].get("deletionTimestamp")
    )


def test_volume_snapshots_are_pruned_by_the_same_rules(
    cluster: Cluster, snapshot_crds: None, pruning_operator: Operator, namespace: str
) -> None:
    retain, destroy = f"{namespace}-retain", f"{namespace}-delete"
    snapshot_class(cluster, retain, "Retain")
    snapshot_class(cluster, destroy, "Delete")
    try:
        client.CoreV1Api(cluster.api).create_namespaced_persistent_volume_claim(
            namespace, PVCBuilder("checkpoints").build()
        )
        cut_snapshot(cluster, namespace, "s-50", destroy, step=50, loss=0.9, hours_ago=7)
        for i, loss in ((1, 0.8), (2, 0.1), (3, 0.5), (4, 0.6), (5, 0.4)):
            cut_snapshot(
                cluster, namespace, f"s-{i}00", retain, step=100 * i, loss=loss, hours_ago=6 - i
            )
        cut_snapshot(
            cluster, namespace, "s-600", retain, step=600, loss=0.3, hours_ago=0.5, ready=False
        )
        name = f"{namespace}-snap"
        create_policy(
            cluster,
            PLURAL,
            policy(name, namespace)
            .snapshots({"checkpoints": "snap"})
            .dry_run()
            .keep_best("eval_loss")
            .min_age("1m")
            .build(),
        )
        dry = wait_for(
            lambda: location(cluster, name).get("lastRun") and location(cluster, name),
            timeout=60,
            what="the DryRun plan over the snapshots",
        )
        print(f"\nDryRun: {dry}")
        assert dry["source"] == "VolumeSnapshots"
        assert dry["deletedNames"] == ["s-100", "s-300"]
        assert "deletionPolicy Delete" in dry["message"], "the Delete-class snapshot is reported"
        all_seven = ["s-100", "s-200", "s-300", "s-400", "s-50", "s-500", "s-600"]
        assert snapshot_names(cluster, namespace) == all_seven

        client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", PLURAL, name, {"spec": {"mode": "Enforce"}}
        )
        wait_for(
            lambda: (
                snapshot_names(cluster, namespace) == ["s-200", "s-400", "s-50", "s-500", "s-600"]
            ),
            timeout=60,
            what="s-100 and s-300 deleted, the rest kept",
        )
        done = wait_for(
            lambda: (e := location(cluster, name)).get("bytesFreed") and e,
            timeout=30,
            what="the bytes freed in status",
        )
        assert done["bytesFreed"] == 2 * 2**30
        reasons = {e.reason for e in events_for(cluster, namespace, "checkpoints")}
        assert "SnapshotsPruned" in reasons
        deleted = {e.reason for e in events_for(cluster, namespace, "s-100")}
        assert "CheckpointSnapshotDeleted" in deleted
    finally:
        for klass in (retain, destroy):
            client.CustomObjectsApi(cluster.api).delete_cluster_custom_object(
                *SNAPSHOTS, "volumesnapshotclasses", klass
            )
