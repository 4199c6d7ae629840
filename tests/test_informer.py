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
