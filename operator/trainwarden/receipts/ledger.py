"""The run ledger's identity and bounds: the seal's key in its Secret, the receipts this
operator can prove it wrote, and the sweep that removes only those.

What the operator believes of a stored receipt — that it is a run's receipt (AlreadyExists
after a restart), its figures (copied onto the workload), that it counts toward the cap
or may be removed — it believes only of a receipt whose seal verifies
(receipts/identity.py). Labels only narrow what the sweep lists.
"""

import base64
import binascii
import heapq
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.names import INSTANCE_LABEL, PREFIX, SEAL, SEAL_KEY, WORKLOAD_UID
from trainwarden.api.v1alpha1.names import RECEIPT_KIND as KIND
from trainwarden.api.v1alpha1.receipt import RunReceiptSpec
from trainwarden.api.v1alpha1.types import API_VERSION, MANAGED_BY
from trainwarden.receipts.identity import (
    CURRENT,
    MIN_KEY,
    Keyring,
    Stored,
    key_id,
    keyring,
    removals,
    seal,
    verified,
)

log = logs.get(__name__)


@dataclass(frozen=True)
class Identity:
    """Who this operator is in the ledger: its instance and the keys of its seal."""

    instance: str | None
    ring: Keyring

    def selector(self) -> str:
        """The receipts labelled as this instance's: what the sweep lists (and then
        verifies: a label is anyone's to write)."""
        mine = f"{INSTANCE_LABEL}={self.instance}" if self.instance else f"!{INSTANCE_LABEL}"
        return f"{MANAGED_BY}=trainwarden,{mine}"

    def manifest(self, name: str, spec: RunReceiptSpec) -> JSON:
        """The RunReceipt `name` of `spec`, sealed with the current key."""
        namespace = spec.workload.namespace
        labels = {
            **{k: v for k, v in spec.labels.items() if not k.startswith(PREFIX)},
            MANAGED_BY: "trainwarden",
            WORKLOAD_UID: spec.workload.uid[:63],
            SEAL_KEY: key_id(self.ring.current),
        }
        if self.instance:
            labels[INSTANCE_LABEL] = self.instance
        sealed = seal(
            self.ring.current, instance=self.instance, namespace=namespace, name=name, spec=spec
        )
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": {SEAL: sealed},
            },
            "spec": spec.model_dump(by_alias=True, mode="json", exclude_none=True),
        }

    def genuine(self, obj: JSON) -> RunReceiptSpec | None:
        """The stored receipt's spec if this operator wrote it, else None."""
        meta: dict[str, Any] = obj.get("metadata") or {}
        return verified(
            self.ring,
            instance=self.instance,
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            sealed=(meta.get("annotations") or {}).get(SEAL),
            spec=obj.get("spec"),
        )

    def stored(self, obj: JSON) -> Stored | None:
        """The stored receipt as the ledger's bounds see it, if this operator wrote it."""
        spec = self.genuine(obj)
        meta: dict[str, Any] = obj.get("metadata") or {}
        stamp = str(meta.get("creationTimestamp") or "")
        try:
            created = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None
        if spec is None:
            return None
        return Stored(
            spec.workload.namespace,
            str(meta.get("name")),
            str(meta.get("uid")),
            str(meta.get("resourceVersion")),
            created,
            spec.workload.uid,
            spec.finished_at,
        )


# --- the key -------------------------------------------------------------------------------


def _decoded(secret: JSON) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for k, v in (secret.get("data") or {}).items():
        try:
            out[str(k)] = base64.b64decode(str(v), validate=True)
        except (binascii.Error, ValueError):
            continue
    return out


def _new_key() -> str:
    return base64.b64encode(secrets.token_bytes(MIN_KEY)).decode()


async def load_keyring(kube: Kube, namespace: str, name: str) -> Keyring | str:
    """The seal's keys from the Secret `namespace/name`, or why there are none. The chart
    creates the Secret empty and the operator fills in a new key (a patch on the Secret's
    resourceVersion: a replica that lost the race reads the winner's); `trainwarden run`
    with an admin's kubeconfig creates the Secret itself."""
    where = f"Secret {namespace}/{name}"
    for _ in range(3):
        try:
            found = await kube.get("v1", "Secret", namespace, name)
            if found is None:
                found = await kube.create(_secret(namespace, name))
            elif CURRENT not in _decoded(found):
                found = await _filled(kube, found)
        except Gone:
            found = None
        except Exception as error:  # forbidden, unreachable: said, tried again later
            why = f"{type(error).__name__}: {error}"
            return f"{where} holds no key and could not be given one: {why}"[:500]
        if found is not None:
            ring = keyring(_decoded(found))
            return ring if isinstance(ring, Keyring) else f"{where}: {ring}"
    return f"{where} changed while it was read: tried again later"


def _secret(namespace: str, name: str) -> JSON:
    meta = {"name": name, "namespace": namespace, "labels": {MANAGED_BY: "trainwarden"}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {CURRENT: _new_key()},
    }


async def _filled(kube: Kube, secret: JSON) -> JSON | None:
    """The Secret with a new key; None if it changed since it was read."""
    meta = secret["metadata"]
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"]},
        "data": {CURRENT: _new_key()},
    }
    try:
        filled = await kube.merge_patch("v1", "Secret", meta["namespace"], meta["name"], patch)
    except Conflict:
        return None
    log.info("run receipt seal key made", secret=f"{meta['namespace']}/{meta['name']}")
    return filled


# --- the sweep -----------------------------------------------------------------------------

SWEEP_GAP = timedelta(seconds=60)
"""The least time between two sweeps of one namespace that a write asks for: the cap may be
passed by the receipts of that long, never by more."""


