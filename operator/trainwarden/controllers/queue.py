"""A work queue of policy names, as controller-runtime has: each name is evaluated by one
worker at a time, at the earliest time anyone asked for it, and a burst of requests for
one name becomes one evaluation.

A key whose evaluation failed is retried after a delay of its own that doubles with each
failure in a row (`backoff`), as client-go's ItemExponentialFailureRateLimiter does, and
starts again from BACKOFF_BASE once it succeeds. Only the delay of the failing key grows:
every other key keeps its own time.

Keys that may act (`urgent`: a budget past its forecast crossing, an idle pod's warning
or reclaim due, a deleted policy's release) are a lane of their own: among the keys due,
they are taken first, so an enforcement is not queued behind the routine re-evaluations a
burst of pod events asks for. A key's urgency is asked when it is due, not when it was
added: a budget's forecast crossing may pass while it waits. A routine key due for
STARVED seconds is taken in its turn again, whatever is urgent: a budget that stays past
its threshold under a stream of pod events is due again and again, and must not keep
the others from ever being evaluated."""

import asyncio
import contextlib
from collections.abc import Callable

STARVED = 5.0
"""Seconds a routine key may wait behind urgent ones, at most (then it goes first)."""
BACKOFF_BASE = 1.0
"""Seconds before the first retry: a dropped connection or a timed-out call is tried
again within a second (a fixed 5 s before), and five retries in a row (1+2+4+8+16 s) fit
in one RESYNC (30 s)."""
BACKOFF_CAP = 120.0
"""Seconds between retries at most: a policy that keeps failing (an API server down for
minutes, a spec the code cannot handle) costs one evaluation in two minutes, and one that
recovers is evaluated again well within the 10 minutes after which
TrainwardenPolicyEvaluationStale fires. (client-go's 5 ms..1000 s suits cheap reconciles
requeued at once; an evaluation here makes API calls and Prometheus queries.)"""


def backoff(failures: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """The delay before the retry after `failures` failures in a row (at least one)."""
    if failures <= 1:
        return min(base, cap)
    # 2**n overflows a float for large n: stop doubling once past the cap.
    exponent = min(failures - 1, 64)
    return min(cap, base * 2.0**exponent)


class WorkQueue:
    def __init__(
        self, now: Callable[[], float] | None = None, urgent: Callable[[str], bool] | None = None
    ) -> None:
        """`now`: seconds on a monotonic clock; the running loop's by default. `urgent`:
        whether a key may act now (taken before the other keys due)."""
        self._now = now
        self._urgent = urgent
        self._due: dict[str, float] = {}
        self._busy: set[str] = set()
        self._after_busy: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        """Failures in a row, only of keys whose last evaluation failed: bounded by the
        keys that exist (`succeeded` and `forget` drop a key's count)."""
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._due) + len(self._after_busy)

    def _time(self) -> float:
        return self._now() if self._now is not None else asyncio.get_running_loop().time()

    def add(self, key: str, delay: float = 0.0) -> None:
        """Evaluate `key` in `delay` seconds, or sooner if already asked for sooner."""
        at = self._time() + max(0.0, delay)
        pending = self._after_busy if key in self._busy else self._due
        if at < pending.get(key, float("inf")):
            pending[key] = at
            self._changed.set()

    def failed(self, key: str) -> float:
        """`key`'s evaluation failed: the delay before it is tried again (the caller adds
        it), doubled from the last one."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return backoff(failures)

    def succeeded(self, key: str) -> None:
        """`key` was evaluated: its next failure is retried after BACKOFF_BASE again."""
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._due.pop(key, None)
        self._after_busy.pop(key, None)
        self._failures.pop(key, None)

    async def get(self) -> str:
        """The next due key not being evaluated; it is busy until `done`."""
        while True:
            now = self._time()
            ready = min(self._due.items(), key=lambda kv: kv[1], default=None)
            if ready is not None and ready[1] <= now:
                key = self._first(ready[0], now)
                del self._due[key]
                self._busy.add(key)
                return key
            self._changed.clear()
            timeout = None if ready is None else ready[1] - now
            with contextlib.suppress(TimeoutError):  # not wait_for: on Python 3.11 it
                async with asyncio.timeout(timeout):  # loses a cancel that meets a set()
                    await self._changed.wait()

    def _first(self, earliest: str, now: float) -> str:
        """The urgent key due longest, else `earliest` (the key due longest); `earliest`
        anyway once it has waited STARVED."""
        if self._urgent is None or now - self._due[earliest] >= STARVED:
            return earliest
        if self._urgent(earliest):
            return earliest
        due = ((k, at) for k, at in self._due.items() if at <= now and self._urgent(k))
        found = min(due, key=lambda kv: kv[1], default=None)
        return earliest if found is None else found[0]

    def take_due(self) -> list[str]:
        """Every other key due now, without waiting (they are busy until `done`): one
        pass over a burst instead of one per key."""
        now = self._time()
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
