"""Accounting periods: calendar periods start at local midnight in the budget's time zone."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from trainwarden.api.v1alpha1.types import time_zone as zone_named

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
