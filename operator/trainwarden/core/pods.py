"""Read the few facts accounting needs out of a Pod object (a plain mapping)."""

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from trainwarden.core.accounting import Outcome, PodSnapshot
from trainwarden.core.quantity import parse_quantity
from trainwarden.core.shapes import mapping, mappings, strings


@dataclass(frozen=True, slots=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time from the API, or None for anything else (never an exception:
    objects carry whatever their writers put there)."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _requests(containers: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for container in containers:
        resources = mapping(container.get("resources"))
        # Extended resources may be given only as limits; Kubernetes then defaults the request.
        merged = {**mapping(resources.get("limits")), **mapping(resources.get("requests"))}
        for name, quantity in merged.items():
            total[name] += float(parse_quantity(quantity))
    return total


def effective_requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """What the scheduler reserves for the pod: per resource, the larger of the app
    containers' sum and the largest init container (sidecars count with the app), plus
    the pod overhead. CPU in cores, memory in bytes."""
    inits = mappings(spec.get("initContainers"))
    init = [c for c in inits if c.get("restartPolicy") != "Always"]
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    app = _requests([*mappings(spec.get("containers")), *sidecars])
    result = dict(app)
    for container in init:
        for name, amount in _requests([container]).items():
            result[name] = max(result.get(name, 0.0), amount)
    for name, quantity in mapping(spec.get("overhead")).items():
        result[name] = result.get(name, 0.0) + float(parse_quantity(quantity))
    return result


def _end(status: Mapping[str, Any]) -> datetime | None:
    """When a terminal pod stopped: its last container's finishedAt, else the last
    condition change (the Ready=False transition), else unknown."""
    finished = [
        parse_time((cs.get("state") or {}).get("terminated", {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    known = [t for t in finished if t is not None] or [
        t
        for t in (parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or [])
        if t is not None
    ]
    return max(known) if known else None


def snapshot(
    pod: Mapping[str, Any], node_labels: Mapping[str, str], *, gone_at: datetime | None = None
) -> PodSnapshot:
    """The accounting view of a pod. `gone_at` is when a still-running pod vanished.

    A terminal pod ends at its last container's finishedAt (or, lacking it, when it was
    seen gone); a pod that never got a startTime never held anything.
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase")
    outcome: Outcome = phase if phase in ("Succeeded", "Failed") else "Running"
    start = parse_time(status.get("startTime"))
    end = _end(status) if outcome != "Running" else None
    if end is None and gone_at is not None:
        end = gone_at
    if end is None and outcome != "Running":
        end = start  # terminal with no trace of when: charge nothing rather than forever
    return PodSnapshot(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        requests=effective_requests(pod.get("spec") or {}),
        start=start,
        end=end,
        outcome=outcome,
        labels=interned(meta.get("labels") or {}),
        node_labels=node_labels,
    )


def interned(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels repeat across thousands of pods (team, job-name keys, their values): one
    string object each instead of one per pod."""
    return {sys.intern(str(k)): sys.intern(str(v)) for k, v in labels.items()}


def controller_owner(pod: Mapping[str, Any]) -> OwnerRef | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return OwnerRef(ref["apiVersion"], ref["kind"], ref["name"], ref["uid"])
    return None


OURS = "trainwarden.dev/"
HOLD_GATE = "trainwarden.dev/budget"
"""The scheduling gate a bare pod held by an exhausted budget waits behind."""
MAX_ANNOTATION = 1024
"""trainwarden's annotations are short; a tenant's megabyte value is cut, not kept."""
# Pods of one multi-pod workload carry its name in a label even when their direct owner is
# an intermediate object (a JobSet's child Jobs, a RayJob's RayCluster).
_GROUP_LABELS = ("jobset.sigs.k8s.io/jobset-name", "ray.io/cluster")
MAX_NODE_SELECTOR = 16
"""A nodeSelector kept for a waiting pod has at most this many labels (a longer one is
not evaluated: the pod is no pending demand)."""
NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The index entry for one pod: small, because the operator holds one per pod."""

    snapshot: PodSnapshot
    node: str | None
    owner: OwnerRef | None
    priority: int
    priority_class: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Only trainwarden's own annotations (opt-outs, warnings), not the pod's whole set."""
    deleting: bool = False
    resource_version: str = ""
    gated: bool = False
    """It waits behind trainwarden's scheduling gate (held by a budget)."""
    unschedulable_since: datetime | None = None
    """While it waits unbound: since when the scheduler has found no node for it (the
    pending demand an idle policy under pressure looks for)."""
    node_selector: Mapping[str, str] | None = field(default_factory=lambda: NO_LABELS)
    """Of an unschedulable pod only: its nodeSelector, or None when its placement has rules
    the operator does not evaluate (required node affinity, an oversized selector)."""
    restarts: int = 0
    """Its containers' restart counts, summed (a run's receipt reports them)."""
    created: datetime | None = None
    """Of a gated pod only: when the API server created it (the order held work starts
    in; the held-at annotation is the tenant's to write)."""

    @property
    def group(self) -> str:
        """The workload this pod is part of, for decisions that need all of it."""
        pod = self.snapshot
        for label in _GROUP_LABELS:
            if label in pod.labels:
                return f"{pod.namespace}/{label}={pod.labels[label]}"
        return self.owner.uid if self.owner else pod.uid


def unschedulable_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the scheduler first failed to place a pod that is still unbound: its
    PodScheduled=False condition with reason Unschedulable (not a gated pod's
    SchedulingGated, nor a pod the scheduler has not tried yet)."""
    status = mapping(pod.get("status"))
    if mapping(pod.get("spec")).get("nodeName") or status.get("phase", "Pending") != "Pending":
        return None
    for condition in mappings(status.get("conditions")):
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _node_selector(spec: Mapping[str, Any]) -> Mapping[str, str] | None:
    required = mapping(mapping(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    selector = mapping(spec.get("nodeSelector"))
    if required or len(selector) > MAX_NODE_SELECTOR:
        return None
    return interned(strings(selector)) if selector else NO_LABELS


def facts(pod: Mapping[str, Any]) -> PodFacts:
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    waiting = unschedulable_since(pod) if meta.get("deletionTimestamp") is None else None
    gated = any(
        isinstance(g, Mapping) and g.get("name") == HOLD_GATE
        for g in spec.get("schedulingGates") or []
    )
    return PodFacts(
        snapshot=snapshot(pod, {}),
        node=spec.get("nodeName"),
        owner=controller_owner(pod),
        priority=int(spec.get("priority") or 0),
        priority_class=spec.get("priorityClassName"),
        annotations={
            k: str(v)[:MAX_ANNOTATION]
            for k, v in (meta.get("annotations") or {}).items()
            if k.startswith(OURS)
        },
        deleting=meta.get("deletionTimestamp") is not None,
        resource_version=str(meta.get("resourceVersion") or ""),
        gated=gated,
        unschedulable_since=waiting,
        node_selector=_node_selector(spec) if waiting is not None else NO_LABELS,
        restarts=_restarts(pod.get("status") or {}),
        created=parse_time(meta.get("creationTimestamp")) if gated else None,
    )


def _restarts(status: Mapping[str, Any]) -> int:
    counts = (
        c.get("restartCount")
        for c in mappings(status.get("containerStatuses"))
        + mappings(status.get("initContainerStatuses"))
    )
    return sum(n for n in counts if isinstance(n, int) and n > 0)
