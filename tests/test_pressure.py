"""Pending demand for idle accelerators (idle/demand.py): which waiting pods count, what
is free where, and which reclaim would make room for whom; against brute force."""

import itertools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.core.keep import Keep
from trainwarden.core.nodes import NodeFacts
from trainwarden.core.pods import facts
from trainwarden.core.reads import CODE
from trainwarden.idle import demand
from trainwarden.testing.builders import PodBuilder
from trainwarden.testing.pods import GPU

T0 = datetime(2026, 8, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
PRODUCT = "nvidia.com/gpu.product"
KEEP = CODE | Keep(node_labels=frozenset({PRODUCT}))
"""What an idle policy with the default nodeLabels reads."""


def unschedulable(builder: PodBuilder, since: datetime = T0 - 5 * MINUTE) -> PodBuilder:
    return builder.unschedulable(since)


def waiting_of(*builders: PodBuilder, min_pending: timedelta = MINUTE) -> list[demand.Waiting]:
    pods = [facts(b.build(), KEEP) for b in builders]
    return demand.waiting(pods, [GPU], now=T0, min_pending=min_pending)


def test_only_pods_the_scheduler_could_not_place_for_min_pending_are_waiting() -> None:
    found = waiting_of(
        unschedulable(PodBuilder("old", "b").gpus(2), T0 - 10 * MINUTE),
        unschedulable(PodBuilder("young", "b").gpus(2), T0 - 30 * timedelta(seconds=1)),
        unschedulable(PodBuilder("cpu-only", "b").cpu("2")),
        PodBuilder("untried", "b").gpus(2).pending(),
        unschedulable(PodBuilder("newer", "b").gpus(1).cpu("4"), T0 - 2 * MINUTE),
    )
    assert [str(w) for w in found] == ["b/old", "b/newer"]
    assert found[1].wants == {GPU: 1.0, "cpu": 4.0}


def test_gated_bound_deleting_and_affinity_bound_pods_are_no_demand() -> None:
    gated = PodBuilder("gated", "b").gpus(1).pending()
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    gated.field("status.conditions", [scheduled])
    bound = unschedulable(PodBuilder("bound", "b").gpus(1)).node("gpu-0")
    deleting = unschedulable(PodBuilder("deleting", "b").gpus(1)).deleting(T0)
    affinity = unschedulable(PodBuilder("affinity", "b").gpus(1))
    term = {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["A100"]}]}
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    affinity.field("spec.affinity", {"nodeAffinity": required})
    huge = unschedulable(PodBuilder("huge", "b").gpus(1))
    huge.node_selector({f"k{i}": "v" for i in range(17)})
    assert waiting_of(gated, bound, deleting, affinity, huge) == []
    kept = facts(
        unschedulable(PodBuilder("s", "b").gpus(1)).node_selector({PRODUCT: "A100"}).build(), KEEP
    )
    assert kept.node_selector == {PRODUCT: "A100"}


def test_a_scheduled_pod_keeps_no_selector() -> None:
    pod = PodBuilder("p", "b").gpus(1).node_selector({PRODUCT: "A100"}).node("gpu-0")
    found = facts(pod.started(T0).build(), KEEP)
    assert found.unschedulable_since is None
    assert found.node_selector == {}


def test_room_is_allocatable_less_what_live_pods_hold() -> None:
    nodes = {"n": NodeFacts(allocatable={GPU: 8, "cpu": 32}, name="n")}
    running = PodBuilder("run", "a").gpus(4).cpu("8").node("n").started(T0)
    going = PodBuilder("going", "a").gpus(2).node("n").started(T0).deleting(T0)
    done = PodBuilder("done", "a").gpus(2).node("n").started(T0 - MINUTE).finished(T0)
    pods = [facts(b.build(), KEEP) for b in (running, going, done)]
    room = demand.rooms(nodes, pods, [GPU])["n"]
    assert room.free == {GPU: 4.0, "cpu": 24.0, "memory": 0.0}


def test_the_demand_is_described_in_bounded_text() -> None:
    pods = tuple(
        demand.Waiting(
            f"u{i}", f"team-{i % 3}", f"p{i}", f"g{i}", T0 - 12 * MINUTE, {GPU: 1}, (GPU,), {}
        )
        for i in range(500)
    )
    text = demand.Demand(pods).describe(T0)
    assert text == (
        "500 pending pods in 3 namespaces want nvidia.com/gpu "
        "(oldest team-0/p0, unschedulable for 12m)"
    )
    one = demand.Demand(pods[:1]).describe(T0 + timedelta(hours=3))
    assert one == "1 pending pod in team-0 wants nvidia.com/gpu (team-0/p0, unschedulable for 3h)"


# --- demand() against brute force --------------------------------------------------------

