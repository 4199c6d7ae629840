"""Utilization from Prometheus: one batched query per policy evaluation.

The policy's query yields one series per accelerator; wrapping it in `max by (namespace,
pod)` makes Prometheus compute each pod's peak over its accelerators, so one request
answers for every pod, however many there are. Each step's point is the peak of the raw
samples within the step (`max_over_time`), so a spike between points is not missed and a
step without any sample is a gap rather than the last value carried forward by
Prometheus's five-minute lookback. Prometheus walks the idle window's steps and answers
two numbers per pod (promql.py `idle_window_query`).
"""

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

import aiohttp

from trainwarden import metrics
from trainwarden.adapters.idle_window import IdleWindow, parse_idle_window
from trainwarden.adapters.promql import (
    busy_queries,
    consumer_of,
    idle_window_query,
    per_gpu_queries,
    selectors,
    usable,
)
from trainwarden.adapters.unavailable import MetricsUnavailable as MetricsUnavailable
from trainwarden.api.v1alpha1.budget import MAX_PRICE
from trainwarden.core.catchup import PodKey as PodKey
from trainwarden.core.catchup import Seen
from trainwarden.core.efficiency import Point
from trainwarden.core.rightsizing import GpuSeries

Samples = dict[PodKey, list[tuple[datetime, float]]]
T = TypeVar("T")
MAX_RESPONSE = 64 * 2**20
"""Bytes of one Prometheus answer read at most: series are written by exporters and
tenants, and an answer past this is refused (metrics unavailable), never read into memory."""


def device(labels: Mapping[str, str]) -> str:
    """What tells one accelerator from another: the exporter's UUID, else host and index."""
    return labels.get("UUID") or f"{labels.get('Hostname', '')}/{labels.get('gpu', '')}"


