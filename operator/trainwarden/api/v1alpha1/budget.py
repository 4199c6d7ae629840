"""TrainingBudget: accelerator-hour and cost budgets per period, with warn and enforce steps."""

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trainwarden.api.v1alpha1.budget_status import TrainingBudgetStatus
from trainwarden.api.v1alpha1.efficiency import EfficiencySignal
from trainwarden.api.v1alpha1.types import (
    DEFAULT_ACCELERATORS,
    APIModel,
    Duration,
    DurationOrZero,
    LabelKey,
    Mode,
    ResourceName,
    Scope,
    cel,
    time_zone,
)


class Period(APIModel):
    """The accounting period over which usage accumulates before it resets."""

    type: Literal["Daily", "Weekly", "Monthly", "Rolling", "Total"] = "Monthly"
    """type is Daily, Weekly or Monthly (calendar periods in timeZone), Rolling (the last
    window, sliding) or Total (never resets)."""
    time_zone: str = Field(default="UTC", min_length=1, max_length=64, examples=["Europe/Paris"])
    """timeZone is the IANA time zone in which calendar periods start at midnight."""
    window: Duration | None = None
    """window is the length of a Rolling period; required for Rolling, forbidden otherwise."""

    @field_validator("time_zone")
    @classmethod
    def _known_time_zone(cls, value: str) -> str:
        time_zone(value)
        return value

    @model_validator(mode="after")
    def _window_only_when_rolling(self) -> "Period":
        """The CEL rule below, also where the API server did not check it (an older
        server, or a spec read from elsewhere): a Rolling period without a window has no
        length to account over."""
        if (self.type == "Rolling") != (self.window is not None):
            raise ValueError("window is required when type is Rolling and not allowed otherwise")
        return self

    model_config = cel(
        (
            "self.type == 'Rolling' ? has(self.window) : !has(self.window)",
            "window is required when type is Rolling and not allowed otherwise",
        )
    )


MAX_STORAGE_CLASSES = 8
"""Storage classes a budget may limit by name, and price by name: its status shows those
(at most 16) before any other class."""
LIMITS_NEEDED = (
    "set at least one limit: acceleratorHours, acceleratorHoursByResource, cpuCoreHours, "
    "memoryGiBHours, cost, storageGiBHours or storageGiBHoursByClass"
)


class Limits(APIModel):
    """Limits per period. At least one must be set; usage of any one at 100 % is exhaustion."""

    accelerator_hours: float | None = Field(default=None, ge=0)
    """acceleratorHours limits card-hours summed over every accelerator resource."""
    accelerator_hours_by_resource: dict[str, float] = Field(default_factory=dict)
    """acceleratorHoursByResource limits card-hours per resource name, e.g. nvidia.com/gpu."""
    cpu_core_hours: float | None = Field(default=None, ge=0)
    """cpuCoreHours limits requested CPU cores multiplied by hours."""
    memory_gib_hours: float | None = Field(default=None, ge=0, alias="memoryGiBHours")
    """memoryGiBHours limits requested memory in GiB multiplied by hours."""
    cost: float | None = Field(default=None, ge=0)
    """cost limits the priced usage, in the currency of rates; requires rates."""
    storage_gib_hours: float | None = Field(default=None, ge=0, alias="storageGiBHours")
    """storageGiBHours limits the storage requested by PersistentVolumeClaims in scope, in
    GiB multiplied by hours, bound or not, mounted or not (docs/storage.md). Exhausted, it
    refuses new claims in scope; it never suspends a workload nor deletes data."""
    storage_gib_hours_by_class: dict[str, float] = Field(
        default_factory=dict, max_length=MAX_STORAGE_CLASSES, alias="storageGiBHoursByClass"
    )
    """storageGiBHoursByClass limits storageGiBHours per storage class name ("" for
    claims without a class)."""

    model_config = cel(
        (
            "has(self.acceleratorHours) || has(self.cpuCoreHours) || "
            "has(self.memoryGiBHours) || has(self.cost) || has(self.storageGiBHours) || "
            "(has(self.acceleratorHoursByResource) && size(self.acceleratorHoursByResource) > 0)"
            " || (has(self.storageGiBHoursByClass) && size(self.storageGiBHoursByClass) > 0)",
            LIMITS_NEEDED,
        ),
        (
            "!has(self.acceleratorHoursByResource) || "
            "self.acceleratorHoursByResource.all(k, self.acceleratorHoursByResource[k] >= 0.0)",
            "acceleratorHoursByResource values must not be negative",
        ),
        (
            "!has(self.storageGiBHoursByClass) || "
            "self.storageGiBHoursByClass.all(k, self.storageGiBHoursByClass[k] >= 0.0)",
            "storageGiBHoursByClass values must not be negative",
        ),
    )

    @model_validator(mode="after")
    def _limited(self) -> "Limits":
        """The CEL rules above, where no API server checked them."""
        if (
            all(
                v is None
                for v in (
                    self.accelerator_hours,
                    self.cpu_core_hours,
                    self.memory_gib_hours,
                    self.cost,
                    self.storage_gib_hours,
                )
            )
            and not self.accelerator_hours_by_resource
            and not self.storage_gib_hours_by_class
        ):
            raise ValueError(LIMITS_NEEDED)
        if any(v < 0 for v in self.accelerator_hours_by_resource.values()):
            raise ValueError("acceleratorHoursByResource values must not be negative")
        if any(v < 0 for v in self.storage_gib_hours_by_class.values()):
            raise ValueError("storageGiBHoursByClass values must not be negative")
        return self


