"""Area 5: S3 faults under CheckpointPolicy pruning (issue 17, item 5).

Each run starts `per_kill` instances, each with its own bucket on the cluster's S3 server,
its own fault proxy in front of it (faults/s3_proxy.py) and an Enforce policy (Hugging
Face layout, keepLast 2, minAge 1 s, every 10 min) on `runs/<namespace>/`: complete
checkpoints 100..800, checkpoint-200 pinned, checkpoint-100 named by a running Job's
resume-from, checkpoint-900 still being written, and objects outside the prefix (a
sibling prefix, a dataset at the bucket's root). The plan is computed here from the
policy's rules, not read from the operator: delete 300..600. From the policy's creation
(its first run starts at once) the proxy answers with one fault for 2-8 s: 500s (a share
of requests, or all), slow answers, dropped connections after the server acted, or a
listing cut into pages of two keys that changes between pages (a planned checkpoint
gets pinned, a new one starts being written; the plan loses the pinned one).

Counted on the objects: expected = the plan; taken = planned checkpoints gone entirely;
lost = planned checkpoints not gone 200 s after the policy was created (its next
scheduled run is 10 min away, so only a retry gets there); wrong = anything else gone
(a protected checkpoint, one outside the plan, an object outside the prefix), a run that
left planned checkpoints and reported success, a failed run without
LastRunSucceeded=False; double = keys sent in a DeleteObjects after the client was told
they were deleted.
"""

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import boto3
from botocore.config import Config
from kubernetes import client

from faults import kit
from faults.kit import Context, harness
from faults.s3_proxy import S3FaultProxy, doubles
from faults.table import Row
from trainwarden.testing.builders import CheckpointPolicyBuilder, JobBuilder, SecretBuilder

CPP = "checkpointpolicies"
STEPS = range(100, 900, 100)
KEEP_LAST = 2
PINNED, RESUMED, WRITING = 200, 100, 900
DEADLINE = 200.0
"""Seconds from the policy's creation for the plan to be carried out (retries at 30 s,
then 60 s, 120 s after failed runs; the schedule's next run is at 10 min)."""
FAULTS = ("error", "error-some", "slow", "drop", "drop-some", "pages")


def name_of(key: str, prefix: str) -> str | None:
    """The checkpoint (top-level entry) a key belongs to; None outside the prefix."""
    return key[len(prefix) :].split("/")[0] if key.startswith(prefix) else None


def plan(complete: list[int], keep_last: int, protected: set[int]) -> set[str]:
    """The checkpoints the policy deletes: complete ones but the newest `keep_last` and
    the protected (pinned, a resume point)."""
    newest = set(sorted(complete)[-keep_last:]) if keep_last else set()
    return {f"checkpoint-{s}" for s in complete if s not in newest | protected}


@dataclass
class Tally:
    taken: int = 0
    lost: int = 0
    wrong: int = 0
    notes: list[str] = field(default_factory=list)


def judge_objects(before: set[str], after: set[str], prefix: str, planned: set[str]) -> Tally:
    """What vanished between the two listings, against the plan."""
    gone = before - after
    tally = Tally()
    outside = sorted(k for k in gone if name_of(k, prefix) is None)
    names = {name_of(k, prefix) for k in gone} - {None}
    for name in sorted(n for n in names if n is not None):
        if name not in planned:
            tally.wrong += 1
            tally.notes.append(f"{name} deleted outside the plan")
    for name in sorted(planned):
        left = [k for k in after if name_of(k, prefix) == name]
        tally.taken += 0 if left else 1
        tally.lost += 1 if left else 0
    tally.wrong += len(outside)
    tally.notes += [f"{k} deleted outside the prefix" for k in outside[:3]]
    return tally


@dataclass(frozen=True)
class Seen:
    """One run, as the policy's status told it, and the bucket right then."""

    last_run: str
    failed: bool
    condition: str | None
    remaining: frozenset[str]
    message: str


@dataclass
class Instance:
    namespace: str
    bucket: str
    prefix: str
    proxy: S3FaultProxy
    planned: set[str]
    fault: str = "up"
    before: set[str] = field(default_factory=set)
    seen: list[Seen] = field(default_factory=list)

    @property
    def policy(self) -> str:
        return f"{self.namespace}-cpp"


