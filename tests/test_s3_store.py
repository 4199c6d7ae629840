"""S3 prefixes pruned by the operator through the S3 API, against the fake API server and
an in-memory bucket: the credentials come from the policy's Secret, what is deleted is
said on the policy and in an audit record under the prefix, a failure fails that location
only, and only jobs in the credentials' namespace may protect checkpoints in it."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from test_checkpoint_reconcile import CKPT, NS, Checkpoints, policy
from trainwarden.adapters.s3 import Credentials
from trainwarden.checkpoints import s3
from trainwarden.storage.s3_prefix import AUDIT, Object, StoreError
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import (
    CheckpointPolicyBuilder,
    JobBuilder,
    NamespaceBuilder,
    PVCBuilder,
    SecretBuilder,
)
from world import World

ENDPOINT, BUCKET, PREFIX = "https://s3.example", "ckpts", "runs/llm"
URL = f"s3://{BUCKET}/{PREFIX}/"
HOUR = timedelta(hours=1)
SIZE = 1000 + 2  # model.safetensors and trainer_state.json ("{}")


class FakeBucket:
    """One bucket in memory with the calls prune_prefix makes of it (storage/s3_prefix.py:
    Store); it records how it was opened, and can refuse a listing or some deletions."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, datetime]] = {}
        self.opened: list[tuple[str, str, str, Credentials]] = []
        self.unreachable: str | None = None
        self.refused: set[str] = set()
        self.unlistable: set[str] = set()
        """Prefixes whose listing fails (the re-check of one checkpoint, say)."""

    def open(self, endpoint: str, region: str, bucket: str, keys: Credentials) -> "FakeBucket":
        """Stands in for adapters.s3.Bucket(endpoint, region, bucket, credentials)."""
        self.opened.append((endpoint, region, bucket, keys))
        return self

    def objects(self, prefix: str) -> Iterator[Object]:
        if self.unreachable is not None or prefix in self.unlistable:
            raise StoreError(self.unreachable or f"list {prefix}: InternalError")
        for key, (body, modified) in sorted(self.data.items()):
            if key.startswith(prefix):
                yield Object(key, len(body), modified, etag=f'"{hash(body)}"')

    def read(self, key: str, limit: int) -> bytes:
        return self.data[key][0][: limit + 1]

    def delete(self, keys: list[str]) -> list[str]:
        for key in keys:
            if key not in self.refused:
                del self.data[key]
        return [f"{k}: AccessDenied" for k in keys if k in self.refused]

    def write(self, key: str, body: bytes) -> None:
        self.data[key] = (body, datetime.now(UTC))

    def checkpoint(self, step: int, modified: datetime) -> None:
        """A Hugging Face checkpoint, complete (its trainer_state.json is written)."""
        stamp = modified.replace(microsecond=0)
        base = f"{PREFIX}/checkpoint-{step}"
        self.data[f"{base}/model.safetensors"] = (b"\0" * 1000, stamp)
        self.data[f"{base}/trainer_state.json"] = (b"{}", stamp)

    def steps(self) -> list[int]:
        names = {k.split("/")[2] for k in self.data if k.count("/") == 3}
        return sorted(int(n.removeprefix("checkpoint-")) for n in names)


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> FakeBucket:
    made = FakeBucket()
    monkeypatch.setattr(s3, "Bucket", made.open)
    return made


@pytest.fixture
def world(bucket: FakeBucket) -> World:
    """The bucket's checkpoints are dated by the wall clock: prune_prefix judges their
    age by it (not by the evaluation's `now`), so the world's clock starts there too."""
    w = World(now=datetime.now(UTC).replace(microsecond=0))
    w.put(NamespaceBuilder(NS).build())
    w.put(SecretBuilder("keys", NS).data(accessKeyId="AK", secretAccessKey="SK").build())
    for step, age in ((100, 5), (200, 4), (300, 3)):
        bucket.checkpoint(step, w.now - age * HOUR)
    return w


def s3_policy(name: str = "s3") -> CheckpointPolicyBuilder:
    return policy(name).s3(ENDPOINT, BUCKET, prefix=PREFIX, secret=(NS, "keys"))


def freed_metric(policy_name: str, namespace: str) -> float | None:
    labels = {"policy": policy_name, "namespace": namespace}
    return REGISTRY.get_sample_value("trainwarden_checkpoint_bytes_freed_total", labels)


