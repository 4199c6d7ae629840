"""The chart's monitoring objects against the harness's Prometheus: render them as a release
named `trainwarden` in `trainwarden-system` would have them, load rule groups the way the
harness's Prometheus takes them (PrometheusRule objects when Prometheus Operator manages
it, rule files otherwise), and register a running operator as a scrape target."""

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from harness import CLUSTER_DIR, KUBE_VERSION, ROOT, Cluster, Operator, read_env, wait_for

TARGETS = CLUSTER_DIR / "state" / "prometheus" / "targets"
RULE_FILES = CLUSTER_DIR / "state" / "prometheus" / "rules"  # the static Prometheus's
MONITORING = ("monitoring.coreos.com", "v1")
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


def managing_namespace() -> str | None:
    """The namespace of the Prometheus Operator-managed Prometheus, or None where the
    harness runs Prometheus from its static configuration (no real node)."""
    return read_env(CLUSTER_DIR / "cluster.env").get("PROMETHEUS_OPERATOR_NAMESPACE")


def loaded_groups(cluster: Cluster) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{cluster.prometheus_url}/api/v1/rules", timeout=10) as r:
        return list(json.load(r)["data"]["groups"])


@contextmanager
def rules_loaded(cluster: Cluster, name: str, spec: dict[str, Any]) -> Iterator[None]:
    """Rule groups (a PrometheusRule's spec) evaluated by the harness's Prometheus while the
    block runs: as PrometheusRule NAME, which the operator writes into the rule files it
    mounts, or as a rule file read on reload. Waits until every group is loaded, and on
    exit, however the block or the wait ended, until none is (the next test starts
    without them). One a run before left (a reused cluster) is replaced."""
    namespace = managing_namespace()
    objects = client.CustomObjectsApi(cluster.api)
    path = RULE_FILES / f"{name}.yaml"
    # The operator's file name is <ns>-<name>-<uid>.yaml.
    marker = f"/{namespace}-{name}-" if namespace else str(path)
    wanted = {g["name"] for g in spec["groups"]}

    def ours() -> set[str]:
        return {g["name"] for g in loaded_groups(cluster) if marker in g["file"]}

    def unload() -> None:
        if namespace:
            _delete_rule(objects, namespace, name)
        else:
            path.unlink(missing_ok=True)
            _reload(cluster)
        wait_for(lambda: not ours(), timeout=90, what=f"Prometheus unloading rules {name}")

    if namespace:
        unload()  # a stale one's groups would pass for the new one's
        body = {
            "apiVersion": "/".join(MONITORING),
            "kind": "PrometheusRule",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        objects.create_namespaced_custom_object(*MONITORING, namespace, "prometheusrules", body)
    else:
        path.write_text(yaml.safe_dump(spec))
        _reload(cluster)
    try:
        wait_for(lambda: ours() == wanted, timeout=90, what=f"Prometheus loading rules {name}")
        yield
    finally:
        unload()


def _delete_rule(objects: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Delete PrometheusRule NAME; one that is not there is fine."""
    try:
        objects.delete_namespaced_custom_object(*MONITORING, namespace, "prometheusrules", name)
    except client.ApiException as e:
        if e.status != 404:
            raise


def _reload(cluster: Cluster) -> None:
    request = urllib.request.Request(f"{cluster.prometheus_url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
