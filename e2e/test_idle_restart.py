"""Idle reclaim through an operator crash and a Prometheus outage.

The warning lives on the pod, so an operator killed during the grace period and started
again reclaims at the original deadline: no second warning, no fresh grace period, no
second action. And with Prometheus unreachable nothing is judged idle at all.
"""

import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubernetes import client

from harness import (
    Cluster,
    create_policy,
    events_for,
    get_policy,
    gpu_job,
    holds,
    idle_policy_manifest,
    publish_utilization,
    start_operator,
    wait_for,
)

PLURAL = "idlereclaimpolicies"
WARNED_AT = "trainwarden.dev/idle-warned-at"
GRACE = timedelta(seconds=20)


def running_pod(cluster: Cluster, namespace: str, job: str) -> client.V1Pod:
    core = client.CoreV1Api(cluster.api)

    def probe() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod: client.V1Pod = wait_for(probe, timeout=60, what=f"the {job} pod running")
    return pod


def test_a_killed_operator_resumes_the_grace_period_from_the_pod(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    batch = client.BatchV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("idle"))
    pod = running_pod(cluster, namespace, "idle").metadata.name
    publish_utilization(cluster, namespace, pod, 1)
    log = tmp_path / "operator.log"
    first = start_operator(cluster.kubeconfig, log, prometheus_url=cluster.prometheus_url)
    policy = f"{namespace}-idle"
    create_policy(cluster, PLURAL, idle_policy_manifest(policy, namespace, gracePeriod="20s"))
    try:
        annotations = wait_for(
            lambda: (
                (a := core.read_namespaced_pod(pod, namespace).metadata.annotations or {})
                and WARNED_AT in a
                and a
            ),
            timeout=90,
            every=0.2,
            what="the warning",
        )
    finally:
        first.stop(kill=True)
    warned = datetime.fromisoformat(annotations[WARNED_AT])
    killed = datetime.now(UTC)
    second = start_operator(cluster.kubeconfig, log, prometheus_url=cluster.prometheus_url)
    try:
        wait_for(
            lambda: batch.read_namespaced_job("idle", namespace).spec.suspend,
            timeout=90,
            every=0.1,
            what="the Job suspended by the restarted operator",
        )
        suspended = datetime.now(UTC)
        deadline = warned + GRACE
        print(
            f"\nwarned {warned:%H:%M:%S}, killed {(killed - warned).total_seconds():.1f}s later; "
            f"restarted operator suspended {(suspended - deadline).total_seconds():+.1f}s "
            "after the original deadline"
        )
        assert suspended >= deadline - timedelta(seconds=1), "the grace period is kept"
        assert suspended < deadline + timedelta(seconds=15), "and not started over"
        warnings = [
            e for e in events_for(cluster, namespace, pod) if e.reason == "IdleAccelerators"
        ]
        assert len(warnings) == 1, "warned once, not again after the restart"
        status = wait_for(
            lambda: (
                (s := get_policy(cluster, PLURAL, policy).get("status", {}))
                and s.get("actionsTaken") == 1
                and s
            ),
            timeout=30,
            what="one action in status",
        )
        assert status["actionsTaken"] == 1
    finally:
        second.stop()


def test_prometheus_down_means_nothing_is_idle(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    batch = client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("idle"))
    pod = running_pod(cluster, namespace, "idle").metadata.name
    publish_utilization(cluster, namespace, pod, 1)  # idle, if anyone could see it
    started = datetime.now(UTC)
    operator = start_operator(
        cluster.kubeconfig, tmp_path / "operator.log", prometheus_url="http://127.0.0.1:9"
    )
    policy = f"{namespace}-idle"
    create_policy(cluster, PLURAL, idle_policy_manifest(policy, namespace))
    try:

        def condition() -> dict[str, str] | None:
            status = get_policy(cluster, PLURAL, policy).get("status", {})
            found: dict[str, str] | None = next(
                (c for c in status.get("conditions", []) if c["type"] == "MetricsAvailable"), None
            )
            return found if found and found["status"] == "False" else None

        available = wait_for(condition, timeout=30, what="MetricsAvailable=False")
        assert available["reason"] == "PrometheusUnavailable"
        assert "unreachable" in available["message"]
        wait_for(
            lambda: get_policy(cluster, PLURAL, policy)["status"].get("podsUnknown") == 1,
            timeout=30,
            what="the pod reported Unknown (after its warm-up)",
        )
        wait_for(
            lambda: (
                "PrometheusUnavailable"
                in {e.reason for e in events_for(cluster, "default", policy)}
            ),
            timeout=10,
            what="a Warning Event on the policy",
        )
        with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
            text = response.read().decode()
        assert f'trainwarden_idle_metrics_available{{policy="{policy}"}} 0.0' in text
        # With Prometheus up this pod would be warned ~35 s after publishing and suspended
        # 15 s later; hold past both.
        remaining = (started + timedelta(seconds=55) - datetime.now(UTC)).total_seconds()
        holds(
            lambda: (
                not batch.read_namespaced_job("idle", namespace).spec.suspend
                and WARNED_AT
                not in (
                    client.CoreV1Api(cluster.api)
                    .read_namespaced_pod(pod, namespace)
                    .metadata.annotations
                    or {}
                )
            ),
            duration=max(remaining, 5),
            every=1,
            what="the Job running and unwarned while Prometheus is down",
        )
    finally:
        operator.stop()
