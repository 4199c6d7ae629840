"""A budget's usage over its period: the period (calendar periods start at local midnight
in the budget's time zone), the ledger of the usage of pods that are gone, bounded however
many pass through, and the usage at one moment (`accrue`: the period rolled over if it
ended, gone pods folded into the ledger, live pods tallied). Pure: the controller passes
the pods and `now`.

Usage of a pod that still exists is recomputed from the pod itself (its startTime and its
containers' finishedAt never change), so a restart cannot skew it. A pod that is gone is
folded into `closed`, a capped tally: the ledger's size depends on the number of
namespaces and label values shown, never on the number of pods.

Two things need more than a running sum:
- A restart. Pods deleted while the operator was down were never seen to go. `charged` is
  the tally of everything at `observed_at` (gone pods and live ones); after a restart,
  `charged - closed - (what the pods still here had used by observed_at)` is what the
  vanished pods had used by then, and it is folded into `closed` once (`restore`). Those
  pods are charged up to `observed_at`, as far as anyone saw them.
- A Rolling window, where gone pods must also leave the window. Their usage goes into
  time buckets of `window / BUCKETS`; the bucket that straddles the window's start counts
  in proportion to its overlap, so the total of gone pods is within one bucket's usage of
  the exact figure (docs/budgets.md). Breakdowns of gone pods scale with that total.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from trainwarden.api.v1alpha1.types import time_zone as zone_named
from trainwarden.core.accounting import Charge, Usage
from trainwarden.core.tally import Tally, burn_rate, tally

PeriodType = Literal["Daily", "Weekly", "Monthly", "Rolling", "Total"]


@dataclass(frozen=True)
class Window:
    """[start, end): end is None for Rolling and Total, which never reset."""

    start: datetime
    end: datetime | None


def current_window(
    kind: PeriodType,
    now: datetime,
    *,
    time_zone: str = "UTC",
    rolling: timedelta | None = None,
    origin: datetime | None = None,
) -> Window:
    """The period containing `now` (an aware datetime).

    Calendar arithmetic is done on local wall-clock dates, then localized, so a Daily period
    on a daylight-saving day is 23 or 25 hours long, as its users expect.
    """
    if kind == "Rolling":
        if rolling is None:
            raise ValueError("a Rolling period needs a window")
        return Window(now - rolling, None)
    if kind == "Total":
        if origin is None:
            raise ValueError("a Total period needs an origin")
        return Window(origin, None)
    zone = zone_named(time_zone)
    local = now.astimezone(zone)
    day = local.date()
    if kind == "Daily":
        first, following = day, day + timedelta(days=1)
    elif kind == "Weekly":
        first = day - timedelta(days=day.weekday())
        following = first + timedelta(days=7)
    else:
        first = day.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)

    def midnight(d: date) -> datetime:
        # In UTC: Python subtracts two datetimes of the same zone in wall-clock time, which
        # would make a daylight-saving day 24 hours long.
        return datetime.combine(d, datetime.min.time(), tzinfo=zone).astimezone(UTC)

    return Window(midnight(first), midnight(following))


def ended(previous: Window | None, current: Window) -> Window | None:
    """The previous calendar period, if `current` has replaced it: its total goes to
    history. Rolling and Total periods never end (they have no `end`)."""
    if previous is None or previous.end is None or previous.start == current.start:
        return None
    return previous


BUCKETS = 32
"""Time buckets per Rolling window: the error bound is one bucket, 1/32 of the window."""
CAP = 12
"""Keys kept per breakdown in the ledger and in status: with 8 attribution labels, a
budget shows at most 12 namespaces, 12 values per label and 3 outcomes."""


@dataclass(frozen=True, slots=True)
class Bucket:
    start: float
    usage: Usage


@dataclass(frozen=True)
class Ledger:
    observed_at: float | None = None
    closed: Tally = field(default_factory=Tally)
    """Pods gone within the period (Rolling: within the retained buckets)."""
    charged: Tally = field(default_factory=Tally)
    """Everything charged at `observed_at`, gone pods and live ones."""
    buckets: tuple[Bucket, ...] = ()
    """Rolling only: the usage of gone pods per time bucket, oldest first."""


def fold(
    ledger: Ledger,
    gone: Sequence[Charge],
    *,
    lo: float,
    hi: float,
    label_keys: Sequence[str],
    width: float | None = None,
) -> Ledger:
    """The ledger with `gone` pods charged for good: their usage within [lo, hi).
    `width` is the bucket width of a Rolling window."""
    if not gone:
        return ledger
    added = tally(gone, lo, hi, label_keys)
    buckets = ledger.buckets
    if width is not None:
        buckets = _bucketed(buckets, gone, lo, hi, width)
    return replace(ledger, closed=(ledger.closed + added).capped(CAP), buckets=buckets)


def _bucketed(
    buckets: tuple[Bucket, ...], gone: Iterable[Charge], lo: float, hi: float, width: float
) -> tuple[Bucket, ...]:
    by_start = {b.start: b.usage for b in buckets}
    for c in gone:
        end = hi if c.end is None else min(c.end, hi)
        first = math.floor(max(c.start, lo) / width)
        for index in range(first, math.floor(end / width) + 1):
            start = index * width
            seconds = c.seconds(max(start, lo), min(start + width, end))
            if seconds > 0:
                _add(by_start, start, c.rate.usage(seconds))
    return tuple(Bucket(s, by_start[s]) for s in sorted(by_start))


def _add(by_start: dict[float, Usage], start: float, usage: Usage) -> None:
    by_start[start] = by_start.get(start, Usage()) + usage


def slide(ledger: Ledger, lo: float, width: float) -> Ledger:
    """Drop the buckets that ended before a Rolling window's start `lo`."""
    kept = tuple(b for b in ledger.buckets if b.start + width > lo)
    if len(kept) == len(ledger.buckets):
        return ledger
    total = sum((b.usage for b in kept), Usage())
    return replace(ledger, buckets=kept, closed=ledger.closed.rescaled(total))


