"""A budget's efficiency meters: what its pods' accelerators did, kept like its usage.

The same shape as the usage ledger (budget/ledger.py), for the same reasons:
- a pod that still exists has its own meter (in memory, bounded by the pods that exist);
  after a restart it is measured again from Prometheus for the whole period, so nothing
  is counted twice;
- a pod that is gone is folded into `measured` and `used`, capped tallies in status: the
  state depends on the breakdown keys shown, never on the number of pods;
- `until` is the watermark: each evaluation measures (until, now] once, so no step is
  counted twice and none is skipped while the operator runs.
In a Rolling window meters are kept in time buckets of window / BUCKETS; the bucket that
straddles the window's start counts in proportion to its overlap, and the breakdown of
gone pods scales with their total (as usage does). What is lost (a pod folded after the
last status write when the operator dies, metrics beyond Prometheus's retention) is
unknown, never idle.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainwarden.budget.ledger import CAP
from trainwarden.core.accounting import Charge
from trainwarden.core.efficiency import Measure, Point, Row, measures, row, rows
from trainwarden.core.tally import Shares, Tally, weighted

Buckets = tuple[tuple[float, Measure], ...]
"""(bucket start, measure) oldest first; one bucket at the period's start outside Rolling."""
PodKey = tuple[str, str]


@dataclass(frozen=True)
class Meters:
    period_start: float | None = None
    until: float | None = None
    """Measured up to here (POSIX seconds); None: nothing measured in this period yet."""
    live: Mapping[str, Buckets] = field(default_factory=dict)
    """Per uid of a pod that still exists."""
    measured: Tally = field(default_factory=Tally)
    """Gone pods' measured accelerator-hours, as a tally at their rates."""
    used: Tally = field(default_factory=Tally)
    buckets: Buckets = ()
    """Rolling only: gone pods' measures per time bucket."""


def _key(at: float, lo: float, width: float | None) -> float:
    return lo if width is None else math.floor(at / width) * width


def _added(buckets: Buckets, more: Iterable[tuple[float, Measure]]) -> Buckets:
    by_start = dict(buckets)
    for start, m in more:
        by_start[start] = by_start.get(start, Measure()) + m
    return tuple(sorted(by_start.items()))


def _within(buckets: Buckets, lo: float, width: float | None) -> Measure:
    total = Measure()
    for start, m in buckets:
        share = 1.0 if width is None else min(1.0, max(0.0, (start + width - lo) / width))
        total = total + m.scaled(share)
    return total


def rolled(meters: Meters, period_start: float, rolling: bool) -> Meters:
    """A new calendar period starts from nothing (its history is in the usage's)."""
    if rolling or meters.period_start == period_start:
        return meters
    return Meters(period_start=period_start)


def advance(
    meters: Meters,
    points: Mapping[PodKey, Sequence[Point]],
    charges: Mapping[PodKey, Charge],
    *,
    step: float,
    lo: float,
    hi: float,
    width: float | None,
) -> Meters:
    """The meters with (until, hi] measured for `charges`, by the (namespace, pod) their
    series carry; `lo` is the window's start (nothing before it counts)."""
    since = lo if meters.until is None else max(lo, meters.until)
    live = dict(meters.live)
    for key, c in charges.items():
        found = points.get(key)
        if not found:
            continue
        per_point = measures(
            found,
            step=step,
            accelerators=c.rate.accelerator_total,
            start=c.start,
            end=c.end,
            lo=since,
            hi=hi,
        )
        live[c.uid] = _added(live.get(c.uid, ()), ((_key(at, lo, width), m) for at, m in per_point))
    return replace(meters, live=live, until=hi)


