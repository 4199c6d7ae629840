"""VolumeReclaimPolicy: find PersistentVolumeClaims no pod has mounted for a stated time,
report them, and (in Enforce, after a grace period) snapshot and delete them.

A kind of its own, not a section of IdleReclaimPolicy: it acts on other objects (claims,
not pods) with another destructive verb (`delete persistentvolumeclaims`) that an admin
may leave out of the chart altogether (docs/storage.md, docs/security.md).
"""

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from trainwarden.api.v1alpha1.types import (
    APIModel,
    Condition,
    Duration,
    Mode,
    Scope,
    Time,
    format_duration,
)

MAX_TRACKED = 40
"""Claims the policy keeps a last-mount record for (status.claims). A claim beyond it is
not aged at all (never deleted); a condition says how many. 40 worst-case entries keep
the whole status under 48 KiB (tests/test_volumes_reconcile.py)."""
MAX_RECENT = 200
"""maxActionsPerMinute (at most 100) of the last minute, and 60 sums of the hour before."""
MAX_NOTES = 10
NOTE_LENGTH = 256
MIN_UNMOUNTED = timedelta(minutes=1)
MAX_UNMOUNTED = timedelta(days=3650)
StorageClassName = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]


class VolumeSnapshotting(APIModel):
    """Take a VolumeSnapshot of a claim before deleting it."""

    volume_snapshot_class_name: str = Field(min_length=1, max_length=253)
    """volumeSnapshotClassName of the snapshot (snapshot.storage.k8s.io/v1)."""
    timeout: Duration = timedelta(minutes=30)
    """timeout for the snapshot to report readyToUse; past it the claim is not deleted
    (reported, condition SnapshotsReady False) until someone deletes the snapshot."""


class VolumeExemptions(APIModel):
    """How far the policy honours trainwarden.dev/keep-until on a claim (the label
    trainwarden.dev/protect: "true" always exempts)."""

    max_keep_duration: Duration = timedelta(days=7)
    """maxKeepDuration caps trainwarden.dev/keep-until from when the policy first saw it."""


class VolumeReclaimPolicySpec(APIModel):
    """Which claims count as orphaned, and what happens to them."""

    mode: Mode = "DryRun"
    """mode Enforce snapshots and deletes; DryRun (the default) only reports what it would
    do, in status.plannedActions."""
    scope: Scope
    """scope picks the claims: their namespace, then their labels (selector)."""
    storage_class_names: list[StorageClassName] = Field(default_factory=list, max_length=32)
    """storageClassNames narrows the scope to claims of these classes; all otherwise."""
    unmounted_for: Duration
    """unmountedFor is how long no pod may have mounted a claim, as this operator observed
    (downtime never counts), before it is Orphaned. At least 1m."""
    grace_period: Duration = timedelta(hours=24)
    """gracePeriod runs from the Orphaned Event on the claim to any action (Enforce)."""
    snapshot: VolumeSnapshotting | None = None
    """snapshot, when set, takes a VolumeSnapshot and waits for it before deleting."""
    exemptions: VolumeExemptions = VolumeExemptions()
    """exemptions the policy honours."""
    max_actions_per_minute: int = Field(default=5, ge=1, le=100)
    """maxActionsPerMinute caps deletions (and snapshots) per minute; the rest wait."""
    max_gib_per_hour: int = Field(default=1024, ge=1, le=1_000_000, alias="maxGiBPerHour")
    """maxGiBPerHour caps the requested capacity deleted per hour; a claim that would go
    past it waits (one larger than the cap alone is deleted only into an empty hour)."""

    @model_validator(mode="after")
    def _bounds(self) -> "VolumeReclaimPolicySpec":
        if not MIN_UNMOUNTED <= self.unmounted_for <= MAX_UNMOUNTED:
            raise ValueError(
                f"unmountedFor {format_duration(self.unmounted_for)} must be between "
                f"{format_duration(MIN_UNMOUNTED)} and {format_duration(MAX_UNMOUNTED)}"
            )
        return self


ClaimState = Literal[
    "Unmounted", "Orphaned", "Exempt", "Snapshotting", "SnapshotFailed", "Deleting"
]


