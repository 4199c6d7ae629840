"""Area 1, status writes: the operator SIGKILLed at random moments while pods start and
finish, and its budgets' usage compared with the truth after every restart.

A budget's usage survives a restart only through its status (the ledger); a kill during or
between status writes must neither lose nor double count. After each restart the first
evaluation's `used` is compared with what the pods held by `lastEvaluated`, computed from
their own timestamps: the promise is one accelerator-second per existing pod.
"""

import functools
import time
from typing import Any

from faults import kit, truth
from faults.kit import Context, Operators, harness
from faults.table import Row

TB = "trainingbudgets"
PER_POD = 1.0
"""The bound, accelerator-seconds per existing pod (timestamps have 1 s resolution)."""


def _evaluated_since(
    ctx: Context, operator: kit.harness.Operator, budget: str, moment: float
) -> dict[str, Any] | None:
    """The budget's status once `operator` has evaluated it since `moment` (its metric: a
    status is written only when it changes, so the status itself may be older, and is
    then still what the evaluation found, at its own lastEvaluated)."""
    if kit.harness.last_evaluated(operator, "TrainingBudget", budget) < moment:
        return None
    return kit.get_policy(ctx.cluster, TB, budget).get("status") or {}


def _charged(status: dict[str, Any]) -> tuple[float, float]:
    """(charged, of which estimated) in accelerator-seconds."""
    used = float((status.get("used") or {}).get("acceleratorHours") or 0) * 3600
    estimate = ((status.get("ledger") or {}).get("estimated") or {}).get("acceleratorHours")
    return used, float(estimate or 0) * 3600


def check(ctx: Context, row: Row, namespace: str, status: dict[str, Any]) -> None:
    """Compare one budget's status with the truth at its lastEvaluated."""
    at = kit.parse_time(status["lastEvaluated"])
    assert at is not None
    pods = truth.existing(ctx.cluster, [namespace])
    held = truth.accelerator_seconds(pods, at)
    used, estimated = _charged(status)
    error = abs(used - estimated - held)
    per_pod = error / max(1, len(pods))
    row.usage_error = max(row.usage_error or 0.0, per_pod)
    if error > PER_POD * len(pods) + 1e-3:
        row.wrong += 1
        row.notes.append(
            f"{namespace} at {at:%H:%M:%S}: charged {used - estimated:.1f} acc-s, "
            f"pods held {held:.1f} ({len(pods)} pods)"
        )
    if estimated > 0.05:
        row.notes.append(f"{namespace}: {estimated:.1f} acc-s estimated, but no pod vanished")


def _churn(ctx: Context, namespaces: list[str], number: int) -> None:
    """New short Jobs in every namespace: pods start and finish around the kill."""
    for namespace in namespaces:
        for k in range(2):
            after = f"{ctx.rng.uniform(1, 12):.1f}s"
            job = harness.gpu_job(
                f"j{number}-{k}", 1, annotations={"sim.trainwarden.dev/complete-after": after}
            )
            kit.create_job(ctx.cluster, namespace, job)


def _round(ctx: Context, row: Row, ops: Operators, namespaces: list[str], number: int) -> None:
    _churn(ctx, namespaces, number)
    time.sleep(ctx.rng.uniform(0.2, 8))  # the fault schedule, not a wait for an outcome
    ops.kill(ops.running[0])
    restarted = time.time()
    operator = ops.start()
    for namespace in namespaces:
        row.expected += 1
        budget = f"{namespace}-tb"
        try:
            status = kit.wait_for(
                functools.partial(_evaluated_since, ctx, operator, budget, restarted),
                timeout=60,
                what=f"{budget} evaluated after the restart",
            )
        except AssertionError:
            row.lost += 1
            continue
        row.taken += 1
        check(ctx, row, namespace, status)
    row.runs += 1


def run_area(ctx: Context) -> Row:
    row = Row("SIGKILL during budget status writes")
    ops = ctx.operators("budget-status")
    with kit.namespaces(ctx.cluster) as made:
        for _ in range(ctx.per_kill):
            namespace = kit.new_namespace(ctx.cluster, "f-stat")
            made.append(namespace)
            ctx.create_budget(f"{namespace}-tb", namespace, 1000, mode="DryRun")
        ops.start()
        for number in range(ctx.runs):
            _round(ctx, row, ops, made, number)
            ctx.say(f"  {row.scenario}: kill {number + 1}/{ctx.runs}")
        ops.stop_all()
    row.notes.append(f"{ctx.per_kill} budgets compared after each restart ({row.taken} in all)")
    return row
