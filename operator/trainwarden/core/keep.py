"""What the operator's cache keeps of the objects it holds many of, and how each kept
string is bounded.

The cache holds one record per pod, workload, namespace and node, and tenants write most
of what those objects carry: any number of labels and annotations, owner references,
containers and resource names. A record keeps only what some code or policy of this
instance reads (core/reads.py says what that is), each value bounded, so its size does
not depend on what a tenant wrote (tests/test_bounded_cache.py, docs/security.md).
"""

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

LABEL_VALUE = 63
"""The longest label value the API accepts."""
NAME = 253
"""The longest object name (a DNS subdomain) the API accepts."""
SHORT = 64
"""Times, durations, uids, resource versions, "true": all much shorter."""
KIND = 63
API_VERSION = 317
"""A group (a DNS subdomain) and a version."""
LABEL_KEY = 317
"""A prefix (a DNS subdomain), "/" and a name of 63."""


INT32 = 2**31 - 1
INT64 = 2**63 - 1


def integer(value: object, limit: int = INT64) -> int:
    """An integer field as the API bounds it (int32, int64); anything else (a string, a
    bool, a number past `limit`) reads as 0."""
    if isinstance(value, int) and not isinstance(value, bool) and -limit <= value <= limit:
        return value
    return 0


def mark(value: object) -> str:
    """A short stand-in for a value too long (or of the wrong type) to keep: "~" and 16
    hex digits of its digest. "~" is in no name, label value, kind, uid or time the API
    accepts, so a mark equals nothing a policy or the API names, and two different
    over-long values stay different (a pod's group, an owner's uid)."""
    text = value if isinstance(value, str) else type(value).__name__
    return "~" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def bounded(value: object, cap: int) -> str:
    """`value` itself if it is ASCII text of at most `cap` characters, else its mark:
    compared whole (a label, a name, a kind), it is never kept cut short, which could
    make it equal to something else."""
    if isinstance(value, str) and len(value) <= cap and value.isascii():
        return value
    return mark(value)


def cut(value: object, cap: int) -> str:
    """Free text read by its start (an annotation's time, path or list of names): at
    most `cap` characters of it. Anything a cut value can say, its writer could have
    written directly."""
    return value[:cap] if isinstance(value, str) else mark(value)


@dataclass(frozen=True)
class Keep:
    """The label keys, resource names and annotations a record keeps; everything else
    an object carries is dropped when it is projected."""

    pod_labels: frozenset[str] = frozenset()
    """Pods' labels read by scopes, attribution, budget labels, groups, Kueue."""
    namespace_labels: frozenset[str] = frozenset()
    """Namespaces' labels read by namespace selectors."""
    node_labels: frozenset[str] = frozenset()
    """Nodes' labels read by rates, idle node selectors and reports (a node keeps these
    first, then a few more for the node selectors of pods waiting for room)."""
    resources: frozenset[str] = frozenset()
    """Resource names accounted for (CPU, memory, every accelerator a policy names)."""
    pod_annotations: Mapping[str, int] = field(default_factory=dict)
    """trainwarden's annotations read on pods, with the characters kept of each."""
    workload_annotations: Mapping[str, int] = field(default_factory=dict)
    """trainwarden's annotations read on workloads, with the characters kept of each."""
    claim_labels: frozenset[str] = frozenset()
    """PersistentVolumeClaims' labels read by claims only (a CheckpointPolicy's PVC
    selector); a claim also keeps `pod_labels`, which scopes read of claims too. Apart, so
    that a new claim selector lists claims again, not every pod."""

    def __or__(self, other: "Keep") -> "Keep":
        return Keep(
            self.pod_labels | other.pod_labels,
            self.namespace_labels | other.namespace_labels,
            self.node_labels | other.node_labels,
            self.resources | other.resources,
            {**other.pod_annotations, **self.pod_annotations},
            {**other.workload_annotations, **self.workload_annotations},
            self.claim_labels | other.claim_labels,
        )


def kept_labels(labels: object, keys: frozenset[str]) -> dict[str, str]:
    """The labels whose keys are in `keys`, each value bounded. Keys and values are
    interned: they repeat across thousands of records (team, job-name, their values),
    and a key kept is always one a reader names, so its object is shared."""
    if not isinstance(labels, Mapping):
        return {}
    found = ((k, labels.get(k)) for k in keys)
    return {sys.intern(k): sys.intern(bounded(v, LABEL_VALUE)) for k, v in found if v is not None}


def label_key(key: object) -> bool:
    """Whether `key` could be a label key the API accepts, as far as its size goes."""
    return isinstance(key, str) and len(key) <= LABEL_KEY and key.isascii()


def kept_annotations(annotations: object, caps: Mapping[str, int]) -> dict[str, str]:
    """The annotations named in `caps`, each cut to its cap; the key object is the
    reader's."""
    if not isinstance(annotations, Mapping):
        return {}
    return {k: cut(annotations[k], cap) for k, cap in caps.items() if k in annotations}
