"""Raw access to the API server as JSON dicts.

The official client's models cost about a millisecond per pod to build; at 10,000 pods that
would measure the client, not the cluster. Everything here goes through the client's
configured urllib3 pool (TLS and credentials from a kubeconfig) and parses JSON itself.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import client, config

Obj = dict[str, Any]


class KubeError(Exception):
    def __init__(self, status: int, method: str, path: str, body: bytes) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]!r}")
        self.status = status


@dataclass(frozen=True)
class Resource:
    """A resource's URL parts: group '' is the core API."""

    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if namespace is not None and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return base + (f"/{name}" if name else "")


PODS = Resource("", "v1", "pods", True)
NODES = Resource("", "v1", "nodes", False)
NAMESPACES = Resource("", "v1", "namespaces", False)
JOBS = Resource("batch", "v1", "jobs", True)
BUDGETS = Resource("trainwarden.dev", "v1alpha1", "trainingbudgets", False)
IDLE_POLICIES = Resource("trainwarden.dev", "v1alpha1", "idlereclaimpolicies", False)
CHECKPOINT_POLICIES = Resource("trainwarden.dev", "v1alpha1", "checkpointpolicies", False)
FLOW_SCHEMAS = Resource("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False)


class Kube:
    """One identity's connection pool to the API server."""

    def __init__(self, kubeconfig: Path, *, pool: int = 32) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)  # type: ignore[no-untyped-call]
        cfg.connection_pool_maxsize = pool
        self._api = client.ApiClient(cfg)
        self.host: str = cfg.host
        self._pool: urllib3.PoolManager = self._api.rest_client.pool_manager

    def raw(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
        timeout: float = 120,
        gzip: bool = True,
    ) -> bytes:
        url = self.host + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        if gzip:
            headers["Accept-Encoding"] = "gzip"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        response = self._pool.request(
            method, url, body=data, headers=headers, timeout=timeout, retries=False
        )
        if response.status >= 300:
            raise KubeError(response.status, method, path, response.data)
        return bytes(response.data)

    def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        data = self.raw(method, path, **kwargs)
        loaded: Obj = json.loads(data) if data else {}
        return loaded

    # --- conveniences -------------------------------------------------------------------
    def list(self, res: Resource, namespace: str | None = None, **query: Any) -> Obj:
        return self.request("GET", res.path(namespace), query=query or None)

    def list_all(self, res: Resource, namespace: str | None = None, **query: Any) -> Iterator[Obj]:
        """Every item, in pages of 500 (small answers, however many objects)."""
        token = ""
        while True:
            page = self.list(
                res, namespace, limit=500, **({"continue": token} if token else {}), **query
            )
            yield from page.get("items", [])
            token = page["metadata"].get("continue", "")
            if not token:
                return

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.request("GET", res.path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    def create(self, res: Resource, body: Obj, namespace: str | None = None) -> Obj:
        return self.request("POST", res.path(namespace), body=body)

    def create_or_keep(self, res: Resource, body: Obj, namespace: str | None = None) -> None:
        try:
            self.create(res, body, namespace)
        except KubeError as error:
            if error.status != 409:
                raise

    def patch(self, res: Resource, name: str, body: Obj, namespace: str | None = None) -> Obj:
        return self.request(
            "PATCH",
            res.path(namespace, name),
            body=body,
            content_type="application/merge-patch+json",
        )

    def delete(self, res: Resource, name: str, namespace: str | None = None, **query: Any) -> None:
        try:
            self.raw("DELETE", res.path(namespace, name), query=query or None)
        except KubeError as error:
            if error.status != 404:
                raise

    def delete_collection(self, res: Resource, namespace: str | None = None, **query: Any) -> None:
        self.raw("DELETE", res.path(namespace), query=query or None)

    def metrics_text(self) -> str:
        return self.raw("GET", "/metrics", timeout=30).decode()

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        **query: Any,
    ) -> Iterator[tuple[str, Obj]]:
        """One watch request: (type, object) as each event arrives, until the server ends it."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
            **query,
        }
        url = self.host + res.path(namespace) + "?" + urlencode(params)
        response = self._pool.request(
            "GET",
            url,
            headers={"Accept": "application/json"},
            preload_content=False,
            timeout=urllib3.Timeout(connect=30, read=timeout_seconds + 60),
            retries=False,
        )
        try:
            if response.status >= 300:
                raise KubeError(response.status, "WATCH", res.path(namespace), response.read())
            pending = b""
            for chunk in response.stream(None):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        event = json.loads(line)
                        yield event["type"], event["object"]
        finally:
            response.release_conn()


Handler = Callable[[str, Obj, float], None]


class Watcher(threading.Thread):
    """Lists then watches a resource in a thread, calling `handler(type, obj, seen_at)`.

    The initial list is delivered as ADDED events. Expired watches (410) relist. Stops when
    `stop()` is called (at the next event or within the watch's timeout).
    """

    def __init__(
        self,
        kube: Kube,
        res: Resource,
        handler: Handler,
        namespace: str | None = None,
        **query: Any,
    ) -> None:
        super().__init__(daemon=True, name=f"watch-{res.plural}")
        self._kube, self._res, self._handler = kube, res, handler
        self._namespace, self._query = namespace, query
        self._stopped = threading.Event()
        self.synced = threading.Event()
        self.errors = 0

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                listed = self._kube.list(self._res, self._namespace, **self._query)
                now = time.time()
                for item in listed.get("items", []):
                    self._handler("ADDED", item, now)
                self.synced.set()
                version = listed["metadata"]["resourceVersion"]
                while not self._stopped.is_set():
                    for kind, obj in self._kube.watch(
                        self._res,
                        self._namespace,
                        resource_version=version,
                        timeout_seconds=60,
                        **self._query,
                    ):
                        if self._stopped.is_set():
                            return
                        if kind == "ERROR":
                            raise KubeError(int(obj.get("code", 500)), "WATCH", "", b"")
                        version = obj["metadata"]["resourceVersion"]
                        if kind != "BOOKMARK":
                            self._handler(kind, obj, time.time())
            except Exception:
                self.errors += 1
                self._stopped.wait(1)


def labels_of(obj: Obj) -> dict[str, str]:
    found: dict[str, str] = obj.get("metadata", {}).get("labels") or {}
    return found


def annotations_of(obj: Obj) -> dict[str, str]:
    found: dict[str, str] = obj.get("metadata", {}).get("annotations") or {}
    return found


def key_of(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"
