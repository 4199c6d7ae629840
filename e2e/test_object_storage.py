"""CheckpointPolicy on S3-compatible object storage, against the real S3 server the local
cluster runs (Versity S3 Gateway): checkpoints uploaded as a Hugging Face Trainer syncs
them, credentials in a Secret, pruned by the operator through the S3 API."""

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    Cluster,
    Operator,
    create_policy,
    events_for,
    get_policy,
    read_env,
    start_operator,
    wait_for,
)
from trainwarden.adapters.s3 import Bucket, Credentials
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.storage.s3_prefix import AUDIT, Object, prune_prefix
from trainwarden.testing.builders import CheckpointPolicyBuilder, JobBuilder, SecretBuilder

PLURAL = "checkpointpolicies"
PIN = ".trainwarden-pin"


@pytest.fixture(scope="module")
def s3_env(cluster: Cluster) -> dict[str, str]:
    return read_env(CLUSTER_DIR / "cluster.env")


@pytest.fixture(scope="module")
def s3(s3_env: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=s3_env["S3_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id=s3_env["S3_ACCESS_KEY"],
        aws_secret_access_key=s3_env["S3_SECRET_KEY"],
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    name = f"tw-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents") or []]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys})
    s3.delete_bucket(Bucket=name)


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    running = start_operator(cluster.kubeconfig, tmp_path_factory.mktemp("op") / "operator.log")
    yield running
    running.stop()


def upload(s3: Any, bucket: str, prefix: str, losses: dict[int, float | None]) -> dict[int, int]:
    """Checkpoints as the Trainer writes them (a None loss: still uploading, no state yet);
    returns each one's size."""
    sizes = {}
    for step, loss in losses.items():
        base = f"{prefix}checkpoint-{step}/"
        weights = b"\0" * (4096 + step)
        s3.put_object(Bucket=bucket, Key=f"{base}model.safetensors", Body=weights)
        size = len(weights)
        if loss is not None:
            state = json.dumps(
                {"global_step": step, "log_history": [{"step": step, "eval_loss": loss}]}
            ).encode()
            s3.put_object(Bucket=bucket, Key=f"{base}trainer_state.json", Body=state)
            size += len(state)
        sizes[step] = size
    return sizes


def steps(s3: Any, bucket: str, prefix: str) -> list[int]:
    found = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents") or []:
            top = o["Key"][len(prefix) :].split("/")[0]
            if top.startswith("checkpoint-") and top[11:].isdigit():
                found.add(int(top[11:]))
    return sorted(found)


def secret(env: dict[str, str]) -> dict[str, Any]:
    keys = {"accessKeyId": env["S3_ACCESS_KEY"], "secretAccessKey": env["S3_SECRET_KEY"]}
    return SecretBuilder("checkpoint-store").string_data(keys).build()


def s3_policy(
    name: str, namespace: str, env: dict[str, str], bucket: str
) -> CheckpointPolicyBuilder:
    """DryRun on runs/llama in the bucket, credentials in the namespace's Secret: keep the
    newest 2 and the best by eval_loss of those older than 2 s, every 5 s."""
    return (
        CheckpointPolicyBuilder(name)
        .dry_run()
        .namespaces(namespace)
        .s3(
            env["S3_ENDPOINT"],
            bucket,
            prefix="runs/llama",
            secret=(namespace, "checkpoint-store"),
        )
        .layout("HuggingFace")
        .keep_last(2)
        .keep_best("eval_loss")
        .min_age("2s")
        .every("5s")
    )


def s3_location(cluster: Cluster, name: str) -> dict[str, Any]:
    status = get_policy(cluster, PLURAL, name).get("status") or {}
    return next((e for e in status.get("locations") or [] if e.get("source") == "S3"), {})


