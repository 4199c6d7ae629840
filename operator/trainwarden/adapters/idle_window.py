"""The idle window's one answer from Prometheus, read (adapters/promql.py
`idle_window_query` asks it): the window's steps, and each pod's coverage of them."""

from dataclasses import dataclass
from datetime import UTC, datetime

from trainwarden.adapters.promql import PART, consumer_of
from trainwarden.adapters.unavailable import MetricsUnavailable
from trainwarden.core.catchup import PodKey
from trainwarden.core.idleness import Coverage, Steps


@dataclass(frozen=True)
class IdleWindow:
    """An idle window summed up by Prometheus: its steps, and each pod's coverage."""

    steps: Steps
    pods: dict[PodKey, Coverage]


LATEST = 253_402_300_799.0
"""The last second a datetime holds (9999-12-31): any count or time past it is no answer."""


def parse_idle_window(body: dict[str, object]) -> IdleWindow:
    """The idle window's one answer, by part (promql.py `idle_window_query`); a series
    without a pod, or a value that is not a count or a time, is left out (that pod is
    Unknown, never idle)."""
    if body.get("status") != "success":
        raise MetricsUnavailable(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise MetricsUnavailable("Prometheus returned no vector for the idle window")
    window: dict[str, float] = {}
    covered: dict[PodKey, int] = {}
    busy: dict[PodKey, datetime] = {}
    for series in data.get("result") or []:
        labels = {str(k): str(v) for k, v in (series.get("metric") or {}).items()}
        value = float(series["value"][1])
        part, key = labels.get(PART), consumer_of(labels)
        if not 0 <= value <= LATEST:  # NaN, Inf, or not a time or count
            continue
        if part in ("steps", "last"):
            window[part] = value
        elif part == "covered" and all(key):
            covered[key] = int(value)
        elif part == "busy" and all(key):
            busy[key] = datetime.fromtimestamp(value, UTC)
    steps = Steps(int(window.get("steps", 0)), datetime.fromtimestamp(window.get("last", 0), UTC))
    return IdleWindow(steps, {key: Coverage(n, busy.get(key)) for key, n in covered.items()})
