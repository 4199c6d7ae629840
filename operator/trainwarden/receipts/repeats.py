"""The Event on new work the admission webhook found to repeat a finished run (core/repeats.py):
posted by the leader, which sees the work once it exists (the webhook answers before it
does, so it has no uid to name).

The webhook's mark, trainwarden.dev/repeat-of, is only a claim (anyone creating the work
can write it): the Event names the earlier run only after finding, in this instance's own
ledger (the cache's receipts), the receipt the mark names for the config hash and data
version the work declares. Said once per workload, for work created within FRESH (a
restart's relist does not say it again for older work).
"""

from collections.abc import Callable
from datetime import datetime, timedelta

from trainwarden import logs
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.names import REPEAT_HELD_BY, REPEAT_OF
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import ledger
from trainwarden.core.pods import PodFacts
from trainwarden.core.workloads import WorkloadFacts

log = logs.get(__name__)
KEY = "repeat:"
"""The work queue's key of a repeat's Event (never a uid), before the work's uid."""
FRESH = timedelta(minutes=10)


def fresh(new: WorkloadFacts | PodFacts, now: datetime) -> bool:
    """New work carrying the webhook's mark, created (a bare pod: started, or gated)
    within FRESH."""
    if isinstance(new, WorkloadFacts):
        at: datetime | None = new.created
    else:
        at = new.created or new.snapshot.start
        if new.owner is not None:
            return False
    return REPEAT_OF in new.annotations and (at is None or now - at < FRESH)


def _subject(found: WorkloadFacts | PodFacts, uid: str) -> tuple[JSON, str]:
    """The Event's subject, and how a person names it."""
    if isinstance(found, WorkloadFacts):
        api, kind, ns, name = found.api_version, found.kind, found.namespace, found.name
    else:
        s = found.snapshot
        api, kind, ns, name = "v1", "Pod", s.namespace, s.name
    return (
        {"apiVersion": api, "kind": kind, "metadata": {"namespace": ns, "name": name, "uid": uid}},
        f"{kind} {ns}/{name}",
    )


async def say(kube: Kube, cache: ClusterCache, uid: str) -> None:
    """Post the Event of a repeat, if the work is still there and the ledger confirms it."""
    found = cache.workloads.get(uid) or cache.pods.get(uid)
    if found is None:
        return
    marks = found.annotations
    namespace = found.namespace if isinstance(found, WorkloadFacts) else found.snapshot.namespace
    key = ledger.repeat_key(namespace, marks)
    earlier = cache.earlier_run(key) if key is not None else None
    subject, what = _subject(found, uid)
    if earlier is None or earlier.receipt != marks.get(REPEAT_OF):
        log.info("repeat mark not confirmed by the ledger: no Event", object=what)
        return
    text = (
        f"{what} repeats a finished run: {earlier.describe()} declared the same config hash "
        f"{earlier.config_hash} and data version {earlier.data_version}"
    )
    if marks.get(REPEAT_HELD_BY):
        text += f"; held by TrainingBudget {marks[REPEAT_HELD_BY]} (repeats: Hold) until started"
    await kube.event(
        subject, type_="Warning", reason="RepeatRun", message=text[:1024], action="Admit"
    )
    log.info("repeat run", object=what, earlier=earlier.receipt)


class Repeats:
    """Which new work needs the Event, told by the run index's cache events (receipts/
    runs.py); `add(key)` queues it once per workload."""

    def __init__(self, add: Callable[[str], None], clock: Callable[[], datetime]) -> None:
        self._add = add
        self._clock = clock
        self.said: set[str] = set()
        """Uids whose Event is queued or posted; forgotten with the work."""

    def seen(self, uid: str, new: WorkloadFacts | PodFacts | None) -> None:
        if new is None:
            self.said.discard(uid)
        elif uid not in self.said and fresh(new, self._clock()):
            self.said.add(uid)
            self._add(KEY + uid)
