"""The experiment ledger end to end (issue 28 items 4 and 5), on the real API server.

A Job declares its params, data version and code version in annotations and names an S3
prefix where its trainer's Hugging Face checkpoints are (uploaded here as the Trainer
syncs them, with trainer_state.json); a CheckpointPolicy scans the prefix. Its RunReceipt
records what it declared (the config hash computed) and the final and best eval_loss the
scan read. The same Job submitted again through `kubectl create` is told it repeats that
run (the chart's webhook configuration, served by this module's operator), and an Event
on the new Job names the earlier receipt; a budget with repeats: Hold creates the next
one suspended.

On the real node (the lead's cluster; skipped without one), the demo trainer writes the
checkpoints to a PVC and a pruner Job reads them: the receipt records the trainer's own
final and best eval_loss from its trainer_state.json.
"""

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    REAL_NODE_TOLERATION,
    TRAINER_UID,
    Cluster,
    budget,
    create_policy,
    events_for,
    simulated,
    start_operator,
    trainer_job,
    trainer_state,
    wait_for,
)
from test_admission import Webhook, kubectl_create, served_webhook
from test_object_storage import bucket, s3, s3_env, secret  # noqa: F401  (fixtures)
from trainwarden.core import ledger
from trainwarden.testing.builders import CheckpointPolicyBuilder, JobBuilder

GROUP, VERSION, RECEIPTS = "trainwarden.dev", "v1alpha1", "runreceipts"
INSTANCE = "ledger"
DECLARED = {
    "trainwarden.dev/params": '{"lr": 0.0003, "batch": 64, "optimizer": "adamw"}',
    "trainwarden.dev/data-version": "imagenet-v3",
    "trainwarden.dev/code-version": "abc1234",
}
PARAMS = {"batch": "64", "lr": "0.0003", "optimizer": "adamw"}
HASH = ledger.config_hash(PARAMS, "imagenet-v3", "abc1234")
LOSSES = {100: 0.9, 200: 0.35, 300: 0.5}
"""eval_loss at each checkpoint: the best at 200, which the Trainer names its best."""


