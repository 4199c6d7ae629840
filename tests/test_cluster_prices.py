"""Prices from the cluster (issue 27, item 7): a budget with acceleratorHourFrom prices each
node's accelerator-hours as its query says (OpenCost's node_gpu_hourly_cost), falls back
to its own acceleratorHour rates for the nodes the answer does not price, keeps the last
answer through failed reads until it is stale, and says in status.prices where each price
came from. Whatever the query answers is bounded and validated (hypothesis)."""

import asyncio
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.adapters.prometheus import MAX_PRICED_NODES, MetricsUnavailable, parse_prices
from trainwarden.budget.controller import BudgetController
from trainwarden.budget.prices import REFRESH, STALE
from trainwarden.core.accounting import AcceleratorPrice, NodePrices, PriceTable
from trainwarden.testing.builders import BudgetBuilder, NamespaceBuilder, PodBuilder
from world import JSON, World

TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
NS = "team-a"
HIGHEST = 1e9


class Source:
    """A price query's answers, in order; an exception is a failed read."""

    def __init__(self, *answers: dict[str, float] | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []

    async def node_prices(self, query: str, node_label: str) -> dict[str, float]:
        self.asked.append((query, node_label))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def gpu_node(world: World, name: str, **labels: str) -> None:
    world.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
               "status": {"allocatable": {"nvidia.com/gpu": "8"}}})  # fmt: skip


def status(world: World, name: str = "b") -> JSON:
    return dict(world.read(*TB, None, name)["status"])


def world_with_pods() -> World:
    """Three 8-GPU pods running on three nodes: one the query prices, one only the rates
    price, one nobody prices."""
    world = World()
    world.put(NamespaceBuilder(NS).build())
    for node, pool in (("n1", "a100"), ("n2", "h100"), ("n3", "t4")):
        gpu_node(world, node, pool=pool)
        pod = PodBuilder(f"on-{node}", NS).gpus(8).node(node).started(world.now)
        world.put(pod.build())
    return world


def budget() -> BudgetBuilder:
    return (
        BudgetBuilder("b")
        .namespaces(NS)
        .cost(1e6)
        .accelerator_rate(1.0, node_labels={"pool": "h100"})
        .accelerator_rate(3.0, node_labels={"pool": "n1-never"})
        .prices_from()
    )


async def evaluated(c: BudgetController, world: World) -> JSON:
    await c._evaluate("b")
    c.policy_event("MODIFIED", world.read(*TB, None, "b"))
    return status(world)


def test_the_query_prices_its_nodes_the_rates_the_rest_and_status_says_which() -> None:
    async def scenario() -> None:
        world = world_with_pods()
        source = Source({"n1": 2.5, "elsewhere": 9.0})
        c = BudgetController(world.fake, world.cache, clock=world.clock, prices=source)
        world.cache.listeners.add(c.index, c.holds, c.labels)
        c.policy_event("ADDED", world.put(budget().build()))
        got = await evaluated(c, world)
        assert source.asked == [("node_gpu_hourly_cost", "node")]
        assert got["burnRatePerHour"]["cost"] == pytest.approx(8 * 2.5 + 8 * 1.0)
        prices = got["prices"]
        assert (prices["fromQuery"], prices["fromRates"], prices["unpriced"]) == (1, 1, 1)
        assert prices["nodesPriced"] == 2
        assert "message" not in prices

        world.advance(60)
        await evaluated(c, world)
        assert len(source.asked) == 1, "read again only once REFRESH has passed"

    asyncio.run(scenario())


