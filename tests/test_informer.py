"""The informer's loop: 410 Gone (Expired) means list again at once, never back off; other
errors back off, tell the cache it is interrupted and list again, and never kill the
thread; a watch ERROR event with code 410 is Expired."""

import asyncio
import json
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from trainwarden.adapters.informer import Expired, Informer, Source


class Told:
    """A sink that keeps what it was told of interruptions."""

    def __init__(self) -> None:
        self.interruptions: list[tuple[str, str]] = []

    def interrupted(self, source: str, since: datetime, reason: str) -> None:
        self.interruptions.append((source, reason))


class Script(Informer[str]):
    """An informer whose list and watch follow a script instead of calling the server."""

    def __init__(self, watches: list[BaseException | None]) -> None:
        self.told = Told()
        loop = asyncio.new_event_loop()
        super().__init__(None, Source("pods", "/api/v1/pods"), str, self.told, loop)  # type: ignore[arg-type]
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
    assert informer.told.interruptions == [("pods", "RuntimeError: connection reset")]
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


class Pages(Informer[tuple[str, str]]):
    """An informer whose list is served page by page from memory, as the server does."""

    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.delivered: dict[str, tuple[str, str]] = {}
        self.told = Told()
        super().__init__(
            None,  # type: ignore[arg-type]
            Source("jobs", "/apis/batch/v1/jobs"),
            lambda raw: (raw.get("apiVersion"), raw.get("kind")),
            self.told,  # type: ignore[arg-type]
            asyncio.new_event_loop(),
        )
        self._pages = pages

    def _get(self, query: list[tuple[str, Any]], *, stream: bool) -> Any:
        return SimpleNamespace(data=json.dumps(self._pages.pop(0)).encode())

    def _delivered_list(self, records: dict[str, tuple[str, str]]) -> None:
        self.delivered = records


def test_listed_objects_carry_their_kind_as_watched_ones_do() -> None:
    """The API server leaves apiVersion and kind out of a list's items; a Job known only
    from the list at startup had no kind, and no exhausted budget could suspend it."""

    def page(uid: str, token: str) -> dict[str, Any]:
        meta = {"resourceVersion": "9", "continue": token}
        item = {"metadata": {"uid": uid, "name": uid}}
        return {"kind": "JobList", "apiVersion": "batch/v1", "metadata": meta, "items": [item]}

    informer = Pages([page("a", "next"), page("b", "")])
    assert informer._list() == "9"
    informer._loop.run_until_complete(asyncio.sleep(0))
    assert informer.delivered == {"a": ("batch/v1", "Job"), "b": ("batch/v1", "Job")}
