"""The chart's alerts and dashboard, executed against the real Prometheus scraping a running
operator: every dashboard query returns data, the budget alerts fire on budgets that are
nearly spent and spent, the operator-down alert fires when it is gone, and every alert
expression is valid PromQL over series the operator really exports."""

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    Cluster,
    Operator,
    budget_manifest,
    create_policy,
    gpu_job,
    idle_policy_manifest,
    pod_template,
    publish_utilization,
    wait_for,
)
from monitoring import register_target, rendered, rule_spec


def query(cluster: Cluster, expr: str) -> list[dict[str, Any]]:
    url = f"{cluster.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.fixture(scope="module")
def scraped(cluster: Cluster, operator: Operator) -> Iterator[Path]:
    """The module's operator registered as a scrape target, as the chart's ServiceMonitor
    would: job trainwarden-metrics, in the release's namespace."""
    target = register_target(cluster, operator)
    yield target
    target.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def activity(cluster: Cluster, scraped: Path) -> Iterator[str]:
    """Budgets nearly spent and spent (DryRun), an idle pod under a NotifyOnly policy."""
    namespace = f"tw-obs-{scraped.stem.split('-')[1]}"
    core = client.CoreV1Api(cluster.api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    job = gpu_job("nine-seconds", annotations={"sim.trainwarden.dev/complete-after": "9s"})
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, job)
    idle = {"apiVersion": "v1", "kind": "Pod", **pod_template(labels={"app": "idle"})}
    idle["metadata"]["name"] = "idle"
    core.create_namespaced_pod(namespace, idle)
    publish_utilization(cluster, namespace, "idle", 1)
    # The Job's 9 GPU-seconds (not the idle pod's) against 10 (90 %) and 3.6 (250 %).
    scope = {"namespaces": [namespace], "selector": {"matchLabels": {"job-name": "nine-seconds"}}}
    meta = {"name": "data", "labels": {"job-name": "nine-seconds"}}  # in the scope
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta}
    claim["spec"] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    core.create_namespaced_persistent_volume_claim(namespace, claim)  # the storage panel's
    # Priced: the cost panel has data, and storage is accounted (a storage rate).
    storage = [{"storageClass": "", "price": 0.0001}]
    rates = {"currency": "EUR", "cpuCoreHour": 0.05, "storageGiBHour": storage}
    for name, hours in ((f"{namespace}-nearly", 10 / 3600), (f"{namespace}-spent", 0.001)):
        manifest = budget_manifest(name, namespace, hours, mode="DryRun", scope=scope, rates=rates)
        create_policy(cluster, "trainingbudgets", manifest)
    create_policy(
        cluster,
        "idlereclaimpolicies",
        idle_policy_manifest(f"{namespace}-idle", namespace, action="NotifyOnly"),
    )
    yield namespace
    api = client.CustomObjectsApi(cluster.api)
    for plural, name in (
        ("trainingbudgets", f"{namespace}-nearly"),
        ("trainingbudgets", f"{namespace}-spent"),
        ("idlereclaimpolicies", f"{namespace}-idle"),
    ):
        api.delete_cluster_custom_object("trainwarden.dev", "v1alpha1", plural, name)
    core.delete_namespace(namespace)


NOT_PROVOKED = {
    "Checkpoint bytes freed (1h)": "a CheckpointPolicy prune (tests/test_metrics.py: exported)",
}
"""Panels whose series this module does not provoke, and where they are proven."""


def test_every_dashboard_query_returns_data(cluster: Cluster, activity: str) -> None:
    """With each variable at All (Grafana sends its allValue, `.*`)."""
    config_map = next(
        d for d in rendered("grafanaDashboard.enabled=true") if d["kind"] == "ConfigMap"
    )
    dashboard = json.loads(config_map["data"]["trainwarden.json"])
    variables = [v["name"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for name in variables:  # each one's own query lists values
        (var,) = [v for v in dashboard["templating"]["list"] if v["name"] == name]
        series = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert series, var["query"]
        wait_for(lambda s=series: query(cluster, s[1]), timeout=120, what=f"values of ${name}")
    panels = [p for p in dashboard["panels"] if p["title"] not in NOT_PROVOKED]
    exprs = [t["expr"] for panel in panels for t in panel["targets"]]
    assert len(exprs) >= 13
    for expr in exprs:
        for name in variables:
            expr = expr.replace(f"${name}", ".*")
        wait_for(lambda e=expr: query(cluster, e), timeout=120, every=2, what=f"data for {expr}")


def alert_rules() -> dict[str, str]:
    """The rules with DryRun budgets alerting too: this module's budgets are DryRun (which
    modes alert by default is e2e/test_prometheus_conventions.py's)."""
    spec = rule_spec("prometheusRule.budgetAlertModes=Enforce|DryRun")
    return {r["alert"]: r["expr"] for g in spec["groups"] for r in g["rules"] if "alert" in r}


def test_budget_alerts_fire_on_real_budgets(cluster: Cluster, activity: str) -> None:
    rules = alert_rules()

    def firing(alert: str, budget: str) -> bool:
        return any(r["metric"].get("budget") == budget for r in query(cluster, rules[alert]))

    wait_for(
        lambda: firing("TrainwardenBudgetExceeded", f"{activity}-spent"),
        timeout=90,
        what="TrainwardenBudgetExceeded for the spent budget",
    )
    wait_for(
        lambda: firing("TrainwardenBudgetNearlySpent", f"{activity}-nearly"),
        timeout=90,
        what="TrainwardenBudgetNearlySpent for the 90 % budget",
    )
    assert not firing("TrainwardenBudgetExceeded", f"{activity}-nearly")


def test_every_alert_is_valid_promql_over_exported_series(cluster: Cluster, scraped: Path) -> None:
    """The error and conflict alerts are not provoked here; their expressions must still run
    and every series they name must exist."""
    for alert, expr in alert_rules().items():
        query(cluster, expr)  # asserts Prometheus accepted it
        for name in set(re.findall(r"\btrainwarden_[a-z_]+", expr)):
            wait_for(
                lambda n=name: query(cluster, f"count({n})"),
                timeout=60,
                what=f"series {name} (used by {alert})",
            )


def test_operator_down_alert_fires_when_the_operator_is_gone(
    cluster: Cluster, scraped: Path
) -> None:
    expr = alert_rules()["TrainwardenOperatorDown"]
    assert not query(cluster, expr), "silent while the operator is scraped"
    scraped.unlink()  # as when its pod is gone: no target, no up == 1
    wait_for(lambda: query(cluster, expr), timeout=60, what="TrainwardenOperatorDown firing")
