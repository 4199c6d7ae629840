"""Utilization from Prometheus: one batched range query per policy evaluation.

The policy's query yields one series per accelerator; wrapping it in `max by (namespace,
pod)` makes Prometheus compute each pod's peak over its accelerators, so one request
answers for every pod, however many there are.
"""

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import aiohttp

from trainwarden import metrics

PodKey = tuple[str, str]
Samples = dict[PodKey, list[tuple[datetime, float]]]


class MetricsUnavailable(Exception):
    """Prometheus could not answer: every pod's utilization is unknown, never idle."""


def peak_query(query: str) -> str:
    return f"max by (namespace, pod) ({query})"


def parse_matrix(body: dict[str, object]) -> Samples:
    """Samples per (namespace, pod) from a Prometheus range-query response."""
    if body.get("status") != "success":
        raise MetricsUnavailable(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise MetricsUnavailable("Prometheus returned no matrix for a range query")
    samples: Samples = defaultdict(list)
    for series in data.get("result") or []:
        labels = series.get("metric") or {}
        key = (labels.get("namespace", ""), labels.get("pod", ""))
        if not all(key):
            continue
        for timestamp, value in series.get("values") or []:
            samples[key].append((datetime.fromtimestamp(float(timestamp), UTC), float(value)))
    return dict(samples)


class Prometheus:
    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self._url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def peaks(
        self, query: str, *, start: datetime, end: datetime, step: timedelta
    ) -> Samples:
        """Each pod's peak utilization over its accelerators, sampled every `step`."""
        params = {
            "query": peak_query(query),
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{step.total_seconds():g}s",
        }
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as session,
                session.get(f"{self._url}/api/v1/query_range", params=params) as response,
            ):
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            metrics.report_prometheus_query(ok=False)
            raise MetricsUnavailable(
                f"Prometheus at {self._url} is unreachable: {error}"
            ) from error
        try:
            result = parse_matrix(body)
        except MetricsUnavailable:
            metrics.report_prometheus_query(ok=False)
            raise
        metrics.report_prometheus_query(ok=True)
        return result
