"""The operator's own informer against the real API server: a paginated list (whose items
carry their kind, which the server leaves out of list items), then a watch that follows
creations and deletions. (What it does on 410 Gone is in
tests/test_informer.py: a fresh API server still serves a watch from resourceVersion 1.)"""

import asyncio
import itertools
import time
from typing import Any

import pytest
from kubernetes import client

from harness import Cluster
from trainwarden.adapters.informer import SILENCE, EventType, Informer, Source
from trainwarden.testing.pods import PodBuilder

Record = tuple[str, str, str]
"""A pod's name, phase, and apiVersion/kind as the informer saw them."""


class Recorder:
    """A Sink that keeps each pod's record by uid, and counts full lists."""

    def __init__(self) -> None:
        self.pods: dict[str, Record] = {}
        self.lists = 0
        self.unchanged_lists = 0

    def replace(self, source: str, records: dict[str, Record]) -> None:
        self.pods = dict(records)
        self.lists += 1

    def unchanged(self, source: str) -> None:
        self.unchanged_lists += 1

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


class Heard(Informer[Record]):
    """An informer that notes when each watch opened and each bookmark arrived, and is
    told of interruptions (a Recorder cannot be held)."""

    def _get(self, query: list[tuple[str, Any]], *, stream: bool) -> Any:
        if stream:
            self.opened.append(time.monotonic())
        return super()._get(query, stream=stream)

    def _deliver(self, event: dict[str, Any], version: str) -> str:
        if event.get("type") == "BOOKMARK":
            self.bookmarks.append(time.monotonic())
        return super()._deliver(event, version)

    def heard(self) -> "Heard":
        self.opened: list[float] = []
        self.bookmarks: list[float] = []
        return self


class Held(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.interruptions: list[str] = []

    def interrupted(self, source: str, since: Any, reason: str) -> None:
        self.interruptions.append(reason)


@pytest.mark.timeout(300)
def test_a_quiet_watch_is_kept_alive_by_bookmarks_and_never_listed_again(
    cluster: Cluster, namespace: str
) -> None:
    """Two watches of ConfigMaps no object matches (nothing but bookmarks reaches them),
    for twice the SILENCE (90 s). One with the real SILENCE: the API server's bookmarks
    (about one a minute) keep it open, so it is never opened again, listed again or held.
    One that takes 20 s of silence as the end of a stream, so that it certainly goes silent
    several times (the bookmarks' minute restarts with each watch): each silence is a new
    watch from the same version, never a relist or a hold, and a ConfigMap created after
    the silences still arrives."""
    quiet = f"informer-quiet={namespace}"
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    patient, hasty = Held(), Held()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        source = Source("configmaps", path, quiet)
        real = Heard(cluster.api, source, project, patient, loop).heard()
        silent = Heard(cluster.api, source, project, hasty, loop, silence=20).heard()
        watching = [real, silent]
        for informer in watching:
            informer.start()
        try:
            await asyncio.wait_for(real.synced.wait(), 30)
            await asyncio.wait_for(silent.synced.wait(), 30)
            await asyncio.sleep(2 * SILENCE)
            body = client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="after", labels={"informer-quiet": namespace})
            )
            client.CoreV1Api(cluster.api).create_namespaced_config_map(namespace, body)
            await until(lambda: "after" in hasty.names() and "after" in patient.names())
        finally:
            for informer in watching:
                informer.stop()
        gaps = [b - a for a, b in itertools.pairwise(real.opened[:1] + real.bookmarks)]
        assert len(real.bookmarks) >= 2, f"bookmarks at {real.bookmarks}"
        assert max(gaps) < SILENCE, f"bookmarks {gaps} s apart"
        assert len(real.opened) == 1, "a watch kept alive by bookmarks was opened again"
        assert len(silent.opened) >= 4, f"went silent only {len(silent.opened) - 1} times"
        for sink in (patient, hasty):
            assert sink.interruptions == [], "a quiet watch held the policies"
            assert sink.lists == 1, "a quiet watch was listed again"

    asyncio.run(scenario())


class Flaky(Informer[Record]):
    """An informer whose watch cannot be opened again, once per entry of `breaks`: each
    runs first (a change while nobody watches, or nothing)."""

    breaks: list[Any]
    opened = 0

    def _get(self, query: list[tuple[str, Any]], *, stream: bool) -> Any:
        if stream and self.opened and self.breaks:
            self.breaks.pop(0)()
            raise ConnectionResetError("the watch could not be opened again")
        self.opened += stream
        return super()._get(query, stream=stream)


@pytest.mark.timeout(120)
def test_a_relist_that_finds_nothing_new_ends_the_hold_without_replacing(
    cluster: Cluster, namespace: str
) -> None:
    """Issue 30 item 5 on the real API server: a watch that cannot be opened again holds
    the policies until its kind is listed again. A list that finds every pod as the watch
    left it (one created while it watched among them: the list's items and the watch's
    objects project the same) ends the hold without replacing the cache; a pod created
    while nobody watched makes the next list a replacement, as before."""
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_pod(namespace, pod(namespace, "before"))
    sink = Held()

    def created_unwatched() -> None:
        core.create_namespaced_pod(namespace, pod(namespace, "unwatched"))

    async def scenario() -> None:
        source = Source("pods", "/api/v1/pods", label_selector=f"informer-test={namespace}")
        loop = asyncio.get_running_loop()
        flaky = Flaky(cluster.api, source, project, sink, loop, watch_timeout=5)
        flaky.breaks = []
        flaky.start()
        try:
            await asyncio.wait_for(flaky.synced.wait(), 30)
            core.create_namespaced_pod(namespace, pod(namespace, "watched"))
            await until(lambda: "watched" in sink.names())
            flaky.breaks += [lambda: None, created_unwatched]
            await until(lambda: "unwatched" in sink.names(), within=60)
        finally:
            flaky.stop()
        assert len(sink.interruptions) == 2, sink.interruptions
        assert sink.unchanged_lists == 1, "the list that found nothing new"
        assert sink.lists == 2, "the first list and the one that found a new pod"
        assert sink.names() == {"before", "watched", "unwatched"}

    asyncio.run(scenario())
