"""A budget's usage at one moment: the period rolled over if it ended, gone pods folded
into the ledger, live pods tallied. Pure: the controller passes the pods and `now`."""

from collections.abc import Sequence
from dataclasses import dataclass

from trainwarden.budget.ledger import (
    BUCKETS,
    Ledger,
    closed_in_window,
    fold,
    observe,
    restore,
    slide,
)
from trainwarden.core.accounting import Usage
from trainwarden.core.charges import Charge
from trainwarden.core.tally import Tally, burn_rate, tally


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
