"""BudgetUsage: one TrainingBudget's figures, as one namespace it charges may read them.

A TrainingBudget is cluster-scoped and its status names every namespace's usage, so it is
not aggregated into the namespace `view` role (docs/security.md). The operator writes one
BudgetUsage per namespace the budget covers and charges, in that namespace, named after the
budget and owned by it (GC removes it with the budget): what Kueue's LocalQueue is to its
ClusterQueue, and Kyverno's PolicyReport to its policy.

Its figures are in `spec`, like a RunReceipt's, with no status subresource: nobody asks
anything of it (there is no desired state to split from an observed one), and one write,
create or merge patch, carries the whole object (a status subresource would make every
create two writes, and a new object empty in between). Top-level fields, as PolicyReport
has, would set it apart from the project's other kinds (the CRD generator, `kubectl explain
budgetusage.spec`) for no gain. It is a copy for reading: the operator never reads one back
as truth, and overwrites it (budget/usage.py).
"""

from typing import Any, Literal

from pydantic import Field

from trainwarden.api.v1alpha1.budget import Limits
from trainwarden.api.v1alpha1.budget_status import ResourceUsage
from trainwarden.api.v1alpha1.types import APIModel, Mode, Time

State = Literal["Exhausted", "Warning", "Ready", "Unknown"]


class NamespaceShare(APIModel):
    """What this namespace spent of the budget this period (its entry in the budget's
    status.breakdown.byNamespace)."""

    accelerator_hours: float = Field(default=0, ge=0)
    """acceleratorHours charged to the budget by this namespace's pods."""
    cost: float = Field(default=0, ge=0)
    """cost of those, at the budget's rates (0 without rates)."""
    percent_of_used: float | None = Field(default=None, ge=0, le=100)
    """percentOfUsed is acceleratorHours over the whole budget's accelerator-hours used, in
    percent; absent when the budget used none."""


class BudgetUsageSpec(APIModel):
    """A TrainingBudget's state and totals, and this namespace's share of them."""

    budget: str = Field(max_length=253)
    """budget is the TrainingBudget's name."""
    mode: Mode
    """mode is the budget's mode: Enforce, or DryRun (it only reports)."""
    period: Literal["Daily", "Weekly", "Monthly", "Rolling", "Total"]
    """period is the budget's period type."""
    period_start: Time | None = None
    """periodStart of the current period."""
    period_end: Time | None = None
    """periodEnd of the current period (absent for Rolling and Total)."""
    state: State
    """state is the budget's first True condition of Exhausted, Warning and Ready (Unknown
    when none is)."""
    percent: float | None = None
    """percent of the budget's most constrained limit used."""
    most_constrained: str | None = Field(default=None, max_length=320)
    """mostConstrained names that limit, e.g. acceleratorHours."""
    limits: Limits
    """limits of the whole budget (its spec.limits)."""
    used: ResourceUsage
    """used by the whole budget this period, every namespace it charges together."""
    remaining: dict[str, float] = Field(default_factory=dict)
    """remaining of the whole budget, per limited dimension."""
    namespace: NamespaceShare
    """namespace is this namespace's share; never another namespace's."""
    evaluated_at: Time | None = None
    """evaluatedAt is when the budget computed these figures (its status.lastEvaluated)."""


class BudgetUsage(APIModel):
    """BudgetUsage shows a namespace the TrainingBudget that charges it: written by the
    operator, read by the namespace's teams."""

    api_version: Literal["trainwarden.dev/v1alpha1"] = "trainwarden.dev/v1alpha1"
    """apiVersion is trainwarden.dev/v1alpha1."""
    kind: Literal["BudgetUsage"] = "BudgetUsage"
    """kind is BudgetUsage."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """metadata is the object's metadata."""
    spec: BudgetUsageSpec
    """spec is the budget's figures as this namespace sees them."""
