"""Whether a PersistentVolumeClaim being created is refused by an exhausted budget.

A volume cannot be suspended, and no data is ever deleted because a budget ran out: what
an exhausted storage limit (or cost limit) does is refuse new claims in its scope, through
the same admission webhook that holds new work (admission/review.py), failing open as it
does. A claim is in a budget's scope by the pods' rule (core/scope.py `in_scope` on the
claim's labels). A budget refuses only while its status says so (`storageAdmission`, a
lease its leader renews, never past the period's end) for its current spec: an operator
that stopped refuses nothing for long, a raised limit is not refused by. DryRun budgets
only warn.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from trainwarden.core.admission import MAX_MESSAGE, BudgetView, Verdict
from trainwarden.core.claims import NO_CLASS, request_bytes
from trainwarden.core.keep import LABEL_VALUE, NAME, bounded, kept_labels
from trainwarden.core.reads import selector_keys
from trainwarden.core.scope import in_scope
from trainwarden.core.shapes import mapping

CLAIM = ("v1", "PersistentVolumeClaim")


def is_claim(obj: Mapping[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) == CLAIM


def _labels(meta: Mapping[str, Any], budgets: Sequence[BudgetView]) -> dict[str, str]:
    """The claim's labels the budgets' selectors read, bounded as the cache keeps them
    (core/keep.py `kept_labels`): however many labels come first, those keys are read."""
    keys = frozenset(k for b in budgets for k in selector_keys(b.spec.scope.selector))
    return kept_labels(meta.get("labels"), keys)


def _what(obj: Mapping[str, Any]) -> str:
    meta, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
    name = meta.get("name") or f"{meta.get('generateName', '')}…"
    klass = spec.get("storageClassName")
    klass = bounded(klass, NAME) if isinstance(klass, str) and klass else NO_CLASS
    size = request_bytes(mapping(mapping(spec.get("resources")).get("requests")).get("storage"))
    namespace = bounded(meta.get("namespace") or "", LABEL_VALUE)
    return (
        f"PersistentVolumeClaim {namespace}/{bounded(name, NAME)} "
        f"({size / 2**30:.6g} GiB, storage class {klass!r})"
    )


def message(obj: Mapping[str, Any], budget: BudgetView, *, dry_run: bool) -> str:
    """What the submitter is told: the budget, its figures, and when it resets."""
    used = budget.storage_used
    figures = budget.storage_message or "a storage limit is exhausted"
    figures += f"; {used:.6g} GiB-hours of storage used this period" if used is not None else ""
    figures += f"; it resets at {budget.period_end.isoformat()}" if budget.period_end else ""
    head = f"TrainingBudget {budget.name} refuses new volumes in its scope ({figures})"
    if dry_run:
        text = f"{head}: {_what(obj)} would be refused (the budget is in DryRun)"
    else:
        text = f"{head}: {_what(obj)} is refused. Existing volumes and their data are untouched."
    return text[:MAX_MESSAGE]


def admit_claim(
    obj: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    budgets: Sequence[BudgetView],
    now: datetime,
) -> Verdict:
    """Refuse the claim for the first Enforce budget (by name) whose scope covers it and
    that refuses now; warn for the DryRun ones that would."""
    meta = mapping(obj.get("metadata"))
    namespace, labels = str(meta.get("namespace") or ""), _labels(meta, budgets)
    refusing = sorted(
        (
            b
            for b in budgets
            if b.refuses_claims(now) and in_scope(b.spec.scope, namespace, namespace_labels, labels)
        ),
        key=lambda b: b.name,
    )
    dry = [b for b in refusing if b.spec.mode == "DryRun"]
    warnings = tuple(message(obj, b, dry_run=True) for b in dry)
    enforcing = [b for b in refusing if b.spec.mode == "Enforce"]
    if not enforcing:
        if not dry:
            return Verdict("allowed")
        return Verdict("would-refuse-claim", dry[0].name, warnings=warnings)
    budget = enforcing[0]
    return Verdict(
        "refused-claim", budget.name, warnings=warnings, refusal=message(obj, budget, dry_run=False)
    )
