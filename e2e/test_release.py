"""A release, installed as an admin installs it: from an OCI registry, by digest.

`make release` pushes the operator image and the chart to the harness's registry (the CNCF
Distribution registry, over TLS with the cluster CA); `helm install oci://...` installs the
chart from there, the real node pulls the operator image by the digest the chart pins, and
the operator, running in the cluster, suspends a Job whose budget is spent. The release's
ServiceMonitor and PrometheusRule are loaded by the harness's Prometheus Operator: the
operator's metrics are scraped through the ServiceMonitor and every shipped rule evaluates.

Needs the real node (root; CI has it): without one it skips.
"""

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    REAL_NODE_LABEL,
    REAL_NODE_TOLERATION,
    ROOT,
    Cluster,
    budget_manifest,
    events_for,
    free_port,
    gpu_job,
    helm,
    helm_uninstall,
    read_env,
    wait_for,
)
from monitoring import MONITORING, loaded_groups, managing_namespace
from trainwarden.testing.builders import INSTANCE_LABEL

RELEASE = NAMESPACE = "trainwarden-release"
INSTANCE = "release"
"""The release's operator governs only policies labelled trainwarden.dev/instance=release:
no other operator of the session acts on this test's budget, and it acts on no other's."""
PORTS = free_port(), free_port(), free_port()
"""Health, metrics and webhook ports of the release's operator, on the host network."""


@pytest.fixture(scope="module")
def env(cluster: Cluster) -> dict[str, str]:
    values = read_env(CLUSTER_DIR / "cluster.env")
    if os.geteuid() != 0 or "REAL_NODE" not in values:
        pytest.skip("the real node pulls the released image: make cluster as root")
    # Idempotent; renders containerd's hosts.toml for the registry (its CA).
    subprocess.run([str(ROOT / "e2e/cluster/node/node-up.sh")], check=True, cwd=ROOT)
    return values


@pytest.fixture(scope="module")
def released(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`make release` of a version no earlier run pushed, into the harness's registry; its
    dist/ directory removed after the module (the registry keeps the artifacts)."""
    version = f"0.0.0-e2e.{int(time.time())}"
    result = subprocess.run(
        ["make", "--no-print-directory", "release", f"VERSION={version}",
         f"REGISTRY={env['REGISTRY']}/e2e"],
        cwd=ROOT, env={**os.environ, "REGISTRY_CA": env["REGISTRY_CA"]},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    artifacts = read_env(ROOT / "dist" / version / "release.env")
    for digest in (artifacts["IMAGE_DIGEST"], artifacts["CHART_DIGEST"]):
        assert digest in result.stdout, f"make release printed {digest}"
    yield artifacts
    shutil.rmtree(ROOT / "dist" / version)


def registry_digest(env: dict[str, str], repository: str, tag: str, media_type: str) -> str:
    """What the registry itself says the tag points at (the OCI distribution API)."""
    request = urllib.request.Request(
        f"https://{env['REGISTRY']}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": media_type},
    )
    context = ssl.create_default_context(cafile=env["REGISTRY_CA"])
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return str(response.headers["Docker-Content-Digest"])


def test_make_release_pushes_the_image_the_real_node_runs_and_a_chart_pinned_to_it(
    env: dict[str, str], released: dict[str, str]
) -> None:
    version, digest = released["VERSION"], released["IMAGE_DIGEST"]
    oci_manifest = "application/vnd.oci.image.manifest.v1+json"
    assert registry_digest(env, "e2e/trainwarden", version, oci_manifest) == digest
    # The archive the real node imports (node/image.sh): the same manifest, byte for byte.
    archive = read_env(CLUSTER_DIR / "images" / "images.env")["TRAINWARDEN_ARCHIVE"]
    index = subprocess.run(
        ["tar", "-xOf", archive, "index.json"], capture_output=True, check=True
    ).stdout
    assert json.loads(index)["manifests"][0]["digest"] == digest
    chart = registry_digest(
        env, "e2e/charts/trainwarden", version, "application/vnd.oci.image.manifest.v1+json"
    )
    assert chart == released["CHART_DIGEST"]


def values(
    env: dict[str, str], instance: str = INSTANCE, ports: tuple[int, int, int] = PORTS
) -> dict[str, Any]:
    """This cluster's values only (the real node, the API server on the host's loopback, the
    host ports): the image is the chart's default, its digest. pullPolicy Always makes the
    node ask the registry at every start, so its log shows this test's pull."""
    health, metrics, webhook = ports
    return {
        "image": {"pullPolicy": "Always"},
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [REAL_NODE_TOLERATION],
        "hostNetwork": True,
        "env": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": env["KUBE_APISERVER_URL"].split(":")[-1]},
        ],
        "webhook": {"port": webhook, "url": f"https://127.0.0.1:{webhook}/hold"},
        "operator": {
            "prometheusUrl": env["PROMETHEUS_URL"],
            "metricsPort": metrics,
            "healthPort": health,
            "instance": instance,
        },
    }


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, env: dict[str, str], released: dict[str, str]
) -> Iterator[tuple[client.V1Pod, list[str]]]:
    """`helm install` from the registry; yields the operator's pod once it leads, and the
    registry's log lines of manifest requests containerd made meanwhile."""
    registry_log = CLUSTER_DIR / "state" / "logs" / "registry.log"
    seen = registry_log.stat().st_size
    started = time.monotonic()
    helm(
        env["KUBECONFIG"], "install", RELEASE, f"oci://{env['REGISTRY']}/e2e/charts/trainwarden",
        "--version", released["VERSION"], "--ca-file", env["REGISTRY_CA"],
        "--namespace", NAMESPACE, "--create-namespace", "--wait", "--timeout=180s",
        "-f", "-", stdin=json.dumps({**values(env), **MONITORED}),
    )  # fmt: skip
    try:
        wait_for(lambda: leading(PORTS[0]), timeout=60, what="the released operator to lead")
        print(f"\nhelm install from the registry: {time.monotonic() - started:.1f} s to leading")
        pods = client.CoreV1Api(cluster.api).list_namespaced_pod(NAMESPACE).items
        assert len(pods) == 1, [p.metadata.name for p in pods]
        with registry_log.open() as log:
            log.seek(seen)
            pulls = [line for line in log if "/manifests/" in line and "containerd" in line]
        yield pods[0], pulls
    finally:
        helm_uninstall(
            env["KUBECONFIG"], RELEASE, NAMESPACE, "--ignore-not-found"
        )  # the last test uninstalls it itself
        client.CoreV1Api(cluster.api).delete_namespace(NAMESPACE)


