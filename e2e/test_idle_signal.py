"""The idle signal end to end: the DCGM stand-in, the real Prometheus scraping it, one
batched range query, and the core's verdicts. Missing data must come out as Unknown."""

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from harness import Cluster, wait_for
from harness import publish_utilization as publish
from trainwarden.adapters.prometheus import MetricsUnavailable, Prometheus
from trainwarden.core.idleness import observe, step_times

WINDOW = timedelta(seconds=30)
STEP = timedelta(seconds=10)  # twice the harness's 5 s scrape interval


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
    samples = asyncio.run(
        prometheus.peaks(
            "DCGM_FI_DEV_GPU_UTIL", start=now - WINDOW - STEP, end=now, step=STEP, min_samples=2
        )
    )
    grid = step_times(now - WINDOW - STEP, now, STEP)
    elapsed = time.monotonic() - started
    ours = {pod: s for (ns, pod), s in samples.items() if ns == namespace}
    assert set(ours) == {"busy", "idle"}, "one query answered for every pod"

    def verdict(pod: str) -> str:
        return observe(ours.get(pod, []), now=now, window=WINDOW, threshold=5, steps=grid).verdict

    assert verdict("busy") == "Busy"
    assert verdict("idle") == "Idle"
    assert verdict("never-published") == "Unknown"
    print(f"\none batched query for {len(samples)} pods took {elapsed * 1000:.0f} ms")


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
    peaks = asyncio.run(
        prometheus.peaks(
            "DCGM_FI_DEV_GPU_UTIL", start=now - WINDOW - STEP, end=now, step=STEP, min_samples=2
        )
    )
    grid = step_times(now - WINDOW - STEP, now, STEP)
    verdicts = {
        pod: observe(points, now=now, window=WINDOW, threshold=5, steps=grid).verdict
        for (ns, pod), points in peaks.items()
        if ns == namespace
    }
    assert verdicts == {"exported": "Idle", "plain": "Busy"}
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
        asyncio.run(unreachable.peaks("up", start=now - WINDOW, end=now, step=STEP))
