"""Which RunReceipts are this operator's: the seal only it can make, the names it writes a
run's receipt under, and which of its own receipts the ledger's bounds remove.

Whoever may create RunReceipts in a namespace writes everything a receipt carries (name,
labels, annotations, spec, managedFields); only uid, creationTimestamp and
resourceVersion are the API server's. So a receipt is the operator's only if it carries
its seal: HMAC-SHA256, under a key only the operator reads, over its instance, the
receipt's namespace and name, and its spec as canonical JSON. A copy under another name,
in another namespace or with another spec does not verify; labels decide nothing.
docs/security.md says why a seal and an admission policy both.

Pure: the shell reads the key from its Secret (receipts/ledger.py).
"""

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import ValidationError

from trainwarden.api.v1alpha1.receipt import RunReceiptSpec
from trainwarden.api.v1alpha1.types import API_VERSION

CURRENT = "key"
"""The Secret's entry sealing new receipts; entries named `retired*` only verify."""
MIN_KEY = 32
"""Bytes a key has at least (HMAC-SHA256's own block of security)."""
MAX_RETIRED = 8
MARK = 10
"""Hex digits of the mark in a fallback name (40 bits: not guessed by creating names)."""
MAX_NAME = 253
_DOMAIN = f"{API_VERSION}/RunReceipt"


def key_id(key: bytes) -> str:
    """A short public name of a key (a hash of it, which reveals nothing of the key)."""
    return hashlib.sha256(f"{_DOMAIN}/key-id\0".encode() + key).hexdigest()[:12]


@dataclass(frozen=True)
class Keyring:
    """The key that seals, and retired ones that still verify (a rotation in progress)."""

    current: bytes
    retired: tuple[bytes, ...] = ()

    def find(self, kid: str) -> bytes | None:
        return next((k for k in (self.current, *self.retired) if key_id(k) == kid), None)


def keyring(data: Mapping[str, bytes]) -> Keyring | str:
    """The keyring of a Secret's decoded entries, or why there is none."""
    current = data.get(CURRENT)
    if current is None:
        return f"no entry {CURRENT!r}"
    if len(current) < MIN_KEY:
        return f"the entry {CURRENT!r} is shorter than {MIN_KEY} bytes"
    retired = [v for k, v in sorted(data.items()) if k.startswith("retired") and len(v) >= MIN_KEY]
    return Keyring(current, tuple(retired[:MAX_RETIRED]))


def canonical(spec: RunReceiptSpec) -> str:
    """The spec as the seal covers it: the model's own dump, keys sorted. A spec read back
    from the API server (numbers re-encoded, defaults filled) dumps the same."""
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, "\0".join((_DOMAIN, *parts)).encode(), hashlib.sha256).hexdigest()


def seal(
    key: bytes, *, instance: str | None, namespace: str, name: str, spec: RunReceiptSpec
) -> str:
    """The seal of the receipt `namespace/name` with `spec`, for this instance."""
    mac = _mac(key, "seal", instance or "", namespace, name, canonical(spec))
    return f"{key_id(key)}.{mac}"


def verified(
    ring: Keyring,
    *,
    instance: str | None,
    namespace: str,
    name: str,
    sealed: object,
    spec: object,
) -> RunReceiptSpec | None:
    """The receipt's spec if this operator wrote it (its seal verifies under a key of the
    ring), else None; never raises, whatever the object holds."""
    if not isinstance(sealed, str) or sealed.count(".") != 1:
        return None
    kid = sealed.partition(".")[0]
    key = ring.find(kid)
    if key is None:
        return None
    try:
        parsed = RunReceiptSpec.model_validate(spec)
    except ValidationError:
        return None
    want = seal(key, instance=instance, namespace=namespace, name=name, spec=parsed)
    if not hmac.compare_digest(want, sealed) or parsed.workload.namespace != namespace:
        return None
    return parsed


def receipt_name(kind: str, name: str, uid: str, mark: str = "") -> str:
    """`<kind>-<name>-<uid[:8]>` (with `-<mark>` after a fallback's): deterministic, so a
    second attempt (after a restart) finds the first one's receipt (AlreadyExists), and a
    DNS subdomain of at most 253 characters."""
    prefix = re.sub(r"[^a-z0-9]", "", kind.lower()) or "run"
    suffix = re.sub(r"[^a-z0-9]", "", uid.lower())[:8] or "0"
    if mark:
        suffix = f"{suffix}-{mark}"
    room = MAX_NAME - len(prefix) - len(suffix) - 2
    middle = re.sub(r"[^a-z0-9.-]", "-", name.lower())[:room].strip("-.") or "x"
    return f"{prefix}-{middle}-{suffix}"


def fallback_name(key: bytes, *, kind: str, name: str, namespace: str, uid: str) -> str:
    """Where the run's receipt goes when its name is taken by a receipt the operator did
    not write: marked with a MAC of the run, so nobody without the key can take it first."""
    mark = _mac(key, "fallback", namespace, uid)[:MARK]
    return receipt_name(kind, name, uid, mark)


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored receipt the operator proved it wrote, as the ledger's bounds see it."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    created: datetime
    """creationTimestamp: which of two receipts of one run came first."""
    workload: str
    """The run's workload uid (sealed)."""
    finished: datetime
    """When the run finished (sealed): a receipt's age, which a re-creation cannot reset."""


def removals(stored: Sequence[Stored], *, now: datetime, ttl: timedelta, cap: int) -> list[Stored]:
    """This operator's receipts of one namespace to remove: a run's second receipt (only a
    crash between two writes and a tenant's deletion can make one), those of runs that
    finished longer than `ttl` ago, then the oldest of the rest beyond `cap`."""
    first: dict[str, Stored] = {}
    again: list[Stored] = []
    for s in sorted(stored, key=lambda s: (s.created, s.name)):
        if s.workload in first:
            again.append(s)
        else:
            first[s.workload] = s
    kept = list(first.values())
    old = [s for s in kept if now - s.finished >= ttl]
    young = sorted((s for s in kept if now - s.finished < ttl), key=lambda s: (s.finished, s.name))
    return again + old + young[: max(0, len(young) - cap)]
