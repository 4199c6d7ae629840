"""Read the few facts accounting needs out of a Pod object (a plain mapping).

The record kept of each pod (`facts`) holds only what some code or policy reads
(core/keep.py): its size does not depend on what the pod's writer put in it.
"""

import sys
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from trainwarden.api.v1alpha1.names import (
    CODE_VERSION,
    CONFIG_HASH,
    DATA_VERSION,
    HOLD_GATE,
    PARAMS,
)
from trainwarden.core.accounting import Outcome, PodSnapshot
from trainwarden.core.keep import (
    API_VERSION,
    INT32,
    KIND,
    LABEL_VALUE,
    NAME,
    SHORT,
    Keep,
    bounded,
    integer,
    kept_annotations,
    kept_labels,
    label_key,
)
from trainwarden.core.quantity import parse_quantity
from trainwarden.core.shapes import mapping, mappings


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


def _requests(
    containers: Iterable[Mapping[str, Any]], only: Collection[str] | None
) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for container in containers:
        resources = mapping(container.get("resources"))
        # Extended resources may be given only as limits; Kubernetes then defaults the request.
        merged = {**mapping(resources.get("limits")), **mapping(resources.get("requests"))}
        for name, quantity in merged.items():
            if only is None or name in only:
                total[name] += float(parse_quantity(quantity))
    return total


def effective_requests(
    spec: Mapping[str, Any], only: Collection[str] | None = None
) -> dict[str, float]:
    """What the scheduler reserves for the pod: per resource, the larger of the app
    containers' sum and the largest init container (sidecars count with the app), plus
    the pod overhead. CPU in cores, memory in bytes. `only`: of these resources alone."""
    inits = mappings(spec.get("initContainers"))
    init = [c for c in inits if c.get("restartPolicy") != "Always"]
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    app = _requests([*mappings(spec.get("containers")), *sidecars], only)
    result = dict(app)
    for container in init:
        for name, amount in _requests([container], only).items():
            result[name] = max(result.get(name, 0.0), amount)
    for name, quantity in mapping(spec.get("overhead")).items():
        if only is None or name in only:
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


def snapshot(pod: Mapping[str, Any], keep: Keep, *, gone_at: datetime | None = None) -> PodSnapshot:
    """The accounting view of a pod: only the labels and resources `keep` names. `gone_at`
    is when a still-running pod vanished.

    A terminal pod ends at its last container's finishedAt (or, lacking it, when it was
    seen gone); a pod that never got a startTime never held anything.
    """
    meta = mapping(pod.get("metadata"))
    status = mapping(pod.get("status"))
    phase = status.get("phase")
    outcome: Outcome = phase if phase in ("Succeeded", "Failed") else "Running"
    start = parse_time(status.get("startTime"))
    end = _end(status) if outcome != "Running" else None
    if end is None and gone_at is not None:
        end = gone_at
    if end is None and outcome != "Running":
        end = start  # terminal with no trace of when: charge nothing rather than forever
    requests = effective_requests(mapping(pod.get("spec")), keep.resources)
    return PodSnapshot(
        uid=bounded(meta.get("uid", ""), SHORT),
        namespace=bounded(meta.get("namespace", ""), LABEL_VALUE),
        name=bounded(meta.get("name", ""), NAME),
        requests={sys.intern(r): n for r, n in requests.items()},
        start=start,
        end=end,
        outcome=outcome,
        labels=kept_labels(meta.get("labels"), keep.pod_labels),
    )


def controller_owner(obj: Mapping[str, Any]) -> OwnerRef | None:
    """The controller among an object's owners. Each string is kept whole only if it is
    no longer than the API's names allow; an over-long one is a mark (core/keep.py), so
    the owner is of no kind the operator knows and its uid names no object: foreign."""
    for ref in mappings(mapping(obj.get("metadata")).get("ownerReferences")):
        if ref.get("controller") is True:
            return OwnerRef(
                bounded(ref.get("apiVersion"), API_VERSION),
                bounded(ref.get("kind"), KIND),
                bounded(ref.get("name"), NAME),
                bounded(ref.get("uid"), SHORT),
            )
    return None


