"""The webhook's view over a cache fed as the replica's informers feed it (replica.py):
the budgets first, then the namespaces with the labels the budgets' scopes read."""

from collections.abc import Iterable, Mapping
from typing import Any

from trainwarden.admission.view import BUDGETS, NAMESPACES, AdmissionView, published_budget
from trainwarden.cache.cluster import ClusterCache, namespace_facts
from trainwarden.core.reads import CODE

JSON = dict[str, Any]


def fed_view(
    budgets: Iterable[JSON],
    namespaces: Mapping[str, Mapping[str, str]],
    instance: str | None = None,
) -> AdmissionView:
    """`namespaces`: each namespace's labels, by name."""
    cache = ClusterCache()
    records = {b["metadata"]["uid"]: published_budget(b, instance) for b in budgets}
    cache.budget_sink().replace(BUDGETS.name, records)
    keep = CODE
    for each in cache.published_budgets.values():
        keep |= each.reads or CODE
    listed = {
        f"uid-{name}": namespace_facts({"metadata": {"name": name, "labels": dict(labels)}}, keep)
        for name, labels in namespaces.items()
    }
    cache.namespace_sink().replace(NAMESPACES.name, listed)
    return AdmissionView(cache)


def unlisted() -> AdmissionView:
    return AdmissionView(ClusterCache())
