"""FakeKube: the Kubernetes port (`trainwarden.adapters.kube.Kube`) in memory, with the API
server's semantics, so that unit tests see a reconciler's writes as the cluster takes them.

A fake implementing the port rather than a mock (cosmicpython; Kueue tests its controllers
against controller-runtime's fake client): a test arranges objects, runs the reconciler,
then asserts on the objects, `fake.writes` and `fake.events`. What the API server does,
the fake does: uid, a global resourceVersion and generation on every change (none on a
no-op), RFC 7386 merge patches, resourceVersion/uid preconditions (Conflict), Gone for a
missing object, status subresource isolation, the scale subresource, evictions refused
by a disruption budget, finalizers holding a deleted object, Secrets' stringData.

Not modelled: admission (defaults, schema, CEL), controllers and garbage collection (a
Job never makes pods; deleting an owner leaves its dependents), graceful pod deletion,
namespace existence, watches, field selectors; server-side apply only as far as
`trainwarden.testing.apiserver.applied` says (forced, no managedFields).

The object rules (status and scale subresources, what generation tracks) are pure
functions in `trainwarden.testing.apiserver`, fault injection is `trainwarden.testing.faults`;
this module holds the state and the port.
"""

import base64
import copy
import functools
import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from trainwarden.adapters.kube import JSON, Blocked, Conflict, Gone, Unreadable
from trainwarden.testing import apiserver as rules
from trainwarden.testing.apiserver import (
    CLUSTER_SCOPED,
    STATUS_SUBRESOURCE,
    KindKey,
    NotServed,
    rfc3339,
    set_field,
)
from trainwarden.testing.faults import Faults
from trainwarden.testing.selectors import parse_selector