Planned = Literal["Delete", "SnapshotThenDelete"]


class TrackedClaim(APIModel):
    """The operator's own last-mount record of one claim no pod mounts now."""

    namespace: str
    """namespace of the claim."""
    name: str
    """name of the claim."""
    uid: str
    """uid of the claim (a claim recreated under the same name starts over)."""
    unmounted_since: Time
    """unmountedSince is when the operator last saw a pod mount it, or first saw it
    unmounted; moved forward by every gap in the operator's observation."""
    state: ClaimState = "Unmounted"
    """state: Unmounted (aging), Orphaned (reported, in its grace period or planned),
    Exempt (left alone: see the Event), Snapshotting, SnapshotFailed, Deleting (Enforce
    only: in DryRun a claim Enforce would delete stays Orphaned, with `planned` set)."""
    reported_at: Time | None = None
    """reportedAt is when the Orphaned Event was posted: the grace period runs from it."""
    reported_in: Mode | None = None
    """reportedIn is the mode then: a claim reported in DryRun is reported again (and
    waits its grace period again) once the policy enforces."""
    snapshot_at: Time | None = None
    """snapshotAt is when the VolumeSnapshot was requested (its timeout runs from it)."""
    keep_until: str | None = Field(default=None, max_length=64)
    """keepUntil is the trainwarden.dev/keep-until value as first seen."""
    keep_seen: Time | None = None
    """keepSeen is when that value was first seen (maxKeepDuration runs from it)."""
    planned: Planned | None = None
    """planned is what Enforce does to the claim now (within the caps) and DryRun would
    do: set on the same claims in both modes."""
    bytes: int = 0
    """bytes the claim requests (once judged)."""


class Deletion(APIModel):
    """An action of the last hour (or the sum of one minute's), for the caps."""

    at: Time
    """at is when the claim was deleted (or a snapshot requested)."""
    bytes: int = 0
    """bytes the claims requested (0 for a snapshot request)."""


class VolumeReclaimPolicyStatus(APIModel):
    """What the policy sees and what it reclaimed."""

    observed_generation: int = 0
    """observedGeneration is the generation of the spec this status reflects."""
    conditions: list[Condition] = Field(default_factory=list, max_length=8)
    """conditions: Ready, Tracking (False when claims go untracked), SnapshotsReady."""
    heartbeat: Time | None = None
    """heartbeat is when the operator last observed the claims: after a restart every
    record's clock moves forward by the time since, so downtime never ages a claim."""
    claims_watched: int = 0
    """claimsWatched is the number of claims in scope."""
    claims_untracked: int = 0
    """claimsUntracked are unmounted claims beyond the record's cap: never aged, never
    deleted."""
    claims: list[TrackedClaim] = Field(default_factory=list, max_length=MAX_TRACKED)
    """claims are the records of claims in scope no pod mounts now."""
    claims_planned: int = 0
    """claimsPlanned counts the claims whose `planned` is set."""
    notes: list[str] = Field(default_factory=list, max_length=MAX_NOTES)
    """notes say what Enforce skipped or deferred this evaluation, and why (at most 10)."""
    recent_actions: list[Deletion] = Field(default_factory=list, max_length=MAX_RECENT)
    """recentActions for the caps: each of the last minute, older ones of the last hour
    summed per minute."""
    claims_deleted: int = 0
    """claimsDeleted counts deletions since the policy was created."""
    bytes_deleted: int = 0
    """bytesDeleted sums the requested capacity of the claims deleted."""


class VolumeReclaimPolicy(APIModel):
    """VolumeReclaimPolicy reports, then snapshots and deletes, PersistentVolumeClaims no
    pod has mounted for a stated time and nothing else references."""

    api_version: Literal["trainwarden.dev/v1alpha1"] = "trainwarden.dev/v1alpha1"
    """apiVersion of the object."""
    kind: Literal["VolumeReclaimPolicy"] = "VolumeReclaimPolicy"
    """kind of the object."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """metadata is the standard object metadata."""
    spec: VolumeReclaimPolicySpec
    """spec is the desired policy."""
    status: VolumeReclaimPolicyStatus = Field(default_factory=VolumeReclaimPolicyStatus)
    """status is the observed state."""
