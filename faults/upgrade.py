"""Area 8 (issue 17, item 8): an upgrade from the previous release. Per run, the
previous release's operator (commit PREVIOUS, checked out in a temporary git worktree and
run from its own source) suspends the two Jobs of each of `--per-kill` exhausted Enforce
budgets, next to a Job its user suspended and forged with the budget's `suspended-by`
label, while a DryRun "witness" budget charges a running Job and a finished pod that is
deleted before the upgrade. The previous operator is stopped (SIGTERM, as a rolling
update does) and the current one started. Judged on the objects:

- nothing the previous release suspended is suspended again or resumed by the upgrade
  (a flip of spec.suspend before the limit is raised is *wrong*, a second one *double*);
- each budget's `status.suspended` keeps the same entries (uid and time) across it;
- usage continues: an exhausted budget (no pod of its runs any more) shows the same
  `used`, and the witness's equals the truth from the pods' timestamps (the deleted pod's
  as the suite saw it) -- the usage error column;
- raising the limit then resumes exactly what the previous release suspended (each Job
  once, the forged one never).
"""

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client

from faults import budget_kills as bk
from faults import kit, truth
from faults.kit import Context, JobSuspensions, Operators, harness
from faults.table import Row

PREVIOUS = "c21277b"
"""The last commit CI landed before the fault suite merged: the release being upgraded from."""
TB = "trainingbudgets"
IRP = kit.IRP
IDLE_GRACE = 40.0
"""The idle policy's grace period: the upgrade falls inside it."""
WARNED_AT = "trainwarden.dev/idle-warned-at"
SECONDS_PER_POD = 1.0
"""Usage allowed to differ per pod: timestamps have 1 s resolution."""


@contextmanager
def previous_release(commit: str = PREVIOUS) -> Iterator[Path]:
    """A detached git worktree of `commit` in a temporary directory, removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="trainwarden-previous-"))
    tree = parent / "src"
    git = ["git", "-C", str(kit.ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", str(tree), commit], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield tree
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


@dataclass
class Witness:
    """A DryRun budget over a running Job and a finished pod deleted before the upgrade."""

    namespace: str
    budget: str
    deleted: list[dict[str, Any]] = field(default_factory=list)


def start_witness(ctx: Context, made: list[str]) -> Witness:
    ns = kit.new_namespace(ctx.cluster, "f-upg-w")
    made.append(ns)
    kit.create_job(ctx.cluster, ns, harness.gpu_job("long", 1))
    done = {"sim.trainwarden.dev/complete-after": "3s"}
    kit.create_job(ctx.cluster, ns, harness.gpu_job("done", 2, annotations=done))
    ctx.create_budget(f"{ns}-tb", ns, 1000, mode="DryRun")
    return Witness(ns, f"{ns}-tb")


def retire_finished(ctx: Context, witness: Witness) -> float:
    """Wait for the short Job's pod to finish, keep it as the suite saw it, delete it;
    returns when it was gone."""

    def finished() -> dict[str, Any] | None:
        pods = kit.list_pods(ctx.cluster, witness.namespace)
        ended = [p for p in pods if truth.end_of(p) is not None]
        return ended[0] if ended else None

    pod = kit.wait_for(finished, timeout=60, what="the witness's finished pod")
    witness.deleted.append(pod)
    client.BatchV1Api(ctx.cluster.api).delete_namespaced_job(
        "done", witness.namespace, propagation_policy="Background"
    )
    uid = pod["metadata"]["uid"]
    kit.wait_for(
        lambda: all(
            p["metadata"]["uid"] != uid for p in kit.list_pods(ctx.cluster, witness.namespace)
        ),
        timeout=60,
        what="the finished pod deleted",
    )
    return time.time()


def status(ctx: Context, name: str) -> dict[str, Any]:
    return dict(kit.get_policy(ctx.cluster, TB, name).get("status") or {})


def used_seconds(st: dict[str, Any]) -> float:
    return float((st.get("used") or {}).get("acceleratorHours") or 0) * 3600


def entries(st: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((s["ref"].get("uid", ""), s["suspendedAt"]) for s in st.get("suspended") or [])


def evaluated_since(ctx: Context, name: str, after: float) -> bool:
    stamp = kit.parse_time(status(ctx, name).get("lastEvaluated"))
    return stamp is not None and stamp.timestamp() >= after


def evaluated_by(operator: harness.Operator, kind: str, name: str) -> bool:
    """Whether this operator process has evaluated the policy (its own metric)."""
    return harness.last_evaluated(operator, kind, name) > 0


def witness_error(ctx: Context, witness: Witness) -> float:
    """|used - truth| per pod at the witness's lastEvaluated."""
    st = status(ctx, witness.budget)
    at = kit.parse_time(st.get("lastEvaluated")) or datetime.now(UTC)
    pods = truth.existing(ctx.cluster, [witness.namespace]) + witness.deleted
    return abs(used_seconds(st) - truth.accelerator_seconds(pods, at)) / max(1, len(pods))


