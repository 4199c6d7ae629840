"""RunReceipt: what one finished (or deleted) training run held, used, cost and lost.

Unlike the policies, a receipt is namespaced (it lives beside the run, so a team reads its
own with namespace RBAC) and it is a record, not a request: the operator writes it once,
whole, in `spec`, and never changes it (no status). docs/receipts.md says why and how
receipts are bounded.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from trainwarden.api.v1alpha1.checkpoint_status import TrainerResult
from trainwarden.api.v1alpha1.types import APIModel, LabelValue, ObjectReference, cel

MAX_CHARGES = 16
MAX_LABELS = 16
MAX_LOSSES = 20
MAX_PARAMS = 32
"""Parameters a receipt records (the experiment ledger: core/ledger.py bounds them)."""
MAX_KEY = 63
MAX_VALUE = 256
MAX_TOTAL = 4096
"""Characters of the params annotation: a longer one is not read at all."""
MAX_VERSION = 256
"""Characters of a data version, code version or config hash."""
MAX_DROPPED = 8
MAX_NOTE = 200
MAX_STORAGE_CLASSES = 8
"""Storage classes a receipt names; the rest are summed as "(other)"."""
MAX_UNKNOWN_CLAIMS = 8

Outcome = Literal["Succeeded", "Failed", "Deleted"]


class AcceleratorHours(APIModel):
    """Accelerator-hours of the run: held = used + idle + unknown."""

    held: float = Field(default=0.0, ge=0)
    """held is what the run's pods requested, over the time they held it."""
    used: float = Field(default=0.0, ge=0)
    """used is the part of held the accelerators spent busy, as Prometheus measured it."""
    idle: float = Field(default=0.0, ge=0)
    """idle is the part of held measured and not busy."""
    unknown: float = Field(default=0.0, ge=0)
    """unknown is the part of held without a measurement (no Prometheus, gaps): never
    counted as used or idle."""
    effective_percent: float | None = Field(default=None, ge=0, le=100)
    """effectivePercent is used over held, in percent; absent when nothing was held or
    nothing measured (all of it unknown)."""


class Charged(APIModel):
    """One budget the run was charged to, at that budget's rates."""

    budget: str = Field(max_length=253)
    """budget is the TrainingBudget's name."""
    cost: float = Field(default=0.0, ge=0)
    """cost is the run's usage priced by the budget's rates (0 without rates)."""


class Pods(APIModel):
    """The run's pods and their failures."""

    started: int = Field(default=0, ge=0)
    """started counts the pods that got a start time."""
    failed: int = Field(default=0, ge=0)
    """failed counts the pods that ended Failed."""
    restarts: int = Field(default=0, ge=0)
    """restarts sums the containers' restart counts over the run's pods."""
    failed_accelerator_hours: float = Field(default=0.0, ge=0)
    """failedAcceleratorHours is what the failed pods held."""


class Interruptions(APIModel):
    """Suspensions the run suffered, seen as transitions while the operator watched it."""

    suspensions: int = Field(default=0, ge=0)
    """suspensions counts every suspension, whoever set it."""
    budget_suspensions: int = Field(default=0, ge=0)
    """budgetSuspensions counts those a TrainingBudget made (its trainwarden.dev/suspended-by
    label appeared)."""
    idle_reclaims: int = Field(default=0, ge=0)
    """idleReclaims counts those an IdleReclaimPolicy made (trainwarden.dev/reclaimed-by)."""


class Checkpoints(APIModel):
    """What a CheckpointPolicy knows of the location the run names in its
    trainwarden.dev/checkpoint-path annotation, as of that policy's last run there."""

    location: str = Field(max_length=1100)
    """location is the annotation's value."""
    policy: str = Field(default="", max_length=253)
    """policy is the CheckpointPolicy that governs the location ("" if none does)."""
    count: int | None = Field(default=None, ge=0)
    """count is how many checkpoints the policy's last run kept there."""
    bytes: int | None = Field(default=None, ge=0)
    """bytes is how many bytes they hold: what the run left there, as of asOf (a later
    pruning is not on the receipt, which is never changed)."""
    bytes_freed: int | None = Field(default=None, ge=0)
    """bytesFreed is how many bytes the policy has freed at the location since it began
    governing it, as of asOf (runs that share a location share this figure)."""
    as_of: datetime | None = None
    """asOf is when that run was."""


