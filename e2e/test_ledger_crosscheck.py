"""kube-state-metrics as an independent ledger (docs/budgets.md, "Cross-check with
kube-state-metrics").

The chart's recording rule (group trainwarden.ledger) counts the accelerators that pods which
started and have not finished request, per namespace and resource, from kube-state-metrics'
series alone. Here: promtool runs it over synthetic series (that it passes `promtool check
rules` is e2e/test_prometheus_conventions.py's); then, loaded into the harness's Prometheus,
it records while Jobs start, finish, are killed and replaced for a few minutes, and budgets
read what its integral over the same windows reads, within 1 %; and, when started shortly
before a whole UTC hour, a Daily budget across its time zone's midnight.
"""

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness import CLUSTER_DIR, Cluster, Operator, create_budget, get_budget, gpu_job, wait_for
from monitoring import rule_spec, rules_loaded

RECORD = "namespace_resource:kube_pod_accelerator_requests_running:sum"
PROMTOOL = CLUSTER_DIR / "prometheus" / "usr" / "bin" / "promtool"
STEP = 0.1
"""The Rolling integral's step (s), over the rule's expression: finer than the 1 s scrape,
so that the window's start cuts the series to within 0.1 s."""
WINDOW = 150  # seconds: the Rolling budget's window, which starts mid-run


def ledger_group() -> dict[str, Any]:
    group: dict[str, Any] = next(
        g for g in rule_spec()["groups"] if g["name"] == "trainwarden.ledger"
    )
    return group


def ledger_expr() -> str:
    expr: str = next(r["expr"] for r in ledger_group()["rules"] if r.get("record") == RECORD)
    return expr


