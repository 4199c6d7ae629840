"""A budget's storage: GiB-hours of the PersistentVolumeClaims in its scope, by storage
class, kept as a watermark ledger. Pure: the controller passes the claims and `now`.

Storage is charged by integrating, not by recomputing from each object as pods are (a
claim's resizes are not on the object): each evaluation charges every claim from where
it was last charged to now (its request in force times the overlap, up to its deletion),
and `observed_at`, the watermark, says every claim is charged up to there. So:
- a claim is charged each second once: from where this process last charged it, or, one
  it has not charged yet, from its creation (a claim that the cache shows late loses
  nothing); a claim whose deletion the cache shows late (an evaluation charged it past
  its deletion) is credited back what was charged past it;
- a restart reads the ledger back from status (the watermark written with the figures):
  a claim created before that watermark is taken as charged up to it, one created after
  from its creation. What a claim deleted while no operator watched held after the last
  status write is lost, as for pods (docs/storage.md);
- the state is a map per storage class (MAX_CLASSES, the rest as "(other)"), in a Rolling
  window a total per time bucket, and in memory only, where each claim was charged up to
  (the claims that exist and those the cache still remembers gone): it never grows with
  the number of claims that pass through. A claim that leaves the scope (relabelled, or
  its namespace) keeps its watermark while the cache holds it, moving uncharged, so it
  is never charged twice for the same time nor for time out of scope once charged.
A Rolling window's buckets are charged as pods' are (budget/ledger.py): the bucket that
straddles the window's start counts in proportion, so the total is within one bucket's
usage of the exact figure; its split by class scales with that total, as the breakdowns
of gone pods do (status stays small: a bucket is one number).
"""

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainwarden.budget.ledger import BUCKETS
from trainwarden.core.claims import ClaimFacts, charge_seconds
from trainwarden.core.tally import OTHER

GIB_HOUR = float(2**30) * 3600.0
"""Byte-seconds in one GiB-hour."""
MAX_CLASSES = 16
Gone = tuple[ClaimFacts, float]
"""A claim seen gone, and when it stopped being charged (its deletion, else when seen)."""
Amounts = Mapping[str, float]


@dataclass(frozen=True)
class StorageLedger:
    observed_at: float | None = None
    """Everything up to here is charged in `by_class`; None: nothing yet this period."""
    period_start: float | None = None
    by_class: Amounts = field(default_factory=dict)
    """GiB-hours per storage class (Rolling: of the retained buckets)."""
    buckets: tuple[tuple[float, float], ...] = ()
    """Rolling only: (start, GiB-hours) per bucket of window / BUCKETS, oldest first."""
    since: float | None = None
    """The watermark a restart read back: a claim not charged by this process and created
    before it is taken as charged up to it (by the process before)."""
    charged_to: Mapping[str, float] = field(default_factory=dict)
    """In memory only: up to when this process charged each claim, by uid."""


@dataclass(frozen=True)
class StorageUsage:
    """What status shows: the window's GiB-hours by class."""

    by_class: Amounts = field(default_factory=dict)
    requested: Amounts = field(default_factory=dict)
    """GiB requested per class by the claims charged now (GiB-hours per hour)."""
    claims: int = 0

    @property
    def total(self) -> float:
        return sum(self.by_class.values())

    @property
    def requested_gib(self) -> float:
        return sum(self.requested.values())


def _add(into: dict[str, float], key: str, amount: float) -> None:
    if amount > 0:
        into[key] = into.get(key, 0.0) + amount


def _capped(amounts: Amounts, cap: int, keep: Collection[str] = ()) -> dict[str, float]:
    """At most `cap` keys: those in `keep`, then the largest; the rest as "(other)"."""
    if len(amounts) <= cap:
        return dict(amounts)
    kept = {k: v for k, v in amounts.items() if k in keep and k != OTHER}
    ranked = sorted(
        ((k, v) for k, v in amounts.items() if k not in kept and k != OTHER),
        key=lambda kv: (-kv[1], kv[0]),
    )
    room = max(0, cap - 1 - len(kept))
    kept.update(ranked[:room])
    kept[OTHER] = amounts.get(OTHER, 0.0) + sum(v for _, v in ranked[room:])
    return kept


def _within(buckets: Iterable[tuple[float, float]], lo: float, width: float) -> float:
    """The buckets' GiB-hours in a window from `lo` (the straddling one in proportion)."""
    return sum(v * min(1.0, max(0.0, (s + width - lo) / width)) for s, v in buckets)


def scaled(amounts: Amounts, total: float) -> dict[str, float]:
    """The same split for a new total."""
    whole = sum(amounts.values())
    ratio = total / whole if whole > 0 else 0.0
    return {k: v * ratio for k, v in amounts.items()}


