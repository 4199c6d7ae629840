"""Prices from the cluster, through the real Prometheus (issue 27, item 7).

OpenCost is not run here (it needs a cloud's or a CSV's pricing, and no GPU); its stand-in
serves the metric OpenCost and Kubecost export, `node_gpu_hourly_cost` ("hourly cost per
GPU on this node"), with OpenCost's label set (instance, node, instance_type, region,
provider_id, arch), and Prometheus scrapes it as a ServiceMonitor would (honorLabels
false: its `instance` label is Prometheus's). A budget reading those prices charges a pod
on the priced node at its node's price and another at its own rate, and says so.
"""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from harness import (
    Cluster,
    Operator,
    budget,
    create_policy,
    free_port,
    get_budget,
    simulated,
    start_operator,
    wait_for,
)
from monitoring import TARGETS
from trainwarden.testing.builders import PodBuilder

PRICE, RATE = 2.75, 1.25  # per GPU-hour: the node's as the cost tool says, the budget's own
LABELS = ("instance", "node", "instance_type", "region", "provider_id", "arch")


@pytest.fixture
def opencost(cluster: Cluster) -> Iterator[Gauge]:
    """OpenCost's price metric, served and scraped (job trainwarden-metrics, namespace
    opencost); the test sets its values."""
    registry = CollectorRegistry()
    gauge = Gauge("node_gpu_hourly_cost", "hourly cost per GPU on this node", LABELS,
                  registry=registry)  # fmt: skip
    port = free_port()
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    target = TARGETS / f"e2e-opencost-{port}.json"
    listed = [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "opencost"}}]
    target.write_text(json.dumps(listed))
    try:
        yield gauge
    finally:
        target.unlink(missing_ok=True)
        server.shutdown()


@pytest.fixture
def operator(cluster: Cluster, crds: None, tmp_path: Path) -> Iterator[tuple[Operator, str]]:
    instance = f"prices-{uuid.uuid4().hex[:6]}"
    running = start_operator(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        prometheus_url=cluster.prometheus_url,
        args=(f"--instance={instance}",),
    )
    yield running, instance
    running.stop()


def running_on(cluster: Cluster, namespace: str, name: str, node: str | None = None) -> str:
    """A 2-GPU pod running (on `node`, else where the scheduler puts it): its node."""
    made = simulated(PodBuilder(name, namespace), 2)
    pod = (made.node(node) if node else made).build()
    client.CoreV1Api(cluster.api).create_namespaced_pod(namespace, pod)
    found = wait_for(
        lambda: (
            (p := client.CoreV1Api(cluster.api).read_namespaced_pod(name, namespace))
            and p.status.phase == "Running"
            and p
        ),
        timeout=60,
        what=f"pod {name} running",
    )
    return str(found.spec.node_name)


def test_a_budget_prices_gpus_at_the_cluster_s_node_price_and_its_rate_elsewhere(
    cluster: Cluster, namespace: str, opencost: Gauge, operator: tuple[Operator, str]
) -> None:
    _, instance = operator
    priced = running_on(cluster, namespace, "priced")
    opencost.labels(
        instance="10.0.0.7:9003", node=priced, instance_type="p4d.24xlarge",
        region="us-east-1", provider_id=f"aws:///us-east-1a/i-{priced}", arch="amd64",
    ).set(PRICE)  # fmt: skip
    wait_for(
        lambda: cluster.prometheus_query(f'node_gpu_hourly_cost{{node="{priced}"}}'),
        timeout=60,
        what="Prometheus scraping the price",
    )
    gpu_nodes = [
        n.metadata.name
        for n in client.CoreV1Api(cluster.api).list_node().items
        if float((n.status.allocatable or {}).get("nvidia.com/gpu", 0)) >= 2 and not n.spec.taints
    ]
    other = running_on(cluster, namespace, "other", next(n for n in gpu_nodes if n != priced))
    name = f"{namespace}-b"
    made = budget(name, namespace, 1000).instance(instance).cost(1e6).prices_from()
    create_policy(cluster, "trainingbudgets", made.accelerator_rate(RATE).build())

    def prices() -> dict[str, int] | None:
        found = (get_budget(cluster, name).get("status") or {}).get("prices")
        return found if found and found.get("fromQuery") else None

    said = wait_for(prices, timeout=60, what="status.prices saying the query priced a node")
    print(f"\nnodes: {priced} (priced), {other}; status.prices: {said}")
    assert (said["fromQuery"], said["fromRates"], said["unpriced"]) == (1, 1, 0)
    assert said["query"] == "node_gpu_hourly_cost"
    burn = get_budget(cluster, name)["status"]["burnRatePerHour"]
    assert burn["cost"] == pytest.approx(2 * PRICE + 2 * RATE)
