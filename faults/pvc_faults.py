"""Area "pvc": a pruner killed mid-deletion, a full volume, the node gone (issue 17, item 6).

PVC directories are pruned by pruner Jobs (checkpoints/pruner.py) whose pods really run on
the cluster's real node `real-0` (kubelet + containerd; `make cluster` as root), on a
hostPath PersistentVolume under .cluster/state/node/volumes/, so the suite reads and
judges the files on the host.

Per run, `per_kill` instances, each a namespace with a PVC and an Enforce policy
(Hugging Face layout, keepLast 2, minAge 1 s, every 10 min, from the Job annotation
`checkpoints:/checkpoints`): complete checkpoints 100..800, checkpoint-200 pinned,
checkpoint-100 named by the Job's resume-from, checkpoint-900 being written (no
trainer_state.json), and beside the directory `checkpoints-v2/checkpoint-100` and
`datasets/`. The plan (faults/s3_faults.plan) deletes 300..600; each of those holds
FILES files, so a pruner spends a while deleting. Half the runs put each volume on a
tmpfs filled to the last byte first (`full`). The policies' first runs start at once;
the moment a pruner has renamed a planned checkpoint to its tombstone
(`.trainwarden-deleting-*`, storage/pruning.py), one fault:

- `pod-deleted`: that pruner's pod deleted with grace 0 (through the API; kubelet kills it);
- `process-killed`: the pruner's process SIGKILLed on the host (the OOM killer's way);
- `node-gone`: the node dies: kubelet and every process of its pods SIGKILLed, its Node
  object deleted; once the pod garbage collector has removed the pruner pods (a node that
  does not come back), kubelet is started again (`node-up.sh`) and registers anew.

Counted on the files: expected = the plan; taken = planned checkpoints gone (no
tombstone left); lost = planned checkpoints or tombstones still there DEADLINE s after
the fault was over (the schedule's next run is 10 min away: only a retry gets there);
wrong = anything else gone (protected, outside the plan, outside the directory), or a
recorded run that left planned checkpoints and said it succeeded; double = a checkpoint
two recorded runs each say they deleted (bytes freed counted twice).
"""

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from faults import kit, s3_faults
from faults.kit import Context, Operators, harness
from faults.table import Row
from trainwarden.testing.builders import CheckpointPolicyBuilder, JobBuilder

CPP = "checkpointpolicies"
STEPS = range(100, 900, 100)
PINNED, RESUMED, WRITING, KEEP_LAST = 200, 100, 900, 2
FILES = 3000
"""Files in each planned checkpoint: unlinking them takes the pruner a moment."""
TOMBSTONE = ".trainwarden-deleting-"
FAULTS = ("pod-deleted", "process-killed", "node-gone", "operator-killed")
DEADLINE = 180.0
"""Seconds after the fault is over for the plan to be carried out (a failed run is
retried 30 s after it; the schedule's next run is at 10 min)."""
TMPFS = "64m"
PRUNER_PODS = "app.kubernetes.io/name=trainwarden-pruner"


@dataclass
class Instance:
    namespace: str
    root: Path
    """The volume on the host; checkpoints in root/checkpoints."""
    planned: set[str]
    full: bool
    before: set[str] = field(default_factory=set)
    runs: dict[str, tuple[bool, frozenset[str], frozenset[str]]] = field(default_factory=dict)
    """Each recorded run by its pruner Job: (failed, names it deleted, planned left then)."""
    finished: float | None = None
    """When (monotonic) a successful run was first seen with nothing planned left."""

    @property
    def policy(self) -> str:
        return f"{self.namespace}-cpp"

    @property
    def directory(self) -> Path:
        return self.root / "checkpoints"


