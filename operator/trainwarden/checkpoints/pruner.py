"""The pruner Job: a fixed template that mounts one PVC and runs `trainwarden prune` on it,
and the reading of what it reports back.

The pruner gets no API credentials (no ServiceAccount token is mounted) and runs as a
non-root user: it can touch the one volume it mounts and nothing else. It reports through
its container's termination message, which the operator reads from the pod's status.

That report is tenant-reachable input: anyone who can create Jobs or Pods in the namespace
can create one with the pruner's labels, or a Job of the pruner's predictable name before
the operator does. So a report is believed only from the Job this operator created (its
uid, returned by the create and recorded in status, and its labels), read from a pod that
Job controls (ownerReferences) running the Job's own container, and parsed into a typed,
bounded model: anything else fails that one location, with the reason, and nothing of it
is recorded (no bytes freed). The one Job believed without a uid on record is the run's
own, created by an operator killed before it could record it: same name, labels and
pruner template as the run's manifest, nothing beside the pruner container
(`adoptable`); whoever created it, what runs there is this run's pruner on this volume.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trainwarden.adapters.workloads import label_value
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.checkpoint_status import (
    MAX_COMPLETIONS,
    MAX_POSIX_SECONDS,
    TrainerResult,
)
from trainwarden.api.v1alpha1.names import PRUNER_FOR, PRUNER_POLICY, PRUNER_REASON
from trainwarden.api.v1alpha1.types import MANAGED_BY
from trainwarden.core.locations import JobState, Location

JSON = dict[str, Any]
MOUNT = "/checkpoints"
TTL_SECONDS = 3600
"""Finished pruner Jobs (and their pods, with the report) are garbage-collected after this."""
DEADLINE_SECONDS = 900
CONTAINER = "pruner"
DEFAULT_UID = 65532
"""The pruner's user unless told otherwise: not root (the restricted Pod Security Standard
refuses root), the same non-root id as the operator's own pod."""


@dataclass(frozen=True)
class PrunerSettings:
    image: str
    run_as_user: int = DEFAULT_UID
    """The trainers' uid when files are not group-writable (so the pruner may delete what
    they wrote); never 0."""
    tolerations: tuple[JSON, ...] = ()

    def __post_init__(self) -> None:
        if self.run_as_user < 1:
            raise ValueError("pruner Jobs run as a non-root user: --pruner-run-as-user >= 1")


def job_name(location: Location, due: datetime) -> str:
    """Deterministic per location and scheduled run: a restarted operator that already
    created this run's Job gets AlreadyExists, not a second Job."""
    return f"trainwarden-prune-{location.key}-{int(due.timestamp())}"


def manifest(
    location: Location,
    policy: str,
    spec: CheckpointPolicySpec,
    state: JobState,
    due: datetime,
    settings: PrunerSettings,
) -> JSON:
    security: JSON = {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    labels = {
        PRUNER_FOR: location.key,
        PRUNER_POLICY: label_value(policy),
        "app.kubernetes.io/name": "trainwarden-pruner",
        MANAGED_BY: "trainwarden",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(location, due),
            "namespace": location.namespace,
            "labels": labels,
            "annotations": {
                PRUNER_REASON: f"CheckpointPolicy {policy} prunes "
                f"{location.pvc}:{location.path} ({spec.mode})"
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": security,
                    "tolerations": list(settings.tolerations),
                    "containers": [_container(location, spec, state, settings)],
                    "volumes": [
                        {
                            "name": "checkpoints",
                            "persistentVolumeClaim": {
                                "claimName": location.pvc,
                                "readOnly": spec.mode == "DryRun",
                            },
                        }
                    ],
                },
            },
        },
    }


def _container(
    location: Location, spec: CheckpointPolicySpec, state: JobState, settings: PrunerSettings
) -> JSON:
    """The pruner's one container: `trainwarden prune` over the mounted PVC."""
    return {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "args": _args(location, spec, state),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {
                "name": "checkpoints",
                "mountPath": MOUNT,
                "readOnly": spec.mode == "DryRun",
            }
        ],
    }


