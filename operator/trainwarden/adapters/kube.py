"""A small async facade over the official client's dynamic API.

The client is synchronous; every call runs in a worker thread so no watch of kopf's event
loop ever freezes behind an API request (kopf trap: sync calls inside async handlers).
"""

import asyncio
import base64
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ResourceNotFoundError,
)

from trainwarden import logs

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"
log = logs.get(__name__)


class Conflict(Exception):
    """The object changed since it was read: re-evaluate, never overwrite."""


class Gone(Exception):
    """The object was deleted since it was read."""


class Blocked(Exception):
    """The API refused the action for now (a PodDisruptionBudget): try again later."""


class Unreadable(Exception):
    """A Secret the operator may not or cannot read; the message says what to do."""


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._dynamic: DynamicClient | None = None
        # Discovery mutates a shared cache and is not thread-safe; calls run in worker
        # threads, several controllers at once.
        self._discovery = threading.Lock()

    def _resource(self, api_version: str, kind: str) -> Any:
        with self._discovery:
            if self._dynamic is None:
                # The client's default discovery cache is one file in /tmp shared by every
                # process; two operators (or a test and the demo) corrupt it. One per process.
                cache = Path(tempfile.gettempdir()) / f"trainwarden-discovery-{os.getpid()}.json"
                self._dynamic = DynamicClient(self._api, cache_file=str(cache))  # type: ignore[no-untyped-call]
            return self._dynamic.resources.get(api_version=api_version, kind=kind)

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> JSON | None:
        def call() -> JSON | None:
            try:
                found = self._resource(api_version, kind).get(name=name, namespace=namespace)
            except (NotFoundError, ResourceNotFoundError):
                return None
            except ForbiddenError:
                # An owner kind outside the operator's role (a DaemonSet, an unknown CRD):
                # unknown, so nothing is done to it, and the rest of the evaluation goes on.
                log.warning("not allowed to read", object=f"{kind}/{namespace}/{name}")
                return None
            result: JSON = found.to_dict()
            return result

        return await asyncio.to_thread(call)

    async def secret(self, namespace: str, name: str, keys: tuple[str, ...]) -> dict[str, str]:
        """The decoded `keys` of one Secret. Only Secrets a policy names are read, and the
        role grants them by name, so "forbidden" is an admin's step, said as such."""

        def call() -> dict[str, str]:
            try:
                found = client.CoreV1Api(self._api).read_namespaced_secret(name, namespace)
            except ApiException as error:
                if error.status == 404:
                    raise Unreadable(f"Secret {namespace}/{name} does not exist") from None
                if error.status == 403:
                    raise Unreadable(
                        f"the operator may not read Secret {namespace}/{name}: grant it by "
                        "name (Helm value s3CredentialSecrets)"
                    ) from None
                raise
            data = found.data or {}
            missing = [k for k in keys if k not in data]
            if missing:
                raise Unreadable(f"Secret {namespace}/{name} has no key {', '.join(missing)}")
            return {k: base64.b64decode(data[k]).decode() for k in keys}

        return await asyncio.to_thread(call)

    async def list_labelled(self, api_version: str, kind: str, selector: str) -> list[JSON]:
        """Objects of a kind across namespaces; none if the kind is not served here."""

        def call() -> list[JSON]:
            try:
                found = self._resource(api_version, kind).get(label_selector=selector)
            except ResourceNotFoundError:
                return []
            items: list[JSON] = found.to_dict().get("items", [])
            return items

        return await asyncio.to_thread(call)

    async def list_in(
        self, api_version: str, kind: str, namespace: str, selector: str = ""
    ) -> list[JSON]:
        """Objects of a kind in one namespace."""

        def call() -> list[JSON]:
            found = self._resource(api_version, kind).get(
                namespace=namespace, label_selector=selector
            )
            items: list[JSON] = found.to_dict().get("items", [])
            return items

        return await asyncio.to_thread(call)

    async def create(self, body: JSON) -> bool:
        """Create an object; False if one of that name exists (objects with deterministic
        names: this operator, before a restart, may already have created it)."""

        def call() -> bool:
            meta = body["metadata"]
            resource = self._resource(body["apiVersion"], body["kind"])
            try:
                resource.create(body=body, namespace=meta.get("namespace"))
            except ConflictError:
                return False
            return True

        return await asyncio.to_thread(call)

    async def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str, version: str
    ) -> None:
        """Delete exactly the object that was read: preconditions on uid and resourceVersion
        make a changed or replaced object a Conflict, never a deletion."""
        where = f"{namespace}/{name}"

        def call() -> None:
            body = {"preconditions": {"uid": uid, "resourceVersion": version}}
            try:
                self._resource(api_version, kind).delete(name=name, namespace=namespace, body=body)
            except ConflictError as error:
                raise Conflict(f"{kind} {where} changed since it was read") from error
            except NotFoundError as error:
                raise Gone(f"{kind} {where} no longer exists") from error

        await asyncio.to_thread(call)

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: JSON,
        *,
        status: bool = False,
    ) -> JSON:
        """Merge-patch; a metadata.resourceVersion in the patch makes it conditional."""

        where = f"{namespace}/{name}" if namespace else name

        def call() -> JSON:
            resource = self._resource(api_version, kind)
            if status:
                resource = resource.subresources["status"]
            try:
                patched = resource.patch(
                    name=name, namespace=namespace, body=patch, content_type=MERGE
                )
            except ConflictError as error:
                raise Conflict(f"{kind} {where} changed since it was read") from error
            except NotFoundError as error:
                raise Gone(f"{kind} {where} no longer exists") from error
            result: JSON = patched.to_dict()
            return result

        return await asyncio.to_thread(call)

    async def evict(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        """Evict exactly the pod that was evaluated (uid and resourceVersion preconditions),
        through the Eviction API so PodDisruptionBudgets are respected. A pod already gone
        is not an error."""

        def call() -> None:
            eviction = client.V1Eviction(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                delete_options=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
                ),
            )
            try:
                client.CoreV1Api(self._api).create_namespaced_pod_eviction(
                    name, namespace, eviction
                )
            except ApiException as error:
                if error.status == 409:
                    raise Conflict(f"pod {namespace}/{name} changed since it was read") from error
                if error.status == 429:
                    raise Blocked(
                        f"evicting pod {namespace}/{name} would violate a PodDisruptionBudget"
                    ) from error
                if error.status != 404:
                    raise

        await asyncio.to_thread(call)

    async def event(self, obj: JSON, *, type_: str, reason: str, message: str, action: str) -> None:
        """A core/v1 Event on `obj` (cluster-scoped objects get theirs in "default")."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=namespace),
            involved_object=client.V1ObjectReference(
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                name=meta["name"],
                namespace=meta.get("namespace"),
                uid=meta.get("uid"),
            ),
            type=type_,
            reason=reason,
            message=message[:1024],
            action=action,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component="trainwarden"),
            reporting_component="trainwarden.dev/operator",
            reporting_instance="trainwarden",
        )

        def call() -> None:
            client.CoreV1Api(self._api).create_namespaced_event(namespace, body)

        # Best effort: an Event that cannot be posted (a namespace being deleted, a rate
        # limit) must never abort the action it reports or the status write after it.
        try:
            await asyncio.to_thread(call)
        except ApiException as error:
            log.warning(
                "event not posted",
                object=f"{obj['kind']}/{namespace}/{meta['name']}",
                reason=reason,
                status=error.status,
            )
