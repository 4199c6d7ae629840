"""A TrainingBudget's status: its usage, what it suspended and holds, its ledger, its history."""

from pydantic import Field

from trainwarden.api.v1alpha1.efficiency import EfficiencyStatus
from trainwarden.api.v1alpha1.types import (
    APIModel,
    Condition,
    ObjectReference,
    Time,
)


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


class UsageCopies(APIModel):
    """The BudgetUsages the operator keeps for this budget, one in each namespace it covers
    and charges (docs/budgets.md, "Teams read their usage"), as the last evaluation wrote
    them; said with the status's next write (at most a minute later)."""

    namespaces: int = Field(default=0, ge=0)
    """namespaces counts those that have one."""
    missing: list[str] = Field(default_factory=list, max_length=3)
    """missing says which charged namespaces have none, and why, one line each."""


class PriceSources(APIModel):
    """Where the prices of the nodes the budget's running pods are on came from."""

    query: str
    """query is the acceleratorHourFrom expression."""
    fetched_at: Time | None = None
    """fetchedAt is when its answer in use was read (absent: never read)."""
    nodes_priced: int = 0
    """nodesPriced is how many nodes its answer priced."""
    from_query: int = 0
    """fromQuery counts the charged pods' nodes priced by the query."""
    from_rates: int = 0
    """fromRates counts those priced by acceleratorHour instead (the query had none)."""
    unpriced: int = 0
    """unpriced counts those neither prices: their accelerator-hours cost nothing."""
    message: str | None = Field(default=None, max_length=1024)
    """message says why the query's answer is not in use, when it is not."""


MAX_STORAGE_KEYS = 17
"""Storage classes shown (16 and "(other)")."""


class StorageBucket(APIModel):
    """A Rolling window's storage in one time bucket (window / 32)."""

    start: Time
    """start of the bucket."""
    used_gib_hours: float = Field(default=0, alias="usedGiBHours")
    """usedGiBHours charged in the bucket, every class together."""


class StorageStatus(APIModel):
    """Storage charged this period: PersistentVolumeClaims in scope, requested GiB
    multiplied by hours (docs/storage.md)."""

    observed_at: Time | None = None
    """observedAt: every claim is charged up to here (a restart charges from here)."""
    used_gib_hours: float = Field(default=0, alias="usedGiBHours")
    """usedGiBHours over every class."""
    requested_gib: float = Field(default=0, alias="requestedGiB")
    """requestedGiB by the claims charged now: the GiB-hours added per hour."""
    claims: int = 0
    """claims charged now."""
    cost: float | None = None
    """cost of storage at spec.rates.storageGiBHour (counted in the cost limit)."""
    by_class: dict[str, float] = Field(default_factory=dict, max_length=MAX_STORAGE_KEYS)
    """byClass GiB-hours per storage class ("" for claims without one; 16 shown: those the
    spec names, then the largest; the rest as "(other)")."""
    buckets: list[StorageBucket] = Field(default_factory=list, max_length=33)
    """buckets: a Rolling window's storage per time bucket (the ledger of that window)."""


class StorageAdmission(APIModel):
    """Whether the admission webhook refuses new PersistentVolumeClaims in scope."""

    refusing: bool = False
    """refusing is True while a storage limit or the cost limit is at the enforce threshold
    (Enforce: claims are refused; DryRun: they are allowed with a warning)."""
    refuse_until: Time | None = None
    """refuseUntil: the webhook believes refusing until then (renewed while it lasts, never
    past the period's end): an operator that stopped refuses nothing for long."""
    message: str | None = Field(default=None, max_length=256)
    """message names the limit and its figures, as the refusal says it."""
    observed_generation: int = 0
    """observedGeneration of the spec it was decided on: a raised limit is not refused by."""


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
    budget_usages: UsageCopies | None = None
    """budgetUsages: the namespaces' copies of these figures (BudgetUsage objects)."""
    history: list[PeriodSummary] = Field(default_factory=list)
    """history of past periods, newest first, at most historyLimit."""
    storage: StorageStatus | None = None
    """storage charged this period (with a storage limit or storage rates)."""
    storage_admission: StorageAdmission | None = None
    """storageAdmission is what the admission webhook refuses new claims by."""
    prices: PriceSources | None = None
    """prices says where accelerator prices came from (with spec.rates.acceleratorHourFrom)."""
    last_evaluated: Time | None = None
    """lastEvaluated is when usage was last computed."""