def _args(location: Location, spec: CheckpointPolicySpec, state: JobState) -> list[str]:
    """`trainwarden prune`'s arguments for this location and its trainers' state."""
    args = [
        "prune",
        f"{MOUNT}{location.path if location.path != '/' else ''}",
        "--policy-json",
        spec.model_dump_json(by_alias=True, exclude_none=True),
        "--report",
        "/dev/termination-log",
        "--missing-ok",
        "--within",
        MOUNT,
    ]
    args.append("--dry-run" if spec.mode == "DryRun" else "--enforce")
    if state == "Finished":
        args.append("--finished")
    elif state == "Running":
        args.append("--running")
    for name in sorted(location.pins):
        args += ["--pin", name]
    for name in sorted(location.resume_from):
        args += ["--resume-from", name]
    return args


Count = Annotated[StrictInt, Field(ge=0, le=10_000_000)]
Bytes = Annotated[StrictInt, Field(ge=0, le=2**62)]
Line = Annotated[StrictStr, Field(max_length=300)]
Seconds = Annotated[StrictInt, Field(ge=0, le=MAX_POSIX_SECONDS)]


class PrunerReport(BaseModel):
    """A pruner's summary (storage/pruning.Report.summary) as the operator accepts it:
    strict types (no "lots", no 1e400), bounded numbers and lists, consistent counts."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    root: StrictStr = Field(default="", max_length=1024)
    dry_run: StrictBool
    failed: StrictBool = False
    error: StrictStr = Field(default="", max_length=1000)
    scanned: Count
    kept: Count
    deleted_count: Count
    bytes_freed: Bytes
    bytes_retained: Bytes
    notes: list[Line] = Field(default_factory=list, max_length=10)
    skipped: list[Line] = Field(default_factory=list, max_length=10)
    failure_count: Count = 0
    failures: list[Line] = Field(default_factory=list, max_length=10)
    deleted: list[Annotated[StrictStr, Field(max_length=255)]] = Field(
        default_factory=list, max_length=1000
    )
    scanned_at: Seconds | None = None
    """When the pruner began its scan (POSIX seconds; older pruners leave it out)."""
    completed: list[Seconds] = Field(default_factory=list, max_length=MAX_COMPLETIONS)
    """When the complete checkpoints it found were written (POSIX seconds)."""
    result: TrainerResult | None = None
    """What the trainer's own state said (older pruners leave it out)."""

    @model_validator(mode="after")
    def _consistent(self) -> "PrunerReport":
        if self.kept > self.scanned or self.deleted_count > self.scanned:
            raise ValueError("more checkpoints kept or deleted than scanned")
        if len(self.deleted) > self.deleted_count:
            raise ValueError("more names deleted than deletedCount")
        if self.deleted_count == 0 and self.bytes_freed:
            raise ValueError("bytes freed without a deletion")
        return self


@dataclass(frozen=True)
class PrunerOutcome:
    """A finished pruner Job: its report, or why there is none."""

    job: str
    finished_at: datetime | None
    report: PrunerReport | None
    error: str | None = None


def finished(job: JSON) -> tuple[bool, bool]:
    """(finished, succeeded) from a Job's conditions."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return True, condition["type"] == "Complete"
    return False, False


def ours(job: JSON, uid: str, location: Location, policy: str) -> bool:
    """Whether `job` is the pruner Job this operator created for `location` (the uid its
    create returned, recorded in status) and still carries its labels."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        bool(uid)
        and meta.get("uid") == uid
        and labels.get(PRUNER_FOR) == location.key
        and labels.get(PRUNER_POLICY) == label_value(policy)
    )


def _pruner_of(spec: JSON) -> tuple[object, ...] | None:
    """What makes a pod spec run the pruner on a volume: its container's image, command,
    arguments and mounts, and the claim behind the mounted volume."""
    container = next((c for c in spec.get("containers") or [] if c.get("name") == CONTAINER), None)
    if container is None:
        return None
    claims = sorted(
        (v.get("name"), (v.get("persistentVolumeClaim") or {}).get("claimName"))
        for v in spec.get("volumes") or []
    )
    mounts = [(m.get("name"), m.get("mountPath")) for m in container.get("volumeMounts") or []]
    keys = ("image", "command", "args")
    return (*(json.dumps(container.get(k)) for k in keys), json.dumps(mounts), json.dumps(claims))


