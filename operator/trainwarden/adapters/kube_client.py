"""The Kubernetes port (`adapters.kube.Kube`) over the official client's dynamic API.

The client is synchronous; every call runs in a worker thread so no watch of kopf's event
loop ever freezes behind an API request (kopf trap: sync calls inside async handlers).
"""

import asyncio
import base64
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ResourceNotFoundError,
    UnprocessibleEntityError,
)

from trainwarden import logs
from trainwarden.adapters.api_requests import counted
from trainwarden.adapters.kube import (
    JSON,
    Blocked,
    Conflict,
    Gone,
    Refused,
    Unreachable,
    Unreadable,
)
from trainwarden.api.v1alpha1.names import REPORTING_COMPONENT

MERGE = "application/merge-patch+json"
FIELD_MANAGER = "trainwarden"
"""The fieldManager every create, patch, eviction and Event of the operator carries (server-
side apply names its own: the Kueue check's controller): managedFields, and GitOps tools
reading them, tell trainwarden's changes (suspend, replicas, cordons, marks) from others'.
Without it the API server names the client's User-Agent ("OpenAPI-Generator")."""
MISSING_KIND_TTL = 300.0
"""Seconds a kind the API server does not serve is taken as still missing (a CRD
installed meanwhile is found within this)."""
REQUEST_TIMEOUT = (10, 60)
"""Seconds to connect and to wait for an answer. Without it a call to an API server that
stopped answering (frozen, or behind a partition that drops packets) holds its thread and
the policy's worker for as long as the kernel keeps the connection."""
log = logs.get(__name__)


T = TypeVar("T")
API_THREADS = 16
"""API calls in flight at once. The client is synchronous, so each call holds a thread; the
default executor has min(32, cpus + 4) threads (6 on 2 cores), shared with everything else
in the process: under churn at 10,000 pods, budgets waited for a thread, not the server."""
POOL_SIZE = API_THREADS + 32
"""Connections kept for reuse: one per API thread, and one per informer's list or watch (one
informer per watched kind, fewer than 32). urllib3 keeps 5 per cpu by default (10 on 2
cores): past that it logs "connection pool is full, discarding connection", and every
discarded connection is a new TCP and TLS handshake on the next call."""


def named_client() -> client.ApiClient:
    """A client whose User-Agent names trainwarden, for the kubeconfig loaded: audit logs
    name the operator, and a write made without a fieldManager (the leader election's Lease,
    written by the kubernetes library) is managed by FIELD_MANAGER all the same. Every
    request it sends is counted (adapters/api_requests.py)."""
    from importlib.metadata import version

    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = POOL_SIZE
    api = client.ApiClient(configuration)
    api.user_agent = f"{FIELD_MANAGER}/{version('trainwarden')}"
    api.rest_client.request = counted(api.rest_client.request)  # type: ignore[method-assign]
    return api


