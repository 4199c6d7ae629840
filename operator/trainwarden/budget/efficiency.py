"""A budget's efficiency: measure what its pods' accelerators did since the last time
(budget/meters.py), and show it against what they held (docs/efficiency.md).

Measured at most once per `spec.efficiency.resolution`, up to one resolution before now
(the newest samples may not be scraped yet). A pod that is gone stays measured until the
watermark passes its end, so the tail of its run is counted, not lost as unknown; one that
waits longer than LEAVING (Prometheus down) is folded with what is known of it.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from trainwarden import logs
from trainwarden.adapters.prometheus import Busy, MetricsUnavailable
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    EfficiencyLedger,
    LedgerTally,
    MeasureBucket,
    TrainingBudgetStatus,
)
from trainwarden.api.v1alpha1.efficiency import (
    EfficiencyBreakdown,
    EfficiencyShare,
    EfficiencyStatus,
)
from trainwarden.budget import status as bs
from trainwarden.budget.ledger import BUCKETS, Period
from trainwarden.budget.meters import Meters, PodKey, advance, fold, rolled, slide, view
from trainwarden.cache.budgets import Members
from trainwarden.core.accounting import Charge
from trainwarden.core.efficiency import Measure, Row, query_step
from trainwarden.core.tally import Tally

log = logs.get(__name__)
LEAVING = timedelta(minutes=10)


@dataclass
class EfficiencyMemory:
    """Between evaluations: the meters (None until read back from status), and the gone
    pods still being measured with the names their series carry."""

    meters: Meters | None = None
    names: dict[str, PodKey] = field(default_factory=dict)
    leaving: list[Charge] = field(default_factory=list)
    message: str | None = None


def _width(spec: TrainingBudgetSpec) -> float | None:
    window = spec.period.window
    if spec.period.type == "Rolling" and window is not None:
        return window.total_seconds() / BUCKETS
    return None


def restored(old: TrainingBudgetStatus) -> Meters:
    """What an earlier process measured of gone pods; live pods are measured again."""
    led = old.ledger.efficiency if old.ledger is not None else None
    if led is None or old.period_start is None:
        return Meters()
    return Meters(
        period_start=old.period_start.timestamp(),
        measured=bs.tally_from(led.measured.total, led.measured.breakdown),
        used=bs.tally_from(led.used.total, led.used.breakdown),
        buckets=tuple(
            (b.start.timestamp(), Measure(b.measured_accelerator_hours, b.used_accelerator_hours))
            for b in led.buckets
        ),
    )


async def measure(
    source: Busy | None,
    spec: TrainingBudgetSpec,
    members: Members,
    memory: EfficiencyMemory,
    old: TrainingBudgetStatus,
    period: Period,
    now: datetime,
) -> None:
    """Advance the meters to (about) now and fold the pods that are gone. Call before the
    usage takes `members.gone`."""
    width = _width(spec)
    meters = rolled(memory.meters or restored(old), period.start, width is not None)
    memory.leaving += members.gone
    memory.names.update(members.gone_names)
    if source is None:
        memory.message = "the operator runs without --prometheus-url: nothing is measured"
    else:
        meters = await _advanced(source, spec, meters, members, memory, period, now)
    done = [c for c in memory.leaving if source is None or _measured(c, meters, now)]
    meters = fold(meters, done, members.label_keys, width)
    if width is not None:
        meters = slide(meters, period.start, width)
    if done:
        gone = {c.uid for c in done}
        memory.leaving = [c for c in memory.leaving if c.uid not in gone]
        memory.names = {uid: key for uid, key in memory.names.items() if uid not in gone}
    memory.meters = meters


def _measured(c: Charge, meters: Meters, now: datetime) -> bool:
    end = c.end if c.end is not None else now.timestamp()
    until = meters.until if meters.until is not None else -math.inf
    return until >= end or end < (now - LEAVING).timestamp()


async def _advanced(
    source: Busy,
    spec: TrainingBudgetSpec,
    meters: Meters,
    members: Members,
    memory: EfficiencyMemory,
    period: Period,
    now: datetime,
) -> Meters:
    """One query over (until, now - resolution], at the resolution (coarser for a
    catch-up after a restart: core/efficiency.query_step), for the live pods and those
    still leaving."""
    resolution = spec.efficiency.resolution.total_seconds()
    charges = [*members.live.values(), *memory.leaving]
    if meters.until is not None:
        since, step = meters.until, resolution
    else:  # from the earliest start in the window: a catch-up, at a bounded step
        since = max(period.start, min((c.start for c in charges), default=now.timestamp()))
        step = query_step(now.timestamp() - resolution - since, resolution, len(charges))
    count = math.floor((now.timestamp() - resolution - since) / step)
    if count < 1:
        return meters  # less than a step since the last measurement
    hi = since + count * step
    names = {uid: (f.snapshot.namespace, f.snapshot.name) for uid, f in members.facts.items()}
    names.update(memory.names)
    by_name = {names[c.uid]: c for c in charges if c.uid in names}
    if not by_name:
        return replace(meters, until=hi)
    try:
        points = await source.busy(
            spec.efficiency.query,
            namespaces=sorted({ns for ns, _ in by_name}),
            start=_time(since + step),
            end=_time(hi),
            step=timedelta(seconds=step),
        )
    except MetricsUnavailable as error:
        memory.message = f"{error}; the time it misses counts as unknown"
        return meters
    memory.message = None
    return advance(meters, points, by_name, step=step, lo=period.start, hi=hi, width=_width(spec))


def _time(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _share(key: str, r: Row) -> EfficiencyShare:
    pct = r.effective
    return EfficiencyShare(
        key=key,
        held_accelerator_hours=bs.round6(r.held),
        used_accelerator_hours=bs.round6(r.used),
        idle_accelerator_hours=bs.round6(r.idle),
        unknown_accelerator_hours=bs.round6(r.unknown),
        effective_percent=round(pct * 100, 2) if pct is not None else None,
    )


def _shares(rows: Mapping[str, Row]) -> list[EfficiencyShare]:
    ranked = sorted(rows.items(), key=lambda kv: (-kv[1].held, kv[0]))
    return [_share(k, r) for k, r in ranked]


def shown(
    spec: TrainingBudgetSpec,
    members: Members,
    memory: EfficiencyMemory,
    usage: Tally,
    period: Period,
) -> EfficiencyStatus | None:
    """The status: the meters against `usage`, what the budget charged in the window."""
    meters = memory.meters
    if meters is None:
        return None
    live = [*members.live.values(), *memory.leaving]
    v = view(meters, live, usage, members.label_keys, lo=period.start, width=_width(spec))
    t = v.total
    return EfficiencyStatus(
        query=spec.efficiency.query,
        measured_until=_time(meters.until) if meters.until is not None else None,
        total=_share("total", t),
        unknown_percent=round(t.unknown / t.held * 100, 2) if t.held > 0 else None,
        breakdown=EfficiencyBreakdown(
            by_namespace=_shares(v.by_namespace),
            by_label={k: _shares(rows) for k, rows in v.by_label.items()},
            by_outcome=_shares(v.by_outcome),
        ),
        message=memory.message,
    )


def ledger(memory: EfficiencyMemory) -> EfficiencyLedger | None:
    """What status keeps of gone pods for the next process."""
    m = memory.meters
    if m is None:
        return None
    return EfficiencyLedger(
        measured=LedgerTally(
            total=bs.usage_model(m.measured.total), breakdown=bs.breakdown_model(m.measured)
        ),
        used=LedgerTally(total=bs.usage_model(m.used.total), breakdown=bs.breakdown_model(m.used)),
        buckets=[
            MeasureBucket(
                start=_time(s),
                measured_accelerator_hours=bs.round6(b.measured),
                used_accelerator_hours=bs.round6(b.used),
            )
            for s, b in m.buckets
        ],
    )
