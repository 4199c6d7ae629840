"""Area 2: leader failover during an action. Two replicas with --leader-election; the
leader is armed with a failpoint, so it dies exactly between a decision and its write (a
suspension recorded but not made, made but not reported, a resume decided but not made);
the standby takes the Lease over and must finish the action exactly once."""

import time
import uuid

from kubernetes import client

from faults import budget_kills as bk
from faults import kit
from faults.kit import Context, Operators, harness
from faults.table import Row

POINTS = {
    "suspend": ("budget-before-record", "budget-before-suspend", "budget-before-final-status"),
    "resume": ("budget-before-resume", "budget-before-final-status"),
}


class Pair:
    """The two replicas: `leader` armed with a failpoint, `standby` plain."""

    def __init__(self, ops: Operators, lease: str) -> None:
        self.ops = ops
        self.args = ("--leader-election", f"--lease-name={lease}", "--lease-namespace=default")
        self.leader = ops.start(*self.args, name="leader")
        kit.wait_for(lambda: harness.role(self.leader) == "leader", timeout=60, what="a leader")
        self.standby: harness.Operator | None = None

    def arm(self, point: str) -> None:
        """Hand the Lease to a new replica armed with `point`, and start a plain standby."""
        armed = self.ops.start(*self.args, f"--failpoint={point}=kill", name="armed")
        kit.wait_for(lambda: harness.role(armed) == "standby", timeout=60, what="the armed standby")
        self.leader.stop()  # SIGTERM: the Lease is handed back at once
        self.ops.running.remove(self.leader)
        kit.wait_for(lambda: harness.role(armed) == "leader", timeout=60, what="the armed leader")
        self.leader = armed
        standby = self.ops.start(*self.args, name="standby")
        kit.wait_for(lambda: harness.role(standby) == "standby", timeout=60, what="a standby")
        self.standby = standby

    def take_over(self) -> float:
        """The armed leader killed itself: wait for the standby to lead; seconds it took."""
        assert self.standby is not None
        died = time.monotonic()
        standby = self.standby
        kit.wait_for(
            lambda: harness.role(standby) == "leader", timeout=60, every=0.2, what="takeover"
        )
        self.leader, self.standby = standby, None
        return time.monotonic() - died


def _play(ctx: Context, pair: Pair, kind: str, made: list[str]) -> tuple[bk.Instance, str, float]:
    inst = bk.start_instance(ctx, f"f-lead-{kind[:3]}", made, trap=kind == "resume")
    began = time.time()
    if kind == "resume":
        bk.spend_in(ctx, inst, cross_in=-2)
        leader = pair.leader
        kit.wait_for(lambda: bk.suspended(ctx, leader, inst, began), timeout=60, what="suspension")
    point = str(ctx.rng.choice(POINTS[kind]))
    pair.arm(point)
    if kind == "suspend":
        bk.spend_in(ctx, inst, cross_in=ctx.rng.uniform(0, 2))
    else:
        raised = {"spec": {"limits": {"acceleratorHours": 1000}}}
        kit.patch_policy(ctx.cluster, bk.TB, inst.budget, raised)
    if not pair.ops.exited(pair.leader, timeout=60):
        return inst, f"{point} not reached", 0.0
    takeover = pair.take_over()
    return inst, point, takeover


def run_area(ctx: Context) -> Row:
    row = Row("leader SIGKILLed between decision and write")
    ops = ctx.operators("failover")
    lease = f"trainwarden-faults-{uuid.uuid4().hex[:6]}"
    takeovers: list[float] = []
    with kit.namespaces(ctx.cluster) as made:
        pair = Pair(ops, lease)
        per_kind: dict[str, list[bk.Instance]] = {"suspend": [], "resume": []}
        for number in range(ctx.runs):
            kind = str(ctx.rng.choice(("suspend", "resume")))
            inst, point, took = _play(ctx, pair, kind, made)
            done = bk.suspended if kind == "suspend" else bk.resumed
            bk.judge(ctx, row, pair.leader, [inst], done, kind, time.time() - took - 1)
            per_kind[kind].append(inst)
            takeovers += [took] if took else []
            row.runs += 1
            row.notes.append(f"run {number + 1}: {kind}, killed at {point}, took over {took:.1f} s")
            ctx.say(f"  {row.scenario}: {row.notes[-1]}")
            client.BatchV1Api(ctx.cluster.api).delete_collection_namespaced_job(
                inst.namespace, propagation_policy="Background"
            )
        for kind, insts in per_kind.items():
            bk.tally(row, insts, resume=kind == "resume")
        ops.stop_all()
        client.CoordinationV1Api(ctx.cluster.api).delete_namespaced_lease(lease, "default")
    if takeovers:
        row.notes.append(f"takeover {min(takeovers):.1f}-{max(takeovers):.1f} s (lease 10 s)")
    return row