NODES = ("n0", "n1", "n2")
RESOURCES = (GPU, "cpu")


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[list[demand.Candidate], list[demand.Waiting], dict[str, demand.Room]]:
    amount = st.integers(0, 4).map(float)
    rooms = {
        n: demand.Room(
            {PRODUCT: draw(st.sampled_from(["A100", "H100"]))},
            {r: draw(amount) for r in RESOURCES},
            draw(st.booleans()),
        )
        for n in NODES
    }
    candidates = []
    for i in range(draw(st.integers(0, 3))):
        on = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=2, unique=True))
        frees = {n: {r: draw(amount) for r in RESOURCES} for n in on}
        groups = frozenset(draw(st.lists(st.sampled_from(["g0", "g1", "g2", "g3"]), max_size=2)))
        candidates.append(demand.Candidate(f"c{i}", groups, frees))
    waiting = []
    for i in range(draw(st.integers(0, 4))):
        wants = {GPU: float(draw(st.integers(1, 6))), "cpu": draw(amount)}
        selector = draw(st.sampled_from([{}, {PRODUCT: "A100"}, {PRODUCT: "H100"}]))
        group = draw(st.sampled_from(["g0", "g1", "g2", "g3"]))
        since = T0 - draw(st.integers(1, 100)) * MINUTE
        waiting.append(
            demand.Waiting(f"w{i}", "ns", f"w{i}", group, since, wants, (GPU,), selector)
        )
    return candidates, sorted(waiting, key=lambda w: w.since), rooms


def fits_room(w: demand.Waiting, labels: Mapping[str, str], free: Mapping[str, float]) -> bool:
    if any(labels.get(k) != v for k, v in w.node_selector.items()):
        return False
    return all(free.get(r, 0.0) >= n for r, n in w.wants.items())


def placeable(
    pods: Sequence[demand.Waiting],
    rooms: Mapping[str, demand.Room],
    free: Mapping[str, dict[str, float]],
) -> bool:
    """Brute force: some assignment of the pods to schedulable nodes fits them all at once."""
    usable = [n for n in NODES if rooms[n].schedulable]
    for assignment in itertools.product(usable, repeat=len(pods)):
        left = {n: dict(free[n]) for n in NODES}
        ok = True
        for pod, node in zip(pods, assignment, strict=True):
            if not fits_room(pod, rooms[node].labels, left[node]):
                ok = False
                break
            for r, n in pod.wants.items():
                left[node][r] -= n
        if ok:
            return True
    return not pods


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_the_reclaims_carried_out_make_room_for_every_pod_they_claim_at_once(
    world: tuple[list[demand.Candidate], list[demand.Waiting], dict[str, demand.Room]],
) -> None:
    candidates, waiting, rooms = world
    found = demand.demand(candidates, waiting, rooms)
    claimed = [w for d in found.values() for w in d.pods]
    assert len({w.uid for w in claimed}) == len(claimed), "a pod is claimed once"
    free = {n: {r: rooms[n].free.get(r, 0.0) for r in RESOURCES} for n in NODES}
    for c in candidates:
        if c.key in found:
            for n, amounts in c.frees.items():
                for r, amount in amounts.items():
                    free[n][r] += amount
    assert placeable(claimed, rooms, free)
    for c in candidates:
        for w in found.get(c.key, demand.Demand(())).pods:
            assert w.group not in c.groups, "a workload is not reclaimed for its own pods"
            somewhere = [n for n in NODES if rooms[n].schedulable]
            assert not any(fits_room(w, rooms[n].labels, rooms[n].free) for n in somewhere), (
                "a pod that fits somewhere already waits for something else"
            )


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_the_first_candidate_is_wanted_exactly_when_brute_force_says_so(
    world: tuple[list[demand.Candidate], list[demand.Waiting], dict[str, demand.Room]],
) -> None:
    candidates, waiting, rooms = world
    if not candidates:
        return
    first = candidates[0]
    usable = [n for n in NODES if rooms[n].schedulable]
    stuck = [
        w for w in waiting if not any(fits_room(w, rooms[n].labels, rooms[n].free) for n in usable)
    ]

    def helped(w: demand.Waiting) -> bool:
        for n in first.frees:
            if rooms[n].schedulable:
                room = {
                    r: rooms[n].free.get(r, 0.0) + first.frees[n].get(r, 0.0) for r in RESOURCES
                }
                if fits_room(w, rooms[n].labels, room):
                    return True
        return False

    expected = [w for w in stuck if w.group not in first.groups and helped(w)]
    got = demand.demand(candidates, waiting, rooms).get(first.key)
    assert (got is not None) == bool(expected)
    if got is not None:
        assert got.pods[0] == expected[0], "the oldest waiting pod it helps comes first"
