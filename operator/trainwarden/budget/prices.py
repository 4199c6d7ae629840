"""Accelerator prices from the cluster (spec.rates.acceleratorHourFrom): each node's price
as the cluster's cost tool exports it to Prometheus (OpenCost's and Kubecost's
`node_gpu_hourly_cost` by default), before the budget's own `acceleratorHour` rates.

One answer per distinct query, shared by the budgets that ask it and read again at most
every REFRESH. A failed read keeps the last answer until it is STALE; after that the
budgets price with their rates alone and status.prices says why. Whatever the query
answers is bounded and validated by the adapter (adapters/prometheus.py `parse_prices`):
at most MAX_PRICED_NODES series, prices between 0 and MAX_PRICE, else left out.
"""

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import logs
from trainwarden.adapters.prometheus import MetricsUnavailable, NodePriceSource
from trainwarden.api.v1alpha1.budget import ClusterPrices, TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import PriceSources
from trainwarden.core.accounting import NodePrices, PriceTable
from trainwarden.core.pods import PodFacts

log = logs.get(__name__)
REFRESH = timedelta(minutes=5)
"""How often a query is read again: cost tools recompute prices hourly or slower."""
STALE = timedelta(hours=1)
"""How long the last answer stands in for a query that keeps failing."""

Key = tuple[str, str, str]


def _key(source: ClusterPrices) -> Key:
    return source.query, source.node_label, source.resource


def source_of(spec: TrainingBudgetSpec) -> ClusterPrices | None:
    return spec.rates.accelerator_hour_from if spec.rates is not None else None


@dataclass
class Answer:
    """The last usable answer to one query, and the last attempt."""

    prices: NodePrices | None = None
    fetched_at: datetime | None = None
    tried_at: datetime | None = None
    error: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PriceBook:
    """The answers of the price queries budgets use; bounded by the distinct queries of
    the budgets there are (`keep_only`)."""

    def __init__(self, source: NodePriceSource | None) -> None:
        self._source = source
        self._answers: dict[Key, Answer] = {}

    def known(self, spec: TrainingBudgetSpec, now: datetime) -> NodePrices | None:
        """The prices the budget uses now: its query's last answer unless stale."""
        source = source_of(spec)
        answer = self._answers.get(_key(source)) if source is not None else None
        if answer is None or answer.fetched_at is None or now - answer.fetched_at > STALE:
            return None
        return answer.prices

    async def refresh(self, spec: TrainingBudgetSpec, now: datetime) -> None:
        """Read the budget's query again if it is due (one reader at a time per query)."""
        source = source_of(spec)
        if source is None or self._source is None:
            return
        answer = self._answers.setdefault(_key(source), Answer())
        async with answer.lock:
            if answer.tried_at is not None and now - answer.tried_at < REFRESH:
                return
            answer.tried_at = now
            try:
                found = await self._source.node_prices(source.query, source.node_label)
            except MetricsUnavailable as error:
                answer.error = str(error)[:512]
                log.warning("prices not read", query=source.query[:200], error=answer.error)
                return
            answer.prices = NodePrices(source.resource, found)
            answer.fetched_at, answer.error = now.replace(microsecond=0), None

    def keep_only(self, specs: Iterable[TrainingBudgetSpec]) -> None:
        """Forget the answers of queries no budget asks any more."""
        used = {_key(s) for spec in specs if (s := source_of(spec)) is not None}
        for key in set(self._answers) - used:
            del self._answers[key]

    def report(
        self,
        spec: TrainingBudgetSpec,
        table: PriceTable,
        pods: Iterable[PodFacts],
        node_labels: Callable[[str], Mapping[str, str]],
        now: datetime,
    ) -> PriceSources | None:
        """What status.prices says: where the prices of the running pods' nodes came from."""
        source = source_of(spec)
        if source is None:
            return None
        answer = self._answers.get(_key(source), Answer())
        nodes = {p.node for p in _running_on(pods, source.resource) if p.node}
        found = [table.source(source.resource, n, node_labels(n)) for n in sorted(nodes)]
        return PriceSources(
            query=source.query,
            fetched_at=answer.fetched_at,
            nodes_priced=len(table.nodes.by_node) if table.nodes is not None else 0,
            from_query=found.count("query"),
            from_rates=found.count("rates"),
            unpriced=found.count(None),
            message=_why(answer, now),
        )


def _why(answer: Answer, now: datetime) -> str | None:
    if answer.fetched_at is None:
        return f"not read yet{': ' + answer.error if answer.error else ''}"
    if now - answer.fetched_at > STALE:
        return f"the last answer is older than {STALE}, priced by rates: {answer.error}"
    if answer.error:
        return f"the last read failed, the answer of {answer.fetched_at} in use: {answer.error}"
    return None


def _running_on(pods: Iterable[PodFacts], resource: str) -> Iterable[PodFacts]:
    return (
        p
        for p in pods
        if p.node and p.snapshot.end is None and p.snapshot.requests.get(resource, 0.0) > 0
    )
