"""Area "api": the API server unreachable, restarted, and etcd restarted, mid-evaluation.

Each run takes one outage, in turn (from a random first):
- **partition**: the operator reaches the API server through a TCP fault proxy
  (faults/tcp_proxy.py) that resets every connection for `--api-outage-seconds`, while the
  scenario's own client (and the rest of the cluster) keeps working. Meanwhile a Job is
  deleted and a limit raised: changes the operator cannot see until it lists again.
- **apiserver**: kube-apiserver SIGKILLed, started again after the outage (up.sh repairs).
- **etcd**: etcd SIGKILLed, started again after a shorter outage (up to 30 s).

Instances (each a namespace with an Enforce budget, no grace):
- *crossing*: two Jobs whose budget runs out halfway through the outage: each Job must
  be suspended exactly once, after the outage (lost if not within the judging window).
- *stale* (partition): Jobs "kept" (1 GPU) and "gone" (4 GPUs); the budget would run out
  halfway through the outage only if "gone" kept running, and it is deleted as the
  outage starts. Suspending "kept" is a wrong action: a decision on the view from before.
- *raised* (partition): a budget running out halfway through, whose limit the user raises
  during the outage: any suspension is wrong.
"""

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from faults import budget_kills as bk
from faults import kit, truth
from faults.kit import Context, JobSuspensions, Operators, harness
from faults.table import Row
from faults.tcp_proxy import TcpFaultProxy

KINDS = ("partition", "apiserver", "etcd")
GONE_GPUS = 4
STATE = harness.CLUSTER_DIR / "state"


@dataclass
class Case:
    namespace: str
    budget: str
    role: str
    """crossing, stale or raised."""
    jobs: JobSuspensions
    names: list[str] = field(default_factory=list)


def _limit_crossed_at(ctx: Context, case: Case, at: float, count: int) -> None:
    """Give the case's budget the limit its running pods reach at `at` (epoch seconds)."""
    pods = kit.pods_running(ctx.cluster, case.namespace, count)
    spent = sum(truth.gpus(p) * (at - truth.start_of(p).timestamp()) for p in pods)
    ctx.create_budget(case.budget, case.namespace, max(spent, 1) / 3600)


def _case(ctx: Context, made: list[str], role: str, jobs: dict[str, int]) -> Case:
    ns = kit.new_namespace(ctx.cluster, f"f-api-{role[:4]}")
    made.append(ns)
    case = Case(ns, f"{ns}-tb", role, JobSuspensions(ctx.cluster, ns), list(jobs))
    for name, gpus in jobs.items():
        kit.create_job(ctx.cluster, ns, harness.gpu_job(name, gpus))
    return case


def _setup(ctx: Context, made: list[str], kind: str, mid: float) -> list[Case]:
    """The run's instances, their budgets running out at `mid` (epoch seconds)."""
    cases = [_case(ctx, made, "crossing", {"small": 1, "large": 2})]
    if kind == "partition":
        cases.append(_case(ctx, made, "stale", {"kept": 1, "gone": GONE_GPUS}))
        cases.append(_case(ctx, made, "raised", {"small": 1, "large": 2}))
    for case in cases:
        _limit_crossed_at(ctx, case, mid, len(case.names))
    return cases


def _kill(component: str) -> None:
    pid = int((STATE / "pids" / f"{component}.pid").read_text().strip())
    os.kill(pid, signal.SIGKILL)


def _repair() -> None:
    """up.sh starts what is not running (and waits for it to be healthy)."""
    env = dict(os.environ)
    env.setdefault(
        "TRAINWARDEN_REAL_NODE", "1" if (STATE / "pids" / "kubelet.pid").exists() else "0"
    )
    subprocess.run(
        [str(kit.ROOT / "e2e" / "cluster" / "up.sh")],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )


def _proxied_kubeconfig(cluster: harness.Cluster, port: int, logs: Path) -> Path:
    text = cluster.kubeconfig.read_text()
    path = logs / "kubeconfig-proxied"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(re.sub(r"(server: https://127\.0\.0\.1:)\d+", rf"\g<1>{port}", text))
    return path


def _during_partition(ctx: Context, cases: list[Case]) -> None:
    """What the operator cannot see while it is cut off."""
    for case in cases:
        if case.role == "stale":
            client.BatchV1Api(ctx.cluster.api).delete_namespaced_job(
                "gone", case.namespace, propagation_policy="Background"
            )
        elif case.role == "raised":
            raised = {"spec": {"limits": {"acceleratorHours": 1000}}}
            kit.patch_policy(ctx.cluster, bk.TB, case.budget, raised)