class ClassHours(APIModel):
    """The storage one class held for the run."""

    storage_class: str = Field(max_length=253)
    """storageClass is the claims' class ("" for none; "(other)" sums the classes past
    the first eight)."""
    gib_hours: float = Field(ge=0)
    """gibHours is their requests in GiB times the hours they overlapped the run."""


class Storage(APIModel):
    """The storage the run held: the PersistentVolumeClaims its pods mounted, each
    counted once, charged its request for the part of its life within the run
    (core/run_storage.py)."""

    gib_hours: float | None = Field(default=None, ge=0)
    """gibHours sums the known claims' requests (GiB) times the hours each overlapped
    [startedAt, finishedAt], up to its deletion; absent when no claim is known."""
    by_class: list[ClassHours] = Field(default_factory=list, max_length=MAX_STORAGE_CLASSES + 1)
    """byClass splits gibHours by storage class, largest first."""
    claims: int = Field(default=0, ge=0)
    """claims counts the distinct claims charged."""
    unknown_claims: int = Field(default=0, ge=0)
    """unknownClaims counts the mounted claims of which nothing is known (gone before
    the receipt and forgotten, or never seen): never guessed, not in gibHours."""
    unknown: list[str] = Field(default_factory=list, max_length=MAX_UNKNOWN_CLAIMS)
    """unknown names the first eight of them."""
    note: str = Field(default="", max_length=512)
    """note says what the figure could not see."""


class Loss(APIModel):
    """One failure or suspension and the compute it is estimated to have lost."""

    at: datetime
    """at is when the pods failed or were suspended."""
    reason: Literal["Failed", "Suspended"]
    """reason is Failed (a pod failed) or Suspended (the workload was suspended)."""
    seconds: float = Field(ge=0)
    """seconds since the newest complete checkpoint written before it came to rest (or
    since the work began again, if that is later): a checkpoint saved while a suspended
    job's pods stopped makes it 0."""
    accelerators: float = Field(ge=0)
    """accelerators the run held at that moment."""
    accelerator_hours: float = Field(ge=0)
    """acceleratorHours is seconds x accelerators, in hours."""
    upper_bound: bool = False
    """upperBound: no scan of the location came after it, so a checkpoint written since
    the last scan is not counted: the loss is at most this."""


class FailureWaste(APIModel):
    """Compute lost to failures and suspensions: the work done since the newest complete
    checkpoint, which a restart has to do again."""

    accelerator_hours: float | None = Field(default=None, ge=0)
    """acceleratorHours sums the losses that could be estimated; absent when none could
    (no CheckpointPolicy scans the location, or every interruption is older than the
    checkpoint history it keeps)."""
    losses: list[Loss] = Field(default_factory=list, max_length=MAX_LOSSES)
    """losses lists the largest ones (at most 20)."""
    note: str = Field(default="", max_length=512)
    """note says what the estimate could not see."""