def parse_vector(body: dict[str, object]) -> dict[tuple[str, str, str], float]:
    """Per (namespace, pod, device), the value of an instant query."""
    if body.get("status") != "success":
        raise MetricsUnavailable(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise MetricsUnavailable("Prometheus returned no vector for an instant query")
    out = {}
    for series in data.get("result") or []:
        labels = {str(k): str(v) for k, v in (series.get("metric") or {}).items()}
        key = (*consumer_of(labels), device(labels))
        value = float(series["value"][1])
        if key[0] and key[1] and math.isfinite(value):
            out[key] = value
    return out


MAX_PRICED_NODES = 20_000
"""Series a price query may answer: one per node of the largest clusters, and no more."""


def parse_prices(
    node_label: str, highest: float
) -> Callable[[dict[str, object]], dict[str, float]]:
    """The parser of a price query's answer: per node (the `node_label` value), its price;
    a node with several series at the highest. A value that is not a price (NaN, negative,
    past `highest`) or a series without the label is left out: that node is not priced by
    the query."""

    def parse(body: dict[str, object]) -> dict[str, float]:
        if body.get("status") != "success":
            raise MetricsUnavailable(
                f"Prometheus answered {body.get('status')}: {body.get('error')}"
            )
        data = body.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise MetricsUnavailable("Prometheus returned no vector for the price query")
        result = data.get("result") or []
        if len(result) > MAX_PRICED_NODES:
            raise MetricsUnavailable(f"the price query answered {len(result)} series")
        out: dict[str, float] = {}
        for series in result:
            node = (series.get("metric") or {}).get(node_label)
            value = float(series["value"][1])
            if isinstance(node, str) and 0 < len(node) <= 253 and 0 <= value <= highest:
                out[node] = max(value, out.get(node, 0.0))
        return out

    return parse


def _instant(at: datetime) -> str:
    """An instant query's time, rounded down to the millisecond (see range_params)."""
    return f"{math.floor(at.timestamp() * 1000) / 1000:.3f}"


def range_params(query: str, *, start: datetime, end: datetime, step: timedelta) -> dict[str, str]:
    """A range query's parameters, its times rounded *down* to the millisecond Prometheus
    reads. Rounded to nearest, `end` lands up to half a millisecond after the caller's now
    half of the time; the newest step then looks like the future, is dropped, and the
    pod is judged on data a whole step old (a recovery seen late, a run reclaimed)."""

    def stamp(at: datetime) -> str:
        millis = math.floor(at.timestamp() * 1000)
        return f"{millis // 1000}.{millis % 1000:03d}"

    return {
        "query": query,
        "start": stamp(start),
        "end": stamp(end),
        "step": f"{step.total_seconds():g}s",
    }


def parse_matrix(body: dict[str, object]) -> Samples:
    """Samples per (namespace, pod) from a Prometheus range-query response."""
    if body.get("status") != "success":
        raise MetricsUnavailable(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise MetricsUnavailable("Prometheus returned no matrix for a range query")
    samples: Samples = defaultdict(list)
    for series in data.get("result") or []:
        key = consumer_of(series.get("metric") or {})
        if not all(key):
            continue
        for timestamp, raw in series.get("values") or []:
            value = float(raw)
            if math.isfinite(value):  # NaN or Inf is no measurement: a gap, never idle
                samples[key].append((datetime.fromtimestamp(float(timestamp), UTC), value))
    return dict(samples)


ACCELERATOR_SERIES = "DCGM_FI_DEV_GPU_UTIL"
"""The per-accelerator series that says which pod held a GPU when (the DCGM exporter's,
naming its consumer in namespace and pod, or exported_namespace and exported_pod: promql.py)."""


def parse_seen(body: dict[str, object]) -> list[Seen]:
    """Each pod's first and last raw sample, series count and node, from an instant
    query of a range selector (raw samples, exact timestamps)."""
    if body.get("status") != "success":
        raise MetricsUnavailable(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise MetricsUnavailable("Prometheus returned no matrix for a range selector")
    found = []
    for series in data.get("result") or []:
        labels = series.get("metric") or {}
        key = consumer_of(labels)
        times = [float(t) for t, _ in series.get("values") or []]
        if all(key) and times:
            found.append(Seen(*key, min(times), max(times), 1, str(labels.get("Hostname", ""))))
    return merged(found)


def merged(seen: Sequence[Seen]) -> list[Seen]:
    """One Seen per pod: the first and last of its series' samples, their count."""
    pods: dict[PodKey, Seen] = {}
    for s in seen:
        key = (s.namespace, s.pod)
        b = pods.get(key)
        pods[key] = (
            s
            if b is None
            else Seen(
                *key,
                min(b.first, s.first),
                max(b.last, s.last),
                b.accelerators + s.accelerators,
                b.node or s.node,
            )
        )
    return list(pods.values())


class AcceleratorSeries(Protocol):
    """The port budgets read the accelerator series of vanished pods through."""

    async def seen(
        self, namespaces: Sequence[str], start: datetime, end: datetime
    ) -> list[Seen]: ...


class Busy(Protocol):
    """The port efficiency reads what accelerators did through (a fake in tests)."""

    async def busy(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        start: datetime,
        end: datetime,
        step: timedelta,
    ) -> dict[PodKey, list[Point]]: ...


class PerGpu(Protocol):
    """The port over-provisioning is judged through (a fake in tests)."""

    async def per_gpu(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        window: timedelta,
        resolution: timedelta,
        at: datetime,
    ) -> list[GpuSeries]: ...


class NodePriceSource(Protocol):
    """The port budgets read per-node prices through (a fake in tests)."""

    async def node_prices(self, query: str, node_label: str) -> dict[str, float]: ...


class Utilization(Protocol):
    """The port idle policies read utilization through (a fake in tests)."""

    async def idle_window(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        at: datetime,
        window: timedelta,
        resolution: timedelta,
        threshold: float,
        min_samples: int = 1,
    ) -> IdleWindow: ...


async def _bounded_body(response: aiohttp.ClientResponse) -> bytes:
    """The whole answer, refused past MAX_RESPONSE. A single read() returns what has
    arrived so far, not the whole body: at 500 pods per policy it cut answers mid-JSON."""
    if (response.content_length or 0) > MAX_RESPONSE:
        raise ValueError(f"an answer of {response.content_length} bytes")
    raw = bytearray()
    async for chunk in response.content.iter_chunked(1 << 16):
        raw += chunk
        if len(raw) > MAX_RESPONSE:
            raise ValueError(f"an answer over {MAX_RESPONSE} bytes")
    return bytes(raw)


class Prometheus:
    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self._url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def idle_window(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        at: datetime,
        window: timedelta,
        resolution: timedelta,
        threshold: float,
        min_samples: int = 1,
    ) -> IdleWindow:
        """Each pod's coverage of the window ending `at`: a step where an accelerator has
        fewer than `min_samples` raw samples (scrapes were missed) has no point (bare
        selectors; expressions are covered per step only)."""
        expr = idle_window_query(
            query,
            window=window,
            resolution=resolution,
            threshold=threshold,
            min_samples=min_samples,
            namespaces=namespaces,
        )
        params = {"query": expr, "time": _instant(at)}
        return await self._get("/api/v1/query", params, parse_idle_window)

    async def busy(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        start: datetime,
        end: datetime,
        step: timedelta,
    ) -> dict[PodKey, list[Point]]:
        """Per pod, one point per step from `start` to `end`: how many accelerators were
        busy (core/efficiency.py) and how many reported. A step without samples has no
        point (unknown)."""
        busy_q, count_q = busy_queries(query, step, namespaces)
        busy = await self._range(busy_q, start, end, step)
        counts = await self._range(count_q, start, end, step)
        out: dict[PodKey, list[Point]] = {}
        for key, points in busy.items():
            reported = {t: v for t, v in counts.get(key, [])}
            out[key] = [
                Point(t.timestamp(), v, int(reported[t])) for t, v in points if reported.get(t)
            ]
        return out

    async def per_gpu(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        window: timedelta,
        resolution: timedelta,
        at: datetime,
    ) -> list[GpuSeries]:
        """Each accelerator's peak over the window ending `at`, and its samples."""
        peak_q, count_q = per_gpu_queries(query, window, resolution, namespaces)
        time = _instant(at)
        peaks = await self._get("/api/v1/query", {"query": peak_q, "time": time}, parse_vector)
        counts = await self._get("/api/v1/query", {"query": count_q, "time": time}, parse_vector)
        return [
            GpuSeries(ns, pod, dev, peak, int(counts.get((ns, pod, dev), 0)))
            for (ns, pod, dev), peak in peaks.items()
        ]

    async def node_prices(self, query: str, node_label: str) -> dict[str, float]:
        """Each node's accelerator-hour price as `query` says now (budget/prices.py)."""
        parse = parse_prices(node_label, MAX_PRICE)
        return await self._get("/api/v1/query", {"query": query}, parse)

    async def seen(self, namespaces: Sequence[str], start: datetime, end: datetime) -> list[Seen]:
        """The pods of `namespaces` whose accelerator series have samples in [start, end]:
        one range selector per label convention (a range vector cannot be relabelled)."""
        if not usable(namespaces):
            return []  # never the whole cluster's series
        seconds = max(1, math.ceil((end - start).total_seconds()))
        found: list[Seen] = []
        for selector in selectors(ACCELERATOR_SERIES, namespaces):
            params = {"query": f"{selector}[{seconds}s]", "time": _instant(end)}
            found += await self._get("/api/v1/query", params, parse_seen)
        return merged(found)

    async def _get(
        self, path: str, params: dict[str, str], parse: Callable[[dict[str, object]], T]
    ) -> T:
        """One query, read whole and parsed; a refused, late, oversized or malformed
        answer is MetricsUnavailable (and a failed query in the metrics)."""
        started = time.monotonic()
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as session,
                session.get(f"{self._url}{path}", params=params) as response,
            ):
                body = json.loads(await _bounded_body(response))
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            metrics.report_prometheus_query(ok=False, seconds=time.monotonic() - started)
            raise MetricsUnavailable(
                f"Prometheus at {self._url} is unreachable: {error}"
            ) from error
        except RecursionError as error:  # nested deeper than the JSON parser goes
            metrics.report_prometheus_query(ok=False, seconds=time.monotonic() - started)
            raise MetricsUnavailable("Prometheus answered something unreadable") from error
        elapsed = time.monotonic() - started
        try:
            result = parse(body)
        except MetricsUnavailable:
            metrics.report_prometheus_query(ok=False, seconds=elapsed)
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as error:  # malformed
            metrics.report_prometheus_query(ok=False, seconds=elapsed)
            raise MetricsUnavailable(
                f"Prometheus answered something unreadable: {error}"
            ) from error
        metrics.report_prometheus_query(ok=True, seconds=elapsed)
        return result

    async def _range(self, query: str, start: datetime, end: datetime, step: timedelta) -> Samples:
        params = range_params(query, start=start, end=end, step=step)
        return await self._get("/api/v1/query_range", params, parse_matrix)
