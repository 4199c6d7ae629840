"""Suspend and resume training workloads of every kind through their own suspend field.

What trainwarden suspends it labels (`trainwarden.dev/suspended-by`), so what it may
resume is found on the objects themselves, not in memory: a restart between acting and
recording loses nothing, and nothing without the label is ever resumed.
"""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.names import (
    RECLAIM_REASON,
    RECLAIMED_AT,
    RECLAIMED_BY,
    SCALED_DOWN_FROM,
    SUSPEND_REASON,
    SUSPENDED_AT,
    SUSPENDED_BY,
    SUSPENDED_IN,
)
from trainwarden.core.keep import Keep
from trainwarden.core.kueue import API_VERSION as KUEUE_API
from trainwarden.core.kueue import JOB_UID as KUEUE_JOB_UID
from trainwarden.core.kueue import kueue_workload as kueue_record
from trainwarden.core.pods import OwnerRef
from trainwarden.core.workloads import (
    KUEUE_QUEUE,
    MAX_CHAIN,
    SUSPEND_FIELD,
    is_suspended,
)
from trainwarden.core.workloads import label_value as label_value  # its home was here

SCALABLE = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}


async def top_level(kube: Kube, namespace: str, owner: OwnerRef) -> JSON | None:
    """The object to act on for a pod owned by `owner`: its highest ancestor that can be
    suspended and is not (a JobSet above its Jobs; a Job whose parent is suspended yet
    runs it), else the highest one (already suspended), else the owner itself. Each link
    is read by name in the pod's namespace and believed only with the uid its reference
    names (core/workloads.ancestors reads the cache the same way)."""
    chain: list[JSON] = []
    ref: Mapping[str, Any] | None = {
        "apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid
    }  # fmt: skip
    while ref is not None and len(chain) < MAX_CHAIN:
        found = await kube.get(
            str(ref["apiVersion"]), str(ref["kind"]), namespace, str(ref["name"])
        )
        if found is None or found["metadata"].get("uid") != ref.get("uid") or found in chain:
            break
        chain.append(found)
        ref = next(
            (r for r in found["metadata"].get("ownerReferences") or [] if r.get("controller")),
            None,
        )
    suspendable = [o for o in chain if (o["apiVersion"], o["kind"]) in SUSPEND_FIELD]
    running = [o for o in suspendable if not is_suspended(o)]
    picked = running or suspendable or chain[:1]
    return picked[-1] if picked else None


def _nested(path: tuple[str, ...], value: Any) -> JSON:
    patch: JSON = {path[-1]: value}
    for part in reversed(path[:-1]):
        patch = {part: patch}
    return patch


async def patch_object(kube: Kube, obj: JSON, patch: JSON) -> JSON:
    """A merge patch of `obj` itself (its apiVersion, kind, namespace and name)."""
    meta = obj["metadata"]
    return await kube.merge_patch(
        obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], patch
    )


def suspended_by(obj: JSON) -> str | None:
    value = (obj["metadata"].get("labels") or {}).get(SUSPENDED_BY)
    return str(value) if value else None


def kueue_managed(obj: JSON) -> bool:
    return KUEUE_QUEUE in (obj["metadata"].get("labels") or {})


