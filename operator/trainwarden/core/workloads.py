"""The workload kinds trainwarden acts on, and the small record the cache keeps of each.

One table says which kinds exist, where their suspend field is, and which are only
intermediate owners (a JobSet's child Jobs, a RayJob's RayCluster): enforcement, the
suspend/resume adapter and the cache's informers all read it.
"""

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from trainwarden.api.v1alpha1.names import RECLAIMED_BY, SUSPENDED_BY
from trainwarden.core.keep import (
    API_VERSION,
    KIND,
    LABEL_VALUE,
    NAME,
    SHORT,
    Keep,
    bounded,
    kept_annotations,
    kept_labels,
)
from trainwarden.core.pods import OwnerRef, controller_owner, parse_time
from trainwarden.core.shapes import mapping, mappings

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
EPOCH = datetime.fromtimestamp(0, UTC)
Result = Literal["Succeeded", "Failed"]


@dataclass(frozen=True)
class WorkloadKind:
    api_version: str
    kind: str
    plural: str
    suspend_path: tuple[str, ...] | None
    """Where `suspend` lives; None for kinds that are only walked through."""

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.kind

    @property
    def collection(self) -> str:
        """The cluster-wide collection's URL path."""
        if "/" in self.api_version:
            return f"/apis/{self.api_version}/{self.plural}"
        return f"/api/{self.api_version}/{self.plural}"


_KUBEFLOW = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("batch/v1", "Job", "jobs", ("spec", "suspend")),
    WorkloadKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", ("spec", "suspend")),
    WorkloadKind("ray.io/v1", "RayJob", "rayjobs", ("spec", "suspend")),
    WorkloadKind("ray.io/v1", "RayCluster", "rayclusters", None),
    *(
        WorkloadKind("kubeflow.org/v1", kind, f"{kind.lower()}s", ("spec", "runPolicy", "suspend"))
        for kind in _KUBEFLOW
    ),
)
BY_KEY: Mapping[tuple[str, str], WorkloadKind] = {k.key: k for k in KINDS}
SUSPEND_FIELD: Mapping[tuple[str, str], tuple[str, ...]] = {
    k.key: k.suspend_path for k in KINDS if k.suspend_path is not None
}
POD = ("v1", "Pod")
"""A bare pod is "suspended" by evicting it."""


@dataclass(frozen=True, slots=True)
class WorkloadFacts:
    """What the cache keeps of a workload object: enough to rank it, find its parent and
    know whether it is suspended, never its body."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    created: datetime
    suspended: bool
    owner: OwnerRef | None
    labels: Mapping[str, str]
    """Only the labels in WORKLOAD_LABELS."""
    annotations: Mapping[str, str]
    """Only the trainwarden annotations the code reads (core/reads.py), each cut."""
    finished_at: datetime | None = None
    """When a Job completed or failed; None while it runs (or for other kinds)."""
    result: "tuple[Result, datetime | None] | None" = None
    """How and when the run ended, for every kind (`terminal`); None while it runs."""

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.kind

    @property
    def kueue_managed(self) -> bool:
        return KUEUE_QUEUE in self.labels

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


WORKLOAD_LABELS = frozenset({SUSPENDED_BY, RECLAIMED_BY, KUEUE_QUEUE})
"""The labels read on workloads: what suspended or reclaimed one, and Kueue's queue."""


def label_value(budget: str) -> str:
    """The suspended-by label a budget writes: budget names may be 253 characters, label
    values only 63."""
    if len(budget) <= 63:
        return budget
    return budget[:50] + "-" + hashlib.sha256(budget.encode()).hexdigest()[:12]


def is_suspended(obj: Mapping[str, Any]) -> bool:
    """Whether the object's own suspend field is set; kinds without one never are."""
    path = SUSPEND_FIELD.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    node: Any = obj
    for part in path or ():
        node = mapping(node).get(part)
    return path is not None and bool(node)


def _finished_at(obj: Mapping[str, Any]) -> datetime | None:
    for condition in mappings(mapping(obj.get("status")).get("conditions")):
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


_TERMINAL: Mapping[str, Mapping[str, Result]] = {
    "Job": {"Complete": "Succeeded", "Failed": "Failed"},
    "JobSet": {"Completed": "Succeeded", "Failed": "Failed"},
    **{kind: {"Succeeded": "Succeeded", "Failed": "Failed"} for kind in _KUBEFLOW},
}
_RAY_RESULT: Mapping[str, Result] = {
    "SUCCEEDED": "Succeeded",
    "FAILED": "Failed",
    "STOPPED": "Failed",
}


