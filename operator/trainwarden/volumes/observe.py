"""What a VolumeReclaimPolicy reads besides its records: the claims in scope and their
mounts (the cache), and for a claim old enough to be judged, what else may still need it
(the API: its workloads, its volume, its snapshot; CheckpointPolicies through links)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainwarden import logs
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.names import CHECKPOINT_PATH, SOURCE_CLAIM_UID
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicySpec
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.links import CheckpointScan
from trainwarden.core import orphans
from trainwarden.core.claims import ClaimFacts
from trainwarden.core.keep import NAME, bounded
from trainwarden.core.scope import in_namespaces, selects
from trainwarden.core.shapes import mapping, mappings
from trainwarden.core.workloads import KINDS

log = logs.get(__name__)
SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
REFERRERS: tuple[tuple[str, str], ...] = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "CronJob"),
    *((k.api_version, k.kind) for k in KINDS),
)
"""Every kind whose pod templates may name a claim: a suspended Job, a JobSet, a Deployment
scaled to zero mounts it again when it resumes. Listed only in a namespace with a claim old
enough to be judged; a kind not served lists as none."""


def in_scope(spec: VolumeReclaimPolicySpec, cache: ClusterCache) -> list[ClaimFacts]:
    """The claims the policy governs: its namespaces, then the claims' labels and class."""
    scope, classes = spec.scope, set(spec.storage_class_names)
    found = []
    for namespace in sorted(cache.claims_by_namespace):
        if not in_namespaces(scope, namespace, cache.namespace_labels(namespace)):
            continue
        for c in cache.claims_in(namespace):
            if scope.selector is not None and not selects(scope.selector, c.labels):
                continue
            if classes and c.storage_class not in classes:
                continue
            found.append(c)
    return found


def mounts(cache: ClusterCache, namespaces: set[str], now: Any) -> dict[str, orphans.Mounts]:
    return {ns: orphans.mounts(cache.pods_in(ns), now) for ns in namespaces}


@dataclass
class Workloads:
    """A namespace's workloads as claim references, listed once per evaluation."""

    references: dict[str, str] = field(default_factory=dict)
    statefulsets: dict[str, list[str]] = field(default_factory=dict)
    unknown: str | None = None


def _checkpoint_claim(obj: Mapping[str, Any]) -> str | None:
    """The claim a workload's trainwarden.dev/checkpoint-path names ("<pvc>:<path>")."""
    path = mapping(mapping(obj.get("metadata")).get("annotations")).get(CHECKPOINT_PATH)
    if not isinstance(path, str) or path.startswith("s3://") or ":" not in path:
        return None
    return path.split(":", 1)[0] or None


async def workloads(kube: Kube, namespace: str) -> Workloads:
    """Every workload of the namespace that names a claim, and its StatefulSets' claim
    templates. A list that fails leaves the namespace unknown: nothing is deleted there."""
    out = Workloads()
    for api_version, kind in REFERRERS:
        try:
            items = await kube.list(api_version, kind, namespace=namespace)
        except Exception as error:  # any failure: the references are unknown, act on none
            out.unknown = f"{kind} not listed ({str(error)[:200]})"
            return out
        for obj in items:
            name = bounded(mapping(obj.get("metadata")).get("name"), NAME)
            named = set(orphans.template_claims(obj))
            named |= {c for c in [_checkpoint_claim(obj)] if c is not None}
            for claim in named:
                out.references.setdefault(claim, f"{kind}/{name}")
            if kind == "StatefulSet":
                templates = mappings(mapping(obj.get("spec")).get("volumeClaimTemplates"))
                out.statefulsets[name] = [
                    bounded(mapping(t.get("metadata")).get("name"), NAME) for t in templates
                ]
    return out


def checkpoint_governor(
    scans: Sequence[CheckpointScan],
    specs: Sequence[tuple[str, CheckpointPolicySpec]],
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    namespace_labels: Mapping[str, str],
) -> str | None:
    """The CheckpointPolicy that governs a claim: one whose status lists it as a location,
    or whose PVC (or VolumeSnapshot) selector picks it in a namespace of its scope."""
    for scan in scans:
        loc = scan.location
        if loc.source != "S3" and (loc.namespace, loc.pvc) == (namespace, name):
            return scan.policy
    for policy, spec in specs:
        if not in_namespaces(spec.scope, namespace, namespace_labels):
            continue
        for source in (spec.storage.pvc, spec.storage.volume_snapshots):
            selector = getattr(source, "selector", None)
            if selector is not None and selects(selector, labels):
                return policy
    return None


async def retained(kube: Kube, volume: str) -> bool | None:
    """Whether the claim's volume is Retain; None when a bound volume cannot be read."""
    if not volume:
        return False
    pv = await kube.get("v1", "PersistentVolume", None, volume)
    if pv is None:
        return None
    return mapping(pv.get("spec")).get("persistentVolumeReclaimPolicy") == "Retain"


def snapshot_name(name: str, uid: str) -> str:
    """Deterministic: the same claim always asks for the same snapshot."""
    return f"{name[:220]}-orphan-{uid[:8]}"


async def snapshot(kube: Kube, namespace: str, name: str, uid: str) -> JSON | None:
    """The snapshot the policy asked for, if it exists and names this claim's uid."""
    found = await kube.get(SNAPSHOT_API, "VolumeSnapshot", namespace, snapshot_name(name, uid))
    labels = mapping(mapping((found or {}).get("metadata")).get("labels"))
    return found if found is not None and labels.get(SOURCE_CLAIM_UID) == uid else None
