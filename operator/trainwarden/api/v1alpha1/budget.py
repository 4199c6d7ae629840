"""TrainingBudget: accelerator-hour and cost budgets per period, with warn and enforce steps."""

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trainwarden.api.v1alpha1.efficiency import EfficiencySignal, EfficiencyStatus
from trainwarden.api.v1alpha1.types import (
    DEFAULT_ACCELERATORS,
    APIModel,
    Condition,
    Duration,
    DurationOrZero,
    LabelKey,
    Mode,
    ObjectReference,
    ResourceName,
    Scope,
    Time,
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

    model_config = cel(
        (
            "has(self.acceleratorHours) || has(self.cpuCoreHours) || "
            "has(self.memoryGiBHours) || has(self.cost) || "
            "(has(self.acceleratorHoursByResource) && size(self.acceleratorHoursByResource) > 0)",
            "set at least one limit: acceleratorHours, acceleratorHoursByResource, "
            "cpuCoreHours, memoryGiBHours or cost",
        ),
        (
            "!has(self.acceleratorHoursByResource) || "
            "self.acceleratorHoursByResource.all(k, self.acceleratorHoursByResource[k] >= 0.0)",
            "acceleratorHoursByResource values must not be negative",
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
                )
            )
            and not self.accelerator_hours_by_resource
        ):
            raise ValueError(
                "set at least one limit: acceleratorHours, acceleratorHoursByResource, "
                "cpuCoreHours, memoryGiBHours or cost"
            )
        if any(v < 0 for v in self.accelerator_hours_by_resource.values()):
            raise ValueError("acceleratorHoursByResource values must not be negative")
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


class ResourceUsage(APIModel):
    """Usage along every dimension a budget can limit."""

    accelerator_hours: float = 0
    """acceleratorHours summed over every accelerator resource."""
    accelerator_hours_by_resource: dict[str, float] = Field(default_factory=dict)
    """acceleratorHoursByResource per resource name."""
    cpu_core_hours: float = 0
    """cpuCoreHours requested cores multiplied by hours."""
    memory_gib_hours: float = Field(default=0, alias="memoryGiBHours")
    """memoryGiBHours requested GiB multiplied by hours."""
    cost: float = 0
    """cost priced through the budget's rates."""


class UsageShare(APIModel):
    """Usage attributed to one key (a namespace, a label value or an outcome)."""

    key: str
    """key is the namespace, label value or outcome."""
    accelerator_hours: float = 0
    """acceleratorHours attributed to the key."""
    cost: float = 0
    """cost attributed to the key."""


class UsageBreakdown(APIModel):
    """Who spent the budget, and on what outcome."""

    by_namespace: list[UsageShare] = Field(default_factory=list)
    """byNamespace usage per namespace."""
    by_label: dict[str, list[UsageShare]] = Field(default_factory=dict)
    """byLabel usage per value of each attribution label."""
    by_outcome: list[UsageShare] = Field(default_factory=list)
    """byOutcome usage of succeeded, failed and running pods."""


class PeriodSummary(APIModel):
    """The total of a past period."""

    start: Time
    """start of the period."""
    end: Time
    """end of the period."""
    usage: ResourceUsage
    """usage over the period."""
    percent: float
    """percent of the most constrained limit used."""


MAX_SUSPENDED = 50
MAX_PENDING = 10
"""Workloads one budget may hold suspended at once: its record of them lives in its
status, which stays bounded (docs/budgets.md)."""


class SuspendedWorkload(APIModel):
    """A workload this budget suspended: its own record, and so the only kind it may
    resume. Labels on the workload are for people; the budget trusts this record."""

    ref: ObjectReference
    """ref is the suspended object, uid included."""
    suspended_at: Time
    """suspendedAt is when it was suspended."""
    generation: int = 0
    """generation of the budget's spec when it suspended the workload."""
    period_start: Time | None = None
    """periodStart of the period in which it was suspended: a workload is resumed only
    once the period or the spec changed since."""


class LedgerTally(APIModel):
    """Usage of pods that are gone, in total and by key (the largest keys, "(other)" for
    the rest)."""

    total: ResourceUsage = ResourceUsage()
    """total usage."""
    breakdown: UsageBreakdown = UsageBreakdown()
    """breakdown by namespace, attribution label and outcome."""


class UsageBucket(APIModel):
    """Usage of gone pods within one time bucket of a Rolling window."""

    start: Time
    """start of the bucket."""
    usage: ResourceUsage
    """usage within the bucket."""


class MeasureBucket(APIModel):
    """What gone pods' accelerators did within one time bucket of a Rolling window."""

    start: Time
    """start of the bucket."""
    measured_accelerator_hours: float = 0
    """measuredAcceleratorHours with a sample."""
    used_accelerator_hours: float = 0
    """usedAcceleratorHours of work."""


