"""What the admission webhook decides on, read from the replica's one informer cache
(cache/cluster.py): this instance's budgets as their status publishes them, and the labels
of namespaces (scopes select namespaces by label).

Every replica keeps them, leader or not: webhooks are served by all of them. The two
sources are the cache's own (started by replica.py on the process's one event loop,
beside the controllers' informers when this replica leads). Until both listed, and while
either may be stale, `current()` is False and the webhook holds nothing. This instance's
RunReceipts are a third source, for the repeat check (core/repeats.py): while it is not
listed or stale, no run is taken for a repeat.
"""

from collections.abc import Mapping
from typing import Any

from trainwarden.adapters.informer import Source
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import INSTANCE_LABEL
from trainwarden.api.v1alpha1.types import MANAGED_BY
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.cache.cluster import ClusterCache, PublishedBudget
from trainwarden.core.admission import BudgetView, budget_view
from trainwarden.core.ledger import Earlier
from trainwarden.core.reads import reads
from trainwarden.core.shapes import mapping

BUDGETS = Source("trainingbudgets", f"/apis/{GROUP}/{VERSION}/trainingbudgets")
RECEIPTS = f"/apis/{GROUP}/{VERSION}/runreceipts"
RECEIPTS_SOURCE = "runreceipts"
NAMESPACES = Source("namespaces", "/api/v1/namespaces")
"""The controllers' namespace source too: one informer, one record per namespace."""


def published_budget(body: Mapping[str, Any], instance: str | None) -> PublishedBudget | None:
    """A TrainingBudget as the cache keeps it; None for another instance's (the label as
    the controllers read it)."""
    meta = mapping(body.get("metadata"))
    if mapping(meta.get("labels")).get(INSTANCE_LABEL) != instance:
        return None
    spec = parse_spec(TrainingBudgetSpec, body.get("spec") or {})
    keep = None if isinstance(spec, list) else reads(spec)
    return PublishedBudget(str(meta.get("name") or ""), budget_view(body), keep)


def receipts(instance: str | None) -> Source:
    """This instance's RunReceipts (the repeat check's ledger): those labelled as its own,
    which the chart's admission policy lets only its ServiceAccount write
    (templates/receipts-policy.yaml; docs/security.md says what a cluster without it
    trusts)."""
    mine = f"{INSTANCE_LABEL}={instance}" if instance else f"!{INSTANCE_LABEL}"
    return Source(RECEIPTS_SOURCE, RECEIPTS, f"{MANAGED_BY}=trainwarden,{mine}")


class AdmissionView:
    """The webhook's reading of the cache. Read from a lane's thread while the informers
    write on the loop: each read is one operation on a dict, or a copy of one."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def current(self) -> bool:
        return self.cache.published.current(BUDGETS.name) and self.cache.interruptions.current(
            NAMESPACES.name
        )

    def budgets(self) -> list[BudgetView]:
        return self.cache.budget_views()

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        return self.cache.namespace_labels(name)

    def earlier_run(self, key: tuple[str, str, str]) -> Earlier | None:
        """The newest finished run new work repeats; None while the receipts are stale."""
        if not self.cache.ledger.current(RECEIPTS_SOURCE):
            return None
        return self.cache.earlier_run(key)

    def earlier_runs(self, namespace: str) -> dict[tuple[str, str, str], Earlier]:
        """Those of one namespace, for a worker process's snapshot."""
        if not self.cache.ledger.current(RECEIPTS_SOURCE):
            return {}
        return self.cache.earlier_runs_in(namespace)
