"""CheckpointPolicy: prune the checkpoints nobody needs, never the ones somebody does."""

import ipaddress
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from cronsim import CronSim, CronSimError
from pydantic import Field, field_validator, model_validator

from trainwarden.api.v1alpha1.checkpoint_status import CheckpointPolicyStatus
from trainwarden.api.v1alpha1.types import (
    APIModel,
    Duration,
    LabelSelector,
    Mode,
    NamespaceName,
    Scope,
    cel,
    time_zone,
)

# A Kubernetes quantity such as 500Gi or 2T: the API server checks the spelling, and the
# length (a 5,000-digit size is more than Python prints as a number).
Quantity = Annotated[
    str,
    Field(
        max_length=32,
        pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$",
        examples=["500Gi"],
    ),
]
_HOST_LABELS = re.compile(r"^((?!-)[A-Z\d-]{1,63}(?<!-)\.)*((?!-)[A-Z\d-]{1,63}(?<!-))$", re.I)
"""A host name as boto3 accepts one in an endpoint URL (botocore.utils)."""


class PVCSource(APIModel):
    """Checkpoint directories on PersistentVolumeClaims, pruned by a short-lived Job."""

    selector: LabelSelector | None = None
    """selector picks PVCs by label in the scoped namespaces."""
    path: str = Field(default="/", min_length=1, max_length=1024, pattern=r"^/[^\x00]*$")
    """path is the checkpoint directory inside the volume."""
    from_workload_annotation: bool = True
    """fromWorkloadAnnotation also governs "<pvc>:<path>" named by the annotation
    trainwarden.dev/checkpoint-path on a scoped training job (Job, JobSet, Kubeflow job
    or RayJob)."""


class SnapshotSource(APIModel):
    """VolumeSnapshots (snapshot.storage.k8s.io), pruned through the API, each PVC's
    snapshots as one history. A snapshot's step, metrics, pin and resume point come from
    its annotations trainwarden.dev/step, metric.trainwarden.dev/<name>,
    trainwarden.dev/pin and trainwarden.dev/resume-point; it is complete once readyToUse."""

    selector: LabelSelector
    """selector picks VolumeSnapshots by label in the scoped namespaces."""
    allow_delete_policy_delete: bool = False
    """allowDeletePolicyDelete permits pruning snapshots whose class has deletionPolicy
    Delete (which destroys the physical snapshot); such snapshots are skipped otherwise."""


class SecretKeyRef(APIModel):
    """A Secret holding object-storage credentials."""

    namespace: NamespaceName
    """namespace of the Secret."""
    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    """name of the Secret; it holds the keys accessKeyId and secretAccessKey. The
    operator reads only Secrets its role names (the chart value
    s3CredentialSecrets grants each one by name)."""


class S3Source(APIModel):
    """Checkpoints in S3-compatible object storage, pruned through the S3 API by the
    operator itself (the same layouts and rules; the listing is judged as a directory).
    Training jobs in scope that write here name it with the annotation
    trainwarden.dev/checkpoint-path: "s3://<bucket>/<prefix>", which protects their newest
    checkpoints while they run and applies afterCompletion once they finish."""

    endpoint: str = Field(min_length=1, max_length=1024, pattern=r"^https?://")
    """endpoint URL of the S3-compatible service."""
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """bucket holding the checkpoints."""
    prefix: str = Field(min_length=1, max_length=1024, pattern=r"^[^\\]*[^/\\][^\\]*$")
    """prefix is the checkpoint directory in the bucket (checkpoints are the "directories"
    right under it, e.g. runs/llama/checkpoint-500/). Required and never just "/": a policy
    governs a checkpoint directory, never a whole bucket (datasets, other teams' prefixes)."""
    region: str = Field(
        default="us-east-1", max_length=63, pattern=r"^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)?$"
    )
    """region of the bucket."""
    credentials: SecretKeyRef
    """credentials name the Secret with the access keys."""

    @field_validator("endpoint")
    @classmethod
    def _reachable(cls, value: str) -> str:
        """A URL boto3 makes a client for: a host name or IPv6 address, a port in range
        (boto3 raises when the client is made, at every run, otherwise)."""
        try:
            parts = urlsplit(value)
            host, _ = parts.hostname, parts.port
        except ValueError as error:
            raise ValueError(f"endpoint {value[:80]!r}: {error}") from None
        if not host or any(c in value for c in "\t\r\n") or not _host(host):
            raise ValueError(f"endpoint {value[:80]!r} names no host boto3 can connect to")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if value.isdigit():  # botocore's rule: a host label, not only digits
            raise ValueError(f"region {value!r} is only digits")
        return value

    @model_validator(mode="after")
    def _prefix_inside(self) -> "S3Source":
        if any(part in (".", "..") for part in self.prefix.split("/")):
            raise ValueError(f"s3.prefix must not contain '.' or '..' segments: {self.prefix!r}")
        return self

    @property
    def url(self) -> str:
        parts = [p for p in self.prefix.split("/") if p]
        return f"s3://{self.bucket}/" + "".join(f"{p}/" for p in parts)


