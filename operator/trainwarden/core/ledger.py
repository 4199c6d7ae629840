"""The budget ledger: what must survive an operator restart for usage to stay exact.

Usage of a pod that still exists is recomputed from the pod itself (its startTime and its
containers' finishedAt never change), so restarts cannot skew it. Only pods that vanish
need memory: the ledger keeps every charged pod as an `open` entry while it exists and
moves it to `closed` (with its end) when it is gone. Both lists are persisted in the
budget's status in one write, so a pod is counted exactly once: live while it exists,
closed afterwards, never both (closed uids are excluded from live pods).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from trainwarden.core.accounting import PodSnapshot


@dataclass(frozen=True)
class Ledger:
    observed_at: datetime | None = None
    """When the open entries were last known to exist."""
    open: Mapping[str, PodSnapshot] = field(default_factory=dict)
    closed: Mapping[str, PodSnapshot] = field(default_factory=dict)


def _slim(pod: PodSnapshot, label_keys: Iterable[str], node_keys: Iterable[str]) -> PodSnapshot:
    """Keep only what accounting of this budget reads, to bound the status size."""
    return replace(
        pod,
        labels={k: pod.labels[k] for k in label_keys if k in pod.labels},
        node_labels={k: pod.node_labels[k] for k in node_keys if k in pod.node_labels},
    )


def advance(
    ledger: Ledger,
    live: Mapping[str, PodSnapshot],
    gone: Mapping[str, PodSnapshot],
    *,
    now: datetime,
    window_start: datetime,
    label_keys: Iterable[str] = (),
    node_keys: Iterable[str] = (),
) -> Ledger:
    """The ledger after observing `live` pods now.

    `gone` holds final snapshots of pods seen deleted since the last write (with their
    end). An open entry that is neither live nor known gone vanished while nobody was
    watching: it is charged up to `observed_at`, the last time it was known to exist.
    Closed entries that ended before the window are dropped: they no longer count.
    """
    label_keys, node_keys = list(label_keys), list(node_keys)
    closed = dict(ledger.closed)
    for uid, entry in ledger.open.items():
        if uid in live:
            continue
        final = gone.get(uid)
        if final is not None:
            closed[uid] = _slim(final, label_keys, node_keys)
        else:
            end = entry.end if entry.end is not None else ledger.observed_at
            closed[uid] = replace(entry, end=end)
    for uid, final in gone.items():
        # A deletion seen late still knows better than a guess from the last observation.
        if uid not in live:
            closed[uid] = _slim(final, label_keys, node_keys)
    open_ = {
        uid: _slim(pod, label_keys, node_keys)
        for uid, pod in live.items()
        if uid not in closed and pod.start is not None
    }
    closed = {
        uid: pod
        for uid, pod in closed.items()
        if pod.start is not None and (pod.end is None or pod.end > window_start)
    }
    return Ledger(now, open_, closed)


def charged(ledger: Ledger, live: Mapping[str, PodSnapshot]) -> list[PodSnapshot]:
    """Every pod to account: live ones as observed, vanished ones from the ledger."""
    return [*live.values(), *(p for uid, p in ledger.closed.items() if uid not in live)]
