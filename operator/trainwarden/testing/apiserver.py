"""The API server's rules for objects, as pure functions over plain dicts, for the fake
API server of the unit tests (tests/fakekube.py): which kinds have status and scale
subresources or are cluster-scoped, what a merge patch may change, when generation moves.

Kept apart from the fake's state so each rule reads (and is tested) on its own.
"""

import base64
import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from trainwarden.api.v1alpha1.types import API_VERSION
from trainwarden.core.patches import apply_merge_patch

JSON = dict[str, Any]
KindKey = tuple[str, str]
"""(apiVersion, kind)"""

_TW = API_VERSION
_POLICIES = ("TrainingBudget", "IdleReclaimPolicy", "CheckpointPolicy", "VolumeReclaimPolicy")
_KUBEFLOW = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
_SNAPSHOT = "snapshot.storage.k8s.io/v1"
_KUEUE = "kueue.x-k8s.io/v1beta1"
_KUEUE2 = "kueue.x-k8s.io/v1beta2"
_KUEUE_KINDS = ("Workload", "ClusterQueue", "LocalQueue", "AdmissionCheck")
STATUS_SUBRESOURCE: frozenset[KindKey] = frozenset(
    {
        *((_TW, k) for k in _POLICIES),
        *(("v1", k) for k in ("Pod", "Node", "Namespace", "Service", "ResourceQuota")),
        *(("v1", k) for k in ("PersistentVolume", "PersistentVolumeClaim")),
        ("v1", "ReplicationController"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        *(("apps/v1", k) for k in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")),
        ("policy/v1", "PodDisruptionBudget"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
        *(("kubeflow.org/v1", k) for k in _KUBEFLOW),
        ("ray.io/v1", "RayJob"),
        ("ray.io/v1", "RayCluster"),
        (_SNAPSHOT, "VolumeSnapshot"),
        (_SNAPSHOT, "VolumeSnapshotContent"),
        *((v, k) for v in (_KUEUE, _KUEUE2) for k in _KUEUE_KINDS),
    }
)
"""Kinds whose status only the status subresource writes."""
CLUSTER_SCOPED: frozenset[KindKey] = frozenset(
    {
        *((_TW, k) for k in _POLICIES),
        *(("v1", k) for k in ("Node", "Namespace", "PersistentVolume")),
        (_SNAPSHOT, "VolumeSnapshotClass"),
        (_SNAPSHOT, "VolumeSnapshotContent"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        *((v, k) for v in (_KUEUE, _KUEUE2) for k in ("ClusterQueue", "ResourceFlavor")),
        *((v, "AdmissionCheck") for v in (_KUEUE, _KUEUE2)),
    }
)
SCALABLE: frozenset[KindKey] = frozenset(
    {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "ReplicaSet")}
)
"""Kinds with a scale subresource."""
_SYSTEM_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
)


class NotServed(LookupError):
    """A kind or subresource the API server does not serve (the real client raises its
    library's error there, not one of the port's)."""


def preconditions_hold(obj: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the uid and resourceVersion a request names (if any) are the object's."""
    meta = obj["metadata"]
    return all(
        wanted.get(name) is None or wanted[name] == meta.get(name)
        for name in ("uid", "resourceVersion")
    )


def patched(old: JSON, patch: JSON, *, subresource: str | None, has_status: bool) -> JSON:
    """The object a merge patch of the main resource or its status makes. The main
    resource never writes the status of a kind with a status subresource; the status
    subresource writes nothing else, metadata included (preconditions are checked
    before). Raises NotServed for any other subresource."""
    if subresource is None:
        new: JSON = apply_merge_patch(old, patch)
        if has_status:
            set_field(new, "status", copy.deepcopy(old.get("status")))
    elif subresource == "status" and has_status:
        new = copy.deepcopy(old)
        set_field(new, "status", apply_merge_patch(old, patch).get("status"))
    else:
        raise NotServed(f"{old['kind']} has no {subresource} subresource")
    keep_system_metadata(old, new)
    return new


LIST_MAP_KEYS = {"admissionChecks": "name", "conditions": "type", "podSets": "name"}
"""Lists merged entry by entry under server-side apply (x-kubernetes-list-type: map), by
the key named; every other list is atomic (replaced whole)."""


def _apply_fields(old: Any, new: Any, key: str | None = None) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        merged = copy.deepcopy(old)
        for name, value in new.items():
            merged[name] = _apply_fields(old.get(name), value, name)
        return merged
    list_key = LIST_MAP_KEYS.get(key or "")
    if list_key and isinstance(old, list) and isinstance(new, list):
        by_key = {e.get(list_key): e for e in old if isinstance(e, dict)}
        applied = {e.get(list_key): e for e in new if isinstance(e, dict)}
        kept = [
            _apply_fields(by_key[k], applied[k]) if k in applied else e for k, e in by_key.items()
        ]
        return kept + [e for k, e in applied.items() if k not in by_key]
    return copy.deepcopy(new)


def applied(old: JSON, body: JSON, *, subresource: str | None, has_status: bool) -> JSON:
    """The object a forced server-side apply of `body` makes, as far as the fake models it:
    the fields given are set (maps merged, map-lists merged by their key, other lists
    replaced), the rest kept. Not modelled: removing fields the manager no longer sends,
    managedFields, conflicts (every apply here is forced)."""
    if subresource not in (None, "status") or (subresource == "status" and not has_status):
        raise NotServed(f"{old['kind']} has no {subresource} subresource")
    fields = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    if subresource == "status":
        fields = {"status": fields.get("status") or {}}
    elif has_status:
        fields.pop("status", None)
    new: JSON = _apply_fields(old, fields)
    keep_system_metadata(old, new)
    return new


def edited(old: JSON, patch: JSON) -> JSON:
    """Any field patched, status included, as another actor (a controller) would."""
    new: JSON = apply_merge_patch(old, patch)
    keep_system_metadata(old, new)
    return new


def keep_system_metadata(old: JSON, new: JSON) -> None:
    """What no patch changes: identity, versions, timestamps."""
    new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
    if not isinstance(new.get("metadata"), dict):
        new["metadata"] = {}
    for name in _SYSTEM_METADATA:
        set_field(new["metadata"], name, old["metadata"].get(name))


def generation_moves(old: JSON, new: JSON, *, has_status: bool) -> bool:
    """Generation tracks the desired state: everything but metadata (and status, where a
    subresource owns it)."""
    skip = {"metadata", "status"} if has_status else {"metadata"}
    return {k: v for k, v in old.items() if k not in skip} != {
        k: v for k, v in new.items() if k not in skip
    }


def scale_of(obj: JSON) -> JSON:
    """The autoscaling/v1 Scale the API server shows for a scalable object."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        },
    }


def scaled(old: JSON, patch: JSON) -> JSON:
    """The object a merge patch of its Scale makes: only spec.replicas moves."""
    if (old["apiVersion"], old["kind"]) not in SCALABLE:
        raise NotServed(f"{old['kind']} has no scale subresource")
    wanted = apply_merge_patch(scale_of(old), patch)
    replicas = (wanted.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise ValueError(f"Scale spec.replicas must be a non-negative integer: {replicas!r}")
    new = copy.deepcopy(old)
    new.setdefault("spec", {})["replicas"] = replicas
    return new


def encode_string_data(obj: JSON) -> None:
    """A Secret's stringData is write-only: the API server stores it base64 in data."""
    if (obj["apiVersion"], obj["kind"]) != ("v1", "Secret") or "stringData" not in obj:
        return
    strings = obj.pop("stringData") or {}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in strings.items()}
    obj["data"] = {**(obj.get("data") or {}), **encoded}


def set_field(mapping: JSON, name: str, value: Any) -> None:
    """Set a field; None removes it (a null field is an absent one)."""
    if value is None:
        mapping.pop(name, None)
    else:
        mapping[name] = value


def rfc3339(t: datetime) -> str:
    """The API server's timestamp format, in UTC to the second."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
