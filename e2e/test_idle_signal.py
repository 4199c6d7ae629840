"""The idle signal end to end: the DCGM stand-in, the real Prometheus scraping it, one
batched query that sums the window up, and the core's verdicts. Missing data must come out
as Unknown, and the summary must judge as the window's every step does."""

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from harness import Cluster, wait_for
from harness import forget_utilization as forget
from harness import publish_utilization as publish
from idle_steps import per_step
from trainwarden.adapters.idle_window import IdleWindow
from trainwarden.adapters.prometheus import MetricsUnavailable, Prometheus
from trainwarden.core.idleness import Observation, judge
from trainwarden.testing.windows import grid

WINDOW = timedelta(seconds=30)
STEP = timedelta(seconds=10)  # twice the harness's 5 s scrape interval
MIN_SAMPLES = 2


def summed(prometheus: Prometheus, namespace: str, now: datetime) -> IdleWindow:
    return asyncio.run(
        prometheus.idle_window(
            "DCGM_FI_DEV_GPU_UTIL",
            namespaces=[namespace],
            at=now,
            window=WINDOW,
            resolution=STEP,
            threshold=5,
            min_samples=MIN_SAMPLES,
        )
    )


def verdicts(answer: IdleWindow, namespace: str, now: datetime) -> dict[str, Observation]:
    return {
        pod: judge(coverage, answer.steps, now=now, window=WINDOW, resolution=STEP)
        for (ns, pod), coverage in answer.pods.items()
        if ns == namespace
    }


def step_by_step(cluster: Cluster, namespace: str, now: datetime) -> dict[str, Observation]:
    return per_step(
        cluster.prometheus_url,
        namespace,
        now,
        window=WINDOW,
        step=STEP,
        threshold=5,
        min_samples=MIN_SAMPLES,
    )


def test_verdicts_from_real_prometheus(cluster: Cluster) -> None:
    namespace = f"idle-{uuid.uuid4().hex[:6]}"
    publish(cluster, namespace, "busy", 80.0, gpus=2)
    publish(cluster, namespace, "idle", 2.0, gpus=4)
    prometheus = Prometheus(cluster.prometheus_url)
    began = datetime.now(UTC)

    def enough_history() -> bool:
        series = cluster.prometheus_query(
            f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}"}}[1m])'
        )
        return len(series) == 6 and datetime.now(UTC) - began > WINDOW + STEP

    wait_for(enough_history, timeout=90, what="a full window of scraped samples")
    now = datetime.now(UTC)
    started = time.monotonic()
    answer = summed(prometheus, namespace, now)
    elapsed = time.monotonic() - started
    ours = verdicts(answer, namespace, now)
    assert set(ours) == {"busy", "idle"}, "one query answered for every pod"
    assert answer.steps.count == len(grid(now, WINDOW, STEP))
    assert {pod: o.verdict for pod, o in ours.items()} == {"busy": "Busy", "idle": "Idle"}
    assert judge(None, answer.steps, now=now, window=WINDOW, resolution=STEP).verdict == "Unknown"
    assert ours == step_by_step(cluster, namespace, now)
    print(f"\none summed-up window for {len(answer.pods)} pods took {elapsed * 1000:.0f} ms")


def test_the_summary_judges_as_every_step_while_utilization_moves(cluster: Cluster) -> None:
    """Invariant, on the real Prometheus: at instants spread over a minute in which pods
    drop below the threshold, recover and stop being scraped, the summed-up window gives
    every pod the verdict and idle-since the per-step range query gives."""
    namespace = f"idle-{uuid.uuid4().hex[:6]}"
    for pod, value in (("drops", 80.0), ("recovers", 1.0), ("flat", 1.0), ("stops", 1.0)):
        publish(cluster, namespace, pod, value, gpus=2)
    prometheus = Prometheus(cluster.prometheus_url)
    began = datetime.now(UTC)
    wait_for(lambda: datetime.now(UTC) - began > WINDOW + 2 * STEP, timeout=90, what="a window")
    publish(cluster, namespace, "drops", 1.0, gpus=2)
    publish(cluster, namespace, "recovers", 90.0, gpus=2)
    forget(cluster, namespace, "stops")
    compared: dict[str, set[str]] = {}
    for _ in range(12):
        time.sleep(4.3)  # instants between steps and scrapes, not on them
        now = datetime.now(UTC)
        answer = summed(prometheus, namespace, now)
        ours, theirs = verdicts(answer, namespace, now), step_by_step(cluster, namespace, now)
        nothing = judge(None, answer.steps, now=now, window=WINDOW, resolution=STEP)
        for pod in set(theirs) - set(ours):  # no point in the window: not in the summary
            ours[pod] = nothing
        assert ours == theirs, now
        for pod, o in ours.items():
            compared.setdefault(pod, set()).add(o.verdict)
    assert {"Idle", "Suspect"} <= compared["drops"], compared
    assert "Unknown" in compared["stops"], compared


