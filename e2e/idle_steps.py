"""The per-step judgment over a real Prometheus: a range query of the same per-step peaks
and sample counts the operator's summed-up window is built from, covered as the operator
judged steps before issue 30 (finite, at least `min_samples` raw samples on every
accelerator). What `idle_window` must equal (e2e/test_idle_signal.py,
e2e/test_idle_window_history.py)."""

import json
import math
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta

from trainwarden.adapters.promql import count_query, peak_query
from trainwarden.core.idleness import Observation
from trainwarden.testing.windows import grid, observe


def per_step(
    url: str,
    namespace: str,
    now: datetime,
    *,
    window: timedelta,
    step: timedelta,
    threshold: float,
    min_samples: int,
) -> dict[str, Observation]:
    """Each pod of `namespace` with a point in the range, judged step by step at `now`."""
    steps = grid(now, window + 2 * step, step)
    parts: dict[str, dict[str, dict[float, float]]] = {}
    for name, query in (("peak", peak_query), ("count", count_query)):
        params = {
            "query": query("DCGM_FI_DEV_GPU_UTIL", step, [namespace]),
            "start": f"{steps[0].timestamp():.3f}",
            "end": f"{math.floor(now.timestamp() * 1000) / 1000:.3f}",
            "step": f"{step.total_seconds():g}s",
        }
        with urllib.request.urlopen(
            f"{url}/api/v1/query_range?" + urllib.parse.urlencode(params), timeout=30
        ) as response:
            body = json.load(response)
        for s in body["data"]["result"]:
            values = {float(t): float(v) for t, v in s["values"]}
            parts.setdefault(s["metric"]["pod"], {})[name] = values
    out = {}
    for pod, p in parts.items():
        counts = p.get("count", {})
        points = [
            (datetime.fromtimestamp(t, UTC), v)
            for t, v in p.get("peak", {}).items()
            if math.isfinite(v) and counts.get(t, 0) >= min_samples
        ]
        out[pod] = observe(points, now=now, window=window, threshold=threshold, steps=steps)
    return out