Key = tuple[str, str, str | None, str]
"""(apiVersion, kind, namespace, name); namespace None for cluster-scoped kinds."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)
VERBS = ("get", "list", "create", "patch", "apply", "delete", "evict")


class Forbidden(PermissionError):
    """A call the role forbids where the real client lets the 403 through (list, writes)."""


@dataclass(frozen=True)
class Write:
    """One write the code under test attempted, as sent."""

    verb: str
    """create, patch, apply, delete or evict."""
    api_version: str
    kind: str
    namespace: str | None
    name: str
    subresource: str | None
    body: JSON
    """The object created, the merge patch, or {"preconditions": {...}} of a delete/evict."""
    outcome: str
    """changed, unchanged (accepted, nothing changed), AlreadyExists, or the error raised."""


@dataclass(frozen=True)
class RecordedEvent:
    """An Event posted about an object (involved object's namespace: None if cluster-scoped)."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str | None
    type: str
    reason: str
    message: str
    action: str
    at: datetime = field(compare=False)


@dataclass
class _Outcome:
    value: str = "changed"


class FakeKube:
    """An in-memory API server behind the Kube port. `store` may be read and edited by a
    test; `put`, `edit` and `drop` change the world as another actor would (not logged)."""

    def __init__(
        self,
        objects: Iterable[JSON] = (),
        *,
        now: Callable[[], datetime] = lambda: T0,
        status_subresource: Iterable[KindKey] = STATUS_SUBRESOURCE,
        cluster_scoped: Iterable[KindKey] = CLUSTER_SCOPED,
        served: Iterable[KindKey] | None = None,
    ) -> None:
        """`served`: the only kinds the server serves (None: every kind)."""
        self.now = now
        self.store: dict[Key, JSON] = {}
        self.writes: list[Write] = []
        self.lists: list[tuple[str, str | None]] = []
        """Every LIST asked for: (kind, namespace); a request count a test can bound."""
        self.gets = 0
        """GETs asked for: with lists, writes and events, every request made."""
        self.events: list[RecordedEvent] = []
        self.managers: dict[Key, set[str]] = {}
        """Field managers that applied to each object (server-side apply)."""
        self._status = frozenset(status_subresource)
        self._cluster = frozenset(cluster_scoped)
        self._served = None if served is None else set(served)
        self._unserved: set[KindKey] = set()
        self._forbidden: dict[KindKey, set[str]] = {}
        self._blocked: set[tuple[str, str]] = set()
        self._faults = Faults()
        self._versions = itertools.count(1)
        self._ids = itertools.count(1)
        for obj in objects:
            self.put(obj)

    # --- arranging the world (not writes of the code under test) ---------------------------

    def put(self, obj: JSON) -> JSON:
        """Store `obj` as given, status included; a missing uid, creationTimestamp or
        generation is filled in, the resourceVersion is always a new one."""
        body = copy.deepcopy(obj)
        meta = body.setdefault("metadata", {})
        key = self._key(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"])
        set_field(meta, "namespace", key[2])
        meta.setdefault("uid", self._uid())
        meta.setdefault("creationTimestamp", rfc3339(self.now()))
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_version()
        rules.encode_string_data(body)
        self.store[key] = body
        return copy.deepcopy(body)

    def edit(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: JSON
    ) -> JSON:
        """Another actor's merge patch (a user, a controller): any field, status included."""
        key = self._key(api_version, kind, namespace, name)
        old = self._existing(key)
        return copy.deepcopy(self._commit(key, old, rules.edited(old, patch), _Outcome()))

    def drop(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        """Another actor deleted the object (finalizers or not)."""
        self.store.pop(self._key(api_version, kind, namespace, name), None)

    def read(self, api_version: str, kind: str, namespace: str | None, name: str) -> JSON | None:
        """The stored object (a copy) for a test's assertions."""
        return copy.deepcopy(self.store.get(self._key(api_version, kind, namespace, name)))

    def unserve(self, api_version: str, kind: str) -> None:
        self._unserved.add((api_version, kind))

    def serve(self, api_version: str, kind: str) -> None:
        self._unserved.discard((api_version, kind))
        if self._served is not None:
            self._served.add((api_version, kind))

    def forbid(self, api_version: str, kind: str, *verbs: str) -> None:
        """The role no longer grants `verbs` (all by default) on the kind."""
        self._forbidden.setdefault((api_version, kind), set()).update(verbs or VERBS)

    def block_eviction(self, namespace: str, name: str) -> None:
        """A PodDisruptionBudget refuses to let this pod go (Blocked) until allowed."""
        self._blocked.add((namespace, name))

    def allow_eviction(self, namespace: str, name: str) -> None:
        self._blocked.discard((namespace, name))

    def fail_next(
        self,
        verb: str,
        kind: str,
        error: Exception | type[Exception],
        *,
        times: int = 1,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """The next `times` matching calls raise `error` (verbs: VERBS, "event", "secret")
        before doing anything; an "event" failure drops the Event, as best effort does."""
        self._faults.fail_next(verb, kind, error, times=times, name=name, subresource=subresource)

    def on_next(
        self,
        verb: str,
        kind: str,
        callback: Callable[["FakeKube"], object],
        *,
        times: int = 1,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """Run `callback(fake)` just before the next matching call: a concurrent change
        between the code's read and its write (e.g. `fake.edit` or `fake.drop`)."""
        hook = functools.partial(callback, self)
        self._faults.on_next(verb, kind, hook, times=times, name=name, subresource=subresource)

    def events_for(self, kind: str, name: str, namespace: str | None = None) -> list[RecordedEvent]:
        return [
            e
            for e in self.events
            if (e.kind, e.name) == (kind, name) and namespace in (None, e.namespace)
        ]

    def reasons(self, kind: str | None = None, name: str | None = None) -> list[str]:
        """Reasons of the Events posted (on one kind, or one object), in order."""
        return [e.reason for e in self.events if kind in (None, e.kind) and name in (None, e.name)]

    def writes_to(self, kind: str, name: str | None = None, verb: str | None = None) -> list[Write]:
        return [
            w
            for w in self.writes
            if w.kind == kind and name in (None, w.name) and verb in (None, w.verb)
        ]

    # --- the Kube port -----------------------------------------------------------------------

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> JSON | None:
        key = self._key(api_version, kind, namespace, name)
        self.gets += 1
        self._faults.intercept("get", kind, name, None)
        if not self._serves(api_version, kind) or self._denies(api_version, kind, "get"):
            return None
        return copy.deepcopy(self.store.get(key))

    async def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, selector: str = ""
    ) -> list[JSON]:
        self._faults.intercept("list", kind, None, None)
        self.lists.append((kind, namespace))
        requirements = parse_selector(selector)
        if not self._serves(api_version, kind):
            return []
        if self._denies(api_version, kind, "list"):
            raise Forbidden(f"list {kind} ({api_version}) is forbidden")
        if (api_version, kind) in self._cluster:
            namespace = None  # as the client does for a cluster-scoped kind
        found = [
            obj
            for (v, k, ns, _), obj in sorted(self.store.items(), key=lambda i: _sort_key(i[0]))
            if (v, k) == (api_version, kind) and namespace in (None, ns)
            if all(r.matches(obj["metadata"].get("labels") or {}) for r in requirements)
        ]
        return copy.deepcopy(found)

    async def create(self, body: JSON) -> JSON | None:
        meta = body.get("metadata") or {}
        name = meta.get("name") or self._generated_name(meta)
        key = self._key(body["apiVersion"], body["kind"], meta.get("namespace"), name)
        with self._write("create", key, None, body) as outcome:
            if key in self.store:
                outcome.value = "AlreadyExists"
                return None
            home = self.store.get(("v1", "Namespace", None, key[2] or ""))
            if key[2] and home is not None and home["metadata"].get("deletionTimestamp"):
                # The NamespaceLifecycle admission: a 403 the client reports as Gone.
                raise Gone(f"{key[1]} {key[2]}/{name}: its namespace is being deleted")
            if meta.get("resourceVersion"):
                raise ValueError("resourceVersion should not be set on objects to be created")
            obj = copy.deepcopy(body)
            obj["metadata"] = {**copy.deepcopy(meta), "name": name}
            set_field(obj["metadata"], "namespace", key[2])
            obj["metadata"].update(
                uid=self._uid(),
                creationTimestamp=rfc3339(self.now()),
                generation=1,
                resourceVersion=self._next_version(),
            )
            if key[:2] in self._status:
                obj.pop("status", None)  # status is the status subresource's to write
            rules.encode_string_data(obj)
            self.store[key] = obj
            return copy.deepcopy(obj)

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        uid: str,
        resource_version: str,
    ) -> None:
        key = self._key(api_version, kind, namespace, name)
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        with self._write("delete", key, None, {"preconditions": preconditions}) as outcome:
            old = self._existing(key)
            _check_preconditions(key, old, preconditions)
            self._remove(key, old, outcome)

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: JSON,
        *,
        subresource: str | None = None,
    ) -> JSON:
        key = self._key(api_version, kind, namespace, name)
        with self._write("patch", key, subresource, patch) as outcome:
            old = self._existing(key)
            _check_preconditions(key, old, patch.get("metadata") or {})
            if subresource == "scale":
                return rules.scale_of(self._commit(key, old, rules.scaled(old, patch), outcome))
            has_status = key[:2] in self._status
            new = rules.patched(old, patch, subresource=subresource, has_status=has_status)
            return copy.deepcopy(self._commit(key, old, new, outcome))

    async def apply(
        self, body: JSON, *, field_manager: str, subresource: str | None = None
    ) -> JSON:
        meta = body["metadata"]
        key = self._key(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"])
        with self._write("apply", key, subresource, body) as outcome:
            old = self._existing(key)
            _check_preconditions(key, old, meta)
            has_status = key[:2] in self._status
            new = rules.applied(old, body, subresource=subresource, has_status=has_status)
            self.managers.setdefault(key, set()).add(field_manager)
            return copy.deepcopy(self._commit(key, old, new, outcome))

    async def evict(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:
        key = self._key("v1", "Pod", namespace, name)
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        with self._write("evict", key, None, {"preconditions": preconditions}) as outcome:
            old = self.store.get(key)
            if old is None:
                outcome.value = "unchanged"  # a pod already gone is not an error
                return
            _check_preconditions(key, old, preconditions)
            if (namespace, name) in self._blocked:
                raise Blocked(
                    f"evicting pod {namespace}/{name} would violate a PodDisruptionBudget"
                )
            self._remove(key, old, outcome)

    async def event(self, obj: JSON, *, type_: str, reason: str, message: str, action: str) -> None:
        meta = obj["metadata"]
        recorded = RecordedEvent(
            api_version=obj["apiVersion"],
            kind=obj["kind"],
            namespace=meta.get("namespace"),
            name=meta["name"],
            uid=meta.get("uid"),
            type=type_,
            reason=reason,
            message=message[:1024],
            action=action,
            at=self.now(),
        )
        try:
            self._faults.intercept("event", obj["kind"], meta["name"], None)
        except Exception:  # best effort, as the real one: an Event never fails the caller
            return
        if not self._denies("v1", "Event", "create"):
            self.events.append(recorded)

    async def secret(self, namespace: str, name: str, keys: tuple[str, ...]) -> dict[str, str]:
        # The messages are the real adapter's (adapters/kube_client.py).
        self._faults.intercept("secret", "Secret", name, None)
        if self._denies("v1", "Secret", "get"):
            raise Unreadable(
                f"the operator may not read Secret {namespace}/{name}: grant it by "
                "name (Helm value s3CredentialSecrets)"
            )
        found = self.store.get(("v1", "Secret", namespace, name))
        if found is None:
            raise Unreadable(f"Secret {namespace}/{name} does not exist")
        data = found.get("data") or {}
        missing = [k for k in keys if k not in data]
        if missing:
            raise Unreadable(f"Secret {namespace}/{name} has no key {', '.join(missing)}")
        return {k: base64.b64decode(data[k]).decode() for k in keys}

    # --- the API server's rules ------------------------------------------------------------------

    def _key(self, api_version: str, kind: str, namespace: str | None, name: str) -> Key:
        if (api_version, kind) in self._cluster:
            return api_version, kind, None, name
        if not namespace:
            raise ValueError(f"Namespace is required for {api_version}.{kind} {name}")
        return api_version, kind, namespace, name

    def _serves(self, api_version: str, kind: str) -> bool:
        kind_key = (api_version, kind)
        listed = self._served is None or kind_key in self._served
        return listed and kind_key not in self._unserved

    def _denies(self, api_version: str, kind: str, verb: str) -> bool:
        return verb in self._forbidden.get((api_version, kind), set())

    @contextmanager
    def _write(
        self, verb: str, key: Key, subresource: str | None, body: JSON
    ) -> Iterator[_Outcome]:
        """Log the write with its outcome; check it is served and allowed."""
        outcome = _Outcome()
        sent = copy.deepcopy(body)
        try:
            self._faults.intercept(verb, key[1], key[3], subresource)
            if not self._serves(key[0], key[1]):
                raise NotServed(f"{key[1]} ({key[0]}) is not served")
            if self._denies(key[0], key[1], verb):
                raise Forbidden(f"{verb} {key[1]} ({key[0]}) is forbidden")
            yield outcome
        except Exception as error:
            outcome.value = type(error).__name__
            raise
        finally:
            self.writes.append(Write(verb, *key, subresource, sent, outcome.value))

    def _existing(self, key: Key) -> JSON:
        found = self.store.get(key)
        if found is None:
            raise Gone(f"{key[1]} {_where(key)} no longer exists")
        return found

    def _commit(self, key: Key, old: JSON, new: JSON, outcome: _Outcome) -> JSON:
        """Store a change: a new resourceVersion, a new generation if more than metadata (and
        status, if a subresource) changed; an unchanged object keeps its version."""
        if new == old:
            outcome.value = "unchanged"
            return old
        meta = new["metadata"]
        if rules.generation_moves(old, new, has_status=key[:2] in self._status):
            meta["generation"] = int(old["metadata"].get("generation") or 0) + 1
        meta["resourceVersion"] = self._next_version()
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.store[key]  # the last finalizer of a deleted object is gone
        else:
            self.store[key] = new
        return new

    def _remove(self, key: Key, old: JSON, outcome: _Outcome) -> None:
        """Finalizers hold a deleted object (marked with a deletionTimestamp) until removed."""
        if not old["metadata"].get("finalizers"):
            del self.store[key]
            return
        new = copy.deepcopy(old)
        new["metadata"].setdefault("deletionTimestamp", rfc3339(self.now()))
        self._commit(key, old, new, outcome)

    def _uid(self) -> str:
        return str(uuid.UUID(int=next(self._ids)))

    def _next_version(self) -> str:
        return str(next(self._versions))

    def _generated_name(self, meta: JSON) -> str:
        prefix = meta.get("generateName")
        if not prefix:
            raise ValueError("metadata.name or metadata.generateName is required")
        return f"{prefix}{next(self._ids):05x}"


def _check_preconditions(key: Key, obj: JSON, wanted: JSON) -> None:
    if not rules.preconditions_hold(obj, wanted):
        raise Conflict(f"{key[1]} {_where(key)} changed since it was read")


def _where(key: Key) -> str:
    return f"{key[2]}/{key[3]}" if key[2] else key[3]


def _sort_key(key: Key) -> tuple[str, str, str, str]:
    return key[0], key[1], key[2] or "", key[3]