def _host(name: str) -> bool:
    if name.startswith("[") or ":" in name:
        try:
            ipaddress.IPv6Address(name.strip("[]"))
        except ValueError:
            return False
        return True
    return len(name) <= 255 and bool(_HOST_LABELS.match(name.removesuffix(".")))


class Storage(APIModel):
    """Where checkpoints live. At least one source is required."""

    pvc: PVCSource | None = None
    """pvc governs directories on PersistentVolumeClaims."""
    volume_snapshots: SnapshotSource | None = None
    """volumeSnapshots governs VolumeSnapshots."""
    s3: S3Source | None = None
    """s3 governs objects in S3-compatible storage."""

    model_config = cel(
        (
            "has(self.pvc) || has(self.volumeSnapshots) || has(self.s3)",
            "storage needs at least one of pvc, volumeSnapshots or s3",
        )
    )

    @model_validator(mode="after")
    def _one_source(self) -> "Storage":
        # The same rule as the CEL above, for a policy file read without an API server.
        if self.pvc is None and self.volume_snapshots is None and self.s3 is None:
            raise ValueError("storage needs at least one of pvc, volumeSnapshots or s3")
        return self


class Layout(APIModel):
    """How a trainer writes checkpoints, and so how to tell a complete one."""

    type: Literal["HuggingFace", "DeepSpeed", "Lightning", "Orbax", "TorchDCP", "Glob"] = (
        "HuggingFace"
    )
    """type names the trainer's layout: HuggingFace (checkpoint-<step>/trainer_state.json),
    DeepSpeed (global_step<N> and latest), Lightning (*.ckpt), Orbax (step directories with
    a commit marker), TorchDCP (.metadata) or Glob."""
    glob: str | None = Field(default=None, min_length=1, max_length=256)
    """glob matches checkpoint entries for type Glob, e.g. "ckpt-*"."""
    step_pattern: str | None = Field(default=None, min_length=1, max_length=256)
    """stepPattern is a regular expression whose first group is the step, for type Glob."""

    model_config = cel(
        (
            "self.type != 'Glob' || (has(self.glob) && has(self.stepPattern))",
            "type Glob needs glob and stepPattern",
        )
    )

    @model_validator(mode="after")
    def _glob_complete(self) -> "Layout":
        if self.type == "Glob" and (self.glob is None or self.step_pattern is None):
            raise ValueError("type Glob needs glob and stepPattern")
        if self.step_pattern is not None:
            try:
                groups = re.compile(self.step_pattern).groups
            except re.error as error:
                raise ValueError(f"stepPattern is not a regular expression: {error}") from None
            if groups < 1:
                raise ValueError("stepPattern needs a group for the step, e.g. ckpt-(\\d+)")
        return self


class KeepBest(APIModel):
    """Keep the best checkpoints by a metric from the checkpoint's own state file."""

    metric: str = Field(min_length=1, max_length=128, examples=["eval_loss"])
    """metric name as the trainer records it."""
    order: Literal["Min", "Max"] = "Min"
    """order Min keeps the lowest values, Max the highest."""
    count: int = Field(default=1, ge=1, le=100)
    """count of best checkpoints to keep."""


