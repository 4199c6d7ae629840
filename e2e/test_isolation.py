"""Isolation on the real API server (issue 25): one budget's spec the schema admits and the
code cannot use costs only that budget.

`period.timeZone: Europe` (a directory of the time-zone database) passes the CRD's schema
(no schema can list the IANA zones). On the landed main ZoneInfo("Europe") raised
IsADirectoryError wherever a budget was read: its own evaluation, the webhook's informer
(which relisted forever, so a Job the other budget should have held came out "unknown")
and every pass of the Kueue AdmissionCheck (Workloads stayed Pending whatever the budgets
said). Here, beside it, a valid exhausted budget of the same namespace still holds a new
Job through the webhook and still answers its Kueue check, and the invalid one says
Ready=False/InvalidSpec naming the field.

One operator (instance `isolation`) serves the chart's webhook configuration (as in
test_admission.py) and answers the AdmissionCheck `trainwarden.dev/budget-isolation` (as
in test_kueue_budget.py).
"""

import subprocess
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    ROOT,
    Cluster,
    Operator,
    budget,
    free_port,
    get_budget,
    gpu_job,
    start_operator,
    wait_for,
)
from test_admission import _render, kubectl_create
from test_kueue_harness import Kueue, cluster_queue_active, labelled_namespace, quota

INSTANCE = "isolation"
CONTROLLER = f"trainwarden.dev/budget-{INSTANCE}"
MUTATING = "MutatingWebhookConfiguration"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUBECTL = CLUSTER_DIR / "bin" / "kubectl"


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """This module's operator, serving the chart's webhook configuration."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    release = f"tw-iso-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", release)
    port = free_port()
    docs = _render(release, release, f"https://127.0.0.1:{port}/hold")
    cluster.kubectl("apply", "-n", release, "-f", "-", stdin=yaml.safe_dump_all(docs))
    (configuration,) = [d["metadata"]["name"] for d in docs if d["kind"] == MUTATING]
    (secret,) = [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
    log = tmp_path_factory.mktemp("isolation") / "operator.log"
    args = (
        f"--instance={INSTANCE}",
        f"--webhook-port={port}",
        "--webhook-address=127.0.0.1",
        f"--webhook-secret={release}/{secret}",
        f"--webhook-configuration={configuration}",
        "--webhook-name=127.0.0.1",
    )
    running = start_operator(cluster.kubeconfig, log, args=args)
    admission = client.AdmissionregistrationV1Api(cluster.api)
    wait_for(
        lambda: (
            admission.read_mutating_webhook_configuration(configuration)
            .webhooks[0]
            .client_config.ca_bundle
        ),
        timeout=60,
        what="the webhook's CA injected",
    )
    yield running
    running.stop()
    print(f"\noperator log: {log}")
    cluster.kubectl("delete", "mutatingwebhookconfiguration", configuration, check=False)
    cluster.kubectl("delete", "namespace", release, "--wait=false", check=False)


@pytest.fixture
def kueue(cluster: Cluster) -> Iterator[Kueue]:
    objects = Kueue(cluster)
    yield objects
    objects.delete_created()


@pytest.fixture
def ns(cluster: Cluster) -> Iterator[str]:
    """A namespace Kueue manages (its queued Jobs), whose other Jobs the webhook sees."""
    yield from labelled_namespace(cluster, "tw-iso")


def create(cluster: Cluster, body: dict[str, object]) -> None:
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", body
    )


def condition(body: dict[str, object], kind: str) -> dict[str, str] | None:
    conditions = (body.get("status") or {}).get("conditions") or []  # type: ignore[attr-defined]
    return next((c for c in conditions if c["type"] == kind), None)


def test_a_budget_with_a_time_zone_directory_costs_only_itself(
    cluster: Cluster, operator: Operator, kueue: Kueue, ns: str
) -> None:
    hostile = budget(f"{ns}-europe", ns, 1000).instance(INSTANCE).unchecked()
    hostile["spec"]["period"] = {"type": "Daily", "timeZone": "Europe"}
    create(cluster, hostile)  # the schema admits it: no schema lists the IANA zones
    assert get_budget(cluster, f"{ns}-europe")["spec"]["period"]["timeZone"] == "Europe"

    tb = f"{ns}-tb"
    client.BatchV1Api(cluster.api).create_namespaced_job(ns, gpu_job("spender", 1))
    # 1.8 GPU-seconds, spent at once; the spender keeps running (an hour's grace), so the
    # budget stays exhausted whatever a suspension would do to its usage
    create(cluster, budget(tb, ns, 0.0005).instance(INSTANCE).grace("1h").build())

    probe = gpu_job("probe", 1)
    probe["metadata"]["namespace"] = ns
    wait_for(
        lambda: f"TrainingBudget {tb} is exhausted" in kubectl_create(cluster, probe, "server"),
        timeout=90,
        what="the valid budget exhausted and its hold served by the webhook",
    )
    job = gpu_job("next", 1)
    job["metadata"]["namespace"] = ns
    printed = kubectl_create(cluster, job)
    assert f"TrainingBudget {tb} is exhausted" in printed, printed
    held = client.BatchV1Api(cluster.api).read_namespaced_job("next", ns)
    assert held.spec.suspend is True
    assert held.metadata.annotations["trainwarden.dev/held-by"] == tb

    flavor, cq, lq = f"{ns}-gpu", ns, "team-queue"
    kueue.create("admissionchecks", f"{ns}-budget", {"controllerName": CONTROLLER})
    checked = quota(ns, flavor) | {
        "admissionChecksStrategy": {"admissionChecks": [{"name": f"{ns}-budget"}]}
    }
    kueue.create("resourceflavors", flavor, {"nodeLabels": {"type": "kwok"}})
    kueue.create("clusterqueues", cq, checked)
    kueue.local_queue(ns, lq, cq)
    wait_for(cluster_queue_active(kueue, cq), timeout=60, what="our check Active, the queue too")
    queued = gpu_job("queued", 1)
    queued["metadata"]["labels"] = {QUEUE_LABEL: lq}
    made = client.BatchV1Api(cluster.api).create_namespaced_job(ns, queued)
    workload = wait_for(lambda: kueue.workload_of(ns, made), timeout=30, what="its Workload")

    def answered() -> dict[str, str] | None:
        status = kueue.workload(ns, workload["metadata"]["name"]).get("status") or {}
        entry = next(
            (c for c in status.get("admissionChecks") or [] if c["name"] == f"{ns}-budget"),
            None,
        )
        return entry if entry and entry.get("message") else None

    check = wait_for(answered, timeout=60, what="our check answered on the Workload")
    assert check["state"] == "Pending", check
    assert f"TrainingBudget {tb} is exhausted" in check["message"], check

    def reported() -> dict[str, str] | None:
        found = condition(get_budget(cluster, f"{ns}-europe"), "Ready")
        return found if found and found["reason"] == "InvalidSpec" else None

    ready = wait_for(reported, timeout=60, what="the Europe budget reported InvalidSpec")
    assert ready["status"] == "False"
    assert "spec.period.timeZone: unknown time zone 'Europe'" in ready["message"], ready