def closed_in_window(ledger: Ledger, lo: float, width: float | None) -> Tally:
    """What gone pods count for in the window starting at `lo`."""
    if width is None:
        return ledger.closed
    total = Usage()
    for b in ledger.buckets:
        overlap = min(1.0, max(0.0, (b.start + width - lo) / width))
        total = total + b.usage.scaled(overlap)
    return ledger.closed.rescaled(total)


def observe(
    ledger: Ledger,
    closed: Tally,
    live: Iterable[Charge],
    *,
    lo: float,
    now: float,
    keys: Sequence[str],
) -> tuple[Ledger, Tally]:
    """Everything charged at `now`: the windowed `closed` tally plus the live pods;
    recorded in the ledger for the next restart, and returned for status."""
    charged = (closed + tally(live, lo, now, keys)).capped(CAP)
    return replace(ledger, observed_at=now, charged=charged), charged


def restore(
    ledger: Ledger,
    live: Sequence[Charge],
    *,
    lo: float,
    label_keys: Sequence[str],
    width: float | None = None,
) -> tuple[Ledger, Tally]:
    """After a restart: fold in what pods that vanished meanwhile had used by
    `observed_at` (estimated, never negative), once. Returns the ledger and that estimate.

    The pods still here are subtracted by what they had used by `observed_at`, attributed
    as a tally then would have (a pod that ran then counts as Running). In a Rolling
    window the estimate goes into the bucket of `observed_at`."""
    at = ledger.observed_at
    if at is None:
        return ledger, Tally()
    seen = tally((c for c in live if c.start <= at), lo, at, label_keys, outcome_at=at)
    closed_then = closed_in_window(ledger, lo, width)
    vanished = ledger.charged.minus(closed_then).minus(seen)
    closed = (ledger.closed + vanished).capped(CAP)
    buckets = ledger.buckets
    if width is not None and not vanished.total.is_zero:
        by_start = {b.start: b.usage for b in buckets}
        _add(by_start, math.floor(at / width) * width, vanished.total)
        buckets = tuple(Bucket(s, by_start[s]) for s in sorted(by_start))
    restored = replace(ledger, closed=closed, charged=Tally(), observed_at=None, buckets=buckets)
    return restored, vanished


@dataclass(frozen=True)
class Period:
    """[start, end) in POSIX seconds; end is None for Rolling and Total."""

    start: float
    end: float | None


@dataclass(frozen=True)
class Accrual:
    ledger: Ledger
    usage: Tally
    """Everything charged in the current period, capped for status."""
    burn: Usage
    """Usage per hour of the pods running now."""
    ended: tuple[Period, Usage] | None = None
    """The period that ended since the last evaluation, and its total."""
    vanished: Tally | None = None
    """What pods deleted while nobody watched were charged on restore (an estimate)."""


def accrue(
    ledger: Ledger,
    *,
    period: Period,
    previous: Period | None,
    live: Sequence[Charge],
    gone: Sequence[Charge],
    now: float,
    label_keys: Sequence[str],
    rolling: float | None = None,
    restoring: bool = False,
) -> Accrual:
    """One evaluation. `previous` is the period the ledger was written in; `rolling` the
    length of a Rolling window; `restoring` says the ledger comes from status after a
    restart, so pods that vanished meanwhile are estimated (once)."""
    width = rolling / BUCKETS if rolling is not None else None
    lo_before = previous.start if previous is not None else period.start
    vanished = None
    if restoring:  # pods seen gone since the restart are not vanished: they are in `gone`
        known = [*live, *gone]
        ledger, vanished = restore(ledger, known, lo=lo_before, label_keys=label_keys, width=width)
    ended = None
    if previous is not None and rolling is None and previous.start != period.start:
        hi = previous.end if previous.end is not None else period.start
        old = fold(ledger, gone, lo=previous.start, hi=hi, label_keys=label_keys)
        total = old.closed.total + tally(live, previous.start, hi, label_keys).total
        ended = (Period(previous.start, hi), total)
        ledger = Ledger()
    ledger = fold(ledger, gone, lo=period.start, hi=now, label_keys=label_keys, width=width)
    if width is not None:
        ledger = slide(ledger, period.start, width)
    closed = closed_in_window(ledger, period.start, width)
    ledger, usage = observe(ledger, closed, live, lo=period.start, now=now, keys=label_keys)
    return Accrual(ledger, usage, burn_rate(live, now), ended, vanished)
