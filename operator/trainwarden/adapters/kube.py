"""The Kubernetes port: the only way reconcilers and controllers talk to the API server.

A Protocol, so that unit tests drive every reconciler against a fake with real patch and
precondition semantics (tests/fakekube.py) and production wires the official client
(`adapters.kube_client.KubeClient`) in the composition root. Errors are the port's own,
never the client library's: a reconciler reads `Conflict`, not HTTP 409.
"""

from typing import Any, Protocol

JSON = dict[str, Any]


class Conflict(Exception):
    """The object changed since it was read: re-evaluate, never overwrite."""


class Gone(Exception):
    """The object was deleted since it was read."""


class Blocked(Exception):
    """The API refused the action for now (a PodDisruptionBudget): try again later."""


class Refused(Exception):
    """The API server refused a write (an admission policy, RBAC): made again unchanged it
    would be refused again; the message is the server's reason."""


class Unreadable(Exception):
    """A Secret the operator may not or cannot read; the message says what to do."""


class Unreachable(Exception):
    """The API server could not be reached or did not answer in time: nothing was done."""


class Kube(Protocol):
    """What trainwarden does to the cluster, object by object."""

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> JSON | None:
        """The object, or None when it does not exist, its kind is not served, or the
        operator may not read it (an owner outside its role is unknown, not an error)."""
        ...

    async def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, selector: str = ""
    ) -> list[JSON]:
        """Objects of a kind in one namespace, or all of them; none if the kind is not
        served. For the few kinds the operator does not keep in its cache."""
        ...

    async def create(self, body: JSON) -> JSON | None:
        """The created object; None if one of that name exists (objects with deterministic
        names: this operator, before a restart, may already have created it). Raises Gone
        when its namespace is being deleted: nothing new may be made there."""
        ...

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
        """Delete exactly the object that was read: a changed or replaced object raises
        Conflict, a missing one Gone."""
        ...

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
        """RFC 7386 merge patch (of `subresource`, e.g. "status" or "scale"); a
        metadata.resourceVersion in the patch makes it conditional (Conflict)."""
        ...

    async def apply(
        self, body: JSON, *, field_manager: str, subresource: str | None = None
    ) -> JSON:
        """Server-side apply of `body` (of `subresource`, e.g. "status"), forced: the
        fields in it become `field_manager`'s, and only those; a list keyed by name
        (a Workload's status.admissionChecks) keeps the entries of other managers."""
        ...

    async def evict(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:
        """Evict exactly the pod that was evaluated, through the Eviction API so that
        PodDisruptionBudgets hold (Blocked); a pod already gone is not an error."""
        ...

    async def event(self, obj: JSON, *, type_: str, reason: str, message: str, action: str) -> None:
        """A core/v1 Event on `obj`, best effort: never raises."""
        ...

    async def secret(self, namespace: str, name: str, keys: tuple[str, ...]) -> dict[str, str]:
        """The decoded `keys` of one Secret; Unreadable says why not."""
        ...