class Bounds:
    """How many of this operator's receipts each namespace holds, as far as it knows: set by
    each sweep, raised by each write. A write asks for a sweep of its namespace only when
    that count is unknown or past the cap, and then at most every SWEEP_GAP: a run's receipt
    costs its POST, not a LIST that grows with the receipts already there. Keyed by
    namespace (forgotten with it)."""

    def __init__(self) -> None:
        self.kept: dict[str, int] = {}
        self.swept_at: dict[str, datetime] = {}

    def wrote(self, namespace: str) -> None:
        if namespace in self.kept:
            self.kept[namespace] += 1

    def removed(self, namespace: str) -> None:
        if namespace in self.kept:
            self.kept[namespace] -= 1

    def lost(self, namespace: str) -> None:
        """The count is no longer known (a receipt changed since it was read)."""
        self.kept.pop(namespace, None)

    def swept(self, namespace: str, kept: int | None, now: datetime) -> None:
        """A sweep ran (`kept`: what it left; None: it failed, the count stays unknown)."""
        self.swept_at[namespace] = now
        if kept is None:
            self.kept.pop(namespace, None)
        else:
            self.kept[namespace] = kept

    def due(self, namespace: str, cap: int, now: datetime) -> datetime | None:
        """When `namespace` needs a sweep for the cap; None: it does not."""
        known = self.kept.get(namespace)
        if known is not None and known <= cap:
            return None
        last = self.swept_at.get(namespace)
        return now if last is None else max(now, last + SWEEP_GAP)

    def keep_only(self, namespaces: set[str]) -> None:
        for table in (self.kept, self.swept_at):
            for gone in table.keys() - namespaces:
                del table[gone]


MAX_KNOWN = 20_000
"""Receipts `Oldest` keeps at most, in all namespaces (about 0.5 KiB each): past it a
namespace's order is not kept and its cap is kept by sweeps (`Bounds`)."""


class Oldest:
    """This operator's receipts in each namespace, in the order the cap removes them (the
    run that finished first, first): as the last sweep left them, with each receipt
    written since. Past the cap a write removes the first of them by one DELETE (its uid
    and resourceVersion as preconditions), not by a LIST of the namespace: a finished run
    costs its POST and that DELETE. A namespace whose order is not known (never swept, a
    write it could not add, a DELETE refused) is left to `Bounds`."""

    def __init__(self, limit: int = MAX_KNOWN) -> None:
        self.limit = limit
        self.order: dict[str, list[tuple[datetime, str, Stored]]] = {}
        self.size = 0

    def known(self, namespace: str, kept: list[Stored]) -> None:
        """A sweep's result: what it left in `namespace` (None if it failed)."""
        self.forget(namespace)
        if self.size + len(kept) <= self.limit:
            heap = [(s.finished, s.name, s) for s in kept]
            heapq.heapify(heap)
            self.order[namespace] = heap
            self.size += len(heap)

    def wrote(self, namespace: str, stored: Stored | None) -> None:
        """A receipt written in `namespace`; None: written, but not known as stored."""
        heap = self.order.get(namespace)
        if heap is None:
            return
        if stored is None or self.size >= self.limit:
            self.forget(namespace)
        else:
            heapq.heappush(heap, (stored.finished, stored.name, stored))
            self.size += 1

    def first(self, namespace: str, count: int) -> list[Stored] | None:
        """The `count` first to remove, taken out of the order; None if not known."""
        heap = self.order.get(namespace)
        if heap is None or len(heap) < count:
            return None
        self.size -= count
        return [heapq.heappop(heap)[2] for _ in range(count)]

    def forget(self, namespace: str) -> None:
        self.size -= len(self.order.pop(namespace, []))

    def keep_only(self, namespaces: set[str]) -> None:
        for gone in self.order.keys() - namespaces:
            self.forget(gone)


async def sweep(
    kube: Kube, who: Identity, namespace: str, *, now: datetime, ttl: timedelta, cap: int
) -> list[Stored]:
    """Remove this operator's receipts in `namespace` past the TTL, over the cap, or a
    run's second one; a receipt it cannot prove it wrote is never counted or removed.
    Returns those of its own it left there."""
    found = await kube.list(API_VERSION, KIND, namespace=namespace, selector=who.selector())
    stored: list[Stored] = []
    unproven: list[str] = []
    for obj in found:
        s = who.stored(obj)
        if s is None:
            unproven.append(str((obj.get("metadata") or {}).get("name")))
        else:
            stored.append(s)
    if unproven:
        metrics.report_receipts_unverified("ledger", len(unproven))
        log.warning(
            "run receipts labelled as this operator's do not carry its seal: never counted "
            "or removed",
            namespace=namespace,
            count=len(unproven),
            receipts=unproven[:10],
        )
    left, removed = set(stored), 0
    for s in removals(stored, now=now, ttl=ttl, cap=cap):
        done = await remove(kube, s)
        if done is not False:
            left.discard(s)
            removed += done is True
    if removed:
        metrics.report_receipts_removed(removed)
        log.info("run receipts removed", namespace=namespace, removed=removed)
    return [s for s in stored if s in left]


async def remove(kube: Kube, s: Stored) -> bool | None:
    """Delete exactly the receipt `s` as it was read: True; None if it is gone already;
    False if it changed since (it stays, and is counted)."""
    try:
        await kube.delete(
            API_VERSION, KIND, s.namespace, s.name, uid=s.uid, resource_version=s.resource_version
        )
    except Gone:
        return None
    except Conflict:
        return False
    return True