def files(root: Path) -> set[str]:
    """Every file and directory under the volume, relative (what the judge compares)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.is_dir() else set()


def present(inst: Instance) -> set[str]:
    """Top-level entries of the checkpoint directory, tombstones named as their checkpoint."""
    names = os.listdir(inst.directory) if inst.directory.is_dir() else []
    return {n.removeprefix(TOMBSTONE) for n in names}


def judge_files(before: set[str], after: set[str], planned: set[str]) -> s3_faults.Tally:
    """What vanished, against the plan: a planned checkpoint counts once all of it is gone."""
    tally = s3_faults.Tally()
    gone = before - after
    tops = {p.split("/")[1] for p in gone if p.startswith("checkpoints/") and p.count("/") >= 1}
    for name in sorted(tops - planned):
        tally.wrong += 1
        tally.notes.append(f"checkpoints/{name} deleted outside the plan")
    outside = sorted(p for p in gone if not p.startswith("checkpoints/"))
    tally.wrong += len(outside)
    tally.notes += [f"{p} deleted outside the directory" for p in outside[:3]]
    for name in sorted(planned):
        left = any(p.split("/")[1].removeprefix(TOMBSTONE) == name for p in after if "/" in p)
        tally.taken += 0 if left else 1
        tally.lost += 1 if left else 0
    return tally


def _checkpoint(directory: Path, step: int, *, complete: bool, many: bool) -> None:
    ckpt = directory / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"\0" * (1024 + step))
    for number in range(FILES if many else 0):
        (ckpt / f"shard-{number:05d}.bin").write_bytes(b"x")
    if complete:
        state = {"global_step": step, "log_history": [{"step": step, "loss": 1.0}]}
        (ckpt / "trainer_state.json").write_text(json.dumps(state))
    stamp = time.time() - 60
    for path in (*ckpt.iterdir(), ckpt):
        os.utime(path, (stamp, stamp))


def _fill(root: Path) -> None:
    """Write a file until the volume has no byte left."""
    with open(root / "filler", "wb") as sink, contextlib.suppress(OSError):  # ENOSPC: full
        while True:
            sink.write(b"\0" * 65536)
            sink.flush()


def _setup(ctx: Context, made: list[str]) -> Instance:
    ns = kit.new_namespace(ctx.cluster, "f-pvc")
    made.append(ns)
    root = harness.PV_ROOT / ns
    full = ctx.rng.random() < 0.5
    root.mkdir(parents=True, exist_ok=True)
    if full:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS}", "tmpfs", str(root)], check=True
        )
    pv, pvc = harness.hostpath_volume(ns, root)
    planned = s3_faults.plan(list(STEPS), KEEP_LAST, {PINNED, RESUMED})
    for step in [*STEPS, WRITING]:
        many = f"checkpoint-{step}" in planned
        _checkpoint(root / "checkpoints", step, complete=step != WRITING, many=many)
    (root / "checkpoints" / f"checkpoint-{PINNED}" / ".trainwarden-pin").touch()
    _checkpoint(root / "checkpoints-v2", 100, complete=True, many=False)
    (root / "datasets").mkdir()
    (root / "datasets" / "shard-00000.tar").write_bytes(b"data")
    harness.own(root)
    if full:
        _fill(root)
    core = client.CoreV1Api(ctx.cluster.api)
    core.create_persistent_volume(cast(Any, pv))
    core.create_namespaced_persistent_volume_claim(ns, cast(Any, pvc))
    job = JobBuilder("trainer").suspended().image("none")
    job = job.checkpoint_path("checkpoints:/checkpoints").resume_from(f"checkpoint-{RESUMED}")
    kit.create_job(ctx.cluster, ns, job.build())
    return Instance(ns, root, planned, full, before=files(root))


def _manifest(inst: Instance) -> dict[str, Any]:
    return (
        CheckpointPolicyBuilder(inst.policy)
        .enforce()
        .namespaces(inst.namespace)
        .pvc()
        .layout("HuggingFace")
        .keep_last(KEEP_LAST)
        .min_age("1s")
        .every("10m")
        .build()
    )


# --- the faults --------------------------------------------------------------------------

CGROUPS = Path("/sys/fs/cgroup/pids")


def _pod_pids(uid: str | None = None, command: bytes = b"") -> list[int]:
    """Processes of this node's pods (of the pod `uid` only, if given, and running
    `command`), from the cgroup root kubelet puts them under (its own per cluster:
    trainwarden-<offset/100>, so another cluster's pods are never touched)."""
    offset = int(os.environ.get("TRAINWARDEN_CLUSTER_PORT_OFFSET") or 0)
    base = CGROUPS / f"trainwarden-{offset // 100}" / "kubepods"
    pids: list[int] = []
    for procs in base.rglob("cgroup.procs"):
        if uid is None or f"pod{uid}" in str(procs):
            with contextlib.suppress(OSError, ValueError):
                pids += [int(p) for p in procs.read_text().split()]
    return [p for p in pids if command in _cmdline(p)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _kill(pids: list[int]) -> int:
    killed = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def _pruner_pod(ctx: Context, ns: str) -> dict[str, Any] | None:
    pods = [p for p in kit.list_pods(ctx.cluster, ns) if "job-name" in p["metadata"]["labels"]]
    pods = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/name")]
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return running[0] if running else (pods[0] if pods else None)


def _tombstone(insts: list[Instance]) -> Instance | None:
    for inst in insts:
        if inst.directory.is_dir() and any(
            n.startswith(TOMBSTONE) for n in os.listdir(inst.directory)
        ):
            return inst
    return None


PIDS = harness.CLUSTER_DIR / "state" / "pids"


def _node_gone(ctx: Context, insts: list[Instance]) -> str:
    """Kubelet and every pod process SIGKILLed, the Node deleted; once the pruner pods
    are garbage-collected (a node gone for good), the machine comes back: kubelet is
    started again exactly as it ran (same binary, flags, log, pid file) and registers a
    new Node. containerd and its images stay (a reboot, not a new machine)."""
    kubelet = int((PIDS / "kubelet.pid").read_text())
    argv = Path(f"/proc/{kubelet}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    core = client.CoreV1Api(ctx.cluster.api)

    def pruners() -> set[str]:
        listed = [core.list_namespaced_pod(i.namespace, label_selector=PRUNER_PODS) for i in insts]
        pods = [pod for found in listed for pod in found.items]
        on_node = [p for p in pods if p.metadata and p.spec and p.spec.node_name == "real-0"]
        return {str(p.metadata.uid) for p in on_node if p.metadata}

    struck = pruners()
    with contextlib.suppress(ProcessLookupError):
        os.kill(kubelet, signal.SIGKILL)
    killed = _kill(_pod_pids())
    core.delete_node("real-0")
    began = time.monotonic()
    # Only pods bound to the node: a pod not yet scheduled, or a retry's, waits for a node.
    kit.wait_for(lambda: not struck & pruners(), timeout=180, what="the lost node's pods collected")
    gone = time.monotonic() - began
    log = (harness.CLUSTER_DIR / "state" / "logs" / "kubelet.log").open("ab")
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
    )
    (PIDS / "kubelet.pid").write_text(f"{process.pid}\n")

    def ready() -> bool:
        node: Any = core.read_node("real-0")
        conditions = node.status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    kit.wait_for(ready, timeout=120, what="the node registered again and Ready")
    return f"{killed} pod processes killed, pods collected after {gone:.0f} s, node back"


def _strike(ctx: Context, ops: Operators, fault: str, insts: list[Instance]) -> str:
    """Wait for a pruner mid-deletion (a tombstone on the disk), then the fault; or, for
    `operator-killed`, the operator's own kill at its failpoint."""
    if fault == "operator-killed":
        if not ops.exited(ops.running[0], timeout=60):
            ops.kill(ops.running[0])
            return "failpoint pruner-before-record not reached in 60 s (SIGKILL)"
        return "at failpoint pruner-before-record (a pruner Job created, its uid unrecorded)"
    hit = kit.wait_for(
        lambda: _tombstone(insts), timeout=120, every=0.005, what="a pruner mid-deletion"
    )
    left = len(hit.planned & present(hit))
    if fault == "node-gone":
        return f"{hit.namespace} ({left} planned left): {_node_gone(ctx, insts)}"
    pod = _pruner_pod(ctx, hit.namespace)
    if pod is None:
        return f"{hit.namespace}: no pruner pod found"
    name = pod["metadata"]["name"]
    if fault == "pod-deleted":
        core = client.CoreV1Api(ctx.cluster.api)
        core.delete_namespaced_pod(name, hit.namespace, grace_period_seconds=0)
        return f"{hit.namespace} ({left} planned left): pod {name} deleted"
    killed = _kill(_pod_pids(pod["metadata"]["uid"], command=b"prune\0"))
    return f"{hit.namespace} ({left} planned left): {killed} pruner process(es) SIGKILLed"


# --- judging -----------------------------------------------------------------------------


def _observer(ctx: Context, insts: dict[str, Instance]) -> kit.Recorder:
    """Every recorded run of the instances' policies, with the planned checkpoints left."""

    def see(obj: dict[str, Any]) -> None:
        inst = insts.get(obj["metadata"]["name"])
        entries = [e for e in (obj.get("status") or {}).get("locations") or [] if e.get("lastJob")]
        if inst is None or not entries or entries[0]["lastJob"] in inst.runs:
            return
        entry = entries[0]
        left = frozenset(inst.planned & present(inst))
        failed = bool(entry.get("failed"))
        inst.runs[entry["lastJob"]] = (failed, frozenset(entry.get("deletedNames") or []), left)
        if not failed and not left and inst.finished is None:
            inst.finished = time.monotonic()

    custom = client.CustomObjectsApi(ctx.cluster.api)
    lister = kit.raw(custom.list_cluster_custom_object)
    return kit.Recorder(lister, see, group=kit.GROUP, version=kit.VERSION, plural=CPP)


def _done(inst: Instance) -> bool:
    if inst.planned & present(inst):
        return False
    runs = list(inst.runs.values())
    return bool(runs) and not runs[-1][0]


def _judge(row: Row, inst: Instance, over: float) -> str:
    left = max(1.0, DEADLINE - (time.monotonic() - over))
    took = "never"
    with contextlib.suppress(AssertionError):  # what is missing is counted below
        kit.wait_for(lambda: _done(inst), timeout=left, what="the plan carried out")
        took = f"{max(0.0, (inst.finished or time.monotonic()) - over):.0f} s"
    tally = judge_files(inst.before, files(inst.root), inst.planned)
    row.expected += len(inst.planned)
    row.taken += tally.taken
    row.lost += tally.lost
    row.wrong += tally.wrong
    row.notes += [f"{inst.namespace}: {n}" for n in tally.notes]
    said: dict[str, int] = {}
    for job, (failed, deleted, left_then) in inst.runs.items():
        for name in deleted:
            said[name] = said.get(name, 0) + 1
        if left_then and not failed:
            row.wrong += 1
            row.notes.append(f"{inst.namespace}: {job} left {sorted(left_then)}, said success")
    row.double += sum(n - 1 for n in said.values() if n > 1)
    if took == "never" and not tally.lost:
        row.lost += 1  # the files are right, but no successful run was ever recorded
        row.notes.append(f"{inst.namespace}: no successful run recorded within the deadline")
    failures = sum(1 for f, _, _ in inst.runs.values() if f)
    full = "full, " if inst.full else ""
    return f"{full}{len(inst.runs)} run(s), {failures} failed, plan done after {took}"


def _cleanup(ctx: Context, insts: list[Instance]) -> None:
    core = client.CoreV1Api(ctx.cluster.api)
    for inst in insts:
        kit.delete_namespace(ctx.cluster, inst.namespace)
        with contextlib.suppress(client.ApiException):
            core.delete_persistent_volume(f"{inst.namespace}-checkpoints")
    for inst in insts:  # a tmpfs is unmounted once no pod of the namespace holds it
        if inst.full:
            kit.wait_for(
                lambda i=inst: subprocess.run(["umount", str(i.root)]).returncode == 0,  # type: ignore[misc]
                timeout=120,
                what=f"{inst.root} unmounted",
            )
        subprocess.run(["rm", "-rf", str(inst.root)], check=False)


def _one_run(ctx: Context, row: Row, ops: Operators, args: tuple[str, ...]) -> str:
    fault = str(ctx.rng.choice(FAULTS))
    armed = ("--failpoint=pruner-before-record=kill",) if fault == "operator-killed" else ()
    ops.start(*args, *armed)
    made: list[str] = []
    insts = [_setup(ctx, made) for _ in range(ctx.per_kill)]
    recorder = _observer(ctx, {i.policy: i for i in insts})
    recorder.synced.wait(30)
    try:
        for inst in insts:
            ctx.create_policy(CPP, _manifest(inst))
        said = _strike(ctx, ops, fault, insts)
        if armed:
            ops.start(*args)
        over = time.monotonic()
        judged = [f"{i.namespace}: {_judge(row, i, over)}" for i in insts]
    finally:
        recorder.stop()
        ops.stop_all()
        _cleanup(ctx, insts)
    return f"{fault}: {said}; " + "; ".join(judged)


def run_area(ctx: Context) -> Row:
    row = Row("Pruner killed, PVC full, node gone")
    env = harness.read_env(harness.CLUSTER_DIR / "cluster.env")
    if not env.get("REAL_NODE"):
        raise RuntimeError("no real node in this cluster (make cluster as root, REAL_NODE=1)")
    tolerations = json.dumps([harness.REAL_NODE_TOLERATION])
    images = harness.read_env(harness.CLUSTER_DIR / "images" / "images.env")  # in containerd
    ops = ctx.operators("pvc")
    args = (
        f"--pruner-image={images['TRAINWARDEN_IMAGE']}",
        f"--pruner-run-as-user={harness.TRAINER_UID}",
        f"--pruner-tolerations={tolerations}",
    )
    faults: dict[str, int] = {}
    try:
        for number in range(ctx.runs):
            said = _one_run(ctx, row, ops, args)
            row.runs += 1
            kind = said.split(":")[0]
            faults[kind] = faults.get(kind, 0) + 1
            row.notes.append(f"run {number + 1}: {said}")
            ctx.say(f"  {row.scenario}: run {number + 1}/{ctx.runs}: {said}")
    finally:
        ops.stop_all()
    row.notes.append(", ".join(f"{n} {kind}" for kind, n in sorted(faults.items())))
    return row
