"""`trainwarden doctor` on the real API server, against the chart installed as
e2e/test_helm.py installs it: every check passes on a healthy install, then one thing at a
time is broken (a CRD's schema, a verb of the role, the Prometheus URL, the webhook's
operator) and its check fails, naming it, with exit code 1; a cluster it cannot reach or
that refuses it is exit 3.
"""

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness import (
    ROOT,
    Cluster,
    Operator,
    forget_utilization,
    free_port,
    helm,
    helm_uninstall,
    publish_utilization,
    simulated,
    start_operator,
    wait_for,
)
from trainwarden.testing.builders import NamespaceBuilder, PodBuilder

CHART = ROOT / "helm" / "trainwarden"
RELEASE = "trainwarden-doctor"  # contains the chart's name: fullname == release
NAMESPACE = "trainwarden-doctor"
DOCTOR = ROOT / ".venv" / "bin" / "trainwarden"


def doctor(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DOCTOR), "doctor", "--kubeconfig", str(kubeconfig), "-n", NAMESPACE, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def verdicts(cluster: Cluster, *args: str) -> tuple[dict[str, dict[str, str]], int]:
    """Each check's row by name, and the exit code, from `doctor -o json`."""
    run = doctor(cluster.kubeconfig, "-o", "json", *args)
    assert run.returncode in (0, 1), run.stderr
    document = json.loads(run.stdout)
    assert document["exitCode"] == run.returncode
    return {c["name"]: c for c in document["checks"]}, run.returncode


@pytest.fixture(scope="module")
def release(cluster: Cluster, crds: None) -> Iterator[str]:
    """The chart, installed for real into a "restricted" namespace; its webhook at this
    host's operator (webhook.url), as test_helm.py installs it. Yields the webhook URL."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    namespace = NamespaceBuilder(NAMESPACE).labels(
        {"pod-security.kubernetes.io/enforce": "restricted"}
    )
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(namespace.build()))
    port = free_port()
    helm(
        cluster.kubeconfig, "upgrade", "--install", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--wait", "--timeout=120s",
        "--set", f"operator.prometheusUrl={cluster.prometheus_url}",
        "--set", f"webhook.url=https://127.0.0.1:{port}/hold",
        # No CRD upgrade hook: its Job's pod lands on a kwok node, which runs nothing, and
        # the tests' `helm upgrade --wait` would wait for it (as in e2e/test_helm.py).
        "--set", "crds.upgrade=false",
        # Nor the uninstall hook, for the same reason (e2e/test_uninstall.py runs it).
        "--set", "uninstall.releaseAll=false",
    )  # fmt: skip
    yield str(port)
    helm_uninstall(cluster.kubeconfig, RELEASE, NAMESPACE)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


@pytest.fixture(scope="module")
def webhook_operator(
    cluster: Cluster, release: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The release's operator, run on this host (its pod lands on a kwok node): it serves
    the webhook and injects its CA. --instance: it governs no other test's policies."""
    log = tmp_path_factory.mktemp("doctor") / "operator.log"
    operator = start_operator(
        cluster.kubeconfig,
        log,
        args=(
            "--instance=doctor", f"--lease-namespace={NAMESPACE}",
            f"--webhook-port={release}", "--webhook-address=127.0.0.1",
            f"--webhook-secret={NAMESPACE}/{RELEASE}-webhook",
            f"--webhook-configuration={RELEASE}-hold", "--webhook-name=127.0.0.1",
        ),
    )  # fmt: skip
    yield operator
    operator.stop()