@pytest.fixture(scope="module")
def webhook(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    """An operator of its own instance serving the chart's webhook configuration."""
    with served_webhook(cluster, tmp_path_factory, "tw-ledger", instance=INSTANCE) as hook:
        yield hook


def upload(store: Any, name: str, prefix: str) -> None:
    """Checkpoints as the Trainer syncs them: each state with the history up to its step,
    best_model_checkpoint naming the best."""
    history: list[dict[str, Any]] = []
    for step, loss in LOSSES.items():
        history += [{"step": step, "loss": loss + 0.2}, {"step": step, "eval_loss": loss}]
        best = min((s for s in LOSSES if s <= step), key=lambda s: LOSSES[s])
        state = {
            "global_step": step,
            "log_history": history,
            "best_metric": LOSSES[best],
            "best_model_checkpoint": f"/out/checkpoint-{best}",
        }
        base = f"{prefix}checkpoint-{step}/"
        store.put_object(Bucket=name, Key=f"{base}model.safetensors", Body=b"\0" * 4096)
        store.put_object(Bucket=name, Key=f"{base}trainer_state.json", Body=json.dumps(state))


def receipts(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    found = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, RECEIPTS
    )
    items: list[dict[str, Any]] = found["items"]
    return items


def declared_job(name: str, namespace: str, where: str | None = None) -> dict[str, Any]:
    job = simulated(JobBuilder(name, namespace), 1).backoff_limit(0).annotations(DECLARED)
    job = job.checkpoint_path(where) if where else job
    return job.completes_after("15s").build()


def finished_receipt(cluster: Cluster, namespace: str, workload: str) -> dict[str, Any]:
    def written() -> dict[str, Any] | None:
        found = [
            r for r in receipts(cluster, namespace) if r["spec"]["workload"]["name"] == workload
        ]
        return found[0] if found else None

    return wait_for(written, timeout=150, what=f"the receipt of {workload}")


def test_a_receipt_records_what_the_run_declared_and_what_its_trainer_reached(
    cluster: Cluster,
    webhook: Webhook,
    namespace: str,
    s3: Any,  # noqa: F811
    s3_env: dict[str, str],  # noqa: F811
    bucket: str,  # noqa: F811
) -> None:
    """(a) on kwok, the scan driven through S3; (b) the repeat warned and held."""
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_secret(namespace, secret(s3_env))
    upload(s3, bucket, "runs/llama/")
    scans = (
        CheckpointPolicyBuilder(f"{namespace}-ckpt")
        .instance(INSTANCE)
        .dry_run()
        .namespaces(namespace)
        .s3(
            s3_env["S3_ENDPOINT"],
            bucket,
            prefix="runs/llama",
            secret=(namespace, "checkpoint-store"),
        )
        .layout("HuggingFace")
        .keep_last(3)
        .every("5s")
    )
    create_policy(cluster, "checkpointpolicies", scans.build())
    charges = budget(f"{namespace}-b", namespace, 100).instance(INSTANCE).accelerator_rate(2.0)
    create_policy(cluster, "trainingbudgets", charges.build())
    kubectl_create(cluster, declared_job("train", namespace, f"s3://{bucket}/runs/llama"))

    first = finished_receipt(cluster, namespace, "train")
    spec = first["spec"]
    assert spec["outcome"] == "Succeeded"
    assert spec["experiment"] == {
        "params": PARAMS,
        "dataVersion": "imagenet-v3",
        "codeVersion": "abc1234",
        "configHash": HASH,
        "configHashSource": "Computed",
        "dropped": [],
    }
    assert spec["result"] == {
        "metric": "eval_loss",
        "final": 0.5,
        "best": 0.35,
        "step": 300,
        "source": "HuggingFace checkpoint-300",
    }
    name = first["metadata"]["name"]
    print(f"\nreceipt {name}: experiment {spec['experiment']}, result {spec['result']}")
    wide = cluster.kubectl("get", "rcpt", name, "-n", namespace, "-o", "wide").splitlines()
    columns = ["DATA", "CONFIG", "METRIC", "FINAL", "STORAGE GIB-H"]  # kubectl aligns them
    starts = [wide[0].index(c) for c in columns]
    assert starts == sorted(starts)
    values = [wide[1][a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    assert values[:4] == ["imagenet-v3", HASH, "eval_loss", "0.5"]
    assert values[4] == "" or float(values[4]) >= 0  # no claim mounted: no storage figure

    def warned() -> str | None:
        """The repeat as `kubectl create` prints it (server-side dry run: the webhook's
        informer sees the receipt a moment after the test does)."""
        printed = kubectl_create(cluster, declared_job("probe", namespace), "server")
        return printed if f"RunReceipt {name}" in printed else None

    wait_for(warned, timeout=60, what="the webhook to know the finished run")
    printed = kubectl_create(cluster, declared_job("again", namespace))
    assert f"Job {namespace}/again repeats a finished run: RunReceipt {name} (Job/train" in printed
    assert "Succeeded, cost" in printed
    assert "eval_loss 0.5, best 0.35" in printed
    assert f"config hash {HASH} and data version imagenet-v3" in printed, printed
    batch = client.BatchV1Api(cluster.api)
    again = batch.read_namespaced_job("again", namespace)
    assert again.metadata.annotations["trainwarden.dev/repeat-of"] == name
    assert not again.spec.suspend, "repeats: Warn only warns"

    def event() -> client.CoreV1Event | None:
        found = [e for e in events_for(cluster, namespace, "again") if e.reason == "RepeatRun"]
        return found[0] if found else None

    said = wait_for(event, timeout=60, what="the RepeatRun Event on the repeated Job")
    assert said.type == "Warning"
    assert f"RunReceipt {name} (Job/train, Succeeded" in said.message
    assert said.involved_object.uid == again.metadata.uid

    client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
        GROUP, VERSION, "trainingbudgets", f"{namespace}-b", {"spec": {"repeats": "Hold"}}
    )

    def held() -> str | None:
        printed = kubectl_create(cluster, declared_job("probe2", namespace), "server")
        return printed if "(repeats: Hold)" in printed else None

    wait_for(held, timeout=60, what="the webhook to see repeats: Hold")
    printed = kubectl_create(cluster, declared_job("third", namespace))
    assert f"held (spec.suspend) by TrainingBudget {namespace}-b (repeats: Hold)" in printed
    third = batch.read_namespaced_job("third", namespace)
    assert third.spec.suspend is True
    assert third.metadata.annotations["trainwarden.dev/repeat-held-by"] == f"{namespace}-b"
    intended = declared_job("fourth", namespace)
    intended["metadata"]["annotations"]["trainwarden.dev/repeat-intended"] = "true"
    assert "repeats a finished run" in kubectl_create(cluster, intended)
    assert not batch.read_namespaced_job("fourth", namespace).spec.suspend


@pytest.fixture
def real_image(request: pytest.FixtureRequest) -> str:
    """The real node's image; skipped on a cluster without the real node."""
    if os.environ.get("TRAINWARDEN_REAL_NODE") == "0":
        pytest.skip("no real node on this cluster (TRAINWARDEN_REAL_NODE=0)")
    image: str = request.getfixturevalue("image")
    return image


def test_the_real_trainer_s_final_metric_is_on_its_receipt(
    cluster: Cluster, crds: None, real_image: str, namespace: str, volume: Path, tmp_path: Path
) -> None:
    """The demo trainer on the real node writes its checkpoints to a PVC, which a DryRun
    CheckpointPolicy's pruner Jobs scan there; the receipt records the trainer's own final
    and best eval_loss, as its trainer_state.json on the host says, and the storage of the
    claim it mounted."""
    instance = f"ledger-{namespace}"
    running = start_operator(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        args=(
            f"--instance={instance}",
            f"--pruner-image={real_image}",
            f"--pruner-run-as-user={TRAINER_UID}",
            f"--pruner-tolerations={json.dumps([REAL_NODE_TOLERATION])}",
            "--receipt-checkpoint-wait=2m",
        ),
    )
    try:
        create_policy(
            cluster,
            "trainingbudgets",
            budget(f"{namespace}-b", namespace, 100).instance(instance).build(),
        )
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
            real_image,
            save_steps=20,
            max_steps=60,
            checkpoint_path="checkpoints:/checkpoints",
        )
        job["metadata"].setdefault("annotations", {}).update(DECLARED)
        client.BatchV1Api(cluster.api).create_namespaced_job(namespace, job)
        receipt = wait_for(
            lambda: next(iter(receipts(cluster, namespace)), None),
            timeout=300,
            what="the trainer's receipt",
        )
    finally:
        running.stop()
    spec = receipt["spec"]
    assert spec["experiment"]["configHash"] == HASH
    assert spec["experiment"]["params"] == PARAMS
    state = trainer_state(volume, 60)
    final = next(
        e["eval_loss"]
        for e in reversed(state["log_history"])
        if "eval_loss" in e and e["step"] == 60
    )
    best_step = int(Path(state["best_model_checkpoint"]).name.removeprefix("checkpoint-"))
    best = trainer_state(volume, best_step)
    best_loss = next(
        e["eval_loss"]
        for e in best["log_history"]
        if e.get("step") == best_step and "eval_loss" in e
    )
    assert spec["result"]["metric"] == "eval_loss"
    assert spec["result"]["final"] == pytest.approx(final)
    assert spec["result"]["step"] == 60
    assert spec["result"]["best"] == pytest.approx(best_loss)
    # Its one 1 GiB claim, made before the run and kept after it: 1 GiB over the whole run.
    storage = spec["storage"]
    assert (storage["claims"], storage.get("unknownClaims", 0)) == (1, 0)
    assert storage["gibHours"] * 3600 == pytest.approx(spec["wallSeconds"], abs=1.0)
    print(f"\nreal trainer's receipt: {spec['result']}, experiment {spec['experiment']}")