class Experiment(APIModel):
    """What the run declared it is, in its workload's annotations (a bare pod's own):
    trainwarden.dev/params, data-version, code-version, config-hash. Only the valid part
    is recorded (core/ledger.py bounds it); `dropped` says what was left out and why."""

    params: dict[str, str] = Field(default_factory=dict, max_length=MAX_PARAMS)
    """params are the declared key parameters (at most 32; a key of at most 63 characters,
    a value of at most 256; numbers and booleans as JSON spells them)."""
    data_version: str | None = Field(default=None, max_length=MAX_VERSION)
    """dataVersion is the declared version of the data the run read."""
    code_version: str | None = Field(default=None, max_length=MAX_VERSION)
    """codeVersion is the declared version of the code the run executed."""
    config_hash: str | None = Field(default=None, max_length=MAX_VERSION)
    """configHash is the declared trainwarden.dev/config-hash; without one, when the run
    declares params or a code version, the operator computes it: "sha256:" and the first
    16 hex digits of the SHA-256 of the canonical JSON of params, dataVersion and
    codeVersion (configHashSource says which). The admission webhook compares it, with
    dataVersion, to warn of a repeat."""
    config_hash_source: Literal["Declared", "Computed"] | None = None
    """configHashSource: Declared (the annotation) or Computed (by the operator)."""
    dropped: list[str] = Field(default_factory=list, max_length=MAX_DROPPED)
    """dropped says what the annotations declared that was not recorded, and why (at most
    8 notes; the last counts the rest)."""


class RunReceiptSpec(APIModel):
    """The receipt of one run, written once when it finished or was deleted."""

    workload: ObjectReference
    """workload is the top-level workload (Job, JobSet, PyTorchJob, RayJob, bare Pod)."""
    outcome: Outcome
    """outcome is Succeeded, Failed, or Deleted (deleted before it finished)."""
    started_at: datetime
    """startedAt is when its first pod started."""
    finished_at: datetime
    """finishedAt is when it finished, or its last pod ended."""
    wall_seconds: float = Field(ge=0)
    """wallSeconds is finishedAt - startedAt."""
    wall_time: str = Field(max_length=32)
    """wallTime is wallSeconds spelled as a duration ("2h14m5s")."""
    accelerator_hours: AcceleratorHours
    """acceleratorHours held, used, idle and unknown."""
    measurement: str = Field(default="", max_length=512)
    """measurement says why used and idle are unknown, when they are."""
    cost: float = Field(default=0.0, ge=0)
    """cost is the highest of the charges (budgets may overlap: they are never added)."""
    charges: list[Charged] = Field(default_factory=list, max_length=MAX_CHARGES)
    """charges lists the budgets the run was charged to."""
    labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)
    """labels are the run's attribution labels (the budgets' attributionLabels)."""
    pods: Pods = Pods()
    """pods started, failed and restarted."""
    interruptions: Interruptions = Interruptions()
    """interruptions the run suffered."""
    checkpoints: Checkpoints | None = None
    """checkpoints the run left, where a CheckpointPolicy governs its location."""
    storage: Storage | None = None
    """storage is what the claims its pods mounted held while it ran; absent when they
    mounted none."""
    failure_waste: FailureWaste | None = None
    """failureWaste estimates the compute failures and suspensions lost; only for a run
    that names its checkpoint location."""
    experiment: Experiment | None = None
    """experiment is what the run declared it is (params, data and code versions, config
    hash); absent when it declared none of them."""
    result: TrainerResult | None = None
    """result is what the trainer's own state said the run achieved (a metric's final and
    best value), as the newest scan of the run's checkpoint location by a CheckpointPolicy
    governing it read it; never from an annotation."""
    partial: bool = False
    """partial is true when the operator did not watch the whole run (it started, or
    restarted, after the run began): pods that ended before are missing."""
    observed_from: datetime | None = None
    """observedFrom is when the operator began watching the run."""

    model_config = cel(("self == oldSelf", "a receipt is a record: it is never changed"))


class RunReceipt(APIModel):
    """The receipt of a finished run: an entry in the run ledger."""

    api_version: Literal["trainwarden.dev/v1alpha1"] = "trainwarden.dev/v1alpha1"
    """apiVersion is trainwarden.dev/v1alpha1."""
    kind: Literal["RunReceipt"] = "RunReceipt"
    """kind is RunReceipt."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """metadata is the object's metadata."""
    spec: RunReceiptSpec
    """spec is the receipt."""