def test_an_s3_prefix_is_pruned_by_the_same_rules(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3: Any,
    s3_env: dict[str, str],
    bucket: str,
) -> None:
    prefix = "runs/llama/"
    losses: dict[int, float | None] = {
        100: 0.8,
        200: 0.7,
        300: 0.1,
        400: 0.5,
        500: 0.6,
        600: 0.4,
        700: 0.3,
        800: None,
    }
    sizes = upload(s3, bucket, prefix, losses)
    s3.put_object(Bucket=bucket, Key=f"{prefix}checkpoint-200{PIN}", Body=b"")
    s3.put_object(Bucket=bucket, Key="runs/llama-v2/checkpoint-100/model.safetensors", Body=b"x")
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_secret(namespace, secret(s3_env))
    # The training job writing there is still running, and resumes from checkpoint-100.
    client.BatchV1Api(cluster.api).create_namespaced_job(
        namespace,
        JobBuilder("llama")
        .suspended()
        .checkpoint_path(f"s3://{bucket}/runs//llama")
        .resume_from("checkpoint-100")
        .image("none")
        .build(),
    )
    time.sleep(2.5)  # minAge 2s: S3 sets LastModified itself, so the checkpoints must age
    name = f"{namespace}-s3"
    create_policy(cluster, PLURAL, s3_policy(name, namespace, s3_env, bucket).build())
    dry = wait_for(
        lambda: (e := s3_location(cluster, name)).get("lastRun") and e,
        timeout=60,
        what="the DryRun plan over the S3 prefix",
    )
    print(f"\nDryRun: {dry}")
    assert dry["path"] == f"s3://{bucket}/runs/llama/"
    assert dry["jobState"] == "Running"
    assert dry["deletedNames"] == ["checkpoint-400", "checkpoint-500"]
    assert dry["scanned"] == 8
    assert steps(s3, bucket, prefix) == sorted(losses), "DryRun deletes nothing"

    client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", PLURAL, name, {"spec": {"mode": "Enforce"}}
    )
    started = time.monotonic()
    wait_for(
        lambda: steps(s3, bucket, prefix) == [100, 200, 300, 600, 700, 800],
        timeout=60,
        what="checkpoint-400 and -500 deleted; the resume point, pin, best, newest and the "
        "one being uploaded kept",
    )
    print(f"Enforce: deleted within {time.monotonic() - started:.1f}s of the mode change")
    done = wait_for(
        lambda: (e := s3_location(cluster, name)).get("bytesFreed") and e,
        timeout=30,
        what="bytes freed in status",
    )
    assert done["bytesFreed"] == sizes[400] + sizes[500]
    assert done["kept"] == 6
    assert steps(s3, bucket, "runs/llama-v2/") == [100], "a sibling prefix is not touched"
    audit = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}{AUDIT}")["Body"].read())
    assert audit["prunedBy"] == f"CheckpointPolicy/{name}"
    assert audit["deleted"] == ["checkpoint-400", "checkpoint-500"]
    assert set(audit["why"]) == {"checkpoint-400", "checkpoint-500"}
    reasons = {e.reason for e in events_for(cluster, "default", name)}
    assert {"CheckpointsWouldBePruned", "CheckpointsPruned"} <= reasons
    status = get_policy(cluster, PLURAL, name)["status"]
    pruning = next(c for c in status["conditions"] if c["type"] == "Pruning")
    assert pruning["status"] == "True"
    assert "S3 API" in pruning["message"]


def test_credentials_that_cannot_be_read_are_reported_and_nothing_is_touched(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3: Any,
    s3_env: dict[str, str],
    bucket: str,
) -> None:
    upload(s3, bucket, "runs/llama/", {1: 0.5, 2: 0.4, 3: 0.3})
    name = f"{namespace}-nokeys"
    create_policy(cluster, PLURAL, s3_policy(name, namespace, s3_env, bucket).enforce().build())
    status = wait_for(
        lambda: (
            (s := get_policy(cluster, PLURAL, name).get("status") or {})
            and any(
                c["type"] == "LastRunSucceeded" and c["status"] == "False"
                for c in s.get("conditions", [])
            )
            and s
        ),
        timeout=60,
        what="LastRunSucceeded False",
    )
    failed = next(c for c in status["conditions"] if c["type"] == "LastRunSucceeded")
    print(f"\n{failed['message']}")
    assert f"Secret {namespace}/checkpoint-store does not exist" in failed["message"]
    assert steps(s3, bucket, "runs/llama/") == [1, 2, 3]
    assert "PruneFailed" in {e.reason for e in events_for(cluster, "default", name)}


KEEP_ONE = CheckpointPolicySpec.model_validate(
    {
        "mode": "Enforce",
        "scope": {"namespaces": ["x"]},
        "storage": {"pvc": {}},
        "retention": {"keepLast": 1, "minAge": "1s"},
    }
)


def real_bucket(env: dict[str, str], name: str) -> Bucket:
    """The operator's own adapter on the cluster's S3 server."""
    keys = Credentials(env["S3_ACCESS_KEY"], env["S3_SECRET_KEY"])
    return Bucket(env["S3_ENDPOINT"], "us-east-1", name, keys)


