"""Area 7 (issue 17, item 7): the operator's clock minutes ahead of or behind the API
server's. Per run, an operator is started with `--failpoint clock-skew=±S` (S of 2 to 5
minutes, its whole process clock moved), and `--per-kill` namespaces each get two GPU
Jobs and an Enforce budget (no grace) whose limit the pods' own timestamps reach 15-30 s
later. Judged on the objects, against the truth of the pods' timestamps:

- a Job suspended before its budget was truly spent is *wrong* (premature), as is a
  negative `status.used` or any suspension of the outsider Job;
- a Job not suspended within 60 s of the true crossing is *lost* (a clock behind would
  charge the newest pods nothing and suspend late);
- the usage error: each budget's first status against the truth at the moment the API
  server stamped that write (its managedFields time: the server's clock, not the
  operator's), per pod.
"""

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client

from faults import budget_kills as bk
from faults import kit, truth
from faults.kit import Context, JobSuspensions, Operators, harness
from faults.table import Row

TB = "trainingbudgets"
LATE = 60.0
"""Seconds after the true crossing by which both Jobs must be suspended."""
TOLERANCE = 1.0
"""Seconds of slack on "premature": start times have 1 s resolution."""


@dataclass
class Case:
    inst: bk.Instance
    crossing: float
    """Wall-clock (server) time at which the pods' usage reaches the limit."""
    pods: int


def status_written_at(budget: dict[str, Any]) -> datetime | None:
    """When the API server took the newest status write (its own clock, 1 s resolution)."""
    stamps = [
        kit.parse_time(entry.get("time"))
        for entry in budget["metadata"].get("managedFields") or []
        if entry.get("subresource") == "status"
    ]
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


def usage_error(ctx: Context, case: Case, budget: dict[str, Any]) -> float | None:
    """|used - truth| per pod, truth taken over the second the server stamped the write."""
    written = status_written_at(budget)
    used = ((budget.get("status") or {}).get("used") or {}).get("acceleratorHours")
    if written is None or used is None:
        return None
    pods = truth.existing(ctx.cluster, [case.inst.namespace])
    charged = float(used) * 3600
    low = truth.accelerator_seconds(
        pods, written.fromtimestamp(written.timestamp() - 0.5, written.tzinfo)
    )
    high = truth.accelerator_seconds(
        pods, written.fromtimestamp(written.timestamp() + 1, written.tzinfo)
    )
    miss = 0.0 if low <= charged <= high else min(abs(charged - low), abs(charged - high))
    return miss / max(1, case.pods)


def start_case(ctx: Context, made: list[str]) -> Case:
    inst = bk.start_instance(ctx, "f-skew", made)
    pods = kit.pods_running(ctx.cluster, inst.namespace, len(bk.JOBS))
    cross_in = ctx.rng.uniform(15, 30)
    at = time.time() + cross_in
    used_then = sum(truth.gpus(p) * (at - truth.start_of(p).timestamp()) for p in pods)
    ctx.create_budget(inst.budget, inst.namespace, used_then / 3600)
    return Case(inst, at, len(pods))


def first_status(ctx: Context, case: Case, errors: list[float]) -> None:
    """The budget's first status with usage, against the truth (deadline 30 s)."""

    def probe() -> dict[str, Any] | None:
        budget = kit.get_policy(ctx.cluster, TB, case.inst.budget)
        return budget if ((budget.get("status") or {}).get("used") or {}) else None

    error = usage_error(ctx, case, kit.wait_for(probe, timeout=30, what="a first status"))
    if error is not None:
        errors.append(error)


def watch_case(ctx: Context, row: Row, case: Case) -> None:
    """Poll the budget until both Jobs are suspended or LATE passes, checking every
    status seen for negative usage."""
    deadline = case.crossing + LATE
    while time.time() < deadline:
        budget = kit.get_policy(ctx.cluster, TB, case.inst.budget)
        used = ((budget.get("status") or {}).get("used") or {}).get("acceleratorHours")
        if used is not None and float(used) < 0:
            row.wrong += 1
            row.notes.append(f"{case.inst.namespace}: negative usage {used}")
        jobs = case.inst.jobs.jobs
        if all(jobs.get(n) and jobs[n].current for n in bk.JOBS):
            return
        time.sleep(0.5)  # polling interval of a condition with a deadline


def tally(row: Row, case: Case, offset: float) -> None:
    """Each Job: suspended once, not before the crossing, not later than LATE after it."""
    for name in bk.JOBS:
        history = case.inst.jobs.jobs.get(name, kit.History())
        flips = [t + offset for t in history.flips(True)]  # monotonic -> wall clock
        row.expected += 1
        row.taken += min(len(flips), 1)
        row.double += max(0, len(flips) - 1)
        if not flips:
            row.lost += 1
            continue
        early = case.crossing - flips[0]
        if early > TOLERANCE:
            row.wrong += 1
            row.notes.append(f"{case.inst.namespace}/{name}: suspended {early:.0f} s early")
        row.wrong += case.inst.jobs.resumes(name)


def skewed_run(ctx: Context, ops: Operators, row: Row, made: list[str], errors: list[float]) -> str:
    seconds = ctx.rng.choice([-1, 1]) * ctx.rng.uniform(120, 300)
    operator = ops.start(f"--failpoint=clock-skew={seconds:+.0f}")
    cases = [start_case(ctx, made) for _ in range(ctx.per_kill)]
    for case in cases:
        first_status(ctx, case, errors)
    for case in sorted(cases, key=lambda c: c.crossing):
        watch_case(ctx, row, case)
    offset = time.time() - time.monotonic()
    measured = harness.samples(operator, "trainwarden_clock_skew_seconds")
    for case in cases:
        tally(row, case, offset)
        case.inst.jobs.stop()
        client.BatchV1Api(ctx.cluster.api).delete_collection_namespaced_job(
            case.inst.namespace, propagation_policy="Background"
        )
        kit.delete_namespace(ctx.cluster, case.inst.namespace)
    ops.stop_all()
    shown = f"{measured[0][1]:+.1f} s" if measured else "no metric"
    return f"clock {seconds:+.0f} s, the operator measured {shown}"


def run_area(ctx: Context) -> Row:
    row = Row("operator clock skewed ±2-5 min")
    ops = ctx.operators("clock-skew")
    errors: list[float] = []
    with kit.namespaces(ctx.cluster) as made:
        outsider = kit.new_namespace(ctx.cluster, "f-out")
        made.append(outsider)
        watched = JobSuspensions(ctx.cluster, outsider)
        kit.create_job(ctx.cluster, outsider, harness.gpu_job("x"))
        for number in range(ctx.runs):
            how = skewed_run(ctx, ops, row, made, errors)
            row.runs += 1
            row.notes.append(f"run {number + 1}: {how}")
            ctx.say(f"  {row.scenario}: run {number + 1}/{ctx.runs} ({how})")
        row.wrong += watched.suspensions("x")
        watched.stop()
    row.usage_error = max(errors) if errors else None
    return row
