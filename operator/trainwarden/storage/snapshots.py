"""VolumeSnapshots as checkpoints: pure reading of snapshot.storage.k8s.io/v1 objects.

A snapshot says what the engine needs through its status (readyToUse, creationTime,
restoreSize) and a few annotations a trainer or a person sets: its step
(`trainwarden.dev/step`), metrics (`metric.trainwarden.dev/<name>: "0.31"`), a pin
(`trainwarden.dev/pin: "true"`) or that a job resumes from it
(`trainwarden.dev/resume-point: "true"`). A snapshot whose class deletes the physical
snapshot with it (deletionPolicy Delete) is protected unless the policy allows it.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainwarden.api.v1alpha1.names import (
    SNAPSHOT_METRIC,
    SNAPSHOT_PIN,
    SNAPSHOT_RESUME_POINT,
    SNAPSHOT_STEP,
)
from trainwarden.core.quantity import parse_quantity
from trainwarden.core.retention import Checkpoint

API_VERSION = "snapshot.storage.k8s.io/v1"
PRECIOUS = "Delete"
"""The deletionPolicy under which deleting the object destroys the physical snapshot."""


@dataclass(frozen=True)
class Snapshot:
    namespace: str
    name: str
    uid: str
    resource_version: str
    source_pvc: str | None
    class_name: str | None
    checkpoint: Checkpoint


def _time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def read(
    obj: Mapping[str, Any], *, deletion_policy: str | None, allow_delete: bool
) -> Snapshot | None:
    """The snapshot as a checkpoint; None while it is being deleted. A class we could not
    read (None) is treated like Delete: when in doubt, nothing is destroyed."""
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    created = _time(status.get("creationTime")) or _time(meta.get("creationTimestamp"))
    if created is None:
        return None
    try:
        size = int(parse_quantity(str(status.get("restoreSize") or 0)))
    except ValueError:
        size = 0
    step_text = str(annotations.get(SNAPSHOT_STEP, "")).strip()
    metrics = {
        key.removeprefix(SNAPSHOT_METRIC): number
        for key, value in annotations.items()
        if key.startswith(SNAPSHOT_METRIC) and (number := _number(str(value))) is not None
    }
    precious = deletion_policy is None or deletion_policy == PRECIOUS
    checkpoint = Checkpoint(
        name=str(meta.get("name")),
        created=created,
        size=size,
        step=int(step_text) if step_text.isdigit() else None,
        complete=status.get("readyToUse") is True and not status.get("error"),
        metrics=metrics,
        pinned=annotations.get(SNAPSHOT_PIN) == "true",
        resume_point=annotations.get(SNAPSHOT_RESUME_POINT) == "true",
        held=(
            f"its class {spec.get('volumeSnapshotClassName') or '(none)'} has deletionPolicy "
            f"{deletion_policy or 'unknown'}: deleting it would destroy the physical snapshot "
            "(allowDeletePolicyDelete is false)"
            if precious and not allow_delete
            else None
        ),
    )
    source = spec.get("source") or {}
    return Snapshot(
        namespace=str(meta.get("namespace") or ""),
        name=checkpoint.name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        source_pvc=source.get("persistentVolumeClaimName"),
        class_name=spec.get("volumeSnapshotClassName"),
        checkpoint=checkpoint,
    )
