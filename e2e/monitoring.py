"""The chart's monitoring objects against the harness's Prometheus: render them as a release
named `trainwarden` in `trainwarden-system` would have them, and register a running
operator as the scrape target the chart's ServiceMonitor would make."""

import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from harness import CLUSTER_DIR, KUBE_VERSION, ROOT, Cluster, Operator, wait_for

TARGETS = CLUSTER_DIR / "state" / "prometheus" / "targets"
CHART = ROOT / "helm" / "trainwarden"
HELM = CLUSTER_DIR / "bin" / "helm"
RELEASE, NAMESPACE = "trainwarden", "trainwarden-system"  # job="trainwarden-metrics"


def rendered(*values: str) -> list[dict[str, Any]]:
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    args = [str(HELM), "template", "--kube-version", KUBE_VERSION, RELEASE, str(CHART)]
    args += ["--namespace", NAMESPACE]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def rule_spec(*values: str) -> dict[str, Any]:
    """The PrometheusRule's spec (its groups), as a Prometheus rule file holds them."""
    docs = rendered("prometheusRule.enabled=true", *values)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return dict(rule["spec"])


def register_target(cluster: Cluster, operator: Operator) -> Path:
    """The operator as a target of job trainwarden-metrics in the release's namespace; the
    caller unlinks the returned file to stop the scrape."""
    port = urllib.parse.urlparse(operator.metrics_url).port
    target = TARGETS / f"e2e-{port}.json"
    target.write_text(
        json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE}}])
    )
    instance = f'up{{job="trainwarden-metrics",instance="127.0.0.1:{port}"}} == 1'
    wait_for(
        lambda: cluster.prometheus_query(instance),
        timeout=60,
        what="Prometheus scraping the operator",
    )
    return target