def _outage(
    ctx: Context, kind: str, proxy: TcpFaultProxy, cases: list[Case], length: float
) -> float:
    """Play the outage; returns when it was lifted (the proxy healed, or the killed
    component started again: recovery times include its start)."""
    if kind == "partition":
        proxy.set_mode("cut")
        _during_partition(ctx, cases)
        time.sleep(length)  # the fault schedule, not a wait for an outcome
        proxy.set_mode("up")
        return time.time()
    _kill("kube-apiserver" if kind == "apiserver" else "etcd")
    time.sleep(length)  # the fault schedule
    lifted = time.time()
    _repair()
    return lifted


def _suspended_all(case: Case) -> bool:
    return all(case.jobs.jobs.get(n) and case.jobs.jobs[n].current for n in case.names)


def _judge(
    operator: harness.Operator, cases: list[Case], ended: float, window: float
) -> float | None:
    """Wait until the crossing Jobs are suspended and every budget was evaluated after the
    outage (so a wrong action would have been taken by then). Returns the seconds from
    the end of the outage to the last suspension, or None if it never came."""
    crossing = [c for c in cases if c.role == "crossing"]

    def done() -> bool:
        evaluated = all(
            harness.last_evaluated(operator, "TrainingBudget", c.budget) > ended for c in cases
        )
        return evaluated and all(_suspended_all(c) for c in crossing)

    try:
        kit.wait_for(done, timeout=window, what="recovery after the outage")
    except AssertionError:
        return None
    flips = [t for c in crossing for n in c.names for t in c.jobs.jobs[n].flips(True)]
    ended_monotonic = time.monotonic() - (time.time() - ended)  # the recorders' clock
    return max(flips) - ended_monotonic if flips else None


def _tally(row: Row, cases: list[Case]) -> None:
    for case in cases:
        for name in case.names:
            suspensions, resumes = case.jobs.suspensions(name), case.jobs.resumes(name)
            row.wrong += resumes
            if case.role == "crossing":
                row.expected += 1
                row.taken += min(suspensions, 1)
                row.lost += 1 if suspensions == 0 else 0
                row.double += max(0, suspensions - 1)
            else:
                row.wrong += suspensions
                if suspensions:
                    row.notes.append(f"{case.namespace}/{name} ({case.role}) suspended")
        case.jobs.stop()


def _round(
    ctx: Context, row: Row, ops: Operators, proxy: TcpFaultProxy, made: list[str], kind: str
) -> str:
    length = ctx.api_outage_seconds if kind != "etcd" else min(30.0, ctx.api_outage_seconds)
    window = min(90.0, 1.5 * length - 30) if kind == "partition" else 90.0
    began = time.time() + 5
    cases = _setup(ctx, made, kind, mid=began + length / 2)
    time.sleep(max(0.0, began - time.time()))  # the fault schedule
    ended = _outage(ctx, kind, proxy, cases, length)
    took = _judge(ops.running[0], cases, ended, window)
    _tally(row, cases)
    for case in cases:
        kit.delete_namespace(ctx.cluster, case.namespace)
    return f"{kind} {length:.0f} s: " + (
        "not recovered" if took is None else f"recovered in {took:.1f} s"
    )


def run_area(ctx: Context) -> Row:
    row = Row("API server unreachable / restarted, etcd restarted")
    ops = ctx.operators("api")
    port = int(
        re.findall(r"server: https://127\.0\.0\.1:(\d+)", ctx.cluster.kubeconfig.read_text())[0]
    )
    proxy = TcpFaultProxy(port)
    ops.kubeconfig = _proxied_kubeconfig(ctx.cluster, proxy.port, ops.logs)
    with kit.namespaces(ctx.cluster) as made:
        ops.start()
        first = ctx.rng.randrange(len(KINDS))  # every kind once in any three runs
        for number in range(ctx.runs):
            how = _round(ctx, row, ops, proxy, made, KINDS[(first + number) % len(KINDS)])
            row.runs += 1
            row.notes.append(f"run {number + 1}: {how}")
            ctx.say(f"  {row.scenario}: {row.notes[-1]}")
        ops.stop_all()
    proxy.stop()
    logs = [p.read_text() for p in ops.logs.glob("*.log")]
    held = sum(text.count('"policy held"') for text in logs)
    failed = sum(text.count('"watch failed, listing again"') for text in logs)
    row.notes.append(
        f"{failed} failed watches listed again; {held} Ready=False ClusterViewInterrupted writes"
    )
    return row
