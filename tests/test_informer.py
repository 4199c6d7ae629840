"""The informer's loop: 410 Gone (Expired) means list again at once, never back off; other
errors back off, tell the cache it is interrupted and list again, and never kill the
thread; a watch ERROR event with code 410 is Expired."""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from urllib3.exceptions import ReadTimeoutError

from trainwarden.adapters.informer import Expired, Informer, Source
from trainwarden.core.reads import CODE
from world import Body

SERVER_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Told:
    """A sink that keeps what it was told of interruptions."""

    def __init__(self) -> None:
        self.interruptions: list[tuple[str, datetime, str]] = []

    def interrupted(self, source: str, since: datetime, reason: str) -> None:
        self.interruptions.append((source, since, reason))


class Script(Informer[str]):
    """An informer whose list and watch follow a script instead of calling the server."""

    def __init__(self, watches: list[BaseException | None]) -> None:
        self.told = Told()
        loop = asyncio.new_event_loop()
        super().__init__(
            None, Source("pods", "/api/v1/pods"), str, self.told, loop, clock=lambda: SERVER_NOW
        )  # type: ignore[arg-type]
        self.lists = 0
        self.watched_from: list[str] = []
        self._script = watches

    def _list(self) -> str:
        self.lists += 1
        return f"list-{self.lists}"

    def _watch(self, version: str) -> str:
        self.watched_from.append(version)
        outcome = self._script.pop(0) if self._script else None
        if not self._script:
            self._stopped.set()
        if outcome is not None:
            raise outcome
        return f"{version}+w"


def test_expired_lists_again_at_once_and_watches_from_the_new_list() -> None:
    informer = Script([None, Expired(), None])
    informer._run()
    assert informer.lists == 2
    assert informer.watched_from == ["list-1", "list-1+w", "list-2"]


def test_an_error_backs_off_tells_the_cache_and_lists_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resuming the watch from where it was could replay what was missed, but nothing says
    when the replay is over: only a list is a known-current view to act on."""
    informer = Script([RuntimeError("connection reset"), None])
    waits: list[float | None] = []
    monkeypatch.setattr(informer._stopped, "wait", lambda delay=None: waits.append(delay))
    informer._run()
    informer._loop.run_until_complete(asyncio.sleep(0))  # deliver what the thread scheduled
    assert waits == [1.0], "the first backoff step"
    assert informer.told.interruptions == [
        ("pods", SERVER_NOW, "RuntimeError: connection reset")
    ], "stamped by the controllers' clock (the API server's time), not this process's"
    assert informer.lists == 2
    assert informer.watched_from == ["list-1", "list-2"]


@pytest.mark.parametrize(
    ("event", "raised"),
    [
        ({"type": "ERROR", "object": {"code": 410, "message": "too old"}}, Expired),
        ({"type": "ERROR", "object": {"code": 500, "message": "boom"}}, RuntimeError),
    ],
)
def test_a_watch_error_event_is_expired_only_for_410(
    event: dict[str, Any], raised: type[BaseException]
) -> None:
    with pytest.raises(raised):
        Script([])._deliver(event, "7")


def test_a_bookmark_moves_only_the_version() -> None:
    informer = Script([])
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    assert informer._deliver(bookmark, "7") == "42"


def test_listed_items_get_the_lists_api_version_and_kind() -> None:
    """Regression (faults/upgrade.py, issue 17 item 8): the API server's JobList items
    carry no apiVersion or kind; projected as they came, every Job present at startup was
    cached as kind "" and not suspended, so a restarted operator dropped its budgets'
    records of what they had suspended and never resumed those Jobs."""
    from trainwarden.adapters.informer import identified
    from trainwarden.core.workloads import workload_facts

    job = {"metadata": {"name": "j", "namespace": "n", "uid": "u"}, "spec": {"suspend": True}}
    page = {"apiVersion": "batch/v1", "kind": "JobList", "items": [job]}
    assert workload_facts(job, CODE).suspended is False, "as it was cached before the fix"
    facts = workload_facts(identified(job, page), CODE)
    assert (facts.api_version, facts.kind, facts.suspended) == ("batch/v1", "Job", True)
    custom = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {}}
    assert identified(custom, {"kind": "PyTorchJobList"}) is custom, "kept as given"


def test_a_list_delivers_jobs_with_their_kind_and_suspension() -> None:
    """The same through the informer's own list: what the cache receives."""

    from trainwarden.core.workloads import workload_facts

    job = {"metadata": {"name": "j", "namespace": "n", "uid": "u"}, "spec": {"suspend": True}}
    page = {"apiVersion": "batch/v1", "kind": "JobList", "metadata": {"resourceVersion": "9"},
            "items": [job]}  # fmt: skip
    got: dict[str, Any] = {}

    class Sink:
        def replace(self, source: str, records: dict[str, Any]) -> None:
            got.update(records)

    loop = asyncio.new_event_loop()
    source, project = Source("jobs", "/apis/batch/v1/jobs"), lambda o: workload_facts(o, CODE)
    informer = Informer(None, source, project, Sink(), loop)  # type: ignore[arg-type]
    informer._get = lambda query, *, stream: Body(json.dumps(page).encode())  # type: ignore[method-assign]
    assert informer._list() == "9"
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    assert (got["u"].kind, got["u"].suspended) == ("Job", True)


