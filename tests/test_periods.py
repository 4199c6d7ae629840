"""Calendar periods in the budget's time zone, and when one ends."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwarden.budget.ledger import Window, current_window, ended

PARIS = ZoneInfo("Europe/Paris")


def test_monthly_starts_at_local_midnight_on_the_first() -> None:
    now = datetime(2026, 3, 31, 22, 30, tzinfo=UTC)  # already April 1st, 00:30 in Paris
    window = current_window("Monthly", now, time_zone="Europe/Paris")
    assert window.start == datetime(2026, 4, 1, tzinfo=PARIS)
    assert window.end == datetime(2026, 5, 1, tzinfo=PARIS)


def test_daily_period_on_a_daylight_saving_day_lasts_23_hours() -> None:
    window = current_window(
        "Daily", datetime(2026, 3, 29, 12, tzinfo=UTC), time_zone="Europe/Paris"
    )
    assert window.end is not None
    assert window.end - window.start == timedelta(hours=23)


def test_weekly_starts_on_monday() -> None:
    window = current_window("Weekly", datetime(2026, 12, 3, 9, tzinfo=UTC))  # a Thursday
    assert window.start == datetime(2026, 11, 30, tzinfo=ZoneInfo("UTC"))
    assert window.start.weekday() == 0


def test_rolling_and_total_never_end() -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    rolling = current_window("Rolling", now, rolling=timedelta(days=7))
    assert rolling == Window(now - timedelta(days=7), None)
    origin = datetime(2025, 1, 1, tzinfo=UTC)
    assert current_window("Total", now, origin=origin) == Window(origin, None)
    with pytest.raises(ValueError, match="window"):
        current_window("Rolling", now)


@given(
    st.sampled_from(["Daily", "Weekly", "Monthly"]),
    st.datetimes(
        min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - hypothesis wants naive bounds
        max_value=datetime(2035, 1, 1),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]),
)
def test_calendar_windows_contain_now_and_tile_time(kind: str, now: datetime, tz: str) -> None:
    window = current_window(kind, now, time_zone=tz)  # type: ignore[arg-type]
    assert window.end is not None
    assert window.start <= now < window.end
    following = current_window(kind, window.end, time_zone=tz)  # type: ignore[arg-type]
    assert following.start == window.end, "periods are contiguous: no gap, no overlap"


def test_a_period_ends_only_when_replaced() -> None:
    day = current_window("Daily", datetime(2026, 5, 1, 12, tzinfo=UTC))
    next_day = current_window("Daily", datetime(2026, 5, 2, 12, tzinfo=UTC))
    assert ended(day, next_day) == day
    assert ended(day, day) is None
    assert ended(None, day) is None
    rolling = Window(datetime(2026, 5, 1, tzinfo=UTC), None)
    assert ended(rolling, Window(datetime(2026, 5, 2, tzinfo=UTC), None)) is None
