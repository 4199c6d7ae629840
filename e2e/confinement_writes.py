"""Writes by HTTP for the confinement test, every one a server-side dry run (admission
runs, nothing is stored), and what they are written to.

`DryRunApi` is an ApiClient whose every write carries `dryRun=All` and is recorded as
sent: the operator's own client (`adapters/kube_client.KubeClient`) runs on it with the
chart's ServiceAccount token (confinement_corpus.py). `Client` replays or varies a
recorded write, as the operator or as an admin. `manifests` are the objects a tenant or
an admin made, which the operator's writes are to.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client, config

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"


def _api(kubeconfig: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    return api


@dataclass(frozen=True)
class Sent:
    """One write as the client sent it."""

    method: str
    path: str
    """The URL's path and query, without the dry run."""
    content_type: str
    body: Any


class DryRunApi:
    """An ApiClient from `kubeconfig` whose writes are server-side dry runs, recorded."""

    def __init__(self, kubeconfig: Path) -> None:
        self.api: client.ApiClient = _api(kubeconfig)
        self.sent: list[Sent] = []
        pool = self.api.rest_client.pool_manager
        request = pool.request

        def dry_request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if method != "GET":
                parts = urlsplit(url)
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                headers = kwargs.get("headers") or {}
                body = kwargs.get("body")
                self.sent.append(
                    Sent(
                        method,
                        path,
                        str(headers.get("Content-Type", "")),
                        json.loads(body) if body else None,
                    )
                )
                url += ("&" if parts.query else "?") + "dryRun=All"
            return request(method, url, *args, **kwargs)

        pool.request = dry_request  # type: ignore[method-assign]

    def take(self) -> list[Sent]:
        """What was sent since the last take."""
        taken, self.sent = self.sent, []
        return taken


@dataclass(frozen=True)
class Answer:
    status: int
    body: JSON

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


class Client:
    """Writes by HTTP as the kubeconfig's user, always server-side dry runs."""

    def __init__(self, kubeconfig: Path) -> None:
        api = _api(kubeconfig)
        self.host = api.configuration.host
        self.pool = api.rest_client.pool_manager
        self.headers = {"Accept": "application/json"}
        token = api.configuration.api_key.get("BearerToken")
        if token:
            self.headers["Authorization"] = token

    def get(self, path: str) -> JSON:
        response = self.pool.request("GET", self.host + path, headers=self.headers)
        assert response.status == 200, response.data[:300]
        found: JSON = json.loads(response.data)
        return found

    def write(self, method: str, path: str, body: Any, content_type: str | None = None) -> Answer:
        """A merge patch or a POST of JSON, unless `content_type` says otherwise."""
        content_type = content_type or (MERGE if method == "PATCH" else "application/json")
        sep = "&" if "?" in path else "?"
        response = self.pool.request(
            method,
            f"{self.host}{path}{sep}dryRun=All",
            body=json.dumps(body).encode(),
            headers={**self.headers, "Content-Type": content_type},
            timeout=30,
        )
        try:
            answer = json.loads(response.data)
        except ValueError:
            answer = {"message": response.data[:300].decode(errors="replace")}
        return Answer(response.status, answer if isinstance(answer, dict) else {})

    def replay(self, sent: Sent) -> Answer:
        """`sent` again, but for its resourceVersion precondition: the object may have
        moved since (a node's heartbeat), and what is tested is admission."""
        body = sent.body
        if isinstance(body, dict) and "resourceVersion" in body.get("metadata", {}):
            meta = {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}
            body = {**body, "metadata": meta}
        return self.write(sent.method, sent.path, body, sent.content_type)


def object_path(sent: Sent) -> str:
    """The object a write is to (its subresource and query dropped)."""
    path = sent.path.split("?", 1)[0]
    for sub in ("/status", "/eviction", "/scale"):
        path = path.removesuffix(sub)
    return path


def resource(sent: Sent) -> str:
    """The resource a write is to: jobs, pods, workloads..."""
    parts = object_path(sent).split("/")
    created = sent.method == "POST" and not sent.path.split("?")[0].endswith("/eviction")
    return parts[-1] if created else parts[-2]


def manifests(namespace: str, tag: str) -> Iterator[JSON]:
    """What the operator's writes are to, as tenants and admins make them."""
    container = {"name": "c", "image": "example.invalid/trainer:1"}
    pod_spec = {"restartPolicy": "Never", "containers": [container]}
    labels = {"team": "a", "app": "trainer"}
    held = {
        "trainwarden.dev/held-by": "team-budget",
        "trainwarden.dev/hold-reason": "exhausted",
        "trainwarden.dev/held-at": "2026-12-01T00:00:00Z",
    }
    marks = {"trainwarden.dev/suspend-reason": "exhausted", "trainwarden.dev/suspended-in": "1/x"}

    def job(name: str, suspend: bool, **meta: Any) -> JSON:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": dict(labels), **meta},
            "spec": {"suspend": suspend, "template": {"spec": pod_spec}},
        }

    yield job("train", False, annotations={"team.example/owner": "someone"})
    yield job("held", True, annotations=held)
    yield job("suspended", True, annotations=marks)
    yield {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "labels": dict(labels)},
        "spec": pod_spec,
    }
    gates = [{"name": "trainwarden.dev/budget"}, {"name": "example.com/other"}]
    yield {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated", "annotations": held},
        "spec": {**pod_spec, "schedulingGates": gates},
    }
    template = {"metadata": {"labels": {"app": "notebook"}}, "spec": {"containers": [container]}}
    for kind in ("Deployment", "StatefulSet"):
        spec = {"replicas": 2, "selector": {"matchLabels": {"app": "notebook"}}}
        yield {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": kind.lower(), "labels": dict(labels)},
            "spec": {**spec, "template": template},
        }
    yield {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt", "annotations": {"team.example/owner": "someone"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    yield {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": dict(labels)},
        "spec": {
            "replicatedJobs": [
                {"name": "w", "template": {"spec": {"template": {"spec": pod_spec}}}}
            ]
        },
    }
    yield {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "labels": dict(labels)},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{**container, "name": "pytorch"}]}},
                }
            },
        },
    }
    yield {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj", "labels": dict(labels)},
        "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True},
    }
    yield {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "labels": dict(labels)},
        "spec": {
            "queueName": f"queue-{tag}",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod_spec}}],
        },
    }
