"""Progress lines, and creating many objects in parallel with retries, under deadlines."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import urllib3

from scale.kube import KubeError


class Progress:
    """One status line while the world is built: rewritten in place on a terminal, else
    printed every 10 s."""

    def __init__(self, title: str) -> None:
        self.title, self.started = title, time.monotonic()
        self.parts: dict[str, str] = {}
        self._stop = threading.Event()
        self._tty = sys.stdout.isatty()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def set(self, name: str, value: str) -> None:
        self.parts[name] = value

    def line(self) -> str:
        elapsed = int(time.monotonic() - self.started)
        parts = " | ".join(f"{k} {v}" for k, v in self.parts.items())
        return f"[{self.title} {elapsed // 60:02d}:{elapsed % 60:02d}] {parts}"

    def _loop(self) -> None:
        every = 1.0 if self._tty else 10.0
        while not self._stop.wait(every):
            if self._tty:
                sys.stdout.write("\r\033[K" + self.line())
                sys.stdout.flush()
            else:
                print(self.line(), flush=True)

    def done(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        if self._tty:
            sys.stdout.write("\r\033[K")
        print(self.line(), flush=True)


def retrying(call: Callable[[], object], *, attempts: int = 30) -> None:
    """Create and delete calls: a namespace's ServiceAccount may not exist yet (403), the
    API server may shed load (429, 5xx) or drop the connection. 409 means it is already
    there (a create retried after a lost answer)."""
    for attempt in range(attempts):
        try:
            call()
            return
        except KubeError as error:
            if error.status == 409:
                return
            if error.status not in (403, 429, 500, 502, 503, 504) or attempt == attempts - 1:
                raise
        except (OSError, urllib3.exceptions.HTTPError):  # a dropped connection, a timeout
            if attempt == attempts - 1:
                raise
        time.sleep(min(5.0, 0.2 * (attempt + 1)))


def parallel(
    calls: Iterable[Callable[[], object]], progress: Progress, name: str, total: int
) -> None:
    done = 0
    lock = threading.Lock()

    def run(call: Callable[[], object]) -> None:
        nonlocal done
        retrying(call)
        with lock:
            done += 1
            progress.set(name, f"{done}/{total}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(run, calls))


def wait_until(
    what: str, probe: Callable[[], bool], deadline: float, progress: Progress, every: float = 2
) -> None:
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached by its deadline")
        time.sleep(every)