def terminal(obj: Mapping[str, Any]) -> tuple[Result, datetime | None] | None:
    """Whether a workload finished, how and when, as its own controller says: a True
    terminal condition (Job, JobSet, Kubeflow), or a RayJob's final jobStatus."""
    status = mapping(obj.get("status"))
    kind = str(obj.get("kind") or "")
    if kind == "RayJob":
        found = _RAY_RESULT.get(str(status.get("jobStatus") or ""))
        done = status.get("jobDeploymentStatus") in ("Complete", "Failed")
        return (found, parse_time(status.get("endTime"))) if found and done else None
    names = _TERMINAL.get(kind, {})
    for condition in mappings(status.get("conditions")):
        result = names.get(str(condition.get("type")))
        if result is not None and condition.get("status") == "True":
            return result, parse_time(condition.get("lastTransitionTime"))
    return None


def workload_facts(obj: Mapping[str, Any], keep: Keep) -> WorkloadFacts:
    """The record the cache keeps of a workload: a few bounded fields, the labels in
    WORKLOAD_LABELS and the annotations `keep` names, whatever else its writer put in."""
    meta = mapping(obj.get("metadata"))
    return WorkloadFacts(
        api_version=bounded(obj.get("apiVersion") or "", API_VERSION),
        kind=bounded(obj.get("kind") or "", KIND),
        namespace=bounded(meta.get("namespace") or "", LABEL_VALUE),
        name=bounded(meta.get("name") or "", NAME),
        uid=bounded(meta.get("uid") or "", SHORT),
        created=parse_time(meta.get("creationTimestamp")) or EPOCH,
        suspended=is_suspended(obj),
        owner=controller_owner(obj),
        labels=kept_labels(meta.get("labels"), WORKLOAD_LABELS),
        annotations=kept_annotations(meta.get("annotations"), keep.workload_annotations),
        finished_at=_finished_at(obj),
        result=terminal(obj),
    )


MAX_CHAIN = 8
"""Owners followed above a pod at most: real chains are two deep (JobSet, Job)."""


def group_kind(api_version: str, kind: str) -> tuple[str, str]:
    """An owner reference names a version; the cache holds one version of each kind."""
    return (api_version.rpartition("/")[0] if "/" in api_version else ""), kind


WATCHED = frozenset(group_kind(*k.key) for k in KINDS)
"""The kinds the cache holds: an owner of one of these that it lacks may only be unseen."""


@dataclass(frozen=True, slots=True)
class Chain:
    """A pod's controller ancestors as the cache knows them, nearest first."""

    links: tuple[WorkloadFacts, ...]
    unresolved: OwnerRef | None
    """The first reference the cache could not follow: an object it does not hold, or one
    whose namespace, kind or name differs from what the reference says (a reference is
    written by whoever wrote the child). None when the chain ends at an object without a
    controller, or in a cycle."""

    @property
    def pending(self) -> bool:
        """The chain stops at a kind the cache holds: its owner may only be unseen yet."""
        ref = self.unresolved
        return ref is not None and group_kind(ref.api_version, ref.kind) in WATCHED


def ancestors(
    owner: OwnerRef | None, namespace: str, lookup: Callable[[str], WorkloadFacts | None]
) -> Chain:
    """Follow controller references up from `owner`, within `namespace` (a reference can
    only name an object of its own namespace: a uid found elsewhere is not that object),
    stopping at a cycle or after MAX_CHAIN links."""
    links: list[WorkloadFacts] = []
    seen: set[str] = set()
    ref = owner
    while ref is not None and len(links) < MAX_CHAIN:
        if ref.uid in seen:
            return Chain(tuple(links), None)
        found = lookup(ref.uid)
        if (
            found is None
            or found.namespace != namespace
            or found.name != ref.name
            or group_kind(found.api_version, found.kind) != group_kind(ref.api_version, ref.kind)
        ):
            return Chain(tuple(links), ref)
        seen.add(ref.uid)
        links.append(found)
        ref = found.owner
    return Chain(tuple(links), ref)


def top_level(
    owner: OwnerRef | None, namespace: str, lookup: Callable[[str], WorkloadFacts | None]
) -> WorkloadFacts | None:
    """The run a pod owned by `owner` belongs to: the highest suspendable ancestor (a
    JobSet above its Jobs, a RayJob above its RayCluster), else the highest known one;
    None for a bare pod, or while the chain stops at an owner the cache may not have seen."""
    chain = ancestors(owner, namespace, lookup)
    if chain.pending:
        return None
    suspendable = [w for w in chain.links if w.key in SUSPEND_FIELD] or list(chain.links)
    return suspendable[-1] if suspendable else None