MAX_PRICE = 1e9
"""The highest price per unit-hour: prices multiply pods' requests and hours, and past
this a cost could exceed what a float holds (1e308 of anything is no price)."""


class AcceleratorRate(APIModel):
    """The price of one accelerator-hour, optionally only on nodes carrying a label."""

    resource: ResourceName = "nvidia.com/gpu"
    """resource is the accelerator resource name this price applies to."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """nodeSelector restricts the price to nodes with these labels (e.g. the GPU model);
    the most specific matching rate wins."""
    price: float = Field(ge=0, le=MAX_PRICE)
    """price per accelerator-hour."""


class StorageRate(APIModel):
    """The price of one GiB-hour of storage requested in one storage class."""

    storage_class: str = Field(max_length=253)
    """storageClass is the class name ("" for claims without a class)."""
    price: float = Field(ge=0, le=MAX_PRICE)
    """price per requested GiB-hour."""


class ClusterPrices(APIModel):
    """Accelerator-hour prices per node, read from Prometheus: what the cluster's cost
    tool says a node costs (OpenCost and Kubecost export `node_gpu_hourly_cost`, the hourly
    cost of one GPU on each node)."""

    query: str = Field(default="node_gpu_hourly_cost", min_length=1, max_length=2048)
    """query is an instant PromQL expression with one series per node, valued in the
    price of one accelerator for one hour (a node with several series is priced at the
    highest)."""
    node_label: str = Field(
        default="node", min_length=1, max_length=128, pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$"
    )
    """nodeLabel is the series label that names the node."""
    resource: ResourceName = "nvidia.com/gpu"
    """resource is the accelerator these prices are for."""


class Rates(APIModel):
    """A price table; trainwarden has no built-in prices."""

    currency: str = Field(default="USD", min_length=1, max_length=8)
    """currency is a label for reports only."""
    accelerator_hour: list[AcceleratorRate] = Field(default_factory=list, max_length=64)
    """acceleratorHour prices by resource name and node labels."""
    cpu_core_hour: float = Field(default=0, ge=0, le=MAX_PRICE)
    """cpuCoreHour is the price of one requested core for one hour."""
    memory_gib_hour: float = Field(default=0, ge=0, le=MAX_PRICE, alias="memoryGiBHour")
    """memoryGiBHour is the price of one requested GiB for one hour."""
    storage_gib_hour: list[StorageRate] = Field(
        default_factory=list, max_length=MAX_STORAGE_CLASSES, alias="storageGiBHour"
    )
    """storageGiBHour prices requested storage per class; a class not listed is free.
    Storage's cost counts toward the cost limit (docs/storage.md)."""
    accelerator_hour_from: ClusterPrices | None = None
    """acceleratorHourFrom prices each node's accelerator-hours as Prometheus says (e.g.
    OpenCost's node_gpu_hourly_cost); a node it has no price for falls back to
    acceleratorHour. Which source priced what is in status.prices."""


class Thresholds(APIModel):
    """Percentages of the limit at which the escalation ladder steps up."""

    warn: int = Field(default=80, ge=1, le=1000)
    """warn raises a Warning event, the BudgetWarning condition and a metric."""
    enforce: int = Field(default=100, ge=1, le=1000)
    """enforce suspends charged workloads (in Enforce mode) once usage reaches it."""

    model_config = cel(("self.warn <= self.enforce", "warn must not be above enforce"))

    @model_validator(mode="after")
    def _ordered(self) -> "Thresholds":
        """The CEL rule above, where no API server checked it."""
        if self.warn > self.enforce:
            raise ValueError("warn must not be above enforce")
        return self