def test_enforce_deletes_with_the_secrets_keys_and_says_so_on_the_policy(
    world: World, bucket: FakeBucket
) -> None:
    checkpoints = Checkpoints(world, s3_policy("s3-enforce"))
    checkpoints.evaluate()
    assert bucket.opened == [(ENDPOINT, "us-east-1", BUCKET, Credentials("AK", "SK"))]
    assert bucket.steps() == [300]
    assert f"{PREFIX}/{AUDIT}" in bucket.data
    assert b'"prunedBy": "CheckpointPolicy/s3-enforce"' in bucket.data[f"{PREFIX}/{AUDIT}"][0]
    (said,) = world.fake.events
    assert (said.kind, said.name, said.type, said.reason) == (
        "CheckpointPolicy",
        "s3-enforce",
        "Normal",
        "CheckpointsPruned",
    )
    assert f"deleted 2 checkpoint(s) in {URL}" in said.message
    entry = checkpoints.entry("S3")
    assert (entry["namespace"], entry["pvc"], entry["path"]) == ("", "", URL)
    assert (entry["deleted"], entry["deletedNames"]) == (2, ["checkpoint-100", "checkpoint-200"])
    assert (entry["bytesFreed"], entry["bytesRetained"], entry["failed"]) == (2 * SIZE, SIZE, False)
    assert checkpoints.status()["bytesFreed"] == 2 * SIZE
    assert f"{URL} (through the S3 API)" in checkpoints.conditions()["Pruning"]["message"]
    assert freed_metric("s3-enforce", NS) == 2 * SIZE, "counted in the credentials' namespace"


def test_dry_run_deletes_nothing_and_writes_no_audit(world: World, bucket: FakeBucket) -> None:
    before = dict(bucket.data)
    checkpoints = Checkpoints(world, s3_policy().dry_run())
    checkpoints.evaluate()
    assert bucket.data == before
    assert world.fake.reasons("CheckpointPolicy", "s3") == ["CheckpointsWouldBePruned"]
    entry = checkpoints.entry("S3")
    assert (entry["deleted"], entry["bytesFreed"]) == (2, 0)
    assert checkpoints.status()["bytesFreed"] == 0
    # Seen all the same: when each was written (the objects' LastModified), for receipts.
    assert entry["completions"] == [rfc3339(world.now - age * HOUR) for age in (3, 4, 5)]
    assert datetime.fromisoformat(entry["completionsAsOf"]) >= world.now