@pytest.fixture(scope="module")
def gpu_pod(cluster: Cluster, webhook_operator: Operator) -> Iterator[tuple[str, str]]:
    """Two running accelerator pods, one DCGM series scraped each way: the ServiceMonitor
    way (exported_* labels, honorLabels false) and with honorLabels true."""
    namespace = f"doc-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    for name, view in (("trainer", "serviceMonitor"), ("plain", "honorLabels")):
        pod = simulated(PodBuilder(name)).build()
        pod["metadata"]["namespace"] = namespace
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        cluster.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.phase}=Running",
                        f"pod/{name}", "--timeout=60s")  # fmt: skip
        publish_utilization(cluster, namespace, name, 50.0, view=view)
    yield namespace, "trainer"
    for name in ("trainer", "plain"):
        forget_utilization(cluster, namespace, name)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_healthy_install_passes_every_check(cluster: Cluster, gpu_pod: tuple[str, str]) -> None:
    """DCGM matched within this module's namespace: other accelerator pods may run on the
    cluster (the demo's, which `make test` runs beside), and they are not this test's."""
    within = ("--dcgm-namespace", gpu_pod[0])

    def all_pass() -> tuple[dict[str, dict[str, str]], int] | None:
        found, code = verdicts(cluster, *within)
        return (found, code) if code == 0 and found["dcgm"]["status"] == "PASS" else None

    found, _ = wait_for(all_pass, timeout=90, what="the DCGM series scraped")
    assert {name: c["status"] for name, c in found.items()} == dict.fromkeys(
        ["operator", "prometheus", "dcgm", "kueue", "crds", "webhook", "rbac", "clock"], "PASS"
    ), found
    assert found["dcgm"]["found"].startswith(
        "2 running accelerator pods; DCGM_FI_DEV_GPU_UTIL names 1 by namespace/pod, "
        "1 by exported_namespace/exported_pod"
    )
    assert "holds all" in found["rbac"]["found"]
    assert f"Helm release {RELEASE}" in found["rbac"]["found"]
    table = doctor(cluster.kubeconfig, *within)
    assert table.returncode == 0, table.stdout
    assert table.stdout.count("PASS  ") == 8, table.stdout
    print(table.stdout)


def test_an_accelerator_pod_without_series_warns_naming_it(
    cluster: Cluster, gpu_pod: tuple[str, str]
) -> None:
    namespace = gpu_pod[0]
    pod = simulated(PodBuilder("unseen")).build()
    pod["metadata"]["namespace"] = namespace
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        cluster.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.phase}=Running",
                        "pod/unseen", "--timeout=60s")  # fmt: skip
        found, code = verdicts(cluster, "--dcgm-namespace", namespace)
        assert found["dcgm"]["status"] == "WARN", found["dcgm"]
        assert f"unmatched ({namespace}/unseen)" in found["dcgm"]["found"]
        assert "1 with no series at all" in found["dcgm"]["found"]
        assert code == 0  # warnings alone
    finally:
        cluster.kubectl("delete", "-n", namespace, "pod/unseen", "--wait=true")


def test_a_stale_crd_fails_upgrade_crds(cluster: Cluster, gpu_pod: tuple[str, str]) -> None:
    crd = "runreceipts.trainwarden.dev"
    path = "/spec/versions/0/schema/openAPIV3Schema/description"
    patch = [{"op": "replace", "path": path, "value": "an older description"}]
    cluster.kubectl("patch", "crd", crd, "--type=json", "-p", json.dumps(patch))
    try:
        found, code = verdicts(cluster)
        assert found["crds"]["status"] == "FAIL"
        assert code == 1
        assert found["crds"]["found"] == (
            f"upgrade CRDs; {crd}: .schema.openAPIV3Schema.description differs"
        )
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    assert verdicts(cluster)[0]["crds"]["status"] == "PASS"


def test_a_verb_removed_from_the_role_fails_naming_it(
    cluster: Cluster, gpu_pod: tuple[str, str]
) -> None:
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    role = rbac.read_cluster_role(RELEASE)
    rule = next(r for r in role.rules if r.resources == ["pods/eviction"])
    rule.verbs = []
    role.rules = [r for r in role.rules if r.verbs]
    rbac.replace_cluster_role(RELEASE, role)
    try:

        def refused() -> dict[str, str] | None:
            check = verdicts(cluster)[0]["rbac"]
            return check if check["status"] == "FAIL" else None

        check = wait_for(refused, timeout=30, what="the RBAC authorizer's cache")
        assert check["found"].endswith(
            f"grants of Helm release {RELEASE} (revision 1): create pods/eviction"
        )
        assert doctor(cluster.kubeconfig).returncode == 1
    finally:
        helm(
            cluster.kubeconfig,
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--wait",
        )
    wait_for(lambda: verdicts(cluster)[0]["rbac"]["status"] == "PASS", timeout=30, what="RBAC back")