SuspendOrder = Literal["Newest", "Oldest", "LowestPriority", "Largest"]


class Enforcement(APIModel):
    """How an exhausted budget suspends the work charged to it."""

    order: list[SuspendOrder] = Field(
        default=["LowestPriority", "Newest"], min_length=1, max_length=4
    )
    """order ranks workloads to suspend first; later entries break ties."""
    grace_period: DurationOrZero = timedelta(minutes=5)
    """gracePeriod is how long after exhaustion charged workloads keep running (warned by
    an Event) before they are suspended; "0s" suspends at once."""
    resume: Literal["Automatic", "Never"] = "Automatic"
    """resume Automatic resumes what this budget suspended when the period resets or the
    limit is raised; nothing suspended by anyone else is ever resumed."""
    max_suspensions_per_minute: int = Field(default=10, ge=1, le=1000)
    """maxSuspensionsPerMinute caps how many workloads this budget may suspend in any
    minute (the blast radius), and how many held workloads it starts in any minute once
    it has room again (so that a queue of held work does not start all at once)."""
    new_workloads: Literal["Hold", "Allow"] = "Hold"
    """newWorkloads Hold: while the budget is exhausted, workloads created in its scope
    (Jobs, JobSets, Kubeflow jobs, RayJobs, bare pods) are held instead of starting: created
    suspended (a bare pod behind a scheduling gate) and started, oldest first, when the
    budget has room again. Allow lets them start, to be suspended with the rest after the
    grace period. Holding needs the chart's admission webhook; without it (or while the
    operator is down) new work starts as usual. In DryRun, creations only get a warning."""


class TrainingBudgetSpec(APIModel):
    """What a TrainingBudget limits, over which workloads, and how it enforces."""

    mode: Mode = "DryRun"
    """mode Enforce suspends workloads; DryRun (the default) only reports what it would do."""
    scope: Scope
    """scope picks the workloads charged to this budget."""
    period: Period = Period()
    """period is when usage resets."""
    limits: Limits
    """limits per period."""
    accelerators: list[ResourceName] = Field(
        default=list(DEFAULT_ACCELERATORS), min_length=1, max_length=16
    )
    """accelerators lists the extended resources counted as accelerators."""
    rates: Rates | None = None
    """rates prices usage; required for a cost limit."""
    thresholds: Thresholds = Thresholds()
    """thresholds at which to warn and enforce."""
    enforcement: Enforcement = Enforcement()
    """enforcement tunes suspension."""
    attribution_labels: list[LabelKey] = Field(
        default=["team", "project", "experiment"], max_length=8
    )
    """attributionLabels are the pod labels usage is broken down by in status."""
    efficiency: EfficiencySignal = EfficiencySignal()
    """efficiency is how the accelerators' work is measured (with --prometheus-url): the
    status then shows held, used, idle and unknown accelerator-hours (docs/efficiency.md)."""
    history_limit: int = Field(default=12, ge=0, le=24)
    """historyLimit is how many past periods status keeps (at most 24, so that status
    stays small; `trainwarden report` and metrics keep the long view)."""
    repeats: Literal["Warn", "Hold"] = "Warn"
    """repeats: what the admission webhook does with new work in scope that declares the
    same config hash and data version as a finished run's receipt in its namespace (the
    experiment ledger, docs/receipts.md). Warn (the default): a kubectl warning and an
    Event naming the earlier run's receipt, outcome and cost. Hold, in Enforce: created
    suspended (a bare pod gated) until its submitter starts it (unsuspends it); work
    annotated trainwarden.dev/repeat-intended: "true" is only warned about."""

    model_config = cel(
        (
            "!has(self.limits.cost) || has(self.rates)",
            "a cost limit needs rates to price usage",
        )
    )

    @model_validator(mode="after")
    def _priced(self) -> "TrainingBudgetSpec":
        """The CEL rule above, where no API server checked it."""
        if self.limits.cost is not None and self.rates is None:
            raise ValueError("a cost limit needs rates to price usage")
        return self


class TrainingBudget(APIModel):
    """TrainingBudget limits accelerator-hours (and optionally cost) of the workloads it
    scopes, per period, and suspends them when the budget is spent."""

    api_version: Literal["trainwarden.dev/v1alpha1"] = "trainwarden.dev/v1alpha1"
    """apiVersion of the object."""
    kind: Literal["TrainingBudget"] = "TrainingBudget"
    """kind of the object."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """metadata is the standard object metadata."""
    spec: TrainingBudgetSpec
    """spec is the desired budget."""
    status: TrainingBudgetStatus = Field(default_factory=TrainingBudgetStatus)
    """status is the observed state."""
