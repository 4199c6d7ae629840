"""After a restart, charge the pods that came and went while no operator ran, as their
accelerator series saw them (core/catchup.py): once, at a budget's first evaluation by
this process, and only where the series can be attributed (namespace-only scopes)."""

from datetime import datetime, timedelta

from trainwarden import logs
from trainwarden.adapters.prometheus import AcceleratorSeries, MetricsUnavailable
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import TrainingBudgetStatus
from trainwarden.cache.budgets import Members
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import catchup
from trainwarden.core.accounting import Charge
from trainwarden.core.scope import in_scope

log = logs.get(__name__)
MAX_CATCH_UP = timedelta(hours=6)
"""The longest outage caught up from the series (older gaps stay the ledger's estimate):
one query of raw samples must stay small."""


def _covered(spec: TrainingBudgetSpec, cache: ClusterCache, namespace: str) -> bool:
    return in_scope(spec.scope, namespace, cache.namespace_labels(namespace), {})


async def catch_up(
    series: AcceleratorSeries | None,
    spec: TrainingBudgetSpec,
    members: Members,
    cache: ClusterCache,
    restoring: bool,
    old: TrainingBudgetStatus,
    now: datetime,
) -> list[Charge]:
    """The charges of pods the series show between the ledger's observedAt and now that
    the operator neither sees nor saw go; empty when there is nothing to catch up (not
    `restoring` the ledger after a restart, no ledger, no Prometheus, a pod selector in
    the scope, Prometheus down)."""
    observed = old.ledger.observed_at if old.ledger is not None else None
    if series is None or not restoring or observed is None or spec.scope.selector is not None:
        return []
    start = max(observed, now - MAX_CATCH_UP)
    namespaces = set(spec.scope.namespaces) | {
        n for n in list(cache.namespaces) if _covered(spec, cache, n)
    }
    try:
        seen = await series.seen(sorted(namespaces), start, now)
    except MetricsUnavailable as error:
        log.warning("no catch-up from accelerator series", error=str(error))
        return []
    known = set(members.gone_names.values()) | {
        (p.snapshot.namespace, p.snapshot.name) for n in namespaces for p in cache.pods_in(n)
    }
    found = catchup.charges(
        seen,
        known=known,
        since=observed.timestamp(),
        covers=lambda n: _covered(spec, cache, n),
        resource=spec.accelerators[0],
        node_labels=cache.node_labels,
        prices=members.prices,
        label_keys=members.label_keys,
    )
    if found:
        log.info("pods gone while the operator was down charged from their series", pods=len(found))
    return found
