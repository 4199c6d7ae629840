"""Sources whose records depend on what the policies read (core/reads.py): pods,
namespaces, nodes and Kueue's Workloads.

The cache keeps of them only the label keys and resources some policy names, so records
kept before a policy came to read more lack it. Re-projecting needs the objects, which
the cache does not hold: the source is listed again, by a fresh informer projecting with
the larger keep, and until that list is delivered the cache says the source is
interrupted, so that no policy is evaluated on records that lack what it reads
(controllers/base.py). What a policy stops reading is left in the records until they
change or the source is listed again: a few keys more, never fewer.
"""

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Generic, TypeVar

from trainwarden import logs
from trainwarden.adapters.informer import Informer, Sink, Source
from trainwarden.adapters.kube import JSON
from trainwarden.core.keep import Keep

log = logs.get(__name__)
T = TypeVar("T")
Start = Callable[[Source, Callable[[JSON], T], Sink[T], asyncio.Event | None], Informer[T]]
REASON = "the policies now read more of it than the cache kept: listing it again"


def grew(old: Keep, new: Keep, fields: tuple[str, ...]) -> bool:
    """Whether `new` names a key or resource of `fields` that `old` did not."""
    return any(not getattr(new, f) <= getattr(old, f) for f in fields)


class Projected(Generic[T]):
    """One such source: its informer, and the keep its records were projected with."""

    def __init__(
        self,
        source: Source,
        project: Callable[[JSON, Keep], T],
        fields: tuple[str, ...],
        sink: Sink[T],
        start: Start[T],
        clock: Callable[[], datetime],
    ) -> None:
        self.source = source
        self.fields = fields
        """The parts of a Keep its records depend on (e.g. pod_labels, resources)."""
        self._project = project
        self._sink = sink
        self._start = start
        self._clock = clock
        self.keep: Keep | None = None
        self.informer: Informer[T] | None = None

    def start(self, keep: Keep, synced: asyncio.Event | None = None) -> Informer[T]:
        """`synced`: set once the first list is delivered (made here if None)."""
        return self._restart(keep, synced)

    def update(self, keep: Keep) -> None:
        """List again if `keep` reads more than the records hold."""
        if self.informer is None or self.keep is None or not grew(self.keep, keep, self.fields):
            return
        log.info("listing again: the policies read more of it", source=self.source.name)
        self._sink.interrupted(self.source.name, self._clock(), REASON)
        old = self.informer
        old.stop()
        self._restart(keep, old.synced)

    def stop(self) -> None:
        if self.informer is not None:
            self.informer.stop()
        self.informer = None

    def _restart(self, keep: Keep, synced: asyncio.Event | None) -> Informer[T]:
        self.keep = keep

        def project(obj: JSON) -> T:
            return self._project(obj, keep)

        self.informer = self._start(self.source, project, self._sink, synced)
        return self.informer