def _tallies(
    pairs: Iterable[tuple[Charge, Measure]], keys: Sequence[str], like: Tally | None = None
) -> tuple[Tally, Tally]:
    """Measured and used accelerator-hours as tallies at each pod's rate (cost in
    proportion), attributed like its usage (with `like`: to the keys it shows)."""
    listed = [(c, m) for c, m in pairs if c.rate.accelerator_total > 0]

    def seconds(c: Charge, hours: float) -> float:
        return hours / c.rate.accelerator_total * 3600.0

    measured = weighted(
        ((c, seconds(c, m.measured), c.outcome) for c, m in listed), keys, like=like
    )
    used = weighted(((c, seconds(c, m.used), c.outcome) for c, m in listed), keys, like=like)
    return measured, used


def fold(
    meters: Meters, gone: Sequence[Charge], keys: Sequence[str], width: float | None
) -> Meters:
    """Gone pods' meters into the capped tallies (and, Rolling, the time buckets)."""
    if not any(c.uid in meters.live for c in gone):
        return meters
    live = dict(meters.live)
    taken = [(c, live.pop(c.uid)) for c in gone if c.uid in live]
    measured, used = _tallies(((c, _within(b, -math.inf, None)) for c, b in taken), keys)
    buckets = meters.buckets
    if width is not None:
        buckets = _added(buckets, (entry for _, b in taken for entry in b))
    return replace(
        meters,
        live=live,
        measured=(meters.measured + measured).capped(CAP),
        used=(meters.used + used).capped(CAP),
        buckets=buckets,
    )


def slide(meters: Meters, lo: float, width: float) -> Meters:
    """Drop what ended before a Rolling window's start `lo`, in gone pods' buckets (their
    breakdowns scale with what is left) and in live pods' meters."""
    kept = tuple((s, m) for s, m in meters.buckets if s + width > lo)
    live = {uid: tuple((s, m) for s, m in b if s + width > lo) for uid, b in meters.live.items()}
    if len(kept) == len(meters.buckets) and live == meters.live:
        return meters
    before, after = _within(meters.buckets, -math.inf, None), _within(kept, -math.inf, None)
    return replace(
        meters,
        live=live,
        buckets=kept,
        measured=_scaled(meters.measured, after.measured, before.measured),
        used=_scaled(meters.used, after.used, before.used),
    )


def _scaled(t: Tally, new: float, old: float) -> Tally:
    return t.rescaled(t.total.scaled(new / old if old > 0 else 0.0))


@dataclass(frozen=True)
class View:
    """What status and metrics show: totals and per breakdown key."""

    total: Row
    by_namespace: Mapping[str, Row]
    by_label: Mapping[str, Mapping[str, Row]]
    by_outcome: Mapping[str, Row]


def view(
    meters: Meters,
    live: Iterable[Charge],
    held: Tally,
    keys: Sequence[str],
    *,
    lo: float,
    width: float | None,
) -> View:
    """The meters against what was held in the window (the budget's usage tally)."""
    pairs = [(c, _within(meters.live.get(c.uid, ()), lo, width)) for c in live]
    m_live, u_live = _tallies(pairs, keys, like=held)
    closed_m, closed_u = meters.measured, meters.used
    if width is not None:  # gone pods' breakdowns scale with what of them is in the window
        whole, inside = _within(meters.buckets, -math.inf, None), _within(meters.buckets, lo, width)
        closed_m = _scaled(closed_m, inside.measured, whole.measured)
        closed_u = _scaled(closed_u, inside.used, whole.used)
    measured, used = m_live + closed_m, u_live + closed_u

    def per_key(h: Shares, m: Shares, u: Shares) -> dict[str, Row]:
        return rows(
            {k: s.accelerator_hours for k, s in h.items()},
            {k: s.accelerator_hours for k, s in m.items()},
            {k: s.accelerator_hours for k, s in u.items()},
        )

    return View(
        row(
            held.total.total_accelerator_hours,
            measured.total.total_accelerator_hours,
            used.total.total_accelerator_hours,
        ),
        per_key(held.by_namespace, measured.by_namespace, used.by_namespace),
        {
            k: per_key(v, measured.by_label.get(k, {}), used.by_label.get(k, {}))
            for k, v in held.by_label.items()
        },
        per_key(held.by_outcome, measured.by_outcome, used.by_outcome),
    )