MONITORED = {
    "serviceMonitor": {"enabled": True, "interval": "5s", "scrapeTimeout": "4s"},
    "prometheusRule": {"enabled": True},
}
"""The release's monitoring objects, for the Prometheus Operator of the harness; scraped
every 5 s (the chart's default is 30 s) so the test waits seconds, not minutes."""


def leading(health_port: int) -> bool:
    url = f"http://127.0.0.1:{health_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(json.load(response).get("controllers"))
    except OSError:
        return False


def test_the_real_node_runs_the_operator_pulled_by_digest_from_the_registry(
    env: dict[str, str], released: dict[str, str], installed: tuple[client.V1Pod, list[str]]
) -> None:
    pod, pulls = installed
    digest = released["IMAGE_DIGEST"]
    reference = f"{env['REGISTRY']}/e2e/trainwarden@{digest}"
    assert pod.spec.node_name == env["REAL_NODE"]
    assert pod.spec.containers[0].image == reference
    status = pod.status.container_statuses[0]
    assert status.ready
    assert status.image_id.endswith(f"@{digest}"), status.image_id
    # The node's containerd asked the registry for that manifest by its digest.
    asked = [line for line in pulls if f"/v2/e2e/trainwarden/manifests/{digest}" in line]
    assert asked, "the registry's log shows no pull by digest:\n" + "".join(pulls)