def test_unreadable_credentials_fail_the_prefix_only_until_a_run_succeeds(
    world: World, bucket: FakeBucket
) -> None:
    world.put(PVCBuilder("ckpt", NS).labels(CKPT).build())
    world.fake.drop("v1", "Secret", NS, "keys")
    checkpoints = Checkpoints(world, s3_policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    entry = checkpoints.entry("S3")
    assert entry["failed"] is True
    assert entry["message"] == f"{URL}: Secret {NS}/keys does not exist"
    assert (bucket.opened, bucket.steps()) == ([], [100, 200, 300])
    (warning,) = world.fake.events_for("CheckpointPolicy", "s3")
    assert (warning.type, warning.reason) == ("Warning", "PruneFailed")
    last = checkpoints.conditions()["LastRunSucceeded"]
    assert (last["status"], last["reason"]) == ("False", "PrunerFailed")
    assert URL in last["message"]
    assert checkpoints.entry("PVC")["prunerUid"], "the PVC directory's run started anyway"
    world.put(SecretBuilder("keys", NS).data(accessKeyId="AK", secretAccessKey="SK").build())
    world.advance(HOUR.total_seconds())
    checkpoints.evaluate()
    entry = checkpoints.entry("S3")
    assert (entry["failed"], entry["deleted"]) == (False, 2)
    assert "does not exist" not in entry["message"]
    assert checkpoints.conditions()["LastRunSucceeded"]["status"] == "True"


def test_a_bucket_that_cannot_be_listed_fails_the_run_with_its_answer(
    world: World, bucket: FakeBucket
) -> None:
    bucket.unreachable = "list s3://ckpts/runs/llm/: AccessDenied"
    checkpoints = Checkpoints(world, s3_policy())
    checkpoints.evaluate()
    entry = checkpoints.entry("S3")
    assert entry["failed"] is True
    assert entry["message"] == f"{URL}: list s3://ckpts/runs/llm/: AccessDenied"
    assert (entry["bytesFreed"], bucket.steps()) == (0, [100, 200, 300])


def test_a_partial_run_fails_the_location_and_is_retried_before_the_schedule(
    world: World, bucket: FakeBucket
) -> None:
    """A deletion the bucket refuses leaves the run partial: the others go and are counted,
    the location fails (LastRunSucceeded=False, a Warning) and is tried again 30 s later,
    not at the next hourly run; a success clears it."""
    bucket.refused = {f"{PREFIX}/checkpoint-100/model.safetensors"}
    checkpoints = Checkpoints(world, s3_policy())
    checkpoints.evaluate()
    assert bucket.steps() == [100, 300]
    entry = checkpoints.entry("S3")
    assert (entry["failed"], entry["failedRuns"]) == (True, 1)
    assert (entry["deletedNames"], entry["bytesFreed"]) == (["checkpoint-200"], SIZE)
    assert entry["message"].startswith("partial run: 1 checkpoint(s) not judged or not deleted")
    assert "failed checkpoint-100: 1 object(s) not deleted" in entry["message"]
    last = checkpoints.conditions()["LastRunSucceeded"]
    assert (last["status"], last["reason"]) == ("False", "PrunerFailed")
    reasons = world.fake.reasons("CheckpointPolicy", "s3")
    assert sorted(reasons) == ["CheckpointsPruned", "PruneFailed"]
    bucket.refused = set()
    world.advance(29)
    checkpoints.evaluate()
    assert bucket.steps() == [100, 300], "not before the retry is due"
    world.advance(1)
    checkpoints.evaluate()
    assert bucket.steps() == [300], "retried 30 s after the partial run, not an hour"
    entry = checkpoints.entry("S3")
    assert (entry["failed"], entry["failedRuns"], entry["bytesFreed"]) == (False, 0, 2 * SIZE)
    assert checkpoints.conditions()["LastRunSucceeded"]["status"] == "True"


def test_failed_runs_are_retried_sooner_each_time_less_often(
    world: World, bucket: FakeBucket
) -> None:
    """A bucket that keeps failing is tried again after 30 s, then 60 s, ... (never in a
    tight loop, never only at the next scheduled run)."""
    bucket.unreachable = "list: InternalError"
    checkpoints = Checkpoints(world, s3_policy())
    checkpoints.evaluate()
    runs = [checkpoints.entry("S3")["lastRun"]]
    for wait in (30, 60, 120):
        world.advance(wait - 1)
        checkpoints.evaluate()
        assert checkpoints.entry("S3")["lastRun"] == runs[-1], f"not before {wait} s"
        world.advance(1)
        checkpoints.evaluate()
        runs.append(checkpoints.entry("S3")["lastRun"])
        assert runs[-1] != runs[-2], f"retried after {wait} s"
    assert checkpoints.entry("S3")["failedRuns"] == 4
    bucket.unreachable = None
    world.advance(240)
    checkpoints.evaluate()
    assert (bucket.steps(), checkpoints.entry("S3")["failedRuns"]) == ([300], 0)


def test_a_recheck_the_bucket_cannot_answer_fails_that_checkpoint_only(
    world: World, bucket: FakeBucket
) -> None:
    """The re-listing of one planned checkpoint right before its deletion fails: that one
    is not deleted, and what the run did delete is still recorded (bytes, names, audit)."""
    bucket.unlistable = {f"{PREFIX}/checkpoint-200"}
    checkpoints = Checkpoints(world, s3_policy())
    checkpoints.evaluate()
    assert bucket.steps() == [200, 300]
    entry = checkpoints.entry("S3")
    assert (entry["deletedNames"], entry["bytesFreed"]) == (["checkpoint-100"], SIZE)
    assert (entry["failed"], entry["failedRuns"]) == (True, 1)
    assert "checkpoint-200: not re-checked, so not deleted" in entry["message"]
    assert f"{PREFIX}/{AUDIT}" in bucket.data


def test_only_jobs_in_the_credentials_namespace_protect_checkpoints_in_the_prefix(
    world: World, bucket: FakeBucket
) -> None:
    """A job elsewhere in scope naming the prefix is told, once, that it is not heeded."""
    world.put(NamespaceBuilder("team-b").build())
    pin = "trainwarden.dev/checkpoint-pin"
    world.put(
        JobBuilder("owner", NS).checkpoint_path(URL).annotations({pin: "checkpoint-100"}).build()
    )
    world.put(
        JobBuilder("intruder", "team-b")
        .checkpoint_path(URL)
        .annotations({pin: "checkpoint-200"})
        .build()
    )
    checkpoints = Checkpoints(world, s3_policy().namespaces(NS, "team-b"))
    checkpoints.evaluate()
    assert bucket.steps() == [100, 300]
    assert checkpoints.entry("S3")["jobState"] == "Running"
    (told,) = world.fake.events_for("Job", "intruder", "team-b")
    assert (told.type, told.reason) == ("Warning", "AnnotationIgnored")
    assert f"belongs to namespace {NS}, not team-b" in told.message
    world.advance(HOUR.total_seconds())
    checkpoints.evaluate()
    assert len(world.fake.events_for("Job", "intruder", "team-b")) == 1


def test_a_keep_best_that_cannot_rank_deletes_nothing_and_warns_on_the_policy(
    world: World, bucket: FakeBucket
) -> None:
    # On main Enforce deleted as if keepBest were absent (and with it the trainer's best).
    checkpoints = Checkpoints(world, s3_policy("unranked").keep_last(1).keep_best("val_loss"))
    checkpoints.evaluate()
    assert bucket.steps() == [100, 200, 300]
    (warning,) = world.fake.events_for("CheckpointPolicy", "unranked")
    assert (warning.type, warning.reason) == ("Warning", "KeepBestCannotRank")
    assert warning.message == (
        f"checkpoint(s) in {URL}: keepBest cannot rank: no checkpoint records the metric "
        "'eval_val_loss'; the 3 it would judge are kept until one does"
    )
    assert "keepBest cannot rank" in checkpoints.entry("S3")["message"]
