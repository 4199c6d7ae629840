"""Figures read from the cluster and from the clients' logs: which policies the operator has
evaluated, the largest status, how stale the budgets are, and the bare watcher's event
latencies."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from scale.cluster import BENCH_LABEL
from scale.kube import BUDGETS, CHECKPOINT_POLICIES, IDLE_POLICIES, Kube, Obj, Resource, Watcher
from scale.probes import PHASE, epoch
from scale.report import Latencies, StatusSize

POLICIES = (BUDGETS, IDLE_POLICIES, CHECKPOINT_POLICIES)
WORLD_SELECTOR = f"{BENCH_LABEL},!{PHASE}"
"""The world's policies, not the probes'."""


class Evaluations:
    """Which world policies of one kind the operator has evaluated since a given instant,
    as a watch on them sees it (observedGeneration current, lastEvaluated after it)."""

    def __init__(self, admin: Kube, res: Resource, since: float) -> None:
        self.res, self.since = res, since
        self._state: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.watch = Watcher(admin, res, self._on_event, labelSelector=WORLD_SELECTOR)
        self.watch.start()

    def _on_event(self, kind: str, obj: Obj, _seen: float) -> None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        current = status.get("observedGeneration") == obj["metadata"].get("generation")
        stamp = status.get("lastEvaluated")
        if self.res is not CHECKPOINT_POLICIES:  # which has no lastEvaluated
            current = current and stamp is not None and epoch(stamp) >= int(self.since)
        with self._lock:
            if kind == "DELETED":
                self._state.pop(name, None)
            else:
                self._state[name] = current

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return sum(self._state.values()), len(self._state)


def status_size(admin: Kube) -> StatusSize:
    """The largest policy status (compact JSON bytes) over all three kinds."""
    largest = StatusSize()
    for res in POLICIES:
        for item in admin.list(res, labelSelector=BENCH_LABEL)["items"]:
            size = len(json.dumps(item.get("status") or {}, separators=(",", ":")))
            if size > largest.status_bytes:
                whole = len(json.dumps(item, separators=(",", ":")))
                name = f"{item['kind']}/{item['metadata']['name']}"
                largest = StatusSize(size, whole, name)
    return largest


def staleness(admin: Kube) -> list[str]:
    items = admin.list(BUDGETS, labelSelector=WORLD_SELECTOR)["items"]
    stamps = [
        epoch(stamp) for item in items if (stamp := (item.get("status") or {}).get("lastEvaluated"))
    ]
    if not stamps:
        return ["no world budget has a lastEvaluated"]
    return [
        f"world budgets' lastEvaluated at the end: oldest {time.time() - min(stamps):.0f} s "
        f"ago, newest {time.time() - max(stamps):.0f} s ago ({len(stamps)}/{len(items)} set)"
    ]


def event_latencies(churn_log: Path, events: Path, phase: str) -> dict[str, Latencies]:
    """The bare watcher's "request sent -> event seen" for this phase's churn pods."""
    sent: dict[str, dict[str, float]] = {"created": {}, "deleted": {}}
    for line in churn_log.read_text().splitlines():
        record = json.loads(line)
        for kind in sent:
            if kind in record:
                sent[kind].setdefault(record["pod"], record[kind])
    seen: dict[str, dict[str, float]] = {"created": {}, "deleted": {}}
    marker = f"/churn-{phase}-"
    for line in events.read_text().splitlines():
        record = json.loads(line)
        if marker not in record["pod"]:
            continue
        seen_as = {"ADDED": "created", "DELETED": "deleted"}.get(record["type"])
        if seen_as:
            seen[seen_as].setdefault(record["pod"], record["t"])
    return {
        kind: Latencies(
            [seen[kind][pod] - t if pod in seen[kind] else None for pod, t in sent[kind].items()],
            timeout=60,
        )
        for kind in sent
    }
