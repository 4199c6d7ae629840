"""A work queue of policy names, as controller-runtime has: each name is evaluated by one
worker at a time, at the earliest time anyone asked for it, and a burst of requests for
one name becomes one evaluation."""

import asyncio
import contextlib


class WorkQueue:
    def __init__(self) -> None:
        self._due: dict[str, float] = {}
        self._busy: set[str] = set()
        self._after_busy: dict[str, float] = {}
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._due) + len(self._after_busy)

    def add(self, key: str, delay: float = 0.0) -> None:
        """Evaluate `key` in `delay` seconds, or sooner if already asked for sooner."""
        at = asyncio.get_running_loop().time() + max(0.0, delay)
        pending = self._after_busy if key in self._busy else self._due
        if at < pending.get(key, float("inf")):
            pending[key] = at
            self._changed.set()

    def forget(self, key: str) -> None:
        self._due.pop(key, None)
        self._after_busy.pop(key, None)

    async def get(self) -> str:
        """The next due key not being evaluated; it is busy until `done`."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ready = min(self._due.items(), key=lambda kv: kv[1], default=None)
            if ready is not None and ready[1] <= now:
                del self._due[ready[0]]
                self._busy.add(ready[0])
                return ready[0]
            self._changed.clear()
            timeout = None if ready is None else ready[1] - now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def take_due(self) -> list[str]:
        """Every other key due now, without waiting (they are busy until `done`): one
        pass over a burst instead of one per key."""
        now = asyncio.get_running_loop().time()
        due = [key for key, at in self._due.items() if at <= now]
        for key in due:
            del self._due[key]
            self._busy.add(key)
        return due

    def done(self, key: str) -> None:
        self._busy.discard(key)
        if key in self._after_busy:
            self._due[key] = min(self._after_busy.pop(key), self._due.get(key, float("inf")))
            self._changed.set()
