"""The operator's one clock: the API server's time, as measured from its answers.

`local_now` is this process's own clock (moved by the `clock-skew` failpoint in fault
runs, never otherwise); `ServerClock.now` is that clock corrected by the offset the
`Date` headers of the API server's answers show (core/skew.py). Controllers reckon in the
server's time, so pod timestamps (stamped by the server and the kubelet) and "now" agree
whatever the node's clock says; `ServerClock.doubt` says when that time is not known well
enough to act on.
"""

import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from trainwarden import failpoints, logs, metrics
from trainwarden.core import skew
from trainwarden.core.skew import Estimate, Sample

log = logs.get(__name__)
KEPT = 32
"""Answers kept for the estimate (the newest; more narrow it no further in practice)."""


def local_now() -> datetime:
    """This process's clock (plus the `clock-skew` failpoint's seconds, if armed)."""
    now = datetime.now(UTC)
    moved = failpoints.skew()
    return now + timedelta(seconds=moved) if moved else now


def parse_date(header: str | None) -> float | None:
    """An HTTP `Date` (RFC 9110 IMF-fixdate) in POSIX seconds; None if absent or bad."""
    if not header:
        return None
    try:
        parsed = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


class ServerClock:
    """The server's time: our clock plus the measured offset. Thread-safe: answers are
    observed from the API client's worker threads."""

    def __init__(self, local: Callable[[], datetime] = local_now) -> None:
        self._local = local
        self._samples: deque[Sample] = deque(maxlen=KEPT)
        self._lock = threading.Lock()
        self._found: Estimate | None = None
        self._warned = False

    def local_seconds(self) -> float:
        return self._local().timestamp()

    def observe(self, sent: float, received: float, date: str | None) -> None:
        """One answer of the API server: local times it was sent and received, its Date."""
        server = parse_date(date)
        if server is None:
            return
        with self._lock:
            self._samples.append(Sample(sent, received, server))
            self._found = skew.estimate(self._samples)
            found = self._found
        if found is not None:
            metrics.report_clock_skew(found.offset, found.uncertainty)
            self._report(found)

    def _report(self, found: Estimate) -> None:
        worth = skew.skewed(found)
        if worth != self._warned:
            self._warned = worth
            report = log.warning if worth else log.info
            report(
                "clock skew from the API server" if worth else "clock agrees with the API server",
                offset_seconds=round(found.offset, 3),
                uncertainty_seconds=round(found.uncertainty, 3),
                acting_in="the API server's time",
            )

    def estimate(self) -> Estimate | None:
        with self._lock:
            return self._found

    def now(self) -> datetime:
        local = self._local()
        found = self.estimate()
        return local + timedelta(seconds=found.offset) if found is not None else local

    def doubt(self) -> str | None:
        return skew.doubt(self.estimate(), self.local_seconds())


def measure(api: Any, clock: ServerClock) -> None:
    """Feed `clock` from every answer the API client `api` receives (its REST layer, so
    the informers' lists and watches and every call of the Kube adapter count)."""
    rest = api.rest_client
    request = rest.request

    def measured(*args: Any, **kwargs: Any) -> Any:
        sent = clock.local_seconds()
        response = request(*args, **kwargs)
        try:
            clock.observe(sent, clock.local_seconds(), response.headers.get("Date"))
        except Exception:  # never let a measurement break a call
            log.debug("no Date on an answer", exc_info=True)
        return response

    rest.request = measured
