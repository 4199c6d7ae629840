"""What the admission webhook decides on: this instance's budgets as their status
publishes them, and the labels of namespaces (scopes select namespaces by label).

Every replica keeps its own, leader or not: webhooks are served by all of them. It is fed
by two informers (adapters/informer.py) on the webhook's event loop. Until both listed,
and while either may be stale, `current()` is False and the webhook holds nothing.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainwarden.api.v1alpha1.names import INSTANCE_LABEL
from trainwarden.core.admission import BudgetView, budget_view
from trainwarden.core.shapes import mapping, strings


class _Source:
    """One informer's sink: records by uid, listed or not, current or not."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}
        self.listed = False
        self.stale = False

    def replace(self, source: str, records: dict[str, Any]) -> None:
        self.records = {uid: r for uid, r in records.items() if r is not None}
        self.listed, self.stale = True, False

    def apply(self, source: str, event: str, uid: str, record: Any) -> None:
        if event == "DELETED" or record is None:
            self.records.pop(uid, None)
        else:
            self.records[uid] = record

    def interrupted(self, source: str, since: datetime, reason: str) -> None:
        self.stale = True


class _Namespaces(_Source):
    """Namespaces by uid, and their labels by name (one lookup per admission request)."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: dict[str, dict[str, str]] = {}

    def replace(self, source: str, records: dict[str, Any]) -> None:
        super().replace(source, records)
        self.labels = dict(self.records.values())

    def apply(self, source: str, event: str, uid: str, record: Any) -> None:
        old = self.records.get(uid)
        super().apply(source, event, uid, record)
        if old is not None:
            self.labels.pop(old[0], None)
        if uid in self.records:
            name, labels = self.records[uid]
            self.labels[name] = labels


class AdmissionView:
    def __init__(self, instance: str | None) -> None:
        self.instance = instance
        self.budget_source = _Source()
        self.namespace_source = _Namespaces()

    def project_budget(self, body: Mapping[str, Any]) -> BudgetView | None:
        """Only this instance's budgets (the label as the controllers read it)."""
        labels = mapping(mapping(body.get("metadata")).get("labels"))
        if labels.get(INSTANCE_LABEL) != self.instance:
            return None
        return budget_view(body)

    @staticmethod
    def project_namespace(body: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
        meta = mapping(body.get("metadata"))
        return str(meta.get("name") or ""), strings(meta.get("labels"))

    def current(self) -> bool:
        sources = (self.budget_source, self.namespace_source)
        return all(s.listed and not s.stale for s in sources)

    def budgets(self) -> list[BudgetView]:
        return list(self.budget_source.records.values())

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        return self.namespace_source.labels.get(name, {})
