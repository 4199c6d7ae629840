"""Holding new work of an exhausted budget, on the real API server (issue 15).

The chart's own MutatingWebhookConfiguration (rendered by helm, pointed at this test's
operator by `webhook.url`) sends Job and bare-pod creations to `trainwarden run
--webhook-port`, which issues its own certificate into the chart's Secret and the CA into
the configuration. A budget spent by a real Job on a kwok GPU node then holds what comes
next: `kubectl create` prints why, the Job is created suspended and nothing is scheduled;
raising the limit starts it. With the operator stopped, creations go ahead unheld (the
configuration fails open); a DryRun budget only warns.
"""

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    KUBE_VERSION,
    ROOT,
    Cluster,
    Operator,
    budget,
    events_for,
    free_port,
    get_budget,
    gpu_job,
    holds,
    samples,
    simulated,
    start_operator,
    wait_for,
)
from trainwarden.testing.builders import PodBuilder

INSTANCE = "admission"  # this module's operator governs only its own budgets
HELM = CLUSTER_DIR / "bin" / "helm"
KUBECTL = CLUSTER_DIR / "bin" / "kubectl"
GATE = "trainwarden.dev/budget"
MUTATING = "MutatingWebhookConfiguration"


class Webhook:
    """This module's operator, serving the webhook of the chart's configuration."""

    def __init__(
        self,
        cluster: Cluster,
        release: str,
        port: int,
        log: Path,
        *extra: str,
        instance: str = INSTANCE,
    ) -> None:
        docs = _render(release, release, f"https://127.0.0.1:{port}/hold")
        cluster.kubectl("apply", "-n", release, "-f", "-", stdin=yaml.safe_dump_all(docs))
        (self.configuration,) = [d["metadata"]["name"] for d in docs if d["kind"] == MUTATING]
        (secret,) = [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
        self.cluster, self.release, self.port, self.log = cluster, release, port, log
        self.args = (
            f"--instance={instance}",
            f"--webhook-port={port}",
            "--webhook-address=127.0.0.1",
            f"--webhook-secret={release}/{secret}",
            f"--webhook-configuration={self.configuration}",
            "--webhook-name=127.0.0.1",
            *extra,
        )
        self.operator = self.start()

    def start(self) -> Operator:
        self.operator = start_operator(self.cluster.kubeconfig, self.log, args=self.args)
        wait_for(self.serving, timeout=60, what="the webhook serving with its CA injected")
        return self.operator

    def serving(self) -> bool:
        """The CA is in the configuration and the listener answers TLS."""
        admission = client.AdmissionregistrationV1Api(self.cluster.api)
        hook = admission.read_mutating_webhook_configuration(self.configuration).webhooks[0]
        if not hook.client_config.ca_bundle:
            return False
        with socket.create_connection(("127.0.0.1", self.port), timeout=2):
            return True

    def answered(self, outcome: str) -> float:
        """How many requests this operator's webhook decided so, by its own metrics."""
        found = samples(self.operator, "trainwarden_admission_requests_total", outcome=outcome)
        return sum(value for _, value in found)


def _render(release: str, namespace: str, url: str) -> list[dict[str, Any]]:
    """The chart's webhook objects (configuration and Secret), as helm renders them."""
    args = [
        "template",
        "--kube-version",
        KUBE_VERSION,
        release,
        str(ROOT / "helm" / "trainwarden"),
        "-n",
        namespace,
    ]
    args += ["--show-only", "templates/webhook.yaml", "--set", "rbac.create=false"]
    args += ["--set", f"webhook.url={url}"]
    result = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@contextmanager
def served_webhook(
    cluster: Cluster,
    tmp_path_factory: pytest.TempPathFactory,
    prefix: str,
    *extra: str,
    instance: str = INSTANCE,
) -> Iterator[Webhook]:
    """A Webhook in a release namespace of its own (`<prefix>-<random>`), for a module's
    fixture: its operator stopped, its configuration and namespace deleted after."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    release = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", release)
    log = tmp_path_factory.mktemp(prefix) / "operator.log"
    hook = Webhook(cluster, release, free_port(), log, *extra, instance=instance)
    try:
        yield hook
    finally:
        hook.operator.stop()
        print(f"\noperator log: {log}")
        cluster.kubectl("delete", "mutatingwebhookconfiguration", hook.configuration, check=False)
        cluster.kubectl("delete", "namespace", release, "--wait=false", check=False)


@pytest.fixture(scope="module")
def webhook(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    with served_webhook(cluster, tmp_path_factory, "tw-adm") as hook:
        yield hook


def kubectl_create(cluster: Cluster, manifest: dict[str, Any], dry_run: str = "none") -> str:
    """`kubectl create -f -` as a user runs it: what it prints on stderr (warnings)."""
    command = [str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), "create", "-f", "-"]
    result = subprocess.run(
        [*command, f"--dry-run={dry_run}"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def exhaust(cluster: Cluster, namespace: str, *, dry_run: bool = False) -> str:
    """A budget of 3.6 GPU-seconds on `namespace`, spent by a 2-GPU Job on a kwok node;
    once its webhook holds new work."""
    name = f"{namespace}-tb"
    made = budget(name, namespace, 0.001).instance(INSTANCE)
    made = made.dry_run() if dry_run else made
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", made.build()
    )
    job = gpu_job("spender", 2)
    job["metadata"]["namespace"] = namespace
    kubectl_create(cluster, job)
    probe = job_in(namespace, "probe")

    def webhook_holds() -> bool:
        """The hold as the webhook serves it: a server-side dry run of a creation passes
        through it (its informers see the budget's status a moment after the test does)."""
        return f"TrainingBudget {name} is exhausted" in kubectl_create(cluster, probe, "server")

    try:
        wait_for(webhook_holds, timeout=90, what="the budget to be spent and hold new work")
    except AssertionError as error:
        status = json.dumps(get_budget(cluster, name).get("status"), indent=1)
        raise AssertionError(f"{error}\nits status: {status}") from None
    return name


def raise_limit(cluster: Cluster, name: str, hours: float) -> None:
    client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
        "trainwarden.dev",
        "v1alpha1",
        "trainingbudgets",
        name,
        {"spec": {"limits": {"acceleratorHours": hours}}},
    )


def job_in(namespace: str, name: str, gpus: int = 1) -> dict[str, Any]:
    job = gpu_job(name, gpus)
    job["metadata"]["namespace"] = namespace
    return job


def pods_of(cluster: Cluster, namespace: str, selector: str) -> list[client.V1Pod]:
    core = client.CoreV1Api(cluster.api)
    found: list[client.V1Pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
    return found


def started_unheld(cluster: Cluster, namespace: str, job: str) -> None:
    """The Job was created as submitted (not suspended, not marked) and its pod runs."""
    created = client.BatchV1Api(cluster.api).read_namespaced_job(job, namespace)
    assert not created.spec.suspend
    assert "trainwarden.dev/held-by" not in (created.metadata.annotations or {})
    wait_for(
        lambda: pods_of(cluster, namespace, f"job-name={job}"),
        timeout=60,
        what=f"the {job} Job's pod",
    )


def reasons(cluster: Cluster, namespace: str, name: str) -> set[str]:
    return {e.reason for e in events_for(cluster, namespace, name)}


def test_new_work_of_an_exhausted_budget_is_held_until_the_limit_is_raised(
    cluster: Cluster, webhook: Webhook, namespace: str
) -> None:
    name = exhaust(cluster, namespace)
    batch, core = client.BatchV1Api(cluster.api), client.CoreV1Api(cluster.api)

    printed = kubectl_create(cluster, job_in(namespace, "next", 4))
    assert f"TrainingBudget {name} is exhausted" in printed, printed
    assert "is held (spec.suspend)" in printed, printed
    assert "resets at" in printed, printed
    assert "4 nvidia.com/gpu" in printed, "the estimate names what the Job would hold"
    held = batch.read_namespaced_job("next", namespace)
    assert held.spec.suspend is True
    assert held.metadata.annotations["trainwarden.dev/held-by"] == name
    solo = simulated(PodBuilder("solo"), 1).build()
    solo["metadata"]["namespace"] = namespace
    kubectl_create(cluster, solo)
    gates = [g.name for g in core.read_namespaced_pod("solo", namespace).spec.scheduling_gates]
    assert gates == [GATE]
    holds(
        lambda: (
            not pods_of(cluster, namespace, "job-name=next")
            and not core.read_namespaced_pod("solo", namespace).spec.node_name
        ),
        duration=5,
        what="nothing of the held work created or scheduled",
    )
    wait_for(
        lambda: "HeldByBudget" in reasons(cluster, namespace, "next"),
        timeout=60,
        what="a HeldByBudget Event on the held Job",
    )
    assert webhook.answered("held") >= 2

    raised = time.monotonic()
    raise_limit(cluster, name, 10.0)
    wait_for(
        lambda: [
            p for p in pods_of(cluster, namespace, "job-name=next") if p.status.phase == "Running"
        ],
        timeout=90,
        what="the released Job's pod running",
    )
    wait_for(
        lambda: core.read_namespaced_pod("solo", namespace).status.phase == "Running",
        timeout=60,
        what="the ungated pod running",
    )
    print(f"\nheld work running {time.monotonic() - raised:.1f}s after the limit was raised")
    started = batch.read_namespaced_job("next", namespace)
    assert "trainwarden.dev/held-by" not in (started.metadata.annotations or {})
    assert not core.read_namespaced_pod("solo", namespace).spec.scheduling_gates
    assert "ReleasedByBudget" in reasons(cluster, namespace, "next")


def test_with_the_operator_stopped_creations_go_ahead(
    cluster: Cluster, webhook: Webhook, namespace: str
) -> None:
    exhaust(cluster, namespace)  # its status still says "holding" for minutes
    webhook.operator.stop()
    try:
        begun = time.monotonic()
        printed = kubectl_create(cluster, job_in(namespace, "unheld"))
        took = time.monotonic() - begun
        assert "held" not in printed, printed
        started_unheld(cluster, namespace, "unheld")
        print(f"\ncreated in {took:.2f}s with the webhook down (failurePolicy: Ignore)")
    finally:
        webhook.start()


def test_a_dry_run_budget_only_warns(cluster: Cluster, webhook: Webhook, namespace: str) -> None:
    name = exhaust(cluster, namespace, dry_run=True)
    printed = kubectl_create(cluster, job_in(namespace, "warned"))
    assert f"TrainingBudget {name} is exhausted" in printed, printed
    assert "would be held (the budget is in DryRun)" in printed, printed
    started_unheld(cluster, namespace, "warned")
    assert webhook.answered("would-hold") >= 1