class Bucket:
    """The real S3 server, without the proxy: what the suite uploads and sees."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.s3: Any = boto3.client(
            "s3",
            endpoint_url=env["S3_ENDPOINT"],
            region_name="us-east-1",
            aws_access_key_id=env["S3_ACCESS_KEY"],
            aws_secret_access_key=env["S3_SECRET_KEY"],
            config=Config(s3={"addressing_style": "path"}),
        )

    def keys(self, bucket: str) -> dict[str, datetime]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {o["Key"]: o["LastModified"] for p in pages for o in p.get("Contents") or []}

    def put(self, bucket: str, key: str, body: bytes = b"") -> None:
        self.s3.put_object(Bucket=bucket, Key=key, Body=body)

    def checkpoint(self, bucket: str, base: str, step: int, *, complete: bool) -> None:
        self.put(bucket, f"{base}checkpoint-{step}/model.safetensors", b"\0" * (1024 + step))
        if complete:
            state = f'{{"global_step": {step}, "log_history": []}}'.encode()
            self.put(bucket, f"{base}checkpoint-{step}/trainer_state.json", state)

    def drop(self, bucket: str) -> None:
        for key in self.keys(bucket):
            self.s3.delete_object(Bucket=bucket, Key=key)
        self.s3.delete_bucket(Bucket=bucket)


def setup(ctx: Context, store: Bucket, made: list[str], buckets: list[str]) -> Instance:
    ns = kit.new_namespace(ctx.cluster, "f-s3")
    made.append(ns)
    bucket = f"f-s3-{uuid.uuid4().hex[:8]}"
    store.s3.create_bucket(Bucket=bucket)
    buckets.append(bucket)
    prefix = f"runs/{ns}/"
    for step in [*STEPS, WRITING]:
        store.checkpoint(bucket, prefix, step, complete=step != WRITING)
    store.put(bucket, f"{prefix}checkpoint-{PINNED}.trainwarden-pin")
    store.checkpoint(bucket, f"runs/{ns}-v2/", 100, complete=True)
    store.put(bucket, "datasets/shard-00000.tar", b"data")
    keys = {
        "accessKeyId": store.env["S3_ACCESS_KEY"],
        "secretAccessKey": store.env["S3_SECRET_KEY"],
    }
    core = client.CoreV1Api(ctx.cluster.api)
    secret: Any = SecretBuilder("checkpoint-store").string_data(keys).build()
    core.create_namespaced_secret(ns, secret)
    job = JobBuilder("trainer").suspended().image("none")
    job = job.checkpoint_path(f"s3://{bucket}/{prefix}").resume_from(f"checkpoint-{RESUMED}")
    kit.create_job(ctx.cluster, ns, job.build())
    env = store.env
    proxy = S3FaultProxy(
        env["S3_ENDPOINT"],
        env["S3_ACCESS_KEY"],
        env["S3_SECRET_KEY"],
        seed=ctx.rng.randrange(2**32),
    )
    planned = plan(list(STEPS), KEEP_LAST, {PINNED, RESUMED})
    return Instance(ns, bucket, prefix, proxy, planned)


def manifest(inst: Instance) -> dict[str, Any]:
    return (
        CheckpointPolicyBuilder(inst.policy)
        .enforce()
        .namespaces(inst.namespace)
        .s3(
            inst.proxy.url,
            inst.bucket,
            prefix=inst.prefix,
            secret=(inst.namespace, "checkpoint-store"),
        )
        .layout("HuggingFace")
        .keep_last(KEEP_LAST)
        .min_age("1s")
        .every("10m")
        .build()
    )


def _changes_between_pages(store: Bucket, inst: Instance, pin: str) -> None:
    """Between two pages of the first listing: a planned checkpoint is pinned and a new
    one starts being written; the plan loses the pinned one."""
    inst.planned.discard(pin)
    store.put(inst.bucket, f"{inst.prefix}{pin}.trainwarden-pin")
    store.checkpoint(inst.bucket, inst.prefix, 1000, complete=False)
    inst.before |= {
        f"{inst.prefix}{pin}.trainwarden-pin",
        f"{inst.prefix}checkpoint-1000/model.safetensors",
    }


def _start(ctx: Context, store: Bucket, inst: Instance) -> threading.Thread:
    """The fault from the policy's creation for 2-8 s (pages: 10 s), then up."""
    fault = str(ctx.rng.choice(FAULTS))
    mode, _, some = fault.partition("-")
    rate = ctx.rng.uniform(0.3, 0.7) if some else 1.0
    window = 10.0 if mode == "pages" else ctx.rng.uniform(2, 8)
    inst.fault = f"{fault} ({rate:.0%}, {window:.0f} s)" if some else f"{fault} ({window:.0f} s)"
    if mode == "pages":
        pin = str(ctx.rng.choice(sorted(inst.planned)))
        inst.proxy.settings.between_pages = lambda: _changes_between_pages(store, inst, pin)
    inst.before = set(store.keys(inst.bucket))
    inst.proxy.set(mode, rate=rate)
    ctx.create_policy(CPP, manifest(inst))

    def restore() -> None:
        time.sleep(window)  # the fault schedule
        inst.proxy.set("up")

    thread = threading.Thread(target=restore, daemon=True)
    thread.start()
    return thread