def advance(
    ledger: StorageLedger,
    live: Iterable[ClaimFacts],
    gone: Iterable[Gone],
    *,
    period_start: float,
    now: float,
    rolling: float | None = None,
    keep: Collection[str] = (),
    elsewhere: Iterable[Gone] = (),
) -> StorageLedger:
    """The ledger charged up to `now`. A new calendar period starts from nothing.
    `keep`: classes never folded into "(other)" (those the spec limits or prices). A
    watermark past `now` (the clock stepped back) charges nothing. `elsewhere`: claims
    the cache holds out of scope, live (ending `now`) or gone; one this ledger charged
    keeps its watermark, moved uncharged, so coming back into scope charges it from
    then, not again from its creation."""
    if rolling is None and ledger.period_start not in (None, period_start):
        ledger = replace(ledger, observed_at=None, by_class={}, buckets=())
    ledger = replace(ledger, period_start=period_start)
    if ledger.observed_at is not None and now < ledger.observed_at:
        return ledger
    width = rolling / BUCKETS if rolling is not None else None
    books = _Books(dict(ledger.by_class), dict(ledger.buckets), width)
    charged_to: dict[str, float] = {}
    for c, end in [*((c, None) for c in live), *gone]:
        stop = min(x for x in (now, end, c.deleting_since) if x is not None)
        done = ledger.charged_to.get(c.uid)
        since = c.created if ledger.since is None else max(c.created, ledger.since)
        start = max(period_start, since if done is None else done)
        if stop >= start:
            books.post(c, start, stop, 1.0)
        elif done is not None:  # its deletion was seen after an evaluation charged past it
            books.post(replace(c, deleting_since=None), max(stop, period_start), start, -1.0)
        charged_to[c.uid] = stop
    for c, end in elsewhere:
        if c.uid in ledger.charged_to and c.uid not in charged_to:
            charged_to[c.uid] = min(x for x in (now, end, c.deleting_since) if x is not None)
    ledger = replace(
        ledger,
        observed_at=now,
        by_class=_capped(books.by_class, MAX_CLASSES, keep),
        buckets=tuple(sorted((s, v) for s, v in books.buckets.items() if v > 0)),
        charged_to=charged_to,
    )
    return _slide(ledger, period_start, width) if width is not None else ledger


@dataclass
class _Books:
    """GiB-hours per class (and, Rolling, per bucket) as one evaluation posts them."""

    by_class: dict[str, float]
    buckets: dict[float, float]
    width: float | None

    def post(self, c: ClaimFacts, lo: float, hi: float, sign: float) -> None:
        """What `c` held in [lo, hi), added (sign 1) or taken back (-1, never below 0;
        from "(other)" for a class folded into it)."""
        held = charge_seconds(c, lo, hi, None) / GIB_HOUR
        if held <= 0:
            return
        klass = c.storage_class if sign > 0 or c.storage_class in self.by_class else OTHER
        self.by_class[klass] = max(0.0, self.by_class.get(klass, 0.0) + sign * held)
        if self.width is None:
            return
        for index in range(math.floor(lo / self.width), math.floor(hi / self.width) + 1):
            start = index * self.width
            part = charge_seconds(c, max(start, lo), min(start + self.width, hi), None)
            if part > 0:
                found = self.buckets.get(start, 0.0) + sign * part / GIB_HOUR
                self.buckets[start] = max(0.0, found)


def _slide(ledger: StorageLedger, lo: float, width: float) -> StorageLedger:
    """Drop the buckets that ended before the window's start `lo`; the classes of what
    is retained scale with it."""
    kept = tuple((s, v) for s, v in ledger.buckets if s + width > lo)
    if len(kept) == len(ledger.buckets):
        return ledger
    retained = _within(kept, -math.inf, width)
    return replace(ledger, buckets=kept, by_class=scaled(ledger.by_class, retained))


def usage(
    ledger: StorageLedger, live: Iterable[ClaimFacts], now: float, rolling: float | None
) -> StorageUsage:
    """The window's figures (Rolling: the straddling bucket in proportion)."""
    charged = [c for c in live if c.created <= now and c.deleting_since is None]
    requested: dict[str, float] = {}
    for c in charged:
        _add(requested, c.storage_class, c.request / float(2**30))
    if rolling is None:
        return StorageUsage(ledger.by_class, requested, len(charged))
    inside = _within(ledger.buckets, now - rolling, rolling / BUCKETS)
    return StorageUsage(scaled(ledger.by_class, inside), requested, len(charged))


def crossing(
    used: Amounts, rate: Amounts, limits: Mapping[str, tuple[float, float]]
) -> float | None:
    """Hours until the first of `limits` (dimension -> (limit, at percent)) is reached at
    `rate` GiB per hour per class; 0 if one is; None if none ever is."""
    soonest: float | None = None
    for name, (limit, percent) in limits.items():
        klass = name[len("storageGiBHours[") : -1] if name.endswith("]") else None
        value = used.get(klass, 0.0) if klass is not None else sum(used.values())
        speed = rate.get(klass, 0.0) if klass is not None else sum(rate.values())
        left = limit * percent / 100.0 - value
        if left <= 0:
            return 0.0
        if speed > 0:
            soonest = left / speed if soonest is None else min(soonest, left / speed)
    return soonest


def cost(by_class: Amounts, prices: Mapping[str, float]) -> float:
    """GiB-hours priced per class at today's rates ("(other)" and unpriced: free)."""
    return sum(hours * prices.get(klass, 0.0) for klass, hours in by_class.items())
