"""A fake of the Prometheus port efficiency and receipts read through (adapters/prometheus.Busy):
per pod a constant number of busy and reporting accelerators, at every step asked for."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from trainwarden.adapters.prometheus import MetricsUnavailable
from trainwarden.core.efficiency import Point

PodKey = tuple[str, str]


class FakeBusy:
    """`pods`: (namespace, pod) -> (busy accelerators, reporting accelerators); `down`
    refuses every query, as an unreachable Prometheus does."""

    def __init__(self, pods: Mapping[PodKey, tuple[float, int]] | None = None) -> None:
        self.pods: dict[PodKey, tuple[float, int]] = dict(pods or {})
        self.down = False
        self.queries: list[tuple[str, datetime, datetime, timedelta]] = []

    async def busy(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        start: datetime,
        end: datetime,
        step: timedelta,
    ) -> dict[PodKey, list[Point]]:
        self.queries.append((query, start, end, step))  # every attempt, answered or not
        if self.down:
            raise MetricsUnavailable("Prometheus at http://prom is unreachable")
        count = int((end - start) / step) + 1
        times = [(start + i * step).timestamp() for i in range(count)]
        return {
            key: [Point(at, busy, reporting) for at in times]
            for key, (busy, reporting) in self.pods.items()
            if key[0] in namespaces
        }
