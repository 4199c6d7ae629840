"""Area "idle": the operator SIGKILLed while idle policies warn and reclaim.

Each kill hits `per_kill` namespaces, each with an Enforce idle policy (Suspend, 15 s
grace), two Jobs: one idle (0 %), one busy (80 %), and an idle bare pod (a bare pod's
Suspend is an eviction). The operator is killed at a random
moment of the warn-then-reclaim cycle (0-50 s after the Jobs start), or by the
`idle-before-reclaim` failpoint, and restarted at once. Counted on the objects: the idle
Job suspended exactly once, the bare pod evicted, the busy Job never, nothing resumed;
and the idle Job's pod warned once (a second warning restarts the grace period: a reclaim
later than promised, and a second Event for the owner).
"""

import time
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes import client

from faults import kit
from faults.kit import Context, JobSuspensions, Operators, harness
from faults.table import Row
from trainwarden.testing.pods import PodBuilder

WARNED = "trainwarden.dev/idle-warned-at"
UTILIZATION: dict[str, float | None] = {"idle": 0.0, "busy": 80.0}
GRACE = 15.0
"""harness.idle_policy's own grace."""
SOLO = "solo"
"""The bare idle pod: evicted, since it has no workload to suspend."""
DEADLINE = 150.0
"""Seconds for the reclaim after the restart: the 30 s window must fill again (the
operator re-learns idleness from Prometheus), then the rest of the grace period."""


@dataclass
class Instance:
    namespace: str
    jobs: JobSuspensions
    idle_pod: str
    warnings: list[str] = field(default_factory=list)
    """Every distinct idle-warned-at value the idle pod carried, in order."""
    pods: Any = None

    def see_pod(self, pod: dict[str, Any]) -> None:
        if pod["metadata"]["name"] != self.idle_pod:
            return
        value = (pod["metadata"].get("annotations") or {}).get(WARNED)
        if value and (not self.warnings or self.warnings[-1] != value):
            self.warnings.append(value)


def _instance(ctx: Context, made: list[str]) -> Instance:
    found = kit.idle_namespace(ctx, "f-idle", made, UTILIZATION, GRACE)
    ns = found.namespace
    solo = harness.simulated(PodBuilder(SOLO, ns)).build()
    client.CoreV1Api(ctx.cluster.api).create_namespaced_pod(ns, cast(Any, solo))
    kit.pods_running(ctx.cluster, ns, len(UTILIZATION) + 1)
    harness.publish_utilization(ctx.cluster, ns, SOLO, 0.0)
    inst = Instance(ns, found.jobs, found.pods["idle"])
    lister = kit.raw(client.CoreV1Api(ctx.cluster.api).list_namespaced_pod)
    inst.pods = kit.Recorder(lister, inst.see_pod, namespace=ns)
    return inst


def _kill(ctx: Context, ops: Operators, armed: str | None) -> str:
    running = ops.running[0]
    if armed is not None:
        if ops.exited(running, timeout=90):
            return f"failpoint {armed}"
        ops.kill(running)
        return f"failpoint {armed} not reached in 90 s (SIGKILL)"
    time.sleep(ctx.rng.uniform(0, 50))  # the fault schedule, not a wait for an outcome
    ops.kill(running)
    return "random moment"


def _solo_gone(ctx: Context, inst: Instance) -> bool:
    return all(p["metadata"]["name"] != SOLO for p in kit.list_pods(ctx.cluster, inst.namespace))


def _judge(ctx: Context, row: Row, inst: Instance) -> None:
    try:
        kit.wait_for(
            lambda: inst.jobs.suspensions("idle") > 0 and _solo_gone(ctx, inst),
            timeout=DEADLINE,
            what="the reclaims",
        )
    except AssertionError:
        row.notes.append(f"{inst.namespace}: not reclaimed within {DEADLINE:.0f} s")
    row.expected += 1
    row.taken += 1 if _solo_gone(ctx, inst) else 0
    row.lost += 0 if _solo_gone(ctx, inst) else 1
    reclaims = inst.jobs.suspensions("idle")
    row.expected += 1
    row.taken += min(1, reclaims)
    row.lost += 0 if reclaims else 1
    row.double += max(0, reclaims - 1)
    row.wrong += inst.jobs.suspensions("busy") + sum(inst.jobs.resumes(n) for n in UTILIZATION)
    if len(inst.warnings) > 1:
        row.double += len(inst.warnings) - 1
        row.notes.append(f"{inst.namespace}: warned {len(inst.warnings)} times")
    inst.jobs.stop()
    inst.pods.stop()


def run_area(ctx: Context) -> Row:
    row = Row("SIGKILL during idle warning and reclaim")
    ops = ctx.operators("idle", prometheus_url=ctx.cluster.prometheus_url)
    hows: dict[str, int] = {}
    with kit.namespaces(ctx.cluster) as made:
        for number in range(ctx.runs):
            armed = ctx.pick_failpoint(("idle-before-reclaim",))
            ops.start(*([f"--failpoint={armed}=kill"] if armed else []))
            insts = [_instance(ctx, made) for _ in range(ctx.per_kill)]
            how = _kill(ctx, ops, armed)
            ops.start()
            for inst in insts:
                _judge(ctx, row, inst)
                kit.delete_namespace(ctx.cluster, inst.namespace)
            ops.stop_all()
            hows[how] = hows.get(how, 0) + 1
            row.runs += 1
            ctx.say(f"  {row.scenario}: kill {number + 1}/{ctx.runs} ({how})")
    row.notes += [f"{count} kills: {how}" for how, count in sorted(hows.items())]
    return row
