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


def test_prometheus_outage_is_unavailability_not_idleness() -> None:
    unreachable = Prometheus("http://127.0.0.1:9", timeout=2)
    now = datetime.now(UTC)
    with pytest.raises(MetricsUnavailable, match="unreachable"):
        asyncio.run(unreachable.peaks("up", start=now - WINDOW, end=now, step=STEP))