def _shape(job: JSON) -> tuple[object, ...]:
    """What a pruner Job runs: nothing but the pruner container (no init container, no
    shared process namespace a sidecar could reach it through), as whom, and how."""
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or []
    security = spec.get("securityContext") or {}
    return (
        [c.get("name") for c in containers],
        bool(spec.get("initContainers")),
        bool(spec.get("shareProcessNamespace")),
        security.get("runAsUser"),
        security.get("runAsNonRoot"),
        json.dumps([c.get("securityContext") for c in containers], sort_keys=True),
        _pruner_of(spec),
    )


def adoptable(found: JSON, wanted: JSON, recorded_job: str | None) -> bool:
    """Whether `found`, a Job of the name of the run about to start (`wanted`, its
    manifest), is that very run: started by an operator killed before it recorded the
    Job's uid. Its name, labels and pruner template must be the manifest's, and its
    report must not have been recorded already (`recorded_job`, the last one read)."""
    name = (found.get("metadata") or {}).get("name")
    labels = (found.get("metadata") or {}).get("labels") or {}
    want = wanted["metadata"]
    return (
        name == want["name"]
        and name != recorded_job
        and all(labels.get(k) == v for k, v in want["labels"].items())
        and _shape(found) == _shape(wanted)
    )


def _ran_by(pod: JSON, job: JSON) -> bool:
    """Whether `pod` is the Job's own: controlled by it (uid) and running its pruner on
    its volume as the template says (a pod anyone made with a copied label or owner
    reference, but another command, image or volume, is not)."""
    uid = (job.get("metadata") or {}).get("uid")
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    if not any(o.get("uid") == uid and o.get("controller") is True for o in owners):
        return False
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    wanted = _pruner_of(template)
    return wanted is not None and _pruner_of(pod.get("spec") or {}) == wanted


def _message(job: JSON, pods: list[JSON]) -> str | None:
    """The pruner container's termination message, from the Job's own pod only."""
    message = None
    for pod in pods:
        if not _ran_by(pod, job):
            continue
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            if container.get("name") != CONTAINER:
                continue  # a sidecar a webhook added says nothing
            terminated = (container.get("state") or {}).get("terminated") or {}
            message = terminated.get("message") or message
    return message


def parse_report(message: str | None) -> PrunerReport | str:
    """The report, or why it is refused (the first problem, as a person reads it)."""
    try:
        return PrunerReport.model_validate_json(message or "")
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where + ': ' if where else ''}{first['msg']}"[:300]


def outcome(job: JSON, pods: list[JSON]) -> PrunerOutcome:
    """Read a finished Job's report from the termination message of its own pod."""
    name = job["metadata"]["name"]
    status = job.get("status") or {}
    raw_time = status.get("completionTime") or next(
        (
            c.get("lastTransitionTime")
            for c in status.get("conditions") or []
            if c.get("type") in ("Complete", "Failed")
        ),
        None,
    )
    at = datetime.fromisoformat(str(raw_time).replace("Z", "+00:00")) if raw_time else None
    _, succeeded = finished(job)
    message = _message(job, pods)
    report = parse_report(message)
    if isinstance(report, PrunerReport) and report.failed:
        return PrunerOutcome(name, at, None, f"pruner Job {name} failed: {report.error}")
    if not succeeded:
        failed: JSON = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {}
        )
        # A pod that never ran (unschedulable, deadline) has no message: the Job says why.
        job_says = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
        why = (message or "").strip()[-300:] or job_says or "failed without a message"
        return PrunerOutcome(name, at, None, f"pruner Job {name} failed: {why}")
    if isinstance(report, str):
        return PrunerOutcome(
            name, at, None, f"pruner Job {name} reported no readable summary: {report}"
        )
    return PrunerOutcome(name, at, report)


def not_adopted(job: str) -> str:
    """Why a run waits: a Job of its name exists that this operator has no record of."""
    return (
        f"a Job named {job} exists that this operator did not create (or has no record of): "
        "it is not adopted and its report is not read; the run starts once it is gone "
        f"(the operator's own are deleted {TTL_SECONDS // 60} minutes after they finish)"
    )
