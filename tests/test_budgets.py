"""Budget levels and the forecast the controller sleeps on."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwarden.core.accounting import Usage
from trainwarden.core.budgets import (
    MAX_PERCENT,
    Limits,
    crossing_time,
    level,
    percent_used,
    threshold_conditions,
)

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def test_most_constrained_dimension_wins() -> None:
    limits = Limits(accelerator_hours=100, cpu_core_hours=1000, cost=50)
    usage = Usage({GPU: 10}, cpu_core_hours=900, cost=5)
    assert percent_used(usage, limits) == (90.0, "cpuCoreHours")


def test_per_resource_limits() -> None:
    limits = Limits(accelerator_hours_by_resource={GPU: 10, "amd.com/gpu": 100})
    usage = Usage({GPU: 5, "amd.com/gpu": 80})
    assert percent_used(usage, limits) == (80.0, "acceleratorHours[amd.com/gpu]")


@pytest.mark.parametrize(
    ("percent", "expected"), [(0, "Ok"), (79.9, "Ok"), (80, "Warning"), (100, "Exhausted")]
)
def test_levels(percent: float, expected: str) -> None:
    assert level(percent, 80, 100) == expected


def test_crossing_time_is_exact_for_a_steady_rate() -> None:
    limits = Limits(accelerator_hours=10)
    usage = Usage({GPU: 4})
    rate = Usage({GPU: 3})  # 3 GPUs running
    assert crossing_time(usage, rate, limits, 100, NOW) == NOW + timedelta(hours=2)
    assert crossing_time(usage, rate, limits, 80, NOW) == NOW + timedelta(hours=4 / 3)


def test_no_crossing_without_spending_and_immediate_when_past() -> None:
    limits = Limits(accelerator_hours=10)
    assert crossing_time(Usage({GPU: 4}), Usage(), limits, 100, NOW) is None
    assert crossing_time(Usage({GPU: 12}), Usage(), limits, 100, NOW) == NOW


@given(st.floats(0, 100), st.floats(0.001, 50), st.floats(1, 200), st.sampled_from([50, 80, 100]))
def test_usage_at_the_forecast_time_is_exactly_the_threshold(
    used: float, gpus: float, limit: float, threshold: float
) -> None:
    limits = Limits(accelerator_hours=limit)
    when = crossing_time(Usage({GPU: used}), Usage({GPU: gpus}), limits, threshold, NOW)
    assert when is not None
    hours = (when - NOW).total_seconds() / 3600
    projected = Usage({GPU: used + gpus * hours})
    if used < limit * threshold / 100:
        assert percent_used(projected, limits)[0] == pytest.approx(threshold, abs=1e-3)
    else:
        assert when == NOW


def test_threshold_conditions_name_the_dimension_and_thresholds() -> None:
    warning, exhausted = threshold_conditions(85.0, "cost", 80, 100)
    assert (warning.type, warning.status, warning.reason) == ("Warning", "True", "ThresholdReached")
    assert (exhausted.status, exhausted.reason) == ("False", "WithinLimit")
    assert exhausted.message == "85.0% of cost used; enforce at 100%"
    assert [c.status for c in threshold_conditions(100.0, "cost", 80, 100)] == ["True", "True"]


@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=0, max_value=1e300))
def test_a_percentage_is_always_a_number_json_can_carry(memory: float, limit: float) -> None:
    """Found by tests/test_isolation.py: a status ledger mangled to -1.8e306 GiB-hours made
    the percentage -inf, and the budget's own status write non-JSON (the budget wedged).
    Usage is never negative: whatever a ledger holds, the percentage is in [0, MAX]."""
    percent, _ = percent_used(Usage(memory_gib_hours=memory), Limits(memory_gib_hours=limit))
    assert 0.0 <= percent <= MAX_PERCENT