class Stream:
    """A watch response: its lines, then a read that times out (the stream's SILENCE) or
    the end of the stream."""

    def __init__(self, lines: list[dict[str, Any]], *, silent: bool) -> None:
        self.lines, self.silent = lines, silent

    def stream(self, amt: None, decode_content: bool) -> Any:
        for line in self.lines:
            yield (json.dumps(line) + "\n").encode()
        if self.silent:
            raise ReadTimeoutError(None, None, "Read timed out.")  # type: ignore[arg-type]

    def release_conn(self) -> None:
        pass


class Quiet(Informer[str]):
    """An informer over scripted watch streams (the real `_watch`), listed once."""

    def __init__(self, streams: list[Stream]) -> None:
        self.told = Told()
        loop = asyncio.new_event_loop()
        jobs = Source("jobs", "/apis/batch/v1/jobs")
        super().__init__(None, jobs, str, self.told, loop, clock=lambda: SERVER_NOW)  # type: ignore[arg-type]
        self.lists = 0
        self.watched_from: list[str] = []
        self._streams = streams

    def _list(self) -> str:
        self.lists += 1
        return "10"

    def _get(self, query: list[tuple[str, Any]], *, stream: bool) -> Any:
        self.watched_from.append(dict(query)["resourceVersion"])
        if not self._streams:
            self._stopped.set()
            return Stream([], silent=False)
        return self._streams.pop(0)


def test_a_silent_watch_is_watched_again_from_its_version_and_nothing_is_held() -> None:
    """A kind nobody writes gets no bookmark from the API server's watch cache (it sends
    none before it saw a change); its stream's SILENCE is no failure: the watch is opened
    again from the version it had, with no relist and no interruption of the policies."""
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    informer = Quiet([Stream([], silent=True), Stream([bookmark], silent=True)])
    informer._run()
    informer._loop.run_until_complete(asyncio.sleep(0))
    assert informer.told.interruptions == [], "a quiet kind held every policy"
    assert informer.lists == 1, "a quiet kind was listed again"
    assert informer.watched_from == ["10", "10", "42"]