class KeepEvery(APIModel):
    """Keep one checkpoint every so many steps or every so much time."""

    steps: int | None = Field(default=None, ge=1)
    """steps keeps checkpoints whose step is a multiple of this."""
    interval: Duration | None = None
    """interval keeps the oldest checkpoint in each interval of this length."""

    model_config = cel(
        (
            "has(self.steps) != has(self.interval)",
            "keepEvery needs exactly one of steps or interval",
        )
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> "KeepEvery":
        if (self.steps is None) == (self.interval is None):
            raise ValueError("keepEvery needs exactly one of steps or interval")
        return self


class Retention(APIModel):
    """What to keep. A checkpoint is kept if any rule keeps it."""

    keep_last: int = Field(default=3, ge=1, le=1000)
    """keepLast keeps the newest N complete checkpoints, whatever their age (at least 1).
    Whatever the rules say, trainwarden never deletes the newest complete checkpoint, one
    being written or younger than minAge, one pinned (a `.trainwarden-pin` file in it, or
    the workload annotation trainwarden.dev/checkpoint-pin), or one a resume pointer names
    (DeepSpeed's latest, Lightning's last.ckpt, trainwarden.dev/resume-from)."""
    keep_every: KeepEvery | None = None
    """keepEvery keeps a sparse history."""
    keep_best: KeepBest | None = None
    """keepBest keeps the best by a metric."""
    max_age: Duration | None = None
    """maxAge: keepEvery and keepBest keep nothing older than this (keepLast, pins and
    resume points still do), so a sparse history does not grow forever."""
    max_total_size: Quantity | None = None
    """maxTotalSize deletes the oldest unprotected checkpoints until the total fits."""
    min_age: Duration = timedelta(minutes=10)
    """minAge: a younger checkpoint is never touched (it may still be being written)."""


class AfterCompletion(APIModel):
    """A stricter rule once the owning job has finished."""

    keep_last: int = Field(default=1, ge=1, le=1000)
    """keepLast keeps the final N checkpoints."""
    keep_best: KeepBest | None = None
    """keepBest keeps the best by a metric."""
    delay: Duration = timedelta(hours=1)
    """delay after the job finishes before the stricter rule applies."""


def cron_after(expression: str, after: datetime) -> datetime:
    """The first time after `after` (an aware datetime, in the schedule's zone) that a
    five-field cron expression names; ValueError if it cannot be read or names none:
    cronsim gives up (StopIteration) after 50 years without a match, e.g. for
    "0 0 LW * */7" (the last weekday of a month that is also a Sunday)."""
    try:
        return next(CronSim(expression, after))
    except (CronSimError, StopIteration, ValueError, OverflowError) as error:
        problem = str(error) or "it names no time in the next 50 years"
        raise ValueError(f"cron {expression!r}: {problem}") from None


class Schedule(APIModel):
    """When the policy runs; also whenever a governed job finishes."""

    interval: Duration = timedelta(hours=1)
    """interval between runs (the first run is at once), unless cron is set."""
    cron: str | None = Field(
        default=None, max_length=128, pattern=r"^\S+(\s+\S+){4}$", examples=["0 3 * * *"]
    )
    """cron is a five-field cron expression ("0 3 * * *": at 03:00 every day); when set it
    replaces interval, and the first run is the first time it names after creation."""
    time_zone: str = Field(default="UTC", min_length=1, max_length=64)
    """timeZone of the cron expression, an IANA name such as Europe/Berlin."""

    @field_validator("time_zone")
    @classmethod
    def _known_time_zone(cls, value: str) -> str:
        time_zone(value)
        return value

    @model_validator(mode="after")
    def _fires(self) -> "Schedule":
        """A cron expression must name a time: one that never fires is no schedule."""
        if self.cron is not None:
            cron_after(self.cron, datetime.now(time_zone(self.time_zone)))
        return self


class CheckpointPolicySpec(APIModel):
    """Where checkpoints live, how to read them, and which to keep."""

    mode: Mode = "DryRun"
    """mode Enforce deletes; DryRun (the default) reports the exact list it would delete."""
    scope: Scope
    """scope picks the namespaces and workloads whose checkpoints are governed."""
    storage: Storage
    """storage says where checkpoints live."""
    layout: Layout = Layout()
    """layout of the checkpoints."""
    retention: Retention = Retention()
    """retention rules while the owning job runs or is unknown."""
    after_completion: AfterCompletion | None = None
    """afterCompletion is a stricter rule once the owning job finished."""
    schedule: Schedule = Schedule()
    """schedule of runs."""
    max_deletions_per_run: int = Field(default=50, ge=1, le=10000)
    """maxDeletionsPerRun caps the blast radius of one run."""


class CheckpointPolicy(APIModel):
    """CheckpointPolicy prunes training checkpoints on PVCs, VolumeSnapshots and object
    storage by retention rules that never delete what a job needs."""

    api_version: Literal["trainwarden.dev/v1alpha1"] = "trainwarden.dev/v1alpha1"
    """apiVersion of the object."""
    kind: Literal["CheckpointPolicy"] = "CheckpointPolicy"
    """kind of the object."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """metadata is the standard object metadata."""
    spec: CheckpointPolicySpec
    """spec is the desired policy."""
    status: CheckpointPolicyStatus = Field(default_factory=CheckpointPolicyStatus)
    """status is the observed state."""
