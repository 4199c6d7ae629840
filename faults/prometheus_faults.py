"""Area 3: Prometheus down or flapping under idle policies.

Each run starts `per_kill` namespaces with an idle policy (Enforce, Suspend) and three
Jobs: one idle (0 %), one busy (80 %), one with no series at all. Once the idle one is
warned, Prometheus becomes unreachable for longer than the grace period (through a fault
proxy: refused connections, or flapping between refused, 503, 15 s answers and up).
Promised: no reclaim while no query can be answered, never one of the busy or silent
Jobs, MetricsAvailable=False during the outage, True again within a scrape interval of
Prometheus returning, and then the idle Job reclaimed exactly once.
"""

import contextlib
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from faults import kit
from faults.kit import Context, JobSuspensions, harness
from faults.proxy import FaultProxy
from faults.table import Row

IRP = kit.IRP
UTILIZATION = {"idle": 0.0, "busy": 80.0}
SILENT = "silent"
GRACE = 40.0
"""Longer than harness.idle_policy's 15 s: every instance of a run is warned before the
outage starts, and every grace period ends within it."""
SCRAPE = 5.0  # the local Prometheus's scrape interval (e2e/cluster/README.md)


@dataclass
class Watched:
    namespace: str
    policy: str
    jobs: JobSuspensions
    idle_pod: str


def _instance(ctx: Context, made: list[str]) -> Watched:
    found = kit.idle_namespace(ctx, "f-prom", made, {**UTILIZATION, SILENT: None}, GRACE)
    return Watched(found.namespace, found.policy, found.jobs, found.pods["idle"])


def _warned(ctx: Context, w: Watched) -> float | None:
    """When the idle pod was warned (POSIX seconds), once it is."""
    pod: Any = client.CoreV1Api(ctx.cluster.api).read_namespaced_pod(w.idle_pod, w.namespace)
    at = kit.parse_time((pod.metadata.annotations or {}).get("trainwarden.dev/idle-warned-at"))
    return at.timestamp() if at else None


def _metrics(ctx: Context, w: Watched) -> str | None:
    found = kit.condition(kit.get_policy(ctx.cluster, IRP, w.policy), "MetricsAvailable")
    return str(found["status"]) if found else None


def _metrics_are(ctx: Context, w: Watched, status: str) -> bool:
    return _metrics(ctx, w) == status


def _schedule(
    ctx: Context, proxy: FaultProxy, mode: str, seconds: float, last: list[str]
) -> threading.Thread:
    """The outage, in a thread: `mode` "down" throughout, or "flap" among every fault;
    `last` gets the last fault before Prometheus is back."""

    def play() -> None:
        end = time.monotonic() + seconds
        proxy.set("down")
        last.append("down")
        while mode == "flap" and time.monotonic() < end:
            fault = str(ctx.rng.choice(("down", "error", "slow", "partial", "up", "down")))
            proxy.set(fault)
            last.append(fault)
            time.sleep(min(ctx.rng.uniform(1, 4), max(0.0, end - time.monotonic())))
        time.sleep(max(0.0, end - time.monotonic()))  # the fault schedule
        proxy.set("up")

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def _told(operator: harness.Operator, w: Watched) -> bool:
    """Whether the operator logged the policy's metrics turning unavailable."""
    needle = f'"object": "IdleReclaimPolicy/{w.policy}"'
    return any(
        "utilization unavailable" in line and needle in line for line in operator.log_lines()
    )


def _outage(
    ctx: Context,
    row: Row,
    proxy: FaultProxy,
    operator: harness.Operator,
    insts: list[Watched],
    warned: list[float],
) -> None:
    """From now until every grace period has ended, and a few seconds more."""
    mode = str(ctx.rng.choice(("down", "flap")))
    seconds = max(warned) + GRACE - time.time() + ctx.rng.uniform(3, 15)
    last: list[str] = []
    thread = _schedule(ctx, proxy, mode, seconds, last)
    said: set[str] = set()
    while thread.is_alive():  # observe while the schedule plays
        said |= {w.namespace for w in insts if _metrics(ctx, w) == "False"}
        thread.join(0.5)
    back = time.monotonic()
    recovery = []
    for w in insts:
        back_up = functools.partial(_metrics_are, ctx, w, "True")
        try:
            kit.wait_for(back_up, timeout=60, every=0.2, what="MetricsAvailable=True")
        except AssertionError:
            row.notes.append(f"{w.namespace}: MetricsAvailable not True 60 s after the outage")
        recovery.append(time.monotonic() - back)
    # The condition must say so whenever a query failed: always when Prometheus is down
    # throughout; when it flaps, only a policy evaluated at a failing moment knows (the
    # operator logs each turn to False).
    failed = {w.namespace for w in insts if mode == "down" or _told(operator, w)}
    faults = [f for f in last if f != "up"]
    row.notes.append(
        f"{mode} for {seconds:.0f} s (last fault: {faults[-1]}): MetricsAvailable=False seen "
        f"in {len(said)}/{len(insts)} (queries failed for {len(failed)}), True again after "
        f"{max(recovery):.1f} s"
    )
    row.wrong += len(failed - said)
    if faults[-1] != "slow" and max(recovery) > SCRAPE + 2:  # a slow answer takes its time
        row.wrong += 1


def _judge(ctx: Context, row: Row, proxy: FaultProxy, w: Watched) -> None:
    with contextlib.suppress(AssertionError):  # a lost reclaim is counted below
        kit.wait_for(
            lambda: w.jobs.suspensions("idle") > 0, timeout=90, what="the idle Job reclaimed"
        )
    row.expected += 1
    reclaims = w.jobs.jobs["idle"].flips(True)
    row.taken += min(1, len(reclaims))
    row.lost += 0 if reclaims else 1
    row.double += max(0, len(reclaims) - 1)
    blind = [t for t in reclaims if not proxy.was_up(t - 2, t)]
    row.wrong += len(blind) + w.jobs.suspensions("busy") + w.jobs.suspensions(SILENT)
    w.jobs.stop()


def run_area(ctx: Context) -> Row:
    row = Row("Prometheus down or flapping (idle policies)")
    proxy = FaultProxy(ctx.cluster.prometheus_url)
    ops = ctx.operators("prometheus", prometheus_url=proxy.url)
    ops.start()
    try:
        with kit.namespaces(ctx.cluster) as made:
            for number in range(ctx.runs):
                insts = [_instance(ctx, made) for _ in range(ctx.per_kill)]
                warned = [
                    kit.wait_for(functools.partial(_warned, ctx, w), timeout=120, what="warning")
                    for w in insts
                ]
                _outage(ctx, row, proxy, ops.running[0], insts, warned)
                for w in insts:
                    _judge(ctx, row, proxy, w)
                    client.BatchV1Api(ctx.cluster.api).delete_collection_namespaced_job(
                        w.namespace, propagation_policy="Background"
                    )
                row.runs += 1
                ctx.say(f"  {row.scenario}: outage {number + 1}/{ctx.runs}: {row.notes[-1]}")
    finally:
        ops.stop_all()
        proxy.close()
    return row
