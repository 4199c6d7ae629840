"""Area 4: the operator down entirely (default 10 min): the cluster stays usable, and the
operator catches up when it returns.

While it is down, pods, Jobs and namespaces are created and deleted in a loop, each
operation with a deadline (nothing of ours may block them: no finalizer, no webhook, no
lock), and in the budget's namespace one Job finishes, one is deleted, and short-lived
pods come and go unseen. After the restart the budget's usage is compared with the truth:
exact for the pods that still exist; pods that vanished while nobody watched can only be
estimated, and status must say which charges are estimates (ledger.estimated).
"""

import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from faults import kit, status_kills, truth
from faults.kit import Context, harness
from faults.table import Row

TB = "trainingbudgets"
DEADLINE = 60.0
COMPLETE = "sim.trainwarden.dev/complete-after"


@dataclass
class Vanished:
    """Pods deleted while the operator was down: what they really held (the suite saw
    their start and their deletion)."""

    seconds: float = 0.0
    pods: int = 0
    latencies: list[float] = field(default_factory=list)


def _gone(read: Any, *args: str) -> bool:
    try:
        read(*args)
    except client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def _exported(ctx: Context, pod: dict[str, Any]) -> None:
    """What the DCGM exporter would report for a running GPU pod (the stand-in's series)."""
    meta = pod["metadata"]
    harness.publish_utilization(
        ctx.cluster, meta["namespace"], meta["name"], 50, gpus=int(truth.gpus(pod))
    )


def _delete_pod(ctx: Context, ns: str, pod: dict[str, Any], out: Vanished) -> bool:
    """Delete a pod, as its series end (the exporter stops reporting a released GPU)."""
    core = client.CoreV1Api(ctx.cluster.api)
    name = pod["metadata"]["name"]
    began = time.monotonic()
    harness.forget_utilization(ctx.cluster, ns, name)
    core.delete_namespaced_pod(name, ns)
    try:
        kit.wait_for(lambda: _gone(core.read_namespaced_pod, name, ns), timeout=DEADLINE)
    except AssertionError:
        return False
    out.latencies.append(time.monotonic() - began)
    out.seconds += truth.gpus(pod) * (time.time() - truth.start_of(pod).timestamp())
    out.pods += 1
    return True


def _cycle(ctx: Context, row: Row, budget_ns: str, out: Vanished) -> None:
    """One round of ordinary work while the operator is down; each step must finish
    within DEADLINE: a pod deleted, a Job deleted with its pods, a namespace deleted."""
    core, batch = client.CoreV1Api(ctx.cluster.api), client.BatchV1Api(ctx.cluster.api)
    ns = kit.new_namespace(ctx.cluster, "f-down")
    unseen = f"unseen-{row.expected}"
    kit.create_job(ctx.cluster, budget_ns, harness.gpu_job(unseen))  # charged, never seen
    kit.create_job(ctx.cluster, ns, harness.gpu_job("work"))
    pod = kit.job_pod(ctx.cluster, budget_ns, unseen)
    _exported(ctx, pod)
    name = pod["metadata"]["name"]
    kit.wait_for(
        lambda: ctx.cluster.prometheus_query(f'DCGM_FI_DEV_GPU_UTIL{{pod="{name}"}}'),
        timeout=30,
        what="a scrape of the pod's series",
    )
    batch.delete_namespaced_job(unseen, budget_ns)  # orphans its pod (the API's default)
    steps = int(_delete_pod(ctx, budget_ns, pod, out))
    kit.job_pod(ctx.cluster, ns, "work")
    batch.delete_namespaced_job("work", ns, propagation_policy="Foreground")
    steps += _waited(lambda: _gone(batch.read_namespaced_job, "work", ns))
    core.delete_namespace(ns)
    steps += _waited(lambda: _gone(core.read_namespace, ns))
    row.expected += 3
    row.taken += steps
    row.lost += 3 - steps


def _waited(probe: Any) -> int:
    try:
        kit.wait_for(probe, timeout=DEADLINE)
    except AssertionError:
        return 0
    return 1