class Relists:
    """A jobs informer over scripted lists into the real cache, with a listener that
    hears each workload told changed and a count of the cache's catching up."""

    def __init__(self) -> None:
        from trainwarden.cache.cluster import ClusterCache
        from trainwarden.core.workloads import workload_facts

        self.cache = ClusterCache()
        self.told: list[tuple[str, bool | None]] = []
        self.caught_up = 0
        self.cache.listeners.add(self)
        self.cache.interruptions.caught_up.add(self._caught_up)
        self.sink = self.cache.workload_sink()
        self.loop = asyncio.new_event_loop()
        source = Source("jobs", "/apis/batch/v1/jobs")
        project = lambda o: workload_facts(o, CODE)  # noqa: E731
        self.informer = Informer(None, source, project, self.sink, self.loop)  # type: ignore[arg-type]

    def _caught_up(self) -> None:
        self.caught_up += 1

    def workload_changed(self, old: Any, new: Any) -> None:
        self.told.append(((new or old).name, None if new is None else new.suspended))

    def pod_changed(self, old: Any, new: Any) -> None: ...

    def namespace_changed(self, name: str) -> None: ...

    def list(self, *jobs: dict[str, Any]) -> None:
        """The informer lists `jobs` (its thread's part); nothing delivered yet."""
        page = {"apiVersion": "batch/v1", "kind": "JobList",
                "metadata": {"resourceVersion": "99"}, "items": list(jobs)}  # fmt: skip
        self.informer._get = lambda query, *, stream: Body(json.dumps(page).encode())  # type: ignore[method-assign]
        self.informer._list()

    def deliver(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))

    def watch_failed(self) -> None:
        self.sink.interrupted("jobs", SERVER_NOW, "RuntimeError: connection reset")


def job(name: str, version: str, *, suspend: bool = False) -> dict[str, Any]:
    meta = {"name": name, "namespace": "n", "uid": f"uid-{name}", "resourceVersion": version,
            "creationTimestamp": "2026-12-01T11:00:00Z"}  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"suspend": suspend}}


def test_a_relist_that_finds_the_cache_current_ends_the_hold_without_replacing_it() -> None:
    """Issue 30 item 5: a watch failed, so every policy is held until its kind is listed
    again; a list that finds every object as the cache has it says so, and the hold ends
    without the cache being replaced (at 10,000 pods: every record assigned again and
    every listener told of each, 72 ms of the event loop with the budget index) for
    nothing."""
    r = Relists()
    r.list(job("a", "1"), job("b", "2"))
    r.deliver()
    assert r.cache.interruptions.current("jobs")
    r.told.clear()
    r.watch_failed()
    assert not r.cache.interruptions.current("jobs"), "held: the watch failed"
    r.list(job("b", "2"), job("a", "1"))
    r.deliver()
    assert r.cache.interruptions.current("jobs"), "the relist ended the hold"
    assert r.caught_up == 1, "the held policies were queued"
    assert r.told == [], "the cache was replaced with what it already held"


def test_a_relist_that_finds_a_change_holds_until_it_is_delivered() -> None:
    """What the watch delivered before it failed counts as what the cache holds (a list
    equal to it missed nothing); a list that differs (here a Job deleted while nobody
    watched) is delivered as before, and the policies stay held until it is."""
    r = Relists()
    r.list(job("a", "1"), job("b", "2"))
    r.deliver()
    event = {"type": "MODIFIED", "object": job("b", "3", suspend=True)}
    assert r.informer._deliver(event, "2") == "3"
    r.deliver()
    assert r.told == [("a", False), ("b", False), ("b", True)]
    r.watch_failed()
    r.list(job("a", "1"), job("b", "3", suspend=True))
    r.deliver()
    assert r.cache.interruptions.current("jobs")
    assert r.caught_up == 1
    assert r.told[3:] == [], "the list equal to what the watch delivered was delivered again"
    r.watch_failed()
    r.list(job("a", "1"))
    assert not r.cache.interruptions.current("jobs"), "released before the list was delivered"
    r.deliver()
    assert r.cache.interruptions.current("jobs")
    assert r.caught_up == 2
    assert ("b", None) in r.told[3:], "b's deletion while nobody watched"
    assert set(r.cache.workloads) == {"uid-a"}
