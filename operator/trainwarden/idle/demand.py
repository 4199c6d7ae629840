"""Pending demand for idle accelerators: which reclaim would let which waiting pod run.

Pure. An idle accelerator nobody else wants costs the same whether it is reclaimed or
not, and reclaiming it costs its team the warm state; under reclaimWhen: UnderPressure a
reclaim goes ahead only for pods the scheduler could not place that would fit in what it
frees. Every doubt counts against the reclaim: a pod with placement rules beyond a
nodeSelector is no demand, nor is one some node already has room for (it waits for
something else), and what several reclaims would free together is never added up.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from trainwarden.core.nodes import NodeFacts
from trainwarden.core.pods import PodFacts

FIT = ("cpu", "memory")
"""Besides the accelerators, what a waiting pod must find room for."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pod the scheduler has found no node for, asking for accelerators."""

    uid: str
    namespace: str
    name: str
    group: str
    since: datetime
    wants: Mapping[str, float]
    """Its requests of the accelerators and of FIT."""
    accelerators: tuple[str, ...]
    node_selector: Mapping[str, str]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Room:
    """A node: its labels, and what is free on it (a deleting pod's share counts as free:
    it is on its way out)."""

    labels: Mapping[str, str]
    free: Mapping[str, float]
    schedulable: bool = True


@dataclass(frozen=True)
class Candidate:
    """A reclaim about to happen: what it frees on each node."""

    key: str
    groups: frozenset[str]
    """The workloads of its pods: their own waiting pods are no reason to reclaim them."""
    frees: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Demand:
    """The waiting pods a reclaim would make room for, oldest first."""

    pods: tuple[Waiting, ...]

    def describe(self, now: datetime) -> str:
        """Bounded whatever the number of pods: a count, the namespaces, the oldest."""
        oldest, count = self.pods[0], len(self.pods)
        namespaces = {p.namespace for p in self.pods}
        where = (
            f"in {oldest.namespace}" if len(namespaces) == 1 else f"in {len(namespaces)} namespaces"
        )
        wants = ", ".join(sorted({r for p in self.pods for r in p.accelerators}))
        pods = "1 pending pod" if count == 1 else f"{count} pending pods"
        verb = "wants" if count == 1 else "want"
        first = "" if count == 1 else "oldest "
        waited = age(now - oldest.since)
        return f"{pods} {where} {verb} {wants} ({first}{oldest}, unschedulable for {waited})"


def age(value: timedelta) -> str:
    """Coarse on purpose: a message that says "12m" need not change every evaluation."""
    seconds = max(0, int(value.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def waiting(
    pods: Iterable[PodFacts], accelerators: Sequence[str], *, now: datetime, min_pending: timedelta
) -> list[Waiting]:
    """Pods the scheduler has found no node for since at least `min_pending` ago (facts()
    records that only for unbound pods not being deleted), asking for one of the
    `accelerators`, whose placement is a plain nodeSelector."""
    out = []
    for facts in pods:
        since, pod = facts.unschedulable_since, facts.snapshot
        if since is None or since > now - min_pending or facts.node_selector is None:
            continue
        asked = tuple(r for r in accelerators if pod.requests.get(r, 0.0) > 0)
        if not asked:
            continue
        wants = {r: pod.requests[r] for r in (*asked, *FIT) if pod.requests.get(r, 0.0) > 0}
        out.append(
            Waiting(
                pod.uid,
                pod.namespace,
                pod.name,
                facts.group,
                since,
                wants,
                asked,
                facts.node_selector,
            )
        )
    return sorted(out, key=lambda w: (w.since, w.namespace, w.name))


def held(pods: Iterable[PodFacts], accelerators: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per node, what the pods hold of the accelerators and of FIT."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for facts in pods:
        if facts.node:
            for r in (*accelerators, *FIT):
                out[facts.node][r] += facts.snapshot.requests.get(r, 0.0)
    return {node: dict(amounts) for node, amounts in out.items()}


def rooms(
    nodes: Mapping[str, NodeFacts], pods: Iterable[PodFacts], accelerators: Sequence[str]
) -> dict[str, Room]:
    """Each node's free accelerators, CPU and memory: allocatable less what its bound pods
    that have not ended and are not being deleted hold."""
    live = [f for f in pods if f.snapshot.end is None and not f.deleting]
    taken = held(live, accelerators)
    return {
        name: Room(
            node.labels,
            {
                r: node.allocatable.get(r, 0.0) - taken.get(name, {}).get(r, 0.0)
                for r in (*accelerators, *FIT)
            },
            not node.unschedulable,
        )
        for name, node in nodes.items()
    }


def fits(pod: Waiting, room: Room, extra: Mapping[str, float]) -> bool:
    """Whether the pod would fit on the node with `extra` freed there."""
    if not room.schedulable:
        return False
    if any(room.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return all(room.free.get(r, 0.0) + extra.get(r, 0.0) >= n for r, n in pod.wants.items())


def demand(
    candidates: Sequence[Candidate], waiting: Sequence[Waiting], rooms: Mapping[str, Room]
) -> dict[str, Demand]:
    """The candidates (in order) whose reclaim makes room for waiting pods, with those pods.

    A pod that fits somewhere already is not waiting for accelerators. Each waiting pod is
    claimed by one candidate at most, and a candidate claims only what fits in what it
    frees plus what is free on the node (less what earlier candidates' pods took)."""
    stuck = [w for w in waiting if not any(fits(w, room, {}) for room in rooms.values())]
    free = {name: dict(room.free) for name, room in rooms.items()}
    claimed: set[str] = set()
    out: dict[str, Demand] = {}
    for c in candidates:
        left = {
            n: {
                r: free[n].get(r, 0.0) + c.frees[n].get(r, 0.0)
                for r in free[n].keys() | c.frees[n].keys()
            }
            for n in sorted(c.frees)
            if n in rooms
        }
        got = []
        for w in stuck:
            if w.uid in claimed or w.group in c.groups:
                continue
            for n, room in left.items():
                if fits(w, Room(rooms[n].labels, room, rooms[n].schedulable), {}):
                    got.append(w)
                    claimed.add(w.uid)
                    for r, amount in w.wants.items():
                        room[r] = room.get(r, 0.0) - amount
                    break
        if got:
            out[c.key] = Demand(tuple(got))
            free.update(left)
    return out