EXPORTER_TARGET = ("nvidia-dcgm-exporter", "gpu-operator", "nvidia-dcgm-exporter-sim")
"""job (the Service's name), namespace and pod of the exporter's target: from GPU Operator's
ServiceMonitor through Prometheus Operator (e2e/cluster/prometheus_operator.sh)."""


def test_series_scraped_through_a_service_monitor_name_their_pod(cluster: Cluster) -> None:
    """GPU Operator's ServiceMonitor scrapes dcgm-exporter with honorLabels false: the
    consumer's namespace and pod arrive as exported_namespace/exported_pod, and namespace
    and pod name the exporter. Every read of the operator finds the consumer, the same as
    for a series scraped with honorLabels true."""
    namespace = f"idle-{uuid.uuid4().hex[:6]}"
    publish(cluster, namespace, "exported", 2.0, gpus=2, view="serviceMonitor")
    publish(cluster, namespace, "plain", 80.0, gpus=1)
    prometheus = Prometheus(cluster.prometheus_url)
    began = datetime.now(UTC)

    def enough_history() -> bool:
        exported = cluster.prometheus_query(
            f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}"}}[1m])'
        )
        return len(exported) == 2 and datetime.now(UTC) - began > WINDOW + STEP

    wait_for(enough_history, timeout=90, what="a full window of scraped samples")
    raw = cluster.prometheus_query(f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}"}}')
    target = {(s["metric"]["job"], s["metric"]["namespace"], s["metric"]["pod"]) for s in raw}
    assert target == {EXPORTER_TARGET}, "the exporter's target labels, as the real setup has them"
    now = datetime.now(UTC)
    judged = verdicts(summed(prometheus, namespace, now), namespace, now)
    assert {pod: o.verdict for pod, o in judged.items()} == {"exported": "Idle", "plain": "Busy"}
    busy = asyncio.run(
        prometheus.busy(
            "DCGM_FI_DEV_GPU_UTIL", namespaces=[namespace], start=now - WINDOW, end=now, step=STEP
        )
    )
    assert {p for (ns, p) in busy if ns == namespace} == {"exported", "plain"}
    assert max(pt.count for pt in busy[namespace, "exported"]) == 2, "two GPUs reported"
    gpus = asyncio.run(
        prometheus.per_gpu(
            "DCGM_FI_DEV_GPU_UTIL", namespaces=[namespace], window=WINDOW, resolution=STEP, at=now
        )
    )
    assert sorted((g.pod, round(g.peak)) for g in gpus) == [
        ("exported", 2), ("exported", 2), ("plain", 80)
    ]  # fmt: skip
    seen = asyncio.run(prometheus.seen([namespace], now - WINDOW, now))
    assert {(s.pod, s.accelerators) for s in seen} == {("exported", 2), ("plain", 1)}


def test_prometheus_outage_is_unavailability_not_idleness() -> None:
    unreachable = Prometheus("http://127.0.0.1:9", timeout=2)
    now = datetime.now(UTC)
    with pytest.raises(MetricsUnavailable, match="unreachable"):
        asyncio.run(
            unreachable.idle_window(
                "up", namespaces=[], at=now, window=WINDOW, resolution=STEP, threshold=5
            )
        )