def test_a_failing_query_keeps_the_last_answer_until_stale_then_the_rates_price() -> None:
    async def scenario() -> None:
        world = world_with_pods()
        down = MetricsUnavailable("Prometheus at http://p is unreachable")
        source = Source({"n1": 2.5}, down)
        c = BudgetController(world.fake, world.cache, clock=world.clock, prices=source)
        world.cache.listeners.add(c.index, c.holds, c.labels)
        c.policy_event("ADDED", world.put(budget().build()))
        await evaluated(c, world)
        world.advance(REFRESH.total_seconds())
        got = await evaluated(c, world)
        assert got["burnRatePerHour"]["cost"] == pytest.approx(8 * 2.5 + 8 * 1.0)
        assert "unreachable" in got["prices"]["message"]
        assert got["prices"]["fromQuery"] == 1
        world.advance(STALE.total_seconds())
        got = await evaluated(c, world)
        assert got["burnRatePerHour"]["cost"] == pytest.approx(8 * 1.0), "n1: no rate matches"
        assert (got["prices"]["fromQuery"], got["prices"]["unpriced"]) == (0, 2)
        assert "older than" in got["prices"]["message"]

    asyncio.run(scenario())


def test_budgets_sharing_a_query_read_it_once_and_a_query_nobody_asks_is_forgotten() -> None:
    async def scenario() -> None:
        world = world_with_pods()
        source = Source({"n1": 2.5})
        c = BudgetController(world.fake, world.cache, clock=world.clock, prices=source)
        world.cache.listeners.add(c.index, c.holds, c.labels)
        for name in ("b", "c"):
            made = budget().build()
            made["metadata"]["name"] = name
            c.policy_event("ADDED", world.put(made))
        await c._evaluate("b")
        await c._evaluate("c")
        assert len(source.asked) == 1
        assert status(world, "c")["prices"]["fromQuery"] == 1
        for name in ("b", "c"):
            c.policy_event("DELETED", world.read(*TB, None, name))
        assert c.book._answers == {}

    asyncio.run(scenario())


def test_a_node_price_comes_before_the_rates_only_for_its_resource() -> None:
    rates = (AcceleratorPrice("nvidia.com/gpu", {}, 1.0), AcceleratorPrice("amd.com/gpu", {}, 4.0))
    table = PriceTable(rates, nodes=NodePrices("nvidia.com/gpu", {"n1": 2.5}))
    assert table.accelerator_price("nvidia.com/gpu", {}, "n1") == 2.5
    assert table.accelerator_price("nvidia.com/gpu", {}, "n2") == 1.0
    assert table.accelerator_price("amd.com/gpu", {}, "n1") == 4.0
    assert (table.source("nvidia.com/gpu", "n1", {}), table.source("amd.com/gpu", "n1", {})) == (
        "query",
        "rates",
    )


values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "-0", "0", "2.5", "1e9", "1000000001"]),
)
labels = st.dictionaries(
    st.sampled_from(["node", "instance", "Node", "exported_node"]),
    st.text(max_size=300) | st.sampled_from(["n1", "n2", ""]),
    max_size=4,
)


def _valid(value: str) -> float | None:
    number = float(value)
    return number if 0 <= number <= HIGHEST else None


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(labels, values), max_size=30))
def test_whatever_the_query_answers_only_real_prices_of_named_nodes_are_read(
    series: list[tuple[dict[str, str], str]],
) -> None:
    """Invariant: every node priced is named by a series' own `node` label (1 to 253
    characters), at the highest valid price among its series, within [0, 1e9]; a series
    without a valid price or name prices nothing."""
    body: dict[str, Any] = {
        "status": "success",
        "data": {"resultType": "vector", "result": [
            {"metric": m, "value": [0, v]} for m, v in series]},
    }  # fmt: skip
    got = parse_prices("node", HIGHEST)(body)
    expected: dict[str, float] = {}
    for metric, value in series:
        node, price = metric.get("node"), _valid(value)
        if node and len(node) <= 253 and price is not None:
            expected[node] = max(price, expected.get(node, 0.0))
    assert got == expected
    assert all(0 <= p <= HIGHEST and not math.isnan(p) for p in got.values())


def test_an_answer_of_more_series_than_nodes_is_refused_not_read() -> None:
    result = [{"metric": {"node": f"n{i}"}, "value": [0, "1"]} for i in range(MAX_PRICED_NODES + 1)]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    with pytest.raises(MetricsUnavailable, match="series"):
        parse_prices("node", HIGHEST)(body)