def _ours_in_the_way(ctx: Context) -> int:
    """Admission webhooks of ours (there should be none at all)."""
    api = client.AdmissionregistrationV1Api(ctx.cluster.api)
    validating: Any = api.list_validating_webhook_configuration()
    mutating: Any = api.list_mutating_webhook_configuration()
    hooks = [*validating.items, *mutating.items]
    return sum(1 for h in hooks if "trainwarden" in h.metadata.name)


def _prepare(ctx: Context, made: list[str]) -> str:
    ns = kit.new_namespace(ctx.cluster, "f-bud")
    made.append(ns)
    ctx.create_budget(f"{ns}-tb", ns, 1000, mode="DryRun")
    kit.create_job(ctx.cluster, ns, harness.gpu_job("keeps-running", 2))
    finish = f"{min(ctx.outage_seconds / 2, 60):.0f}s"
    kit.create_job(ctx.cluster, ns, harness.gpu_job("finishes", 1, annotations={COMPLETE: finish}))
    kit.create_job(ctx.cluster, ns, harness.gpu_job("deleted", 1))
    for pod in kit.pods_running(ctx.cluster, ns, 3):
        _exported(ctx, pod)
    kit.wait_for(
        lambda: (
            (kit.get_policy(ctx.cluster, TB, f"{ns}-tb").get("status") or {})
            .get("burnRatePerHour", {})
            .get("acceleratorHours")
            == 4
        ),
        timeout=60,
        what="the budget charging its 4 GPUs",
    )
    return ns


def run_area(ctx: Context) -> Row:
    usable = Row(f"operator down {ctx.outage_seconds:.0f} s: cluster usable")
    catch_up = Row(f"operator down {ctx.outage_seconds:.0f} s: catch-up of a budget")
    ops = ctx.operators("outage", prometheus_url=ctx.cluster.prometheus_url)
    out = Vanished()
    with kit.namespaces(ctx.cluster) as made:
        ops.start()
        ns = _prepare(ctx, made)
        ops.kill(ops.running[0])
        end = time.monotonic() + ctx.outage_seconds
        deleted = [
            p
            for p in truth.existing(ctx.cluster, [ns])
            if p["metadata"]["labels"].get("job-name") == "deleted"
        ]
        client.BatchV1Api(ctx.cluster.api).delete_namespaced_job("deleted", ns)
        usable.expected += 1
        usable.taken += sum(int(_delete_pod(ctx, ns, p, out)) for p in deleted)
        while time.monotonic() < end:
            _cycle(ctx, usable, ns, out)
        usable.wrong += _ours_in_the_way(ctx)
        usable.runs = catch_up.runs = 1
        restarted = time.time()
        _judge_catch_up(ctx, catch_up, ops.start(), ns, restarted, out)
        ops.stop_all()
    usable.notes.append(
        f"{usable.taken} create/delete cycles finished; deletions of pods took at most "
        f"{max(out.latencies, default=0):.1f} s"
    )
    return _merged(usable, catch_up)


def _judge_catch_up(
    ctx: Context,
    row: Row,
    operator: kit.harness.Operator,
    ns: str,
    restarted: float,
    out: Vanished,
) -> None:
    row.expected = 1
    try:
        status = kit.wait_for(
            lambda: status_kills._evaluated_since(ctx, operator, f"{ns}-tb", restarted),
            timeout=60,
            what="the budget evaluated after the restart",
        )
    except AssertionError:
        row.lost = 1
        return
    row.taken = 1
    status_kills.check(ctx, row, ns, status)
    _, estimated = status_kills._charged(status)
    error = abs(estimated - out.seconds) / max(1, out.pods)
    row.notes.append(
        f"{out.pods} pods deleted while it was down held {out.seconds:.0f} acc-s; charged "
        f"{estimated:.0f} acc-s for them, all in ledger.estimated ({error:.1f} acc-s per "
        f"pod off; bound: 2 scrape intervals = 10 acc-s per GPU)"
    )


def _merged(usable: Row, catch_up: Row) -> Row:
    """Both rows travel as one result; the caller prints them one after the other."""
    usable.notes.append("catch-up: " + "; ".join(catch_up.notes))
    usable.usage_error = catch_up.usage_error
    usable.lost += catch_up.lost
    usable.wrong += catch_up.wrong
    return usable