class EfficiencyLedger(APIModel):
    """What gone pods' accelerators did this period, kept like their usage."""

    measured: LedgerTally = LedgerTally()
    """measured accelerator-hours (with a sample), as usage at the pods' rates."""
    used: LedgerTally = LedgerTally()
    """used accelerator-hours (measured times utilization)."""
    buckets: list[MeasureBucket] = Field(default_factory=list, max_length=40)
    """buckets per time bucket of a Rolling window."""


class Ledger(APIModel):
    """What must survive an operator restart for usage to stay exact (docs/budgets.md).
    Its size depends on the keys shown, never on the number of pods."""

    observed_at: Time | None = None
    """observedAt is when `used` and `breakdown` were computed: after a restart, pods
    that vanished meanwhile are charged up to then."""
    closed: LedgerTally = LedgerTally()
    """closed is the usage of pods that are gone, in the current period."""
    buckets: list[UsageBucket] = Field(default_factory=list, max_length=40)
    """buckets hold the usage of gone pods per time bucket of a Rolling window."""
    estimated: ResourceUsage | None = None
    """estimated is the part of `used` charged for pods deleted while the operator was
    down: up to when it last saw them, the rest of their run unknown."""
    efficiency: EfficiencyLedger | None = None
    """efficiency of the pods that are gone (see status.efficiency)."""


MAX_RELEASED = 16
"""Started held workloads one budget keeps committed at once: its record of them lives in
its status, which stays bounded; a further one that declares a cost waits until one of
them finishes (docs/budgets.md)."""


class ReleasedWorkload(APIModel):
    """A held workload this budget started, with what it declared it would cost: what is
    left of that stays committed until it finishes, across evaluations and restarts, so
    that what the budget starts never adds up to more than it had left."""

    ref: ObjectReference
    """ref is the started object, uid included."""
    estimate: ResourceUsage
    """estimate is what it declared it would cost (trainwarden.dev/expected-duration times
    its pods' requests) when it was started."""
    released_at: Time
    """releasedAt is when it was started: its usage since then is subtracted."""


class AdmissionStatus(APIModel):
    """What the admission webhook reads: whether new workloads in scope are held now."""

    holding: bool = False
    """holding is true while the budget is exhausted and holds new workloads (in DryRun:
    would hold them, and creations get a warning)."""
    hold_until: Time | None = None
    """holdUntil: the webhook holds new workloads only until then. The operator renews it
    every few minutes while it holds, never past the end of the period: an operator that
    stopped holds nothing for long, and a reset period holds nothing at all."""
    held: int = Field(default=0, ge=0)
    """held counts the workloads this budget holds now, waiting for room."""
    released: list[ReleasedWorkload] = Field(default_factory=list, max_length=MAX_RELEASED)
    """released lists held workloads this budget started that still run within what they
    declared: what they have not used yet is not offered to other held work."""
    observed_generation: int = 0
    """observedGeneration of the spec the hold was decided on: the webhook ignores a hold
    of an older spec (a raised limit is not held against)."""


class TrainingBudgetStatus(APIModel):
    """Observed usage and what the budget did about it."""

    observed_generation: int = 0
    """observedGeneration is the generation of the spec this status reflects."""
    conditions: list[Condition] = Field(default_factory=list)
    """conditions: Ready, Warning, Exhausted."""
    period_start: Time | None = None
    """periodStart of the current period."""
    period_end: Time | None = None
    """periodEnd of the current period (absent for Total)."""
    used: ResourceUsage | None = None
    """used in the current period."""
    remaining: dict[str, float] = Field(default_factory=dict)
    """remaining in the current period, for each limited dimension only (acceleratorHours,
    acceleratorHours[<resource>], cpuCoreHours, memoryGiBHours, cost); never negative."""
    percent: float | None = None
    """percent of the most constrained limit used."""
    burn_rate_per_hour: ResourceUsage | None = None
    """burnRatePerHour is the current rate of usage."""
    projected_exhaustion: Time | None = None
    """projectedExhaustion is when the budget runs out at the current burn rate."""
    breakdown: UsageBreakdown | None = None
    """breakdown of usage by namespace, attribution label and outcome."""
    most_constrained: str | None = None
    """mostConstrained names the limit closest to exhaustion, e.g. acceleratorHours."""
    suspended: list[SuspendedWorkload] = Field(default_factory=list, max_length=MAX_SUSPENDED)
    """suspended lists workloads this budget suspended and has not resumed."""
    admission: AdmissionStatus | None = None
    """admission is what the admission webhook holds new workloads by."""
    pending_actions: list[str] = Field(default_factory=list, max_length=MAX_PENDING)
    """pendingActions says what the budget would do (DryRun) or is waiting to do (grace
    period, per-minute cap, Kueue-managed workloads), one line each."""
    ledger: Ledger | None = None
    """ledger is the operator's restart-safe memory of pods that are gone."""
    efficiency: EfficiencyStatus | None = None
    """efficiency: how much of the accelerator time charged this period did work."""
    history: list[PeriodSummary] = Field(default_factory=list)
    """history of past periods, newest first, at most historyLimit."""
    last_evaluated: Time | None = None
    """lastEvaluated is when usage was last computed."""


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
