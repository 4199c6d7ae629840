"""Storage accounting against the exact figure (hypothesis, 1,000 cases each).

The invariant: whatever claims come, grow and go between evaluations, and wherever the
operator restarts from its last status write, the charge of every claim is its request in
force times its overlap with the period, never negative, never outside the period, and no
second is charged twice: the ledger equals the exact sum within 1 GiB-second per claim;
after a restart it is never above it, and below it only by what claims deleted while no
operator watched held after the status it restarted from (budget/storage.py). A claim
that leaves the scope and comes back is charged only the intervals it was in scope.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as s

from trainwarden.api.v1alpha1.budget_status import TrainingBudgetStatus
from trainwarden.budget import storage as st
from trainwarden.budget import storage_step
from trainwarden.core.claims import MAX_BYTES, ClaimFacts, claim_facts, updated
from trainwarden.core.reads import CODE

P = 1_767_225_600  # 2026-01-01T00:00:00Z, the period's start
GIB_SECOND = 1 / 3600  # in GiB-hours


def _time(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Claim:
    uid: str
    created: int
    sizes: tuple[int, ...]
    """The request, then each size it grew to."""
    resized: tuple[int, ...]
    """When it grew to sizes[1:], ascending."""
    deleted: int | None
    """deletionTimestamp, when its deletion was asked."""
    gone: int | None
    """When it disappeared (at or after `deleted`)."""
    klass: Any
    name: Any

    def size_at(self, t: float) -> int:
        size = self.sizes[0]
        for when, grown in zip(self.resized, self.sizes[1:], strict=True):
            if when <= t:
                size = grown
        return size

    def obj(self, t: float) -> dict[str, Any]:
        """The object as the API serves it at `t`."""
        meta: dict[str, Any] = {
            "uid": self.uid, "namespace": "team-a", "name": self.name,
            "creationTimestamp": _time(self.created),
            "labels": {"team": "a", "junk" * 20: "x" * 300},
        }  # fmt: skip
        if self.deleted is not None and self.deleted <= t:
            meta["deletionTimestamp"] = _time(self.deleted)
        spec = {"resources": {"requests": {"storage": str(self.size_at(t))}}}
        if self.klass is not None:
            spec["storageClassName"] = self.klass
        return {"metadata": meta, "spec": spec}

    def exact(self, lo: float, hi: float) -> float:
        """GiB-hours in [lo, hi): each size times its overlap."""
        stop = min(x for x in (hi, self.deleted, self.gone) if x is not None)
        edges = [self.created, *self.resized, float("inf")]
        total = 0.0
        for i, size in enumerate(self.sizes):
            a, b = max(lo, edges[i]), min(stop, edges[i + 1])
            if b > a:
                total += size * (b - a)
        return total / st.GIB_HOUR


@s.composite
def claims(draw: s.DrawFn, i: int, resizes: int) -> Claim:
    created = P + draw(s.integers(-7200, 20_000))
    n = draw(s.integers(0, resizes))
    sizes = sorted(draw(s.lists(s.integers(1, MAX_BYTES), min_size=n + 1, max_size=n + 1)))
    resized = sorted(draw(s.lists(s.integers(created, P + 30_000), min_size=n, max_size=n)))
    deleted = draw(s.none() | s.integers(created, P + 30_000))
    gone = None if deleted is None else deleted + draw(s.integers(0, 600))
    klass = draw(s.sampled_from([None, "", "fast", "slow", "x" * 400, 7]))
    name = draw(s.sampled_from(["data", "ckpt-" + "9" * 300, "", None]))
    return Claim(f"uid-{i}", created, tuple(sizes), tuple(resized), deleted, gone, klass, name)


class World:
    """What the cache holds as the informers deliver each change in time order."""

    def __init__(self, claims: list[Claim], start: float) -> None:
        """A process whose first list is at `start`."""
        self.claims = claims
        self.live: dict[str, ClaimFacts] = {}
        self.gone: list[tuple[ClaimFacts, float]] = []
        self._at(start)
        self.seen = start

    def until(self, t: float) -> None:
        """Every change in (seen, t], in order: creations, resizes, deletions, removals."""
        changes = sorted(
            {t}
            | {x for c in self.claims for x in (c.created, *c.resized, c.deleted, c.gone)
               if x is not None and self.seen < x <= t}
        )  # fmt: skip
        for at in changes:
            self._at(at)
        self.seen = t

    def _at(self, at: float) -> None:
        """What the informer delivers of the claims as they are at `at`."""
        for c in self.claims:
            present = c.created <= at and (c.gone is None or at < c.gone)
            old = self.live.get(c.uid)
            if present:
                new = claim_facts(c.obj(at), CODE)
                assert new is not None
                self.live[c.uid] = updated(old, new, datetime.fromtimestamp(at, UTC))
            elif old is not None:
                del self.live[c.uid]
                end = old.deleting_since if old.deleting_since is not None else at
                self.gone.append((old, end))


def _evaluate(ledger: st.StorageLedger, world: World, t: float) -> st.StorageLedger:
    world.until(t)
    return st.advance(ledger, list(world.live.values()), world.gone, period_start=P, now=t)


def _exact(cs: list[Claim], now: float) -> float:
    return sum(c.exact(P, now) for c in cs)


def _round_trip(ledger: st.StorageLedger) -> st.StorageLedger:
    """Through status as the operator writes and reads it back after a restart."""
    view = storage_step.StorageView(st.usage(ledger, [], 0, None), 0.0, 0.0, "", "Ok", True)
    model = storage_step.status_of(ledger, view)
    raw = {"periodStart": _time(P), "storage": model.model_dump(mode="json", by_alias=True)}
    return storage_step.ledger_from(TrainingBudgetStatus.model_validate(raw))


TIMES = s.lists(s.integers(1, 32_000), min_size=1, max_size=12).map(sorted)


@settings(max_examples=1000, deadline=None)
@given(s.lists(s.integers(0, 10**6), min_size=0, max_size=6).flatmap(
    lambda xs: s.tuples(*(claims(i, 3) for i in range(len(xs))))), TIMES,
    s.lists(s.integers(0, 5), min_size=12, max_size=12))  # fmt: skip
def test_the_ledger_charges_every_claim_its_request_times_its_overlap(
    cs: tuple[Claim, ...], times: list[int], lags: list[int]
) -> None:
    """Each evaluation sees the cache `lag` seconds behind (the informer's delivery):
    meanwhile off by at most what changed in that lag, exact once the cache caught up."""
    world, ledger, seen = World(list(cs), P), st.StorageLedger(), float(P)
    for t, lag in zip(times, lags, strict=False):
        seen = max(seen, P + t - lag)
        world.until(seen)
        now = P + t
        ledger = st.advance(ledger, list(world.live.values()), world.gone, period_start=P, now=now)
        exact = _exact(list(cs), now)
        charged = sum(ledger.by_class.values())
        assert all(v >= 0 for v in ledger.by_class.values())
        behind = sum(max(c.sizes) * (now - seen) for c in cs) / st.GIB_HOUR
        slack = max(len(cs) * GIB_SECOND, exact * 1e-12)
        assert abs(charged - exact) <= behind + slack, (charged, exact, behind)
    end = P + times[-1] + 1
    ledger = _evaluate(ledger, world, end)
    charged, exact = sum(ledger.by_class.values()), _exact(list(cs), end)
    assert abs(charged - exact) <= max(len(cs) * GIB_SECOND, exact * 1e-12), (charged, exact)


@settings(max_examples=1000, deadline=None)
@given(s.lists(s.integers(0, 10**6), min_size=0, max_size=6).flatmap(
    lambda xs: s.tuples(*(claims(i, 0) for i in range(len(xs))))), TIMES,
    s.integers(0, 11), s.integers(0, 11), s.integers(0, 3000))  # fmt: skip
def test_a_restart_from_the_last_status_never_charges_twice(
    cs: tuple[Claim, ...], times: list[int], written: int, restarted: int, down: int
) -> None:
    """The process dies after evaluation `restarted` (its last status write was at
    evaluation `written`), and a new one starts `down` seconds later with a fresh cache."""
    written, restarted = min(written, restarted, len(times) - 1), min(restarted, len(times) - 1)
    world, ledger = World(list(cs), P), st.StorageLedger()
    status = st.StorageLedger()
    for t in times[: restarted + 1]:
        ledger = _evaluate(ledger, world, P + t)
        if t == times[written]:
            status = _round_trip(ledger)
    since = status.observed_at if status.observed_at is not None else P
    back = P + times[restarted] + down
    world = World(list(cs), back)  # a new process: a fresh list, no claim seen gone
    ledger = status
    for t in [back, *(P + x for x in times if P + x > back)]:
        ledger = _evaluate(ledger, world, t)
        exact = _exact(list(cs), t)
        lost = sum(c.exact(since, t) for c in cs if c.gone is not None and since < c.gone <= back)
        charged = sum(ledger.by_class.values())
        slack = max(len(cs) * GIB_SECOND, exact * 1e-12)
        assert charged <= exact + slack, (charged, exact)
        assert charged >= exact - lost - slack, (charged, exact, lost)


@settings(max_examples=1000, deadline=None)
@given(s.lists(s.integers(0, 10**6), min_size=1, max_size=6).flatmap(
    lambda xs: s.tuples(*(claims(i, 2) for i in range(len(xs))))), TIMES,
    s.lists(s.lists(s.booleans(), min_size=6, max_size=6), min_size=12, max_size=12))  # fmt: skip
def test_a_claim_is_charged_for_the_time_it_was_in_scope_never_twice(
    cs: tuple[Claim, ...], times: list[int], scopes: list[list[bool]]
) -> None:
    """Between evaluations a claim leaves the scope and comes back (its labels, or its
    namespace's, relabelled), live or already gone: from the first evaluation that
    charges it (from its creation), it is charged exactly the intervals between
    evaluations that end with it in scope, never again for time already charged nor for
    the time it was out."""
    world, ledger, last = World(list(cs), P), st.StorageLedger(), float(P)
    charged: set[str] = set()
    expected = 0.0
    for t, inside in zip(times, scopes, strict=False):
        now = P + t
        world.until(now)

        def scoped(c: ClaimFacts, inside: list[bool] = inside) -> bool:
            return inside[int(c.uid.removeprefix("uid-"))]

        live = list(world.live.values())
        ledger = st.advance(
            ledger,
            [c for c in live if scoped(c)],
            [g for g in world.gone if scoped(g[0])],
            period_start=P,
            now=now,
            elsewhere=[(c, now) for c in live if not scoped(c)]
            + [g for g in world.gone if not scoped(g[0])],
        )
        for c in cs:
            if inside[int(c.uid.removeprefix("uid-"))] and c.created <= now:
                expected += c.exact(last if c.uid in charged else P, now)
                charged.add(c.uid)
        last = now
        got = sum(ledger.by_class.values())
        assert abs(got - expected) <= max(len(cs) * GIB_SECOND, expected * 1e-12), (got, expected)
