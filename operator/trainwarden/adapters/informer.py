"""List and watch one kind into the cache, the way client-go's reflector does.

kopf's own watching gives every object a worker and, with indices, waits for the whole
operator to be indexed object by object; at 10,000 pods it never finished starting. The
kinds with many objects (pods, Jobs, namespaces, nodes) are therefore read here: a
paginated LIST, then a WATCH from its resourceVersion with bookmarks, a relist on 410
Gone, and a backoff on errors. After a failed list or watch the cache is told it is
interrupted, and the informer lists again rather than resuming the watch: only a fresh
list says what changed while nobody watched, and the controllers act on nothing until
then (controllers/base.py). A list that finds every record as the informer last
delivered it tells the cache so (`Sink.unchanged`) instead of delivering it again: the
cache was current, and no listener recomputes anything for changes that did not happen. A
list's pages are read one object at a time (pages.py), each raw object is projected to
a small record in the watch thread (the cache never holds a pod's body, core/keep.py),
and records reach the cache on the event loop, so the cache needs no locks.
"""

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import ReadTimeoutError

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON
from trainwarden.adapters.pages import Page

log = logs.get(__name__)
T = TypeVar("T")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
SILENCE = 90
"""Seconds a watch may say nothing (no event, no bookmark) before its stream is given up.
The API server's watch cache sends a bookmark about every minute to a watch that allows
them and has a timeout (measured on the local cluster, v1.34: 59-61 s apart on kinds
nobody writes), but promises none: none while it has no resourceVersion of that kind
(k8s.io/apiserver cacher.go dispatchEvents), and a loaded server sends them late. A
stream that stopped (a partition, a load balancer dropping it, an API server frozen)
looks the same until the kernel gives up on the connection. So a silent stream is
watched again from its version, with no relist and nothing held: the server then replays
what a dead stream missed (or says 410, and the kind is listed again), and a watch it
cannot open again is the failure that holds the policies (`_run`)."""
BACKOFF = (1.0, 2.0, 5.0, 10.0)
"""Seconds between attempts after a failure. Nothing is evaluated until a failed source is
listed again, so the last step bounds how long the operator stays idle after an outage;
one list per source every 10 s is no load for a recovering API server."""


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class Sink(Protocol[T]):
    """Where an informer delivers records; called on the event loop only."""

    def replace(self, source: str, records: dict[str, T]) -> None:
        """The complete state after a (re)list, keyed by uid."""

    def apply(self, source: str, event: EventType, uid: str, record: T) -> None:
        """One change; for DELETED, the record is the object's last state."""

    def unchanged(self, source: str) -> None:
        """A (re)list found every record as last delivered: the cache was current."""

    def interrupted(self, source: str, since: datetime, reason: str) -> None:
        """A list or watch failed: changes may be missing until the next replace."""


@dataclass(frozen=True)
class Source:
    """One kind to list and watch, cluster-wide."""

    name: str
    """A short name for logs and metrics, e.g. "pods"."""
    path: str
    """The collection's URL path, e.g. "/api/v1/pods" or "/apis/batch/v1/jobs"."""
    label_selector: str = ""


def identified(item: dict[str, Any], page: dict[str, Any]) -> dict[str, Any]:
    """A listed item with its apiVersion and kind. The API server leaves them out of the
    items of a built-in kind's list (a JobList's Jobs have neither; watch events have
    both), and projections read them: without this, every Job present when the operator
    started was cached as kind "" and not suspended, so after any restart a budget
    dropped its record of what it had suspended and never resumed it (found by the
    upgrade area of `make faults`, faults/upgrade.py)."""
    if item.get("apiVersion") and item.get("kind"):
        return item
    kind = str(page.get("kind") or "")
    return {
        **item,
        "apiVersion": item.get("apiVersion") or page.get("apiVersion") or "",
        "kind": item.get("kind") or (kind[: -len("List")] if kind.endswith("List") else kind),
    }


