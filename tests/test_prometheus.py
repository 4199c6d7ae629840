"""Parsing Prometheus range-query answers; errors become 'unknown', never 'idle'."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwarden.adapters.prometheus import (
    MetricsUnavailable,
    parse_matrix,
    peak_query,
    range_params,
)


def test_peak_query_batches_every_pod_in_one_request() -> None:
    assert (
        peak_query("DCGM_FI_DEV_GPU_UTIL", timedelta(minutes=1))
        == "max by (namespace, pod) (max_over_time(DCGM_FI_DEV_GPU_UTIL[60s]))"
    )


def test_selectors_read_raw_samples_and_expressions_use_a_subquery() -> None:
    step = timedelta(seconds=10)
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="a"}[10s]' in peak_query(
        'DCGM_FI_DEV_GPU_UTIL{namespace="a"}', step
    )
    assert "(DCGM_FI_PROF_GR_ENGINE_ACTIVE * 100)[10s:]" in peak_query(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE * 100", step
    )


@given(st.floats(1.6e9, 2.2e9))
def test_the_newest_step_is_never_after_now(seconds: float) -> None:
    """observe() drops points after `now`: were `end` rounded up, the newest step would be
    lost and a pod judged on data a whole step old."""
    now = datetime.fromtimestamp(seconds, UTC)
    params = range_params("q", start=now - timedelta(minutes=5), end=now, step=timedelta(10))
    end = datetime.fromtimestamp(float(params["end"]), UTC)
    assert now - timedelta(milliseconds=1) < end <= now
    assert params["end"] == f"{float(params['end']):.3f}"


def test_a_time_half_a_millisecond_before_the_next_is_rounded_down() -> None:
    now = datetime(2026, 12, 2, 21, 15, 46, 189600, tzinfo=UTC)
    params = range_params("q", start=now, end=now, step=timedelta(seconds=10))
    assert params["end"].endswith(".189")


def test_matrix_is_grouped_by_pod() -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"namespace": "a", "pod": "p"},
                    "values": [[1767225600, "3"], [1767225615, "97.5"]],
                },
                {"metric": {"namespace": "a"}, "values": [[1767225600, "1"]]},
            ],
        },
    }
    samples = parse_matrix(body)
    assert samples == {
        ("a", "p"): [
            (datetime(2026, 1, 1, tzinfo=UTC), 3.0),
            (datetime(2026, 1, 1, 0, 0, 15, tzinfo=UTC), 97.5),
        ]
    }


@pytest.mark.parametrize(
    "body",
    [
        {"status": "error", "error": "bad query"},
        {"status": "success", "data": {"resultType": "vector"}},
    ],
)
def test_errors_are_unavailability(body: dict[str, object]) -> None:
    with pytest.raises(MetricsUnavailable):
        parse_matrix(body)