@dataclass
class Idle:
    """An Enforce idle policy (Suspend) over an idle Job and a busy one."""

    namespace: str
    policy: str
    jobs: JobSuspensions
    idle_pod: str
    warned_at: str | None = None
    """The idle pod's warning, as the previous release stamped it."""


def start_idle(ctx: Context, made: list[str]) -> Idle:
    found = kit.idle_namespace(ctx, "f-upg-i", made, {"idle": 0.0, "busy": 80.0}, IDLE_GRACE)
    return Idle(found.namespace, found.policy, found.jobs, found.pods["idle"])


def warned_at(ctx: Context, idle: Idle) -> str | None:
    try:
        pod: Any = client.CoreV1Api(ctx.cluster.api).read_namespaced_pod(
            idle.idle_pod, idle.namespace
        )
    except client.ApiException:
        return None
    return (pod.metadata.annotations or {}).get(WARNED_AT)


def judge_idle(ctx: Context, row: Row, new: harness.Operator, idle: Idle) -> None:
    """The current release neither warns again nor restarts the grace period: the idle
    Job is reclaimed once, not before the previous warning's grace ended; never the busy
    one (counted in tally_idle)."""
    kit.wait_for(
        partial(evaluated_by, new, "IdleReclaimPolicy", idle.policy),
        timeout=60,
        what="an idle evaluation by the current release",
    )
    now = warned_at(ctx, idle)
    if now is not None and now != idle.warned_at:
        row.wrong += 1
        row.notes.append(f"{idle.policy}: warned again ({idle.warned_at} -> {now})")
    start = kit.parse_time(idle.warned_at)
    due = (start.timestamp() if start else time.time()) + IDLE_GRACE
    try:
        kit.wait_for(lambda: bool(idle.jobs.jobs.get("idle") and idle.jobs.jobs["idle"].current),
                     timeout=max(1.0, due + 60 - time.time()), what="the idle reclaim")  # fmt: skip
    except AssertionError:
        return  # counted as lost
    flip = idle.jobs.jobs["idle"].flips(True)[0] + time.time() - time.monotonic()
    if flip < due - 1.0:  # the warning's stamp has 1 s resolution
        row.wrong += 1
        row.notes.append(f"{idle.policy}: reclaimed {due - flip:.0f} s before the grace ended")


def tally_idle(row: Row, idle: Idle) -> None:
    reclaims = idle.jobs.suspensions("idle")
    row.expected += 1
    row.taken += min(reclaims, 1)
    row.lost += reclaims == 0
    row.double += max(0, reclaims - 1)
    row.wrong += idle.jobs.suspensions("busy") + idle.jobs.resumes("idle")
    idle.jobs.stop()


@dataclass
class Before:
    """What the previous release left, per budget: its record and its usage."""

    records: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)


Previous = tuple[list[bk.Instance], Witness, Before, str, Idle]


def under_previous(ctx: Context, ops: Operators, tree: Path, made: list[str]) -> Previous:
    """The previous release suspends every instance's Jobs and charges the witness."""
    old = ops.start(name="previous", source=tree)
    new_metric = harness.samples(old, "trainwarden_clock_skew_seconds")
    which = "current code!" if new_metric else "previous code (no clock metric)"
    idle = start_idle(ctx, made)  # its window runs while the budgets suspend
    insts = [bk.start_instance(ctx, "f-upg", made, trap=True) for _ in range(ctx.per_kill)]
    witness = start_witness(ctx, made)
    began = time.time()
    for inst in insts:
        bk.spend_in(ctx, inst, cross_in=-2)
    for inst in insts:
        kit.wait_for(partial(bk.suspended, ctx, old, inst, began), timeout=60, what="suspension")
    gone = retire_finished(ctx, witness)
    kit.wait_for(
        lambda: evaluated_since(ctx, witness.budget, gone),
        timeout=60,
        what="the previous release's status after the deletion",
    )
    idle.warned_at = kit.wait_for(lambda: warned_at(ctx, idle), timeout=90, what="a warning")
    before = Before()
    for inst in insts:
        st = status(ctx, inst.budget)
        before.records[inst.budget], before.used[inst.budget] = entries(st), used_seconds(st)
    old.stop()  # SIGTERM, as a rolling update stops it
    ops.running.remove(old)
    return insts, witness, before, which, idle