GROUP_LABELS = ("jobset.sigs.k8s.io/jobset-name", "ray.io/cluster")
"""Pods of one multi-pod workload carry its name in one of these labels even when their
direct owner is an intermediate object (a JobSet's child Jobs, a RayJob's RayCluster)."""
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
    claims: tuple[str, ...] = ()
    """The PersistentVolumeClaims it mounts, by name in its namespace (at most
    MAX_POD_CLAIMS): a run's receipt charges the storage they held (core/run_storage.py)."""

    @property
    def group(self) -> str:
        """The workload this pod is part of, for decisions that need all of it."""
        pod = self.snapshot
        for label in GROUP_LABELS:
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
    """Only a selector the operator can evaluate is kept: a few labels, of keys the API
    accepts (their values bounded like any label's)."""
    required = mapping(mapping(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    selector = mapping(spec.get("nodeSelector"))
    if required or len(selector) > MAX_NODE_SELECTOR or not all(map(label_key, selector)):
        return None
    return kept_labels(selector, frozenset(selector)) if selector else NO_LABELS


MAX_POD_CLAIMS = 16
"""Claims a pod's record names at most; a pod mounting more counts as mounting one
unknown claim more (an empty name), so its receipt says its storage is not all known."""


def mounted_claims(spec: Mapping[str, Any], pod_name: str) -> tuple[str, ...]:
    """The claims a pod mounts: `persistentVolumeClaim.claimName`, and a generic ephemeral
    volume's claim (`<pod>-<volume>`, as the ephemeral volume controller names it); sorted,
    each once, each bounded."""
    names: set[str] = set()
    for volume in mappings(spec.get("volumes")):
        claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
        if isinstance(claim, str) and claim:
            names.add(bounded(claim, NAME))
        elif volume.get("ephemeral") is not None and isinstance(volume.get("name"), str):
            names.add(bounded(f"{pod_name}-{volume['name']}", NAME))
    found = sorted(names)
    return tuple(found) if len(found) <= MAX_POD_CLAIMS else (*found[: MAX_POD_CLAIMS - 1], "")


LEDGER_KEYS = frozenset({PARAMS, DATA_VERSION, CODE_VERSION, CONFIG_HASH})


def _annotations(annotations: object, keep: Keep, *, owned: bool) -> dict[str, str]:
    """trainwarden's annotations on a pod; the experiment ledger's only on a bare pod (its
    own run): a controller's pods carry their template's copies, which the run reads from
    the workload instead, and kept per pod they would cost up to 5 KiB each."""
    kept = kept_annotations(annotations, keep.pod_annotations)
    if owned:
        for key in LEDGER_KEYS & kept.keys():
            del kept[key]
    return kept


def facts(pod: Mapping[str, Any], keep: Keep) -> PodFacts:
    """The record the cache keeps of a pod: what `keep` names, each string bounded."""
    spec, meta = mapping(pod.get("spec")), mapping(pod.get("metadata"))
    waiting = unschedulable_since(pod) if meta.get("deletionTimestamp") is None else None
    node, priority_class = spec.get("nodeName"), spec.get("priorityClassName")
    gated = any(g.get("name") == HOLD_GATE for g in mappings(spec.get("schedulingGates")))
    owner = controller_owner(pod)
    return PodFacts(
        snapshot=snapshot(pod, keep),
        node=bounded(node, NAME) if node else None,
        owner=owner,
        priority=integer(spec.get("priority"), INT32),
        priority_class=bounded(priority_class, NAME) if priority_class else None,
        annotations=_annotations(meta.get("annotations"), keep, owned=owner is not None),
        deleting=meta.get("deletionTimestamp") is not None,
        resource_version=bounded(str(meta.get("resourceVersion") or ""), SHORT),
        gated=gated,
        unschedulable_since=waiting,
        node_selector=_node_selector(spec) if waiting is not None else NO_LABELS,
        restarts=_restarts(mapping(pod.get("status"))),
        created=parse_time(meta.get("creationTimestamp")) if gated else None,
        claims=mounted_claims(spec, str(meta.get("name") or "")),
    )


def _restarts(status: Mapping[str, Any]) -> int:
    counts = (
        integer(c.get("restartCount"), INT32)
        for c in mappings(status.get("containerStatuses"))
        + mappings(status.get("initContainerStatuses"))
    )
    return min(INT32, sum(n for n in counts if n > 0))
