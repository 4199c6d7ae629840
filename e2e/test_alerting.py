"""An exhausted budget's alert reaches Alertmanager's receiver with the labels a route
needs: the chart's PrometheusRule loaded into the harness's real Prometheus, which
evaluates it over a running operator's metrics and sends to the harness's real
Alertmanager (built from its Go module), whose webhook receiver is this module."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    Cluster,
    Operator,
    budget_manifest,
    create_policy,
    gpu_job,
    read_env,
    wait_for,
)
from monitoring import register_target, rule_spec, rules_loaded


class Receiver(ThreadingHTTPServer):
    """Alertmanager's webhook receiver: every alert it was sent, in order."""

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.alerts: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def received(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.alerts)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.alerts += body["alerts"]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver(int(read_env(CLUSTER_DIR / "cluster.env")["ALERT_RECEIVER_PORT"]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def rules(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """The chart's rules (default values: only Enforce budgets alert) in Prometheus."""
    spec = rule_spec()
    with rules_loaded(cluster, "e2e-alerting", spec):
        yield spec


def test_an_exhausted_enforce_budget_pages_with_its_routing_labels(
    cluster: Cluster,
    operator: Operator,
    receiver: Receiver,
    rules: dict[str, Any],
    namespace: str,
) -> None:
    """The Enforce budget's alert arrives labelled budget and mode, with its runbook; the
    DryRun budget beside it, as spent, raises none (by default DryRun does not page)."""
    target = register_target(cluster, operator)
    try:
        job = gpu_job("burn", annotations={"sim.trainwarden.dev/complete-after": "30s"})
        client.BatchV1Api(cluster.api).create_namespaced_job(namespace, job)
        enforce, dry = f"{namespace}-enforce", f"{namespace}-rehearsal"
        for name, mode in ((enforce, "Enforce"), (dry, "DryRun")):
            create_policy(
                cluster, "trainingbudgets", budget_manifest(name, namespace, 0.0001, mode=mode)
            )
        spent = 'trainwarden_budget_used_ratio{budget="%s"} >= 1'
        wait_for(
            lambda: cluster.prometheus_query(spent % dry),
            timeout=90,
            what="the DryRun budget spent",
        )

        def arrived() -> list[dict[str, Any]]:
            return [a for a in receiver.received() if a["labels"].get("budget") == enforce]

        wait_for(arrived, timeout=120, every=1, what="the Enforce budget's alert at the receiver")
        alert = arrived()[0]
        assert alert["labels"]["alertname"] == "TrainwardenBudgetExceeded"
        assert alert["labels"]["mode"] == "Enforce"
        assert alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["runbook_url"].endswith("#trainwardenbudgetexceeded")
        assert alert["annotations"]["summary"] == f"Enforce TrainingBudget {enforce} is spent."
        firing = 'ALERTS{alertname="TrainwardenBudgetExceeded", budget="%s"}'
        assert not cluster.prometheus_query(firing % dry), "a DryRun budget paged"
        assert not [a for a in receiver.received() if a["labels"].get("budget") == dry]
    finally:
        target.unlink(missing_ok=True)