def test_a_wrong_prometheus_url_fails(cluster: Cluster, gpu_pod: tuple[str, str]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    values = ["--reuse-values", "--wait", "--timeout=120s"]
    helm(cluster.kubeconfig, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *values,
         "--set", f"operator.prometheusUrl={closed}")  # fmt: skip
    try:
        found, code = verdicts(cluster)
        assert found["prometheus"]["status"] == "FAIL"
        assert code == 1
        assert found["prometheus"]["found"].startswith(f"{closed}: URLError")
        assert found["dcgm"]["status"] == "WARN"  # not checked, and says why
        assert found["prometheus"]["fix"] == "docs/install.md#doctor-prometheus"
    finally:
        helm(cluster.kubeconfig, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *values,
             "--set", f"operator.prometheusUrl={cluster.prometheus_url}")  # fmt: skip


def test_a_probe_pod_refused_by_a_quota_after_the_webhook_answered_warns(
    cluster: Cluster, gpu_pod: tuple[str, str]
) -> None:
    """A probe namespace whose ResourceQuota admits no pod: the API server refuses the dry
    run (403) after the mutating webhooks ran, and hands back their warnings with the
    refusal. The doctor's user may create pods there: the webhook line, not exit 3."""
    namespace = f"doc-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("create", "quota", "none", "-n", namespace, "--hard=pods=0")
        cluster.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.hard.pods}=0",
                        "resourcequota/none", "--timeout=60s")  # fmt: skip
        run = doctor(cluster.kubeconfig, "-o", "json", "--probe-namespace", namespace)
        assert run.returncode == 0, run.stderr
        webhook = {c["name"]: c for c in json.loads(run.stdout)["checks"]}["webhook"]
        assert webhook["status"] == "WARN", webhook
        assert webhook["found"].startswith(
            f"the API server called {RELEASE}-hold and got its answer, then refused the probe "
            "pod: 403 "
        ), webhook
        assert "exceeded quota: none" in webhook["found"], webhook
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_without_its_operator_the_webhook_check_fails(
    cluster: Cluster, gpu_pod: tuple[str, str], webhook_operator: Operator
) -> None:
    """Last: the module's operator is stopped. The configuration fails open: only the
    missing probe answer shows the API server reached no webhook."""
    webhook_operator.stop()
    found, code = verdicts(cluster)
    assert found["webhook"]["status"] == "FAIL"
    assert code == 1
    assert found["webhook"]["found"].startswith(
        f"the API server did not get an answer from {RELEASE}-hold"
    )


def test_an_unreachable_or_refusing_cluster_is_exit_3(
    cluster: Cluster, release: str, tmp_path: Path
) -> None:
    config: dict[str, Any] = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    unreachable = tmp_path / "unreachable"
    unreachable.write_text(yaml.safe_dump(config))
    run = doctor(unreachable)
    assert run.returncode == 3, run.stderr
    assert run.stderr.startswith("trainwarden doctor: cannot reach the API server")
    assert "Traceback" not in run.stderr
    assert run.stdout == ""

    account = f"doc-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "serviceaccount", account, "-n", NAMESPACE)
    token = cluster.kubectl("create", "token", account, "-n", NAMESPACE).strip()
    config["clusters"][0]["cluster"]["server"] = yaml.safe_load(cluster.kubeconfig.read_text())[
        "clusters"
    ][0]["cluster"]["server"]
    config["users"][0]["user"] = {"token": token}
    refused = tmp_path / "refused"
    refused.write_text(yaml.safe_dump(config))
    run = doctor(refused)
    assert run.returncode == 3, run.stderr
    assert run.stderr.startswith("trainwarden doctor: forbidden (403 Forbidden)")
