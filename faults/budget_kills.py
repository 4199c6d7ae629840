"""Area 1: the operator SIGKILLed while a budget suspends, resumes, and writes status.

Each kill hits `per_kill` scenario instances (a namespace, its Jobs and its budget), each
at its own random phase. A kill is made at a random moment, or (a share of them) by a
failpoint: the operator kills itself at a chosen point between a decision and its write,
the narrow windows random timing rarely hits. Actions are counted on the Jobs themselves
(every change of spec.suspend, by a watch), never from the operator's account.
"""

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from faults import kit, truth
from faults.kit import Context, JobSuspensions, Operators, harness
from faults.table import Row

TB = "trainingbudgets"
SUSPEND_POINTS = ("budget-before-record", "budget-before-suspend", "budget-before-final-status")
RESUME_POINTS = ("budget-before-resume", "budget-before-final-status")
JOBS = {"small": 1, "large": 2}
"""The Jobs each instance runs, with their GPUs: both are suspended, both resumed."""
TRAP = "theirs"
"""A Job the user suspended, forged with the budget's suspended-by label: never resumed."""
OUTCOME_DEADLINE = 120.0


@dataclass
class Instance:
    namespace: str
    budget: str
    jobs: JobSuspensions
    uids: dict[str, str] = field(default_factory=dict)


def records(status: dict[str, Any]) -> list[str]:
    return [s["ref"]["name"] for s in status.get("suspended") or []]


def start_instance(ctx: Context, prefix: str, made: list[str], *, trap: bool = False) -> Instance:
    ns = kit.new_namespace(ctx.cluster, prefix)
    made.append(ns)
    inst = Instance(ns, f"{ns}-tb", JobSuspensions(ctx.cluster, ns))
    for name, gpus in JOBS.items():
        inst.uids[name] = kit.create_job(ctx.cluster, ns, harness.gpu_job(name, gpus))
    if trap:
        forged = {"trainwarden.dev/suspended-by": inst.budget}
        kit.create_job(ctx.cluster, ns, harness.gpu_job(TRAP, 1, labels=forged, suspend=True))
    return inst


def spend_in(ctx: Context, inst: Instance, cross_in: float) -> None:
    """A budget on the instance's namespace spent `cross_in` seconds from now."""
    pods = kit.pods_running(ctx.cluster, inst.namespace, len(JOBS))
    at = time.time() + cross_in
    used_then = sum(
        truth.gpus(p) * (at - truth.start_of(p).timestamp()) for p in pods
    )  # fmt: skip
    ctx.create_budget(inst.budget, inst.namespace, max(used_then, 1) / 3600)


def _evaluated(operator: harness.Operator, inst: Instance, after: float) -> bool:
    """Whether `operator` evaluated the budget since `after`: status is written only when
    it changes, so its lastEvaluated is no proof; the operator's metric is."""
    return harness.last_evaluated(operator, "TrainingBudget", inst.budget) >= after


def suspended(ctx: Context, operator: harness.Operator, inst: Instance, after: float) -> bool:
    """Both Jobs suspended, recorded once each in status, and an evaluation since `after`
    that left it so."""
    status = kit.get_policy(ctx.cluster, TB, inst.budget).get("status") or {}
    return (
        all(inst.jobs.jobs.get(n) and inst.jobs.jobs[n].current for n in JOBS)
        and sorted(records(status)) == sorted(JOBS)
        and _evaluated(operator, inst, after)
    )


def resumed(ctx: Context, operator: harness.Operator, inst: Instance, after: float) -> bool:
    status = kit.get_policy(ctx.cluster, TB, inst.budget).get("status") or {}
    return (
        all(inst.jobs.jobs.get(n) and inst.jobs.jobs[n].current is False for n in JOBS)
        and not records(status)
        and _evaluated(operator, inst, after)
    )


def _kill(ctx: Context, ops: Operators, running: Any, armed: str | None, window: float) -> str:
    """Kill the operator: wait for an armed failpoint, or SIGKILL at a random moment within
    `window` seconds. Returns how it died, for the notes."""
    if armed is not None:
        if ops.exited(running, timeout=60):
            return f"failpoint {armed}"
        ops.kill(running)
        return f"failpoint {armed} not reached in 60 s (SIGKILL)"
    time.sleep(ctx.rng.uniform(0, window))  # the fault schedule, not a wait for an outcome
    ops.kill(running)
    return "random moment"


def judge(
    ctx: Context,
    row: Row,
    operator: harness.Operator,
    insts: list[Instance],
    done: Any,
    kind: str,
    restarted: float,
) -> None:
    """Wait for each instance's outcome; count what never came as lost."""
    deadline = time.monotonic() + OUTCOME_DEADLINE
    for inst in insts:
        left = max(1.0, deadline - time.monotonic())
        try:
            kit.wait_for(
                functools.partial(done, ctx, operator, inst, restarted), timeout=left, what=kind
            )
        except AssertionError:
            row.notes.append(f"{inst.namespace}: not {kind} within {OUTCOME_DEADLINE:.0f} s")