def promtool(*args: str) -> str:
    result = subprocess.run(
        [str(PROMTOOL), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _requests(
    pod: str, uid: str, gpus: int, *, resource: str = "nvidia_com_gpu", **extra: str
) -> dict[str, str]:
    labels = {
        "job": "kube-state-metrics",
        "namespace": "team-a",
        "pod": pod,
        "uid": uid,
        "container": "main",
        "node": "gpu-0",
        "resource": resource,
        "unit": "integer",
        **extra,
    }
    return _series("kube_pod_container_resource_requests", labels, f"{gpus}x20")


def _phase(
    pod: str, uid: str, phases: dict[str, str], job: str = "kube-state-metrics"
) -> list[dict[str, str]]:
    """kube_pod_status_phase: one series per phase, 1 for the pod's phase, 0 otherwise."""
    labels = {"job": job, "namespace": "team-a", "pod": pod, "uid": uid}
    return [
        _series("kube_pod_status_phase", {**labels, "phase": phase}, phases.get(phase, "0x20"))
        for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
    ]


def _started(pod: str, uid: str, job: str = "kube-state-metrics") -> dict[str, str]:
    labels = {"job": job, "namespace": "team-a", "pod": pod, "uid": uid}
    return _series("kube_pod_start_time", labels, "1x20")


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def test_ledger_rule_counts_started_unfinished_accelerator_requests(tmp_path: Path) -> None:
    """Synthetic kube-state-metrics series, one minute apart (promtool's notation: `1x4 0x15`
    is 1 for minutes 0..4, then 0): what the rule must count and what it must not."""
    series = [
        # 2 GPUs Running for minutes 0-4, Succeeded from minute 5: 5 GPU-minutes x 2.
        _requests("done", "u1", 2),
        _requests("done", "u1", 8, resource="cpu", unit="core"),  # not an accelerator
        *_phase("done", "u1", {"Running": "1x4 0x15", "Succeeded": "0x4 1x15"}),
        _started("done", "u1"),
        # Pending but started (the kubelet pulls its image): charged, as budgets do.
        _requests("pulling", "u2", 1),
        *_phase("pulling", "u2", {"Pending": "1x20"}),
        _started("pulling", "u2"),
        # Pending and never started (unschedulable): costs nothing.
        _requests("unscheduled", "u3", 4),
        *_phase("unscheduled", "u3", {"Pending": "1x20"}),
        # Two containers, and an AMD GPU: per resource.
        _requests("multi", "u4", 1),
        _requests("multi", "u4", 1, container="sidecar"),
        _requests("multi", "u4", 3, resource="amd_com_gpu"),
        *_phase("multi", "u4", {"Running": "1x20"}),
        _started("multi", "u4"),
        # A name reused by a new pod (new uid) while the old one's Failed series remain.
        _requests("reused", "old", 4),
        *_phase("reused", "old", {"Failed": "1x20"}),
        _started("reused", "old"),
        _requests("reused", "new", 1),
        *_phase("reused", "new", {"Running": "1x20"}),
        _started("reused", "new"),
        # Another exporter's series (another job): not kube-state-metrics'.
        _requests("elsewhere", "u5", 8, job="other"),
        *_phase("elsewhere", "u5", {"Running": "1x20"}, job="other"),
        _started("elsewhere", "u5", job="other"),
    ]

    def sample(resource: str, value: float) -> dict[str, Any]:
        return {"labels": f'{RECORD}{{namespace="team-a",resource="{resource}"}}', "value": value}

    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    # done 2 + pulling 1 + multi 2 + reused/new 1
                    {
                        "expr": RECORD,
                        "eval_time": "2m",
                        "exp_samples": [sample("nvidia_com_gpu", 6), sample("amd_com_gpu", 3)],
                    },
                    {
                        "expr": RECORD,
                        "eval_time": "10m",
                        "exp_samples": [sample("nvidia_com_gpu", 4), sample("amd_com_gpu", 3)],
                    },
                    # The integral over minutes 0..9 in GPU-minutes: 4 x 10 + done's 2 x 5.
                    {
                        "expr": f'sum_over_time({RECORD}{{resource="nvidia_com_gpu"}}[10m])',
                        "eval_time": "9m",
                        "exp_samples": [
                            {
                                "labels": '{namespace="team-a",resource="nvidia_com_gpu"}',
                                "value": 50,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [ledger_group()]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests))
    out = promtool("test", "rules", str(tmp_path / "test.yaml"))
    assert "SUCCESS" in out, out


# --- the cross-check on the real cluster ---------------------------------------------------


def query(cluster: Cluster, expr: str, at: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    url = f"{cluster.prometheus_url}/api/v1/query?{params}"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def hours(cluster: Cluster, integral: str, namespace: str, at: float) -> float:
    rows = query(cluster, integral, at)
    return sum(float(r["value"][1]) for r in rows if r["metric"].get("namespace") == namespace)


def expression_hours(
    cluster: Cluster, expr: str, namespace: str, start: float, end: float
) -> float:
    """The rule's expression integrated over (start, end] at STEP, in accelerator-hours."""
    window, step = f"{round((end - start) * 1000)}ms", f"{round(STEP * 1000)}ms"
    return hours(
        cluster, f"sum_over_time(({expr})[{window}:{step}]) * {STEP} / 3600", namespace, end
    )


def recorded_hours(cluster: Cluster, namespace: str, start: float, end: float) -> float:
    """The recorded series (one sample a second) integrated over (start, end]."""
    window = f"{round((end - start) * 1000)}ms"
    return hours(cluster, f"sum_over_time({RECORD}[{window}]) / 3600", namespace, end)


@pytest.fixture
def recording(cluster: Cluster) -> Iterator[None]:
    """The chart's ledger group in the harness's Prometheus, evaluated every second (the
    scrape interval of kube-state-metrics here; 30 s or a minute in most setups)."""
    with rules_loaded(cluster, "e2e-ledger", {"groups": [{**ledger_group(), "interval": "1s"}]}):
        yield


def _timestamp(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def observed(
    cluster: Cluster, name: str, after: float, *, idle: bool = False
) -> tuple[float, float]:
    """(observedAt, used acceleratorHours) of the first status written after `after`
    (`idle`: and with no pod running, so no burn rate: every end is in)."""

    def probe() -> tuple[float, float] | None:
        status = get_budget(cluster, name).get("status", {})
        stamp = status.get("ledger", {}).get("observedAt")
        if stamp is None or _timestamp(stamp) <= after:
            return None
        if idle and status.get("burnRatePerHour", {}).get("acceleratorHours"):
            return None
        return _timestamp(stamp), float(status["used"]["acceleratorHours"])

    return wait_for(probe, timeout=150, every=1, what=f"a status of {name} observed later")


def job(name: str, gpus: int, seconds: int, *, backoff: int = 0) -> dict[str, Any]:
    manifest = gpu_job(
        name, gpus, annotations={"sim.trainwarden.dev/complete-after": f"{seconds}s"}
    )
    manifest["spec"]["backoffLimit"] = backoff
    return manifest


def pods_in(cluster: Cluster, namespace: str) -> list[client.V1Pod]:
    return list(client.CoreV1Api(cluster.api).list_namespaced_pod(namespace).items)


def test_budget_usage_matches_the_kube_state_metrics_ledger(
    cluster: Cluster, operator: Operator, namespace: str, recording: None
) -> None:
    """A Daily budget over a run with churn and kills, and a Rolling one whose window starts
    mid-run, read within 1 % of the rule's integral over the same windows.

    Daily, from the recorded series (the rule evaluated every second): the 1 s scrape and
    evaluation place each pod's start and end up to a second late, and budgets count from
    the pods' own times, truncated to the second: a pod's two figures differ by
    under 2 s x its accelerators, in either direction, independently from pod to pod. For
    these eight pods that worst case is 34 accelerator-seconds, 0.99 % of the run's 3,435;
    the expected spread is a tenth of that. Rolling: evaluated (a spec change) while the
    three long pods run through its window, and after the killed pods' time buckets left
    it: its window cuts them both ends, to within the 0.1 s step the expression is integrated
    at (the recorded series' one-second samples would place the cut within a second).
    """
    expr = ledger_expr()
    batch = client.BatchV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    custom = client.CustomObjectsApi(cluster.api)
    wait_for(
        lambda: cluster.prometheus_query('up{job="kube-state-metrics"} == 1'),
        timeout=60,
        what="Prometheus scraping kube-state-metrics",
    )
    daily, rolling = f"{namespace}-daily", f"{namespace}-rolling"
    create_budget(cluster, daily, namespace, 1000, mode="DryRun")
    period = {"type": "Rolling", "window": f"{WINDOW}s"}
    create_budget(cluster, rolling, namespace, 1000, mode="DryRun", period=period)
    began = time.time()
    # Long runs that finish, one killed outright at 90 s, one whose pod is killed at 60 s
    # and replaced (backoffLimit 1: the replacement runs its own 240 s), short ones.
    for name, count, seconds, backoff in (
        ("long-a", 4, 330, 0),
        ("long-b", 4, 300, 0),
        ("killed", 2, 600, 0),
        ("replaced", 2, 240, 1),
        ("short-1", 1, 30, 0),
        ("short-2", 1, 45, 0),
    ):
        batch.create_namespaced_job(namespace, job(name, count, seconds, backoff=backoff))
    time.sleep(30)
    batch.create_namespaced_job(namespace, job("short-3", 1, 60))
    time.sleep(30)
    (victim,) = core.list_namespaced_pod(namespace, label_selector="job-name=replaced").items
    core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=0)
    time.sleep(30)
    batch.delete_namespaced_job("killed", namespace, propagation_policy="Background")

    # The Rolling budget, once its window starts after the kills (and their buckets), while
    # long-a, long-b and the replacement run (to 330, 300 and ~300 s).
    time.sleep(max(0.0, began + 90 + WINDOW + 25 - time.time()))
    changed = time.time()
    limit = {"spec": {"limits": {"acceleratorHours": 999}}}
    custom.patch_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", rolling, limit
    )
    at, used = observed(cluster, rolling, changed)
    time.sleep(2)  # the scrape after `at`
    ledger = expression_hours(cluster, expr, namespace, at - WINDOW, at)
    print(
        f"\nRolling {WINDOW} s at {at - began:.0f} s: budget {used:.6f} h, "
        f"kube-state-metrics {ledger:.6f} h, difference {100 * (used - ledger) / ledger:+.3f} %"
    )
    assert at - began < 295, "evaluated while the three long pods ran"
    assert abs(used - ledger) <= 0.01 * ledger

    def finished() -> list[client.V1Pod] | None:
        pods = pods_in(cluster, namespace)
        done = all(p.status.phase in ("Succeeded", "Failed") for p in pods)
        return pods if done and len(pods) >= 6 else None  # long-*, short-*, the replacement

    pods = wait_for(finished, timeout=300, every=2, what="every pod finished")
    ended = max(
        c.state.terminated.finished_at.timestamp()
        for p in pods
        for c in p.status.container_statuses or []
        if c.state.terminated
    )
    gpus = [4, 4, 2, 2, 2, 1, 1, 1]  # the eight pods that ran, the two killed ones included

    # The Daily budget once the last end is in; the ledger over the whole run.
    at, used = observed(cluster, daily, ended, idle=True)
    time.sleep(2)
    ledger = recorded_hours(cluster, namespace, began - 10, at)
    fine = expression_hours(cluster, expr, namespace, began - 10, at)
    worst = 2 * sum(gpus) / 3600
    spread = 0.41 * sum(g * g for g in gpus) ** 0.5 / 3600
    print(
        f"Daily, {len(gpus)} pods over {ended - began:.0f} s: budget {used:.6f} h, "
        f"kube-state-metrics {ledger:.6f} h, difference {100 * (used - ledger) / ledger:+.3f} % "
        f"(worst case {100 * worst / ledger:.2f} %, "
        f"expected spread {100 * spread / ledger:.2f} %); the expression at {STEP} s: {fine:.6f} h"
    )
    assert ledger > 0.5, "the rule's series cover the run"
    assert abs(used - ledger) <= 0.01 * ledger


def midnight_zone(hour: int) -> str:
    """The fixed-offset zone whose midnight is `hour` o'clock UTC (Etc/GMT's signs are
    POSIX's, inverted: Etc/GMT-11 is UTC+11)."""
    ahead = -hour if hour <= 12 else 24 - hour
    return "Etc/UTC" if ahead == 0 else f"Etc/GMT{-ahead:+d}"


def test_a_daily_period_boundary_matches_the_ledger(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """A Daily budget whose time zone's midnight falls during the run: the period that ended
    (status.history) and the new one (status.used, read while the pods run) each read what
    the rule's expression integrates to on their side of midnight, within 1 %. Some zone's
    midnight passes every whole UTC hour, but not every few minutes: this runs only when it
    starts 5 to 7 minutes before one, and skips otherwise (saying when it would run).

    Before midnight only the pods' starts fall in the period, and the ledger sees each up to
    2 s later than the budget (the scrape, the truncated startTime): 1 s x 6 accelerators
    short on average, 0.33 % of the ~1,800 accelerator-seconds before midnight."""
    now = time.time()
    boundary = (int(now) // 3600 + 1) * 3600
    if not 300 <= boundary - now <= 420:
        pytest.skip(
            f"runs 5 to 7 minutes before a whole UTC hour; the next is in {boundary - now:.0f} s"
        )
    zone = midnight_zone(datetime.fromtimestamp(boundary, UTC).hour)
    expr = ledger_expr()
    name = f"{namespace}-daily"
    period = {"type": "Daily", "timeZone": zone}
    create_budget(cluster, name, namespace, 1000, mode="DryRun", period=period)
    began = time.time()
    runs = round(boundary - began) + 180
    batch = client.BatchV1Api(cluster.api)
    for job_name, count in (("across-4", 4), ("across-2", 2)):
        batch.create_namespaced_job(namespace, job(job_name, count, runs))

    def closed() -> tuple[dict[str, Any], float, float] | None:
        status = get_budget(cluster, name).get("status", {})
        history = status.get("history") or []
        stamp = status.get("ledger", {}).get("observedAt")
        if not history or stamp is None or _timestamp(stamp) < boundary + 30:
            return None
        return history[0], _timestamp(stamp), float(status["used"]["acceleratorHours"])

    past, at, used = wait_for(closed, timeout=boundary - began + 150, every=1, what="midnight")
    time.sleep(2)
    assert _timestamp(past["end"]) == boundary, past
    before = expression_hours(cluster, expr, namespace, began - 10, boundary)
    after = expression_hours(cluster, expr, namespace, boundary, at)
    closed_used = float(past["usage"]["acceleratorHours"])
    print(
        f"\n{zone} midnight at {datetime.fromtimestamp(boundary, UTC):%H:%M} UTC: the period "
        f"that ended {closed_used:.6f} h, ledger {before:.6f} h "
        f"({100 * (closed_used - before) / before:+.3f} %); the new one at +{at - boundary:.0f} s "
        f"{used:.6f} h, ledger {after:.6f} h ({100 * (used - after) / after:+.3f} %)"
    )
    assert at < began + runs, "read while both pods ran"
    assert abs(closed_used - before) <= 0.01 * before
    assert abs(used - after) <= 0.01 * after
