"""Parsing Prometheus range-query answers; errors become 'unknown', never 'idle'."""

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from hypothesis import example, given
from hypothesis import strategies as st

from trainwarden.adapters import prometheus
from trainwarden.adapters.prometheus import (
    MetricsUnavailable,
    Prometheus,
    parse_matrix,
    parse_seen,
    range_params,
)
from trainwarden.adapters.promql import busy_queries, peak_query, selectors
from trainwarden.core.efficiency import Point


def test_peak_query_batches_every_pod_in_one_request_under_either_label_convention() -> None:
    """What the query means is proven on the real Prometheus (e2e/test_idle_signal.py):
    here, its shape."""
    query = peak_query("DCGM_FI_DEV_GPU_UTIL", timedelta(minutes=1))
    assert query.startswith("max by (namespace, pod) (label_replace(")
    assert "max_over_time(DCGM_FI_DEV_GPU_UTIL[60s])" in query
    for label in ("namespace", "pod", "container"):
        assert f'"{label}", "$1", "exported_{label}", "(.+)"' in query


def test_a_selector_is_narrowed_under_each_convention_and_never_twice() -> None:
    """A series with exported_namespace is matched by it only; one without, by namespace:
    no series is in both halves (an `or` of the two would otherwise keep one of each)."""
    plain, exported = selectors('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', ["b", "a", "Not A Name"])
    assert plain == 'DCGM_FI_DEV_GPU_UTIL{gpu="0", exported_namespace="", namespace=~"a|b"}'
    assert exported == 'DCGM_FI_DEV_GPU_UTIL{gpu="0", exported_namespace=~"a|b"}'
    assert selectors("DCGM_FI_DEV_GPU_UTIL", []) == ["DCGM_FI_DEV_GPU_UTIL"]
    busy, _ = busy_queries("DCGM_FI_DEV_GPU_UTIL", timedelta(seconds=30), ["a"])
    assert " or " in busy
    busy, _ = busy_queries("DCGM_FI_PROF_SM_ACTIVE * 100", timedelta(seconds=30), ["a"])
    assert " or " not in busy
    assert "(DCGM_FI_PROF_SM_ACTIVE * 100)[30s:]" in busy


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


def test_the_consumer_is_read_from_exported_labels_where_a_series_has_them() -> None:
    """Scraped through a ServiceMonitor with honorLabels false, namespace and pod are the
    exporter's own and exported_namespace/exported_pod the consumer's."""
    exporter = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p"}
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {**exporter, "exported_namespace": "a", "exported_pod": "p"},
                    "values": [[1767225600, "3"]],
                },
                {
                    "metric": {**exporter, "exported_namespace": "a", "exported_pod": "p"},
                    "values": [[1767225660, "5"]],
                },
                {"metric": {"namespace": "b", "pod": "q"}, "values": [[1767225600, "7"]]},
            ],
        },
    }
    assert set(parse_matrix(body)) == {("a", "p"), ("b", "q")}
    seen = {(s.namespace, s.pod): s for s in parse_seen(body)}
    assert set(seen) == {("a", "p"), ("b", "q")}
    assert (seen["a", "p"].first, seen["a", "p"].last) == (1767225600, 1767225660)
    assert seen["a", "p"].accelerators == 2


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


def serve_range_answer(body: bytes, *, pieces: int) -> Callable[[], Awaitable[web.AppRunner]]:
    """A local HTTP server answering every range query with `body`, sent chunked in
    `pieces` writes with a pause between them, as a large answer arrives over a network."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        size = -(-len(body) // pieces)
        for i in range(0, len(body), size):
            await response.write(body[i : i + size])
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/api/v1/query_range", answer)
        app.router.add_get("/api/v1/query", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    return start


def matrix(pods: int, steps: int) -> bytes:
    values = [[1_764_590_400 + 10 * i, "42"] for i in range(steps)]
    result = [
        {"metric": {"namespace": "ns", "pod": f"pod-{p}"}, "values": values} for p in range(pods)
    ]
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}
    ).encode()


def query_local(body: bytes, *, pieces: int) -> dict[tuple[str, str], list[Point]]:
    async def scenario() -> dict[tuple[str, str], list[Point]]:
        runner = await serve_range_answer(body, pieces=pieces)()
        port = runner.addresses[0][1]
        try:
            t = datetime(2025, 12, 1, 12, tzinfo=UTC)
            return await Prometheus(f"http://127.0.0.1:{port}").busy(
                "up",
                namespaces=["ns"],
                start=t,
                end=t + timedelta(minutes=5),
                step=timedelta(seconds=10),
            )
        finally:
            await runner.cleanup()

    return asyncio.run(scenario())


def test_a_large_answer_arriving_in_pieces_is_read_whole() -> None:
    """500 pods x 31 steps is ~1 MB of JSON: one read() returned only its first part."""
    samples = query_local(matrix(500, 31), pieces=20)
    assert len(samples) == 500
    assert all(len(points) == 31 for points in samples.values())


def test_an_answer_over_the_cap_is_unavailability_not_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prometheus, "MAX_RESPONSE", 100_000)
    with pytest.raises(MetricsUnavailable, match="over 100000 bytes"):
        query_local(matrix(500, 31), pieces=20)


def test_a_malformed_answer_is_metrics_unavailable_never_a_crash() -> None:
    """A catch-up that raised anything else failed its budget's evaluation, and the next
    evaluation caught up again: a budget wedged by one bad answer."""
    series = [{"metric": {"namespace": "a", "pod": "p"}, "values": [["x", "1"]]}]
    body = {"status": "success", "data": {"resultType": "matrix", "result": series}}

    async def scenario() -> None:
        runner = await serve_range_answer(json.dumps(body).encode(), pieces=1)()
        port = runner.addresses[0][1]
        t = datetime(2025, 12, 1, 12, tzinfo=UTC)
        try:
            with pytest.raises(MetricsUnavailable, match="unreadable"):
                await Prometheus(f"http://127.0.0.1:{port}").seen(["a"], t, t + timedelta(1))
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_an_answer_nested_past_the_parser_s_depth_is_unavailability() -> None:
    """A tenant-shaped or broken answer of deeply nested arrays made json.loads raise
    RecursionError, which no handler caught: the evaluation failed instead of reading
    "utilization unavailable"."""
    with pytest.raises(MetricsUnavailable, match="unreadable"):
        query_local(b"[" * 100_000 + b"]" * 100_000, pieces=1)


@given(st.lists(st.text(max_size=70), max_size=8))
@example(["team-a\n"])  # `$` matches before a final newline: a regex `match` let it in
def test_no_namespace_name_is_spliced_into_promql_unless_it_is_a_dns_label(
    names: list[str],
) -> None:
    """A quote, brace or `|` in a name would change the query; such names are left out
    (unnarrowed rather than injected)."""
    found = selectors('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', names)
    safe = [n for n in names if re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", n)]
    if not safe:
        assert found == ['DCGM_FI_DEV_GPU_UTIL{gpu="0"}']
        return
    among = "|".join(sorted(safe))
    assert found == [
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0", exported_namespace="", namespace=~"{among}"}}',
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0", exported_namespace=~"{among}"}}',
    ]
