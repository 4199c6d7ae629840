"""Which workloads a policy governs, and which budgets a pod is charged to.

Deliberately narrower than Kubernetes where Kubernetes is permissive: an empty selector
selects nothing here, so no malformed or half-written policy can govern everything.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainwarden.api.v1alpha1.names import BUDGET_LABEL
from trainwarden.api.v1alpha1.types import LabelSelector, Scope


def selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics, except that an empty selector matches nothing."""
    if not selector.match_labels and not selector.match_expressions:
        return False
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        value = labels.get(requirement.key)
        match requirement.operator:
            case "In":
                ok = present and value in requirement.values
            case "NotIn":
                ok = not present or value not in requirement.values
            case "Exists":
                ok = present
            case "DoesNotExist":
                ok = not present
        if not ok:
            return False
    return True


def in_namespaces(scope: Scope, namespace: str, namespace_labels: Mapping[str, str]) -> bool:
    """Whether `namespace` is one `scope` governs (its label selector aside)."""
    return namespace in scope.namespaces or (
        scope.namespace_selector is not None and selects(scope.namespace_selector, namespace_labels)
    )


def in_scope(
    scope: Scope,
    namespace: str,
    namespace_labels: Mapping[str, str],
    labels: Mapping[str, str],
) -> bool:
    """Whether a workload in `namespace` with `labels` is governed by `scope`."""
    if not in_namespaces(scope, namespace, namespace_labels):
        return False
    return scope.selector is None or selects(scope.selector, labels)


@dataclass(frozen=True)
class Charge:
    """The budgets a pod is charged to, and why it is not charged as it asked, if so."""

    budgets: tuple[str, ...]
    problem: str | None = None


def charge(
    budgets: Mapping[str, Scope],
    namespace: str,
    namespace_labels: Mapping[str, str],
    labels: Mapping[str, str],
) -> Charge:
    """A pod is charged to every budget whose scope includes it.

    The budget label is honoured through scopes (a budget's selector may require it), never
    around them: it cannot add a budget whose scope excludes the pod (spending another
    team's budget) nor remove one whose scope includes it (escaping its own). A label naming
    an unknown budget, or one that does not cover the pod, is reported.
    """
    covering: Sequence[str] = sorted(
        name
        for name, scope in budgets.items()
        if in_scope(scope, namespace, namespace_labels, labels)
    )
    asked = labels.get(BUDGET_LABEL)
    if asked is None or asked in covering:
        return Charge(tuple(covering))
    reason = "no such budget" if asked not in budgets else "the pod is outside its scope"
    return Charge(
        tuple(covering),
        f"label {BUDGET_LABEL}={asked!r} ignored ({reason}); charged by scope to "
        + (", ".join(covering) or "no budget"),
    )
