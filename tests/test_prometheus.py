"""Parsing Prometheus range-query answers; errors become 'unknown', never 'idle'."""

from datetime import UTC, datetime, timedelta

import pytest

from trainwarden.adapters.prometheus import MetricsUnavailable, parse_matrix, peak_query


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
