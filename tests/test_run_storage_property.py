"""A run's storage against the exact figure (hypothesis, 1,000 cases each).

The invariant: a receipt's storage GiB-hours equal the sum, over the distinct claims its
pods mounted (a name several pods mount counted once; a name recreated during the run is
each of its claims), of each request in force times its overlap with [run start, run
end], up to the claim's deletion or when it was seen gone; never negative, never more
than the claims' lives within the run allow; split by class, bounded, summing to the
total; and a mounted name of which no record touches the run is counted unknown, never
charged or guessed (core/run_storage.py).
"""

import itertools
import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as s

from trainwarden.core.claims import MAX_BYTES, ClaimFacts
from trainwarden.core.run_storage import BYTE_SECONDS_PER_GIB_HOUR, PAST_CAP, Claims, Record, held

NAMES = ["data", "ckpt", "scratch", "logs", "cache"]
CLASSES = ["", "fast", *(f"class-{i}" for i in range(10))]


@dataclass(frozen=True)
class Made:
    record: Record
    sizes: tuple[tuple[int, int], ...]
    stop: float | None


@s.composite
def records(draw: s.DrawFn, uid: int) -> Made:
    created = draw(s.integers(0, 10_000))
    sizes = draw(s.lists(s.integers(1, 2**44) | s.just(MAX_BYTES), min_size=1, max_size=4))
    steps = draw(s.lists(s.integers(0, 3_000), min_size=len(sizes) - 1, max_size=len(sizes) - 1))
    since, history = created, [(created, sizes[0])]
    for step, size in zip(steps, sorted(sizes[1:]), strict=True):
        since += step
        history.append((since, max(size, history[-1][1])))
    deleting = draw(s.none() | s.integers(created, 20_000))
    gone = draw(s.none() | s.integers(created, 20_000))
    claim = ClaimFacts(
        uid=f"u{uid}",
        namespace="team-a",
        name=draw(s.sampled_from(NAMES)),
        labels={},
        storage_class=draw(s.sampled_from(CLASSES)),
        created=float(created),
        requests=tuple((float(t), b) for t, b in history),
        deleting_since=None if deleting is None else float(deleting),
    )
    stops = [float(t) for t in (deleting, gone) if t is not None]
    return Made(
        Record(claim, None if gone is None else float(gone)),
        tuple(history),
        min(stops, default=None),
    )


@s.composite
def cases(draw: s.DrawFn) -> tuple[list[Made], list[str], float, float]:
    made = [draw(records(i)) for i in range(draw(s.integers(0, 12)))]
    mounted = draw(s.lists(s.sampled_from([*NAMES, ""]), max_size=12))
    start = draw(s.integers(0, 15_000))
    end = start + draw(s.integers(0, 10_000))
    return made, mounted, float(start), float(end)


def _touches(m: Made, start: float, end: float) -> bool:
    return m.record.claim.created <= end and (m.stop is None or m.stop >= start)


def _exact(m: Made, start: float, end: float) -> float:
    """Byte-seconds, by the elementary segments between every change of request."""
    stop = end if m.stop is None else min(end, m.stop)
    cuts = sorted({start, stop, *(float(t) for t, _ in m.sizes)})
    total = 0.0
    for a, b in itertools.pairwise(cuts):
        lo, hi = max(a, start), min(b, stop)
        in_force = [size for t, size in m.sizes if t <= lo]
        if hi > lo and in_force:
            total += in_force[-1] * (hi - lo)
    return total


@settings(max_examples=1000, deadline=None)
@given(cases())
def test_storage_is_the_exact_sum_over_distinct_mounted_claims(
    case: tuple[list[Made], list[str], float, float],
) -> None:
    made, mounted, start, end = case
    got = held(set(mounted), Claims(tuple(m.record for m in made), True), start=start, end=end)
    if not mounted:
        assert got is None
        return
    assert got is not None
    charged = [m for m in made if m.record.claim.name in mounted and _touches(m, start, end)]
    exact = sum(_exact(m, start, end) for m in charged) / BYTE_SECONDS_PER_GIB_HOUR
    bound = (
        sum(max(b for _, b in m.sizes) * (end - start) for m in charged) / BYTE_SECONDS_PER_GIB_HOUR
    )
    assert got.claims == len(charged)
    if not charged:
        assert got.gib_hours is None
    else:
        assert got.gib_hours is not None
        assert got.gib_hours >= 0
        assert math.isclose(got.gib_hours, exact, rel_tol=1e-9, abs_tol=1e-6)
        assert got.gib_hours <= bound * (1 + 1e-9) + 1e-6
        split = sum(c.gib_hours for c in got.by_class)
        assert math.isclose(split, got.gib_hours, rel_tol=1e-9, abs_tol=1e-5)
    assert len(got.by_class) <= 9
    known = {m.record.claim.name for m in charged}
    missing = sorted({n or PAST_CAP for n in mounted if n not in known})
    assert got.unknown_claims == len(missing)
    assert got.unknown == missing[:8]


@settings(max_examples=1000, deadline=None)
@given(cases())
def test_a_claim_mounted_by_several_pods_is_counted_once(
    case: tuple[list[Made], list[str], float, float],
) -> None:
    made, mounted, start, end = case
    claims = Claims(tuple(m.record for m in made), True)
    once = held(set(mounted), claims, start=start, end=end)
    twice = held({*mounted, *mounted}, Claims(claims.records * 2, True), start=start, end=end)
    assert once == twice


@settings(max_examples=1000, deadline=None)
@given(cases())
def test_nothing_is_guessed_while_the_claims_are_not_current(
    case: tuple[list[Made], list[str], float, float],
) -> None:
    made, mounted, start, end = case
    got = held(set(mounted), Claims(tuple(m.record for m in made), False), start=start, end=end)
    if mounted:
        assert got is not None
        assert got.gib_hours is None
        assert got.by_class == []
        assert got.unknown_claims == len(set(mounted))