def after_upgrade(
    ctx: Context, ops: Operators, row: Row, previous: Previous, errors: list[float]
) -> float:
    """The current release takes over: records kept, usage continued; then the limits
    are raised. Returns when (monotonic clock, as the Jobs' histories)."""
    insts, witness, before, _, idle = previous
    upgraded = time.time()
    new = ops.start(name="current")
    for inst in insts:
        kit.wait_for(
            partial(evaluated_by, new, "TrainingBudget", inst.budget),
            timeout=60,
            what="an evaluation by the current release",
        )
    kit.wait_for(
        lambda: evaluated_since(ctx, witness.budget, upgraded),
        timeout=90,
        what="the witness's status by the current release",
    )
    errors.append(witness_error(ctx, witness))
    judge_idle(ctx, row, new, idle)
    for inst in insts:
        st = status(ctx, inst.budget)
        kept = before.records[inst.budget]
        if entries(st) != kept:
            row.wrong += 1
            row.notes.append(f"{inst.budget}: record {kept} became {entries(st)}")
        errors.append(abs(used_seconds(st) - before.used[inst.budget]) / len(bk.JOBS))
    raised, wall = time.monotonic(), time.time()
    raise_limit = {"spec": {"limits": {"acceleratorHours": 1000}}}
    for inst in insts:
        kit.patch_policy(ctx.cluster, TB, inst.budget, raise_limit)
    for inst in insts:
        try:
            kit.wait_for(partial(bk.resumed, ctx, new, inst, wall), timeout=60, what="resume")
        except AssertionError:
            row.notes.append(f"{inst.namespace}: not resumed within 60 s of the raise")
    return raised


def tally(row: Row, insts: list[bk.Instance], raised: float) -> None:
    """Per Job: suspended once (by the previous release), resumed once after the raise."""
    for inst in insts:
        for name in bk.JOBS:
            history = inst.jobs.jobs.get(name, kit.History())
            suspensions, resumes = history.flips(True), history.flips(False)
            row.expected += 2
            row.taken += min(len(suspensions), 1) + min(len(resumes), 1)
            row.lost += (not suspensions) + (not resumes)
            row.double += max(0, len(suspensions) - 1) + max(0, len(resumes) - 1)
            row.wrong += sum(1 for t in resumes if t < raised)  # resumed by the upgrade
        row.wrong += inst.jobs.resumes(bk.TRAP)
        inst.jobs.stop()


def run_area(ctx: Context) -> Row:
    row = Row(f"upgrade from {PREVIOUS}")
    ops = ctx.operators("upgrade", prometheus_url=ctx.cluster.prometheus_url)
    errors: list[float] = []
    with previous_release() as tree, kit.namespaces(ctx.cluster) as made:
        for number in range(ctx.runs):
            previous = under_previous(ctx, ops, tree, made)
            raised = after_upgrade(ctx, ops, row, previous, errors)
            tally(row, previous[0], raised)
            tally_idle(row, previous[4])
            for operator in ops.running:  # a death nobody planned explains what it lost
                if operator.process.poll() is not None:
                    row.notes.append(f"run {number + 1}: the current operator exited on its "
                                     f"own (code {operator.process.returncode})")  # fmt: skip
            ops.stop_all()
            others = [previous[1].namespace, previous[4].namespace]
            for namespace in [i.namespace for i in previous[0]] + others:
                kit.delete_namespace(ctx.cluster, namespace)
            row.runs += 1
            ctx.say(f"  {row.scenario}: run {number + 1}/{ctx.runs} ({previous[3]})")
        row.notes.append(f"the first operator ran the {previous[3]}")
    row.usage_error = max(errors) if errors else None
    return row