def budget_marks(
    budget: str, reason: str, generation: int, period_start: datetime
) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations a budget leaves on what it suspends: what lets it, and
    only it, resume the workload later."""
    return {SUSPENDED_BY: label_value(budget)}, {
        SUSPEND_REASON: reason,
        SUSPENDED_AT: _now(),
        SUSPENDED_IN: f"{generation}/{period_start.isoformat()}",
    }


def reclaim_marks(policy: str, reason: str) -> tuple[dict[str, str], dict[str, str]]:
    """What an idle reclaim leaves on the workload. Not SUSPENDED_BY: no budget may resume
    what an idle policy suspended."""
    return {RECLAIMED_BY: label_value(policy)}, {RECLAIM_REASON: reason, RECLAIMED_AT: _now()}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _marked(
    obj: JSON, patch: JSON, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> JSON:
    patch["metadata"] = {
        "resourceVersion": obj["metadata"]["resourceVersion"],
        "labels": dict(labels),
        "annotations": dict(annotations),
    }
    return patch


async def suspend(
    kube: Kube, obj: JSON, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> JSON | None:
    """Suspend exactly the version evaluated (a concurrent change raises Conflict); return
    the suspended object, or None for a bare pod, which is evicted."""
    meta = obj["metadata"]
    key = (obj["apiVersion"], obj["kind"])
    if key == ("v1", "Pod"):
        await kube.evict(
            meta["namespace"],
            meta["name"],
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
        )
        return None
    patch = _marked(obj, _nested(SUSPEND_FIELD[key], True), labels, annotations)
    return await patch_object(kube, obj, patch)


async def scalable_owner(kube: Kube, namespace: str, owner: OwnerRef) -> JSON | None:
    """The Deployment (through its ReplicaSet) or StatefulSet that runs a pod, if any."""
    current = await kube.get(owner.api_version, owner.kind, namespace, owner.name)
    if current is not None and current["kind"] == "ReplicaSet":
        parent = next(
            (r for r in current["metadata"].get("ownerReferences") or [] if r.get("controller")),
            None,
        )
        if parent is None or parent.get("kind") != "Deployment":
            return None
        current = await kube.get(parent["apiVersion"], parent["kind"], namespace, parent["name"])
    if current is None or (current["apiVersion"], current["kind"]) not in SCALABLE:
        return None
    return current


async def scale_down(
    kube: Kube, obj: JSON, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> JSON:
    """Scale to zero, remembering the replicas it had so a person can scale it back."""
    replicas = int((obj.get("spec") or {}).get("replicas") or 0)
    patch = _marked(
        obj,
        {"spec": {"replicas": 0}},
        labels,
        {**annotations, SCALED_DOWN_FROM: str(replicas)},
    )
    return await patch_object(kube, obj, patch)


async def resume(kube: Kube, obj: JSON) -> JSON:
    """Resume and drop trainwarden's marks, conditional on the version evaluated."""
    meta = obj["metadata"]
    patch = _nested(SUSPEND_FIELD[(obj["apiVersion"], obj["kind"])], False)
    patch["metadata"] = _unmarked(meta["resourceVersion"])
    return await patch_object(kube, obj, patch)


# --- Kueue: a workload Kueue runs is suspended through its Workload ----------------------


def _unmarked(resource_version: str) -> JSON:
    """The metadata of a patch that drops a budget's marks, conditional on the version."""
    return {
        "resourceVersion": resource_version,
        "labels": {SUSPENDED_BY: None},
        "annotations": {SUSPEND_REASON: None, SUSPENDED_AT: None, SUSPENDED_IN: None},
    }


async def kueue_workload(kube: Kube, job: JSON, name: str | None = None) -> JSON | None:
    """The Kueue Workload made for `job`: by name when the cache knows it, else by Kueue's
    job-uid label; only one owned by exactly this job (controller owner or label)."""
    meta = job["metadata"]
    uid, namespace = meta["uid"], meta["namespace"]
    if name is not None:
        found = await kube.get(KUEUE_API, "Workload", namespace, name)
        candidates = [found] if found is not None else []
    else:
        candidates = await kube.list(
            KUEUE_API, "Workload", namespace=namespace, selector=f"{KUEUE_JOB_UID}={uid}"
        )
    for workload in candidates:
        if kueue_record(workload, Keep()).owner_uid == uid:  # only its owner is read
            return workload
    return None


async def mark(
    kube: Kube, obj: JSON, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> JSON:
    """Only trainwarden's marks, conditional on the version read."""
    patch = _marked(obj, {}, labels, annotations)
    return await patch_object(kube, obj, patch)


async def unmark(kube: Kube, obj: JSON) -> JSON:
    """Drop trainwarden's suspension marks, conditional on the version read."""
    meta = obj["metadata"]
    patch = {"metadata": _unmarked(meta["resourceVersion"])}
    return await patch_object(kube, obj, patch)


async def hand_over(kube: Kube, obj: JSON, hold: Mapping[str, str]) -> JSON:
    """A budget's suspension turned into another budget's hold (`hold`: its marks): still
    suspended, the first budget's marks dropped, conditional on the version read."""
    meta = _unmarked(obj["metadata"]["resourceVersion"])
    meta["annotations"].update(hold)
    return await patch_object(kube, obj, {"metadata": meta})


async def deactivate(
    kube: Kube, workload: JSON, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> JSON:
    """spec.active=false on exactly the version evaluated, with the marks that let this
    budget, and only it, reactivate it: Kueue evicts it, suspends its job and keeps its
    quota accounting right."""
    patch = _marked(workload, {"spec": {"active": False}}, labels, annotations)
    return await patch_object(kube, workload, patch)


async def reactivate(kube: Kube, workload: JSON) -> JSON:
    """spec.active=true and the marks dropped, conditional on the version evaluated: Kueue
    queues it again and, once admitted, starts its job."""
    meta = workload["metadata"]
    patch = {"spec": {"active": True}, "metadata": _unmarked(meta["resourceVersion"])}
    return await patch_object(kube, workload, patch)