def tally(row: Row, insts: list[Instance], *, resume: bool) -> None:
    """Count the actions on the Jobs over the whole area (a late double shows too)."""
    for inst in insts:
        for name in JOBS:
            suspensions = inst.jobs.suspensions(name)
            resumes = inst.jobs.resumes(name)
            done = resumes if resume else suspensions
            row.expected += 1
            row.taken += min(done, 1)
            row.lost += 1 if done == 0 else 0
            row.double += max(0, done - 1)
            row.wrong += suspensions - 1 if resume else resumes  # the opposite action
        if TRAP in inst.jobs.jobs:
            row.wrong += inst.jobs.resumes(TRAP)
        gaps = inst.jobs.recorder.gaps
        if gaps:
            row.notes.append(f"{inst.namespace}: the recorder relisted {gaps}x")
        inst.jobs.stop()


def _phase(inst: Instance, killed: float) -> str:
    flips = [t for n in JOBS for t in inst.jobs.jobs.get(n, kit.History()).flips(True)]
    if not flips or min(flips) > killed:
        return "before the suspension"
    return "after the suspension" if max(flips) <= killed else "between the two suspensions"


Round = tuple[list[Instance], str, float]
"""A round's instances, how the operator died, and when it was restarted."""


def suspend_round(ctx: Context, ops: Operators, made: list[str]) -> Round:
    armed = ctx.pick_failpoint(SUSPEND_POINTS)
    running = ops.running[0] if ops.running else ops.start()
    if armed is not None:
        ops.kill(running)
        running = ops.start(f"--failpoint={armed}=kill")
    insts = [start_instance(ctx, "f-susp", made) for _ in range(ctx.per_kill)]
    for inst in insts:
        spend_in(ctx, inst, cross_in=ctx.rng.uniform(0.5, 4))
    how = _kill(ctx, ops, running, armed, window=6)
    killed = time.monotonic()
    phases = [_phase(i, killed) for i in insts]
    restarted = time.time()
    ops.start()
    return insts, f"{how}; " + ", ".join(sorted(set(phases))), restarted


def resume_round(ctx: Context, ops: Operators, made: list[str]) -> Round:
    running = ops.running[0] if ops.running else ops.start()
    insts = [start_instance(ctx, "f-res", made, trap=True) for _ in range(ctx.per_kill)]
    began = time.time()
    for inst in insts:
        spend_in(ctx, inst, cross_in=-2)  # already spent: suspended at once
    for inst in insts:
        kit.wait_for(
            functools.partial(suspended, ctx, running, inst, began), timeout=60, what="suspension"
        )
    armed = ctx.pick_failpoint(RESUME_POINTS)
    if armed is not None:
        ops.kill(running)
        running = ops.start(f"--failpoint={armed}=kill")
    for inst in insts:
        kit.patch_policy(
            ctx.cluster, TB, inst.budget, {"spec": {"limits": {"acceleratorHours": 1000}}}
        )
    how = _kill(ctx, ops, running, armed, window=3)
    restarted = time.time()
    ops.start()
    return insts, how, restarted


def _retire(ctx: Context, row: Row, insts: list[Instance], *, resume: bool) -> None:
    """Count a round's actions (a round later: a late double shows too), then delete its
    namespaces and budgets so the operator does not carry them through every round."""
    tally(row, insts, resume=resume)
    for inst in insts:
        kit.delete_namespace(ctx.cluster, inst.namespace)


def run_area(ctx: Context, kind: str) -> Row:
    """`kind` is "suspend" or "resume": `ctx.runs` kills, each judged and counted."""
    row = Row(f"SIGKILL during budget {'suspension' if kind == 'suspend' else 'resume'}")
    ops = ctx.operators(f"budget-{kind}")
    play = suspend_round if kind == "suspend" else resume_round
    hows: dict[str, int] = {}
    with kit.namespaces(ctx.cluster) as made:
        outsider = kit.new_namespace(ctx.cluster, "f-out")
        made.append(outsider)
        watched = JobSuspensions(ctx.cluster, outsider)
        kit.create_job(ctx.cluster, outsider, harness.gpu_job("x"))
        previous: list[Instance] = []
        for number in range(ctx.runs):
            insts, how, restarted = play(ctx, ops, made)
            done = suspended if kind == "suspend" else resumed
            judge(ctx, row, ops.running[0], insts, done, kind, restarted)
            _retire(ctx, row, previous, resume=kind == "resume")
            previous = insts
            hows[how] = hows.get(how, 0) + 1
            row.runs += 1
            ctx.say(f"  {row.scenario}: kill {number + 1}/{ctx.runs} ({how})")
            for inst in insts:  # free the GPUs for the next round; the watch stays
                client.BatchV1Api(ctx.cluster.api).delete_collection_namespaced_job(
                    inst.namespace, propagation_policy="Background"
                )
        _retire(ctx, row, previous, resume=kind == "resume")
        row.wrong += watched.suspensions("x")
        watched.stop()
        ops.stop_all()
    row.notes += [f"{count} kills: {how}" for how, count in sorted(hows.items())]
    return row
