"""Opt-outs, time-bounded acknowledgements and priority classes."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.core.exemptions import EXEMPT, KEEP_UNTIL, exemption

NOW = datetime(2026, 9, 1, 12, tzinfo=UTC)


def check(annotations: dict[str, str], priority: str | None = None, allow: bool = True):  # type: ignore[no-untyped-def]
    return exemption(
        annotations,
        priority,
        now=NOW,
        allow_opt_out=allow,
        max_keep=timedelta(hours=12),
        priority_classes={"production-inference"},
    )


def test_opt_out_only_where_allowed() -> None:
    assert check({EXEMPT: "true"}).reason == f"{EXEMPT}: true"
    denied = check({EXEMPT: "true"}, allow=False)
    assert denied.reason is None
    assert denied.problem is not None
    assert "does not allow" in denied.problem


def test_keep_until_is_capped_by_the_policy() -> None:
    tonight = check({KEEP_UNTIL: "2026-09-01T20:00:00Z"})
    assert tonight.reason == "kept until 2026-09-01T20:00:00+00:00"
    next_week = check({KEEP_UNTIL: "2026-09-08T20:00:00Z"})
    assert next_week.reason is not None
    assert next_week.reason.startswith("kept until 2026-09-02T00:00:00+00:00 (capped")
    assert check({KEEP_UNTIL: "2026-08-31T20:00:00Z"}).reason is None


def test_priority_classes() -> None:
    assert check({}, "production-inference").reason is not None
    assert check({}, "batch").reason is None


@given(
    st.one_of(
        st.text(max_size=30),
        st.datetimes().map(datetime.isoformat),
        st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    )
)
def test_keep_until_exempts_only_a_valid_future_time_and_reports_the_rest(raw: str) -> None:
    result = check({KEEP_UNTIL: raw})
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        assert result.reason is None, "a malformed or zone-less time never exempts"
        assert result.problem is not None, "and it is reported"
    else:
        assert (result.reason is not None) == (parsed > NOW)
        assert result.problem is None