class KubeClient:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._calls = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kube")
        self._dynamic: DynamicClient | None = None
        # Discovery mutates a shared cache and is not thread-safe; calls run in worker
        # threads, several controllers at once.
        self._discovery = threading.Lock()
        self._resources: dict[tuple[str, str], Any] = {}
        self._missing: dict[tuple[str, str], float] = {}

    async def _run(self, call: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._calls, call)
        except urllib3.exceptions.HTTPError as error:  # refused, reset, timed out
            raise Unreachable(f"{type(error).__name__}: {error}"[:300]) from error

    def _resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        with self._discovery:
            if key in self._resources:
                return self._resources[key]
            if self._missing.get(key, 0.0) > time.monotonic():
                raise ResourceNotFoundError(f"{kind} ({api_version}) is not served")
            if self._dynamic is None:
                # The client's default discovery cache is one file in /tmp shared by every
                # process; two operators (or a test and the demo) corrupt it. One per process.
                cache = Path(tempfile.gettempdir()) / f"trainwarden-discovery-{os.getpid()}.json"
                self._dynamic = DynamicClient(self._api, cache_file=str(cache))  # type: ignore[no-untyped-call]
            try:
                found = self._dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # Every miss makes the client drop its discovery cache and refetch it all
                # (~19 requests for the Kubeflow kinds a cluster does not serve, each cycle):
                # remember the miss for a while instead.
                self._missing[key] = time.monotonic() + MISSING_KIND_TTL
                raise
            self._resources[key] = found
            return found

    def _target(self, api_version: str, kind: str, subresource: str | None) -> Any:
        resource = self._resource(api_version, kind)
        return resource.subresources[subresource] if subresource is not None else resource

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> JSON | None:
        def call() -> JSON | None:
            try:
                found = self._resource(api_version, kind).get(
                    name=name, namespace=namespace, _request_timeout=REQUEST_TIMEOUT
                )
            except (NotFoundError, ResourceNotFoundError):
                return None
            except ForbiddenError:
                # An owner kind outside the operator's role (a DaemonSet, an unknown CRD):
                # unknown, so nothing is done to it, and the rest of the evaluation goes on.
                log.warning("not allowed to read", object=f"{kind}/{namespace}/{name}")
                return None
            result: JSON = found.to_dict()
            return result

        return await self._run(call)

    async def secret(self, namespace: str, name: str, keys: tuple[str, ...]) -> dict[str, str]:
        """Only Secrets a policy names are read, and the role grants them by name, so
        "forbidden" is an admin's step, said as such."""

        def call() -> dict[str, str]:
            try:
                found = client.CoreV1Api(self._api).read_namespaced_secret(
                    name, namespace, _request_timeout=REQUEST_TIMEOUT
                )
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

        return await self._run(call)

    async def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, selector: str = ""
    ) -> list[JSON]:
        def call() -> list[JSON]:
            try:
                found = self._resource(api_version, kind).get(
                    namespace=namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
                )
            except ResourceNotFoundError:
                return []
            items: list[JSON] = found.to_dict().get("items", [])
            return items

        return await self._run(call)

    async def create(self, body: JSON) -> JSON | None:
        def call() -> JSON | None:
            meta = body["metadata"]
            resource = self._resource(body["apiVersion"], body["kind"])
            try:
                created = resource.create(
                    body=body,
                    namespace=meta.get("namespace"),
                    field_manager=FIELD_MANAGER,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            except ConflictError:
                return None
            except ForbiddenError as error:
                where = f"{body['kind']} {meta.get('namespace')}/{meta.get('name')}"
                if _terminating(error):
                    raise Gone(f"{where}: its namespace is being deleted") from error
                raise Refused(f"{where}: {_reason(error)}") from error
            except UnprocessibleEntityError as error:  # a ValidatingAdmissionPolicy's default
                where = f"{body['kind']} {meta.get('namespace')}/{meta.get('name')}"
                raise Refused(f"{where}: {_reason(error)}") from error
            result: JSON = created.to_dict()
            return result

        return await self._run(call)

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
        where = f"{namespace}/{name}"

        def call() -> None:
            body = {"preconditions": {"uid": uid, "resourceVersion": resource_version}}
            with _preconditioned(kind, where):
                self._resource(api_version, kind).delete(
                    name=name, namespace=namespace, body=body, _request_timeout=REQUEST_TIMEOUT
                )

        await self._run(call)

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
        where = f"{namespace}/{name}" if namespace else name

        def call() -> JSON:
            resource = self._target(api_version, kind, subresource)
            with _preconditioned(kind, where):
                patched = resource.patch(
                    name=name,
                    namespace=namespace,
                    body=patch,
                    content_type=MERGE,
                    field_manager=FIELD_MANAGER,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            result: JSON = patched.to_dict()
            return result

        return await self._run(call)

    async def apply(
        self, body: JSON, *, field_manager: str, subresource: str | None = None
    ) -> JSON:
        meta = body["metadata"]
        where = f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]

        def call() -> JSON:
            resource = self._target(body["apiVersion"], body["kind"], subresource)
            with _preconditioned(body["kind"], where):
                applied = resource.server_side_apply(
                    body=body,
                    name=meta["name"],
                    namespace=meta.get("namespace"),
                    field_manager=field_manager,
                    force_conflicts=True,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            result: JSON = applied.to_dict()
            return result

        return await self._run(call)

    async def evict(self, namespace: str, name: str, *, uid: str, resource_version: str) -> None:

        def call() -> None:
            eviction = client.V1Eviction(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                delete_options=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
                ),
            )
            try:
                client.CoreV1Api(self._api).create_namespaced_pod_eviction(
                    name,
                    namespace,
                    eviction,
                    field_manager=FIELD_MANAGER,
                    _request_timeout=REQUEST_TIMEOUT,
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

        await self._run(call)

    async def event(self, obj: JSON, *, type_: str, reason: str, message: str, action: str) -> None:
        """Cluster-scoped objects get their Events in "default"."""
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
            reporting_component=REPORTING_COMPONENT,
            reporting_instance="trainwarden",
        )

        def call() -> None:
            client.CoreV1Api(self._api).create_namespaced_event(
                namespace, body, field_manager=FIELD_MANAGER, _request_timeout=REQUEST_TIMEOUT
            )

        # Best effort: an Event that cannot be posted (a namespace being deleted, a rate
        # limit) must never abort the action it reports or the status write after it.
        try:
            await self._run(call)
        except ApiException as error:
            where = f"{obj['kind']}/{namespace}/{meta['name']}"
            if error.status == 403 and _terminating(error):
                log.info("event not posted: its namespace is being deleted", object=where)
                return
            log.warning("event not posted", object=where, reason=reason, status=error.status)


def _terminating(error: ApiException) -> bool:
    """A 403 from the NamespaceLifecycle admission: the namespace is being deleted, so
    nothing new may be made there (not a permission the operator lacks)."""
    try:
        causes = (json.loads(error.body or "{}").get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        return False
    return any(c.get("reason") == "NamespaceTerminating" for c in causes if isinstance(c, dict))


def _reason(error: ApiException) -> str:
    """The server's own message (an admission policy's says which rule), bounded."""
    try:
        message = json.loads(error.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or error.reason or error.status)[:512]


@contextlib.contextmanager
def _preconditioned(kind: str, where: str) -> Iterator[None]:
    """A write's failed precondition (409) or missing object (404), in the port's terms."""
    try:
        yield
    except ConflictError as error:
        raise Conflict(f"{kind} {where} changed since it was read") from error
    except NotFoundError as error:
        raise Gone(f"{kind} {where} no longer exists") from error
