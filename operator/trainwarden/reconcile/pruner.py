"""The pruner Job: a fixed template that mounts one PVC and runs `trainwarden prune` on it,
and the reading of what it reports back.

The pruner gets no API credentials (no ServiceAccount token is mounted): it can touch the
one volume it mounts and nothing else. It reports through its container's termination
message, which the operator reads from the pod's status.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.core.locations import JobState, Location

JSON = dict[str, Any]
MOUNT = "/checkpoints"
PRUNER = "trainwarden.dev/pruner-for"
"""Label on pruner Jobs: the location key they prune."""
POLICY = "trainwarden.dev/policy"
TTL_SECONDS = 3600
"""Finished pruner Jobs (and their pods, with the report) are garbage-collected after this."""
DEADLINE_SECONDS = 900


@dataclass(frozen=True)
class PrunerSettings:
    image: str
    run_as_user: int | None = None
    """The writer's uid when files are not group-writable; None: the image's user."""
    tolerations: tuple[JSON, ...] = ()


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
    args = [
        "prune",
        f"{MOUNT}{location.path if location.path != '/' else ''}",
        "--policy-json",
        spec.model_dump_json(by_alias=True, exclude_none=True),
        "--report",
        "/dev/termination-log",
        "--missing-ok",
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
    security: JSON = {"seccompProfile": {"type": "RuntimeDefault"}}
    if settings.run_as_user is not None:
        security["runAsUser"] = settings.run_as_user
    labels = {
        PRUNER: location.key,
        POLICY: policy,
        "app.kubernetes.io/name": "trainwarden-pruner",
        "app.kubernetes.io/managed-by": "trainwarden",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(location, due),
            "namespace": location.namespace,
            "labels": labels,
            "annotations": {
                "trainwarden.dev/reason": f"CheckpointPolicy {policy} prunes "
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
                    "containers": [
                        {
                            "name": "pruner",
                            "image": settings.image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": args,
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
                    ],
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


@dataclass(frozen=True)
class Outcome:
    """A finished pruner Job: its report, or why there is none."""

    job: str
    finished_at: datetime | None
    report: JSON | None
    error: str | None = None


def finished(job: JSON) -> tuple[bool, bool]:
    """(finished, succeeded) from a Job's conditions."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return True, condition["type"] == "Complete"
    return False, False


def outcome(job: JSON, pods: list[JSON]) -> Outcome:
    """Read a finished Job's report from its pod's termination message."""
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
    message = None
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated") or {}
            message = terminated.get("message") or message
    if not succeeded:
        failed: JSON = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {}
        )
        # A pod that never ran (unschedulable, deadline) has no message: the Job says why.
        job_says = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
        why = (message or "").strip()[-300:] or job_says or "failed without a message"
        return Outcome(name, at, None, f"pruner Job {name} failed: {why}")
    try:
        report = json.loads(message or "")
    except ValueError:
        return Outcome(name, at, None, f"pruner Job {name} reported no readable summary")
    if not isinstance(report, dict):
        return Outcome(name, at, None, f"pruner Job {name} reported no readable summary")
    return Outcome(name, at, report)