def observer(ctx: Context, store: Bucket, insts: dict[str, Instance]) -> kit.Recorder:
    """Every status of the instances' policies: each new run, with the bucket then."""

    def see(obj: dict[str, Any]) -> None:
        inst = insts.get(obj["metadata"]["name"])
        status = obj.get("status") or {}
        entries = [e for e in status.get("locations") or [] if e["source"] == "S3"]
        entry: dict[str, Any] = entries[0] if entries else {}
        if inst is None or not entry.get("lastRun"):
            return
        if inst.seen and inst.seen[-1].last_run == entry["lastRun"]:
            return
        present = {name_of(k, inst.prefix) for k in store.keys(inst.bucket)}
        condition = kit.condition(obj, "LastRunSucceeded")
        inst.seen.append(
            Seen(
                entry["lastRun"],
                bool(entry.get("failed")),
                condition["status"] if condition else None,
                frozenset(inst.planned & {n for n in present if n}),
                str(entry.get("message") or "")[:300],
            )
        )

    custom = client.CustomObjectsApi(ctx.cluster.api)
    lister = kit.raw(custom.list_cluster_custom_object)
    return kit.Recorder(lister, see, group=kit.GROUP, version=kit.VERSION, plural=CPP)


def done(store: Bucket, inst: Instance) -> bool:
    present = {name_of(k, inst.prefix) for k in store.keys(inst.bucket)}
    return not (inst.planned & present) and bool(inst.seen) and not inst.seen[-1].failed


def _judge_runs(row: Row, inst: Instance) -> str:
    """The runs as status told them: a partial one reported as success, or a failure
    without the condition, is wrong; returns what happened, for the notes."""
    failed = [s for s in inst.seen if s.failed]
    for s in inst.seen:
        if s.remaining and not s.failed:
            row.wrong += 1
            row.notes.append(f"{inst.namespace}: a run left {sorted(s.remaining)}, said success")
        if s.failed and s.condition != "False":
            row.wrong += 1
            row.notes.append(f"{inst.namespace}: a failed run, LastRunSucceeded {s.condition}")
    times = [kit.parse_time(s.last_run) for s in inst.seen]
    gaps = [
        (b - a).total_seconds()
        for a, b, s in zip(times, times[1:], inst.seen, strict=False)
        if a and b and s.failed
    ]
    retried = f", retried after {', '.join(f'{g:.0f}' for g in gaps)} s" if gaps else ""
    return f"{inst.fault}: {len(inst.seen)} run(s), {len(failed)} failed or partial{retried}"


def _judge(ctx: Context, row: Row, store: Bucket, inst: Instance, created: float) -> str:
    left = max(1.0, DEADLINE - (time.monotonic() - created))
    with contextlib.suppress(AssertionError):  # what is missing is counted below
        kit.wait_for(lambda: done(store, inst), timeout=left, what="the plan carried out")
    count(row, store, inst)
    return _judge_runs(row, inst)


def count(row: Row, store: Bucket, inst: Instance) -> None:
    """An instance's deletions into the row, judged on the bucket as it is now."""
    tally = judge_objects(inst.before, set(store.keys(inst.bucket)), inst.prefix, inst.planned)
    row.expected += len(inst.planned)
    row.taken += tally.taken
    row.lost += tally.lost
    row.wrong += tally.wrong
    row.double += len(doubles(inst.proxy.settings.deletions))
    row.notes += [f"{inst.namespace}: {n}" for n in tally.notes]


def _one_run(ctx: Context, row: Row, store: Bucket, made: list[str], buckets: list[str]) -> str:
    insts = [setup(ctx, store, made, buckets) for _ in range(ctx.per_kill)]
    newest = max(max(store.keys(i.bucket).values()) for i in insts).timestamp()
    kit.wait_for(lambda: time.time() > newest + 1.5, timeout=10, what="minAge passed")
    by_name = {i.policy: i for i in insts}
    recorder = observer(ctx, store, by_name)
    recorder.synced.wait(30)
    try:
        created = time.monotonic()
        schedules = [_start(ctx, store, i) for i in insts]
        said = [_judge(ctx, row, store, i, created) for i in insts]
        for thread in schedules:
            thread.join()
    finally:
        recorder.stop()
        for inst in insts:
            inst.proxy.close()
            kit.delete_namespace(ctx.cluster, inst.namespace)
    return "; ".join(said)


def run_area(ctx: Context) -> Row:
    row = Row("S3 faults under checkpoint pruning")
    store = Bucket(harness.read_env(harness.CLUSTER_DIR / "cluster.env"))
    ops = ctx.operators("s3")
    ops.start()
    buckets: list[str] = []
    try:
        with kit.namespaces(ctx.cluster) as made:
            for number in range(ctx.runs):
                said = _one_run(ctx, row, store, made, buckets)
                row.runs += 1
                row.notes.append(f"run {number + 1}: {said}")
                ctx.say(f"  {row.scenario}: run {number + 1}/{ctx.runs}: {said}")
    finally:
        ops.stop_all()
        for bucket in buckets:
            with contextlib.suppress(Exception):  # cleanup only; the figures are in
                store.drop(bucket)
    return row
