"""Opt-outs, time-bounded acknowledgements and priority classes."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import EXEMPT, KEEP_UNTIL
from trainwarden.core.exemptions import exemption

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


def test_a_capped_acknowledgement_ends_instead_of_sliding() -> None:
    """The reported bug: the cap ran from each evaluation's now, so "kept until now + cap"
    moved forever. It runs from when the value was first seen."""
    raw = "2026-09-08T20:00:00Z"
    first = exemption(
        {KEEP_UNTIL: raw},
        None,
        now=NOW,
        allow_opt_out=True,
        max_keep=timedelta(hours=12),
        priority_classes=(),
    )
    assert first.acknowledged == (raw, NOW)
    for hours in (1, 6, 11):
        later = exemption(
            {KEEP_UNTIL: raw},
            None,
            now=NOW + timedelta(hours=hours),
            allow_opt_out=True,
            max_keep=timedelta(hours=12),
            priority_classes=(),
            seen=first.acknowledged,
        )
        assert later.until == NOW + timedelta(hours=12), "the cap does not slide"
    expired = exemption(
        {KEEP_UNTIL: raw},
        None,
        now=NOW + timedelta(hours=13),
        allow_opt_out=True,
        max_keep=timedelta(hours=12),
        priority_classes=(),
        seen=first.acknowledged,
    )
    assert expired.reason is None
    assert expired.acknowledged == (raw, NOW), "remembered, so it does not start over"


def test_a_new_value_is_a_new_acknowledgement_and_a_future_anchor_is_not_trusted() -> None:
    kwargs = {"allow_opt_out": True, "max_keep": timedelta(hours=12), "priority_classes": ()}
    renewed = exemption(
        {KEEP_UNTIL: "2026-09-09T00:00:00Z"},
        None,
        now=NOW,
        seen=("2026-09-08T20:00:00Z", NOW - timedelta(days=1)),
        **kwargs,
    )
    assert renewed.acknowledged == ("2026-09-09T00:00:00Z", NOW)
    forged = exemption(
        {KEEP_UNTIL: "2026-09-09T00:00:00Z"},
        None,
        now=NOW,
        seen=("2026-09-09T00:00:00Z", NOW + timedelta(days=9)),
        **kwargs,
    )
    assert forged.until == NOW + timedelta(hours=12)