class RewritesDuringTheRun:
    """The real bucket, but a trainer re-saves `checkpoint-2` right after the plan is made,
    between the scan and the deletion (the re-listing of that checkpoint sees it)."""

    def __init__(self, bucket: Bucket, s3: Any) -> None:
        self.bucket, self.s3, self.rewrote = bucket, s3, False

    def objects(self, prefix: str) -> Iterator[Object]:
        if prefix.endswith("checkpoint-2") and not self.rewrote:
            self.s3.put_object(
                Bucket=self.bucket.name, Key=f"{prefix}/model.safetensors", Body=b"new"
            )
            self.rewrote = True
        return self.bucket.objects(prefix)

    def read(self, key: str, limit: int) -> bytes:
        return self.bucket.read(key, limit)

    def delete(self, keys: list[str]) -> list[str]:
        return self.bucket.delete(keys)

    def write(self, key: str, body: bytes) -> None:
        self.bucket.write(key, body)


def test_a_checkpoint_rewritten_between_plan_and_delete_is_spared(
    s3: Any, s3_env: dict[str, str], bucket: str
) -> None:
    upload(s3, bucket, "run/", {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6})
    time.sleep(1.5)
    real = real_bucket(s3_env, bucket)
    store = RewritesDuringTheRun(real, s3)
    report = prune_prefix(store, "run", KEEP_ONE, dry_run=False, policy="test")
    assert store.rewrote
    assert report.deleted == ["checkpoint-1", "checkpoint-3"]
    assert report.skipped == ["checkpoint-2: changed since the scan"]
    assert steps(s3, bucket, "run/") == [2, 4]


def test_deleting_more_than_one_request_holds(s3: Any, s3_env: dict[str, str], bucket: str) -> None:
    """A checkpoint of 1,500 objects (a sharded save) needs two DeleteObjects requests."""
    for shard in range(1500):
        s3.put_object(Bucket=bucket, Key=f"run/checkpoint-1/shard-{shard:05d}", Body=b"x")
    upload(s3, bucket, "run/", {1: 0.5, 2: 0.4})
    time.sleep(1.5)
    real = real_bucket(s3_env, bucket)
    report = prune_prefix(real, "run/", KEEP_ONE, dry_run=False, policy="test")
    assert report.deleted == ["checkpoint-1"]
    assert report.bytes_freed == 1500 + 4096 + 1 + len(
        json.dumps({"global_step": 1, "log_history": [{"step": 1, "eval_loss": 0.5}]})
    )
    assert steps(s3, bucket, "run/") == [2]


def test_metadata_is_fetched_bounded_and_only_where_a_layout_reads_it(
    s3: Any, s3_env: dict[str, str], bucket: str
) -> None:
    """A state over the read limit is never downloaded (its checkpoint is held), an empty
    one needs no ranged GET (which S3 refuses on an empty object), one deeper than the
    layout reads is never fetched, and a GET never returns more than the limit asked."""
    upload(s3, bucket, "run/", {1: 0.5, 2: 0.4})
    big = json.dumps({"global_step": 3, "pad": "x" * 2**21}).encode()
    s3.put_object(Bucket=bucket, Key="run/checkpoint-3/trainer_state.json", Body=big)
    s3.put_object(Bucket=bucket, Key="run/checkpoint-4/trainer_state.json", Body=b"")
    s3.put_object(Bucket=bucket, Key="run/checkpoint-2/sub/trainer_state.json", Body=big)
    time.sleep(1.5)
    real = real_bucket(s3_env, bucket)
    fetched: list[str] = []

    class Watched:
        def objects(self, prefix: str) -> Iterator[Object]:
            return real.objects(prefix)

        def read(self, key: str, limit: int) -> bytes:
            fetched.append(key)
            return real.read(key, limit)

        def delete(self, keys: list[str]) -> list[str]:
            raise AssertionError("DryRun")

        def write(self, key: str, body: bytes) -> None:
            raise AssertionError("DryRun")

    dry = KEEP_ONE.model_copy(update={"mode": "DryRun"})
    report = prune_prefix(Watched(), "run", dry, dry_run=True, policy="test")
    assert report.error is None
    assert sorted(fetched) == [f"run/checkpoint-{s}/trainer_state.json" for s in (1, 2)]
    rules = {d.checkpoint.name: d.rule for d in report.decisions}
    assert rules["checkpoint-3"] == "Held"
    assert rules["checkpoint-4"] == "Incomplete"
    assert len(real.read("run/checkpoint-3/trainer_state.json", 10)) == 11