class Informer(Generic[T]):
    """One kind's list+watch loop, run in its own daemon thread."""

    def __init__(
        self,
        api: client.ApiClient,
        source: Source,
        project: Callable[[JSON], T],
        sink: Sink[T],
        loop: asyncio.AbstractEventLoop,
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        synced: asyncio.Event | None = None,
        silence: float = SILENCE,
    ) -> None:
        self.source = source
        self.synced = synced or asyncio.Event()
        """Set once a list was delivered; an informer that replaces another (a source
        listed again, adapters/projected.py) shares its predecessor's."""
        self._api = api
        self._project = project
        self._sink = sink
        self._loop = loop
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._silence = silence
        self._clock = clock
        """The controllers' clock (the API server's time): when a watch failed is compared
        with their "now" (controllers/status.py) and with pods' ends (cache/budgets.py)."""
        self._sink_has: dict[str, T] | None = None
        """Each record as this thread last delivered it, by uid (None before a list):
        what the sink holds once the deliveries scheduled reach it. A list equal to it
        missed nothing. The records are the cache's own objects: only the dict costs."""
        self._stopped = threading.Event()
        self._muted = False
        """Set by `stop`, on the loop: deliveries scheduled before are dropped there."""
        self._thread = threading.Thread(target=self._run, name=f"informer-{source.name}")
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop at the next event or the end of the current watch, and deliver nothing
        more: what the thread had already scheduled on the loop is dropped there. The
        stream is not closed from here: closing an SSL socket another thread reads blocks
        until that read ends (up to the watch timeout), and this runs on the event loop.
        The thread is a daemon, so it never holds up the process's exit."""
        self._stopped.set()
        self._muted = True

    def _on_loop(self, deliver: Callable[..., None], *args: Any) -> None:
        """Run `deliver` on the event loop unless the informer was stopped by then (on
        the loop too, so nothing delivered after `stop` returned reaches the sink)."""

        def guarded() -> None:
            if not self._muted:
                deliver(*args)

        self._loop.call_soon_threadsafe(guarded)

    def _run(self) -> None:
        failures = 0
        version: str | None = None
        while not self._stopped.is_set():
            try:
                if version is None:
                    version = self._list()
                    failures = 0
                version = self._watch(version)
                failures = 0
            except Expired:
                log.info("watch expired, listing again", source=self.source.name)
                metrics.report_informer_relist(self.source.name)
                version = None
            except Exception as error:  # the thread must never die: its kind would freeze
                if self._stopped.is_set():
                    return
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                reason = f"{type(error).__name__}: {error}"[:300]
                log.warning(
                    "watch failed, listing again",
                    source=self.source.name,
                    error=reason,
                    retry_in=delay,
                )
                metrics.report_informer_error(self.source.name)
                self._on_loop(self._sink.interrupted, self.source.name, self._clock(), reason)
                version = None
                self._stopped.wait(delay)

    def _get(self, query: list[tuple[str, Any]], *, stream: bool) -> Any:
        """The raw urllib3 response: no deserialization into the client's models, which
        would cost more than everything else the operator does with a pod."""
        headers = {"Accept": "application/json"}
        if not stream:  # the server gzips a list over 128 KiB when asked; urllib3 inflates it
            headers["Accept-Encoding"] = "gzip"
        request = self._api.param_serialize(
            "GET",
            self.source.path,
            query_params=query,
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        timeout = (10, self._silence) if stream else (10, 60)
        response = self._api.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise client.ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def _selector(self) -> list[tuple[str, Any]]:
        selector = self.source.label_selector
        return [("labelSelector", selector)] if selector else []

    def _list(self) -> str:
        """Every object, page by page, each page read one object at a time (pages.py);
        delivered at once, so the cache sees one state."""
        records: dict[str, T] = {}
        token = ""
        while True:
            query = [("limit", self._page_size), *self._selector()]
            if token:
                query.append(("continue", token))
            try:
                response = self._get(query, stream=False)
            except client.ApiException as error:
                if error.status == 410:  # the continue token expired mid-list
                    raise Expired from error
                raise
            page = Page(response)
            try:
                for raw in page.items():
                    uid = (raw.get("metadata") or {}).get("uid")
                    if uid:
                        records[uid] = self._project(identified(raw, page.head))
            except BaseException:
                response.close()  # unread: never back into the pool
                raise
            response.release_conn()
            token = (page.head.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        version = str(page.head["metadata"]["resourceVersion"])
        same = records == self._sink_has
        self._on_loop(self._delivered_list, None if same else records)
        self._sink_has = dict(records)  # the thread changes it; the loop reads `records`
        log.info("listed", source=self.source.name, objects=len(records), unchanged=same)
        return version

    def _delivered_list(self, records: dict[str, T] | None) -> None:
        """`records` None: the list found what the sink already holds (every uid, each
        record equal: for a pod, its resourceVersion too), so the hold on a failed
        watch ends without replacing the cache and telling every listener of every
        record."""
        if records is None:
            self._sink.unchanged(self.source.name)
        else:
            self._sink.replace(self.source.name, records)
        self.synced.set()

    def _watch(self, version: str) -> str:
        """Follow changes from `version` until the server ends the stream or it is silent
        for `silence` seconds; the newest version seen, so the next watch continues where
        this one stopped."""
        query = [
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self._watch_timeout),
            *self._selector(),
        ]
        try:
            response = self._get(query, stream=True)
        except client.ApiException as error:
            if error.status == 410:
                raise Expired from error
            raise
        try:
            for event in self._events(response):
                version = self._deliver(event, version)
        except ReadTimeoutError:  # SILENCE without an event or a bookmark: watch again
            log.info("watch silent, watching again from its version", source=self.source.name)
        finally:
            response.release_conn()
        return version

    def _events(self, response: Any) -> Iterator[JSON]:
        for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
            if self._stopped.is_set():
                return
            if line:
                yield json.loads(line)

    def _deliver(self, event: JSON, version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or version)
        if kind in ("ADDED", "MODIFIED", "DELETED") and meta.get("uid"):
            record = self._project(obj)
            self._on_loop(self._sink.apply, self.source.name, kind, meta["uid"], record)
            self._follow(kind, meta["uid"], record)
            metrics.report_informer_event(self.source.name)
        return version  # BOOKMARK: only the version moves

    def _follow(self, kind: str, uid: str, record: T) -> None:
        """Keep `_sink_has` what the sink holds after this event."""
        if self._sink_has is None:
            return
        if kind == "DELETED":
            self._sink_has.pop(uid, None)
        else:
            self._sink_has[uid] = record
