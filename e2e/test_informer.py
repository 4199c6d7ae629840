"""The operator's own informer against the real API server: a paginated list (whose items
carry their kind, which the server leaves out of list items), then a watch that follows
creations and deletions. (What it does on 410 Gone is in
tests/test_informer.py: a fresh API server still serves a watch from resourceVersion 1.)"""

import asyncio
from typing import Any

import pytest
from kubernetes import client

from harness import Cluster
from trainwarden.adapters.informer import EventType, Informer, Source
from trainwarden.testing.pods import PodBuilder

Record = tuple[str, str, str]
"""A pod's name, phase, and apiVersion/kind as the informer saw them."""


class Recorder:
    """A Sink that keeps each pod's record by uid, and counts full lists."""

    def __init__(self) -> None:
        self.pods: dict[str, Record] = {}
        self.lists = 0

    def replace(self, source: str, records: dict[str, Record]) -> None:
        self.pods = dict(records)
        self.lists += 1

    def apply(self, source: str, event: EventType, uid: str, record: Record) -> None:
        if event == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = record

    def names(self) -> set[str]:
        return {name for name, _, _ in self.pods.values()}


def project(raw: dict[str, Any]) -> Record:
    phase = (raw.get("status") or {}).get("phase", "")
    return raw["metadata"]["name"], phase, f"{raw.get('apiVersion')}/{raw.get('kind')}"


def pod(namespace: str, name: str) -> dict[str, Any]:
    return PodBuilder(name, namespace).labels({"informer-test": namespace}).build()


def informer(cluster: Cluster, namespace: str, sink: Recorder) -> Informer[Record]:
    source = Source("pods", "/api/v1/pods", label_selector=f"informer-test={namespace}")
    # Pages of 2 so that the list of 5 pods takes three pages (limit/continue).
    return Informer(cluster.api, source, project, sink, asyncio.get_running_loop(), page_size=2)


@pytest.mark.timeout(120)
def test_lists_in_pages_then_follows_changes(cluster: Cluster, namespace: str) -> None:
    core = client.CoreV1Api(cluster.api)
    for i in range(5):
        core.create_namespaced_pod(namespace, pod(namespace, f"before-{i}"))
    sink = Recorder()

    async def scenario() -> None:
        watching = informer(cluster, namespace, sink)
        watching.start()
        try:
            await asyncio.wait_for(watching.synced.wait(), 30)
            assert sink.names() == {f"before-{i}" for i in range(5)}
            kinds = {kind for _, _, kind in sink.pods.values()}
            assert kinds == {"v1/Pod"}, "a workload listed at startup must be suspendable"
            core.create_namespaced_pod(namespace, pod(namespace, "after"))
            core.delete_namespaced_pod("before-0", namespace, grace_period_seconds=0)
            await until(lambda: "after" in sink.names() and "before-0" not in sink.names())
            assert {kind for _, _, kind in sink.pods.values()} == {"v1/Pod"}
            assert sink.lists == 1, "a healthy watch never lists again"
        finally:
            watching.stop()

    asyncio.run(scenario())


async def until(condition: Any, within: float = 30) -> None:
    """Await a condition on the sink; the informer's deliveries run on this loop."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.1)


class Encodings(Informer[Record]):
    """An informer that notes each answer's Content-Encoding."""

    seen: list[str | None]

    def _get(self, query: list[tuple[str, Any]], *, stream: bool) -> Any:
        response = super()._get(query, stream=stream)
        self.seen.append(response.headers.get("Content-Encoding"))
        return response


@pytest.mark.timeout(120)
def test_lists_arrive_compressed_and_read_as_ever(cluster: Cluster, namespace: str) -> None:
    """The API server gzips answers over 128 KiB to a client that asks (APIResponseCompression):
    a relist of many pods is a tenth of the bytes. Three 80 KiB ConfigMaps make one such."""
    core = client.CoreV1Api(cluster.api)
    for i in range(3):
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"big-{i}", labels={"informer-test": namespace}),
            data={"text": "checkpoint-00100 " * 5000},
        )
        core.create_namespaced_config_map(namespace, body)
    sink = Recorder()

    async def scenario() -> None:
        source = Source("configmaps", f"/api/v1/namespaces/{namespace}/configmaps")
        loop = asyncio.get_running_loop()
        listing = Encodings(cluster.api, source, project, sink, loop)
        listing.seen = []
        listing.start()
        try:
            await asyncio.wait_for(listing.synced.wait(), 30)
            assert listing.seen[0] == "gzip", listing.seen
            assert {f"big-{i}" for i in range(3)} <= sink.names()
            assert {kind for _, _, kind in sink.pods.values()} == {"v1/ConfigMap"}
        finally:
            listing.stop()

    asyncio.run(scenario())
