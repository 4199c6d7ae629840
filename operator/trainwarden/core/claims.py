"""What storage accounting needs from one PersistentVolumeClaim, and nothing more.

The cache keeps one `ClaimFacts` per claim (cache/cluster.py): its identity, the labels
some scope reads (core/keep.py), its storage class, the storage it requests and since
when, when it was created and when its deletion was asked. Whatever a tenant wrote is
bounded here: names and classes as the cache bounds every string, a request that does
not parse reads as 0 bytes, one past MAX_BYTES as MAX_BYTES.

A claim's request can only grow (the API server refuses to shrink one). `requests` keeps
the last MAX_REQUESTS requests in force with when the cache saw each; an older one is
merged into the next (the larger), so a claim resized more often than that between two
evaluations is charged a little more than it held, never less.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from trainwarden.core.keep import LABEL_VALUE, NAME, SHORT, Keep, bounded, kept_labels
from trainwarden.core.pods import parse_time
from trainwarden.core.quantity import parse_quantity
from trainwarden.core.shapes import mapping

MAX_BYTES = 2**63 - 1
"""The largest request kept (the API's int64 of bytes): 8 EiB, 8.6e9 GiB."""
MAX_REQUESTS = 4
NO_CLASS = ""
"""The class a claim without one is counted under (docs/storage.md)."""


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    """Only those scopes and claim selectors read (`Keep.pod_labels`, `Keep.claim_labels`)."""
    storage_class: str
    created: float
    """creationTimestamp, POSIX seconds (the API server's, one-second resolution)."""
    requests: tuple[tuple[float, int], ...]
    """(since, bytes) of the requests in force, oldest first; the first since `created`."""
    deleting_since: float | None = None
    """deletionTimestamp: from then on the claim is no longer charged."""

    @property
    def request(self) -> int:
        return self.requests[-1][1]


def request_bytes(value: object) -> int:
    """spec.resources.requests.storage in whole bytes (rounded up, as the API does),
    0 for anything that is not a quantity or not positive, at most MAX_BYTES."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        return 0
    if isinstance(value, str) and len(value) > SHORT:
        return 0
    try:
        parsed = parse_quantity(value)
    except ValueError:
        return 0
    if not parsed.is_finite() or parsed <= 0:
        return 0
    if parsed >= Decimal(MAX_BYTES):
        return MAX_BYTES
    return math.ceil(parsed)


def claim_facts(obj: Mapping[str, Any], keep: Keep) -> ClaimFacts | None:
    """The record kept of a claim; None for one without a creation time (never charged)."""
    meta, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
    created = parse_time(meta.get("creationTimestamp"))
    if created is None:
        return None
    requested = mapping(mapping(spec.get("resources")).get("requests")).get("storage")
    deleting = parse_time(meta.get("deletionTimestamp"))
    klass = spec.get("storageClassName")
    return ClaimFacts(
        uid=bounded(meta.get("uid") or "", SHORT),
        namespace=bounded(meta.get("namespace") or "", LABEL_VALUE),
        name=bounded(meta.get("name") or "", NAME),
        labels=kept_labels(meta.get("labels"), keep.pod_labels | keep.claim_labels),
        storage_class=bounded(klass, NAME) if isinstance(klass, str) and klass else NO_CLASS,
        created=created.timestamp(),
        requests=((created.timestamp(), request_bytes(requested)),),
        deleting_since=deleting.timestamp() if deleting is not None else None,
    )


def updated(old: ClaimFacts | None, new: ClaimFacts, seen: datetime) -> ClaimFacts:
    """`new` with the history of requests `old` had: a changed request is in force
    from `seen` (when the cache saw it), bounded to MAX_REQUESTS entries."""
    if old is None or old.uid != new.uid:
        return new
    history = old.requests
    if new.request != old.request:
        history = (*history, (max(seen.timestamp(), history[-1][0]), new.request))
    while len(history) > MAX_REQUESTS:
        (since, _), (_, larger) = history[0], history[1]
        history = ((since, max(larger, history[0][1])), *history[2:])
    return replace(new, requests=history)


def charge_seconds(c: ClaimFacts, lo: float, hi: float, end: float | None) -> float:
    """Byte-seconds the claim held within [lo, hi): each request in force times its
    overlap, up to `end` (its deletion, or when it was seen gone). Never negative."""
    stop = min(hi, end) if end is not None else hi
    if c.deleting_since is not None:
        stop = min(stop, c.deleting_since)
    total = 0.0
    for i, (since, size) in enumerate(c.requests):
        until = c.requests[i + 1][0] if i + 1 < len(c.requests) else math.inf
        a, b = max(lo, since, c.created), min(stop, until)
        if b > a:
            total += float(size) * (b - a)
    return total