def test_the_release_is_scraped_through_its_servicemonitor_and_every_shipped_rule_evaluates(
    cluster: Cluster, installed: tuple[client.V1Pod, list[str]]
) -> None:
    """The ServiceMonitor's job (serviceMonitor/<namespace>/<name>/0) scrapes the operator's
    pod through its metrics Service, with the target labels the chart's rules select on;
    the PrometheusRule's groups are loaded from the operator's rule file, every rule the
    chart ships among them, each evaluated without error after the scrape was up."""
    if not managing_namespace():
        pytest.skip("the harness's Prometheus is not managed by Prometheus Operator")
    pod, _ = installed
    objects = client.CustomObjectsApi(cluster.api)
    monitor = objects.get_namespaced_custom_object(
        *MONITORING, NAMESPACE, "servicemonitors", RELEASE
    )
    rule = objects.get_namespaced_custom_object(*MONITORING, NAMESPACE, "prometheusrules", RELEASE)
    pool = f"serviceMonitor/{NAMESPACE}/{monitor['metadata']['name']}/0"
    job = f"{RELEASE}-metrics"

    def scraped() -> dict[str, Any] | None:
        url = f"{cluster.prometheus_url}/api/v1/targets?state=active"
        with urllib.request.urlopen(url, timeout=10) as response:
            targets = json.load(response)["data"]["activeTargets"]
        ours = [t for t in targets if t["scrapePool"] == pool and t["health"] == "up"]
        return ours[0] if ours else None

    target = wait_for(scraped, timeout=120, what=f"Prometheus scraping {pool}")
    up_since = datetime.now(UTC)
    labels = target["labels"]
    assert (labels["job"], labels["namespace"]) == (job, NAMESPACE)
    assert labels["pod"] == pod.metadata.name
    assert (labels["service"], labels["endpoint"]) == (job, "metrics")
    series = f'trainwarden_build_info{{job="{job}", namespace="{NAMESPACE}"}}'
    wait_for(lambda: cluster.prometheus_query(series), timeout=60, what="the operator's metrics")

    shipped = {r.get("alert") or r["record"] for g in rule["spec"]["groups"] for r in g["rules"]}
    marker = f"/{NAMESPACE}-{RELEASE}-"  # the operator's rule file: <namespace>-<name>-<uid>

    def evaluated() -> list[dict[str, Any]] | None:
        rules = [r for g in loaded_groups(cluster) if marker in g["file"] for r in g["rules"]]
        fresh = [r for r in rules if datetime.fromisoformat(r["lastEvaluation"]) > up_since]
        return rules if len(fresh) == len(rules) and {r["name"] for r in rules} == shipped else None

    rules = wait_for(evaluated, timeout=120, what="every shipped rule evaluated after the scrape")
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    down = next(r for r in rules if r["name"] == "TrainwardenOperatorDown")
    assert down["state"] == "inactive", down
    print(f"\n{len(rules)} rules of the release's PrometheusRule evaluated, all ok")


def test_the_released_operator_suspends_a_job_whose_budget_is_spent(
    cluster: Cluster, namespace: str, installed: tuple[client.V1Pod, list[str]]
) -> None:
    batch = client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("train", 2))
    name = f"{namespace}-tb"
    budget = budget_manifest(
        name,
        namespace,
        0.002,  # 7.2 GPU-seconds: 2 GPUs spend it in under 4 s
        enforcement={"gracePeriod": "0s", "order": ["Newest"]},
    )
    budget["metadata"].setdefault("labels", {})[INSTANCE_LABEL] = INSTANCE
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", budget
    )
    job = wait_for(
        lambda: (j := batch.read_namespaced_job("train", namespace)).spec.suspend and j,
        timeout=90,
        what="the Job suspended by the released operator",
    )
    assert job.metadata.labels["trainwarden.dev/suspended-by"] == name


def test_uninstalling_the_release_resumes_and_starts_what_it_held_on_the_real_node(
    cluster: Cluster, env: dict[str, str], namespace: str, installed: tuple[client.V1Pod, list[str]]
) -> None:
    """Last (it uninstalls the module's release): the chart's pre-delete hook runs the
    released image on the real node, stops the operator, resumes the Job its budget
    suspended and starts the Job it held; the budget stays."""
    batch = client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("train", 2))
    name = f"{namespace}-tb"
    made = budget_manifest(name, namespace, 0.002, enforcement={"gracePeriod": "0s"})
    made["metadata"].setdefault("labels", {})[INSTANCE_LABEL] = INSTANCE
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", made
    )
    wait_for(
        lambda: batch.read_namespaced_job("train", namespace).spec.suspend,
        timeout=90,
        what="the Job suspended by the released operator",
    )
    held = gpu_job("next", 1)
    held["metadata"]["namespace"] = namespace

    def create(dry_run: str) -> str:
        """`kubectl create` of the Job as a user runs it: its warnings."""
        result = subprocess.run(
            [str(CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", str(cluster.kubeconfig),
             "create", f"--dry-run={dry_run}", "-f", "-"],
            input=json.dumps(held), capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return result.stderr

    wait_for(lambda: "is held" in create("server"), timeout=60, what="the webhook holding")
    assert "is held" in create("none")
    started = time.monotonic()
    out = helm_uninstall(env["KUBECONFIG"], RELEASE, NAMESPACE)
    print(f"\nhelm uninstall (the hook on the real node): {time.monotonic() - started:.1f} s")
    for job in ("train", "next"):
        found = batch.read_namespaced_job(job, namespace)
        assert found.spec.suspend is False, (job, found.metadata)
        assert "trainwarden.dev/suspended-by" not in (found.metadata.labels or {})
        assert "trainwarden.dev/held-by" not in (found.metadata.annotations or {})
        reasons = {e.reason for e in events_for(cluster, namespace, job)}
        assert "ReleasedOnUninstall" in reasons, (job, reasons, out)
    assert client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", name
    ), "policies stay"
