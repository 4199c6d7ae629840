"""`helm uninstall` leaves nothing of ours stuck (issue 26 item 4).

The chart installed for real, its operator running here with a token of the chart's
ServiceAccount (the Deployment's pod lands on a kwok node, which runs nothing, as in
e2e/test_helm.py), governing instance INSTANCE: a spent Enforce budget suspends its
running Job, then holds a Job and gates a bare pod created while it holds; a node carries
the cordon of one of the instance's IdleReclaimPolicies (set as the policy sets it:
waiting for an accelerator node to be idle on Prometheus' clock takes minutes), another an
admin's cordon; a Job was suspended by its owner. Then `helm uninstall --wait`. Its
pre-delete hook Job's pod also lands on a kwok node: the test stands in for the kubelet,
running that pod's own command (`trainwarden <its args>`) with a token of the pod's
ServiceAccount, so the hook's grants, the confinement policies and the restricted Pod
Security of the release's namespace all apply, and then lets kwok finish the pod as
succeeded. Afterwards: no gated pod, held Job, suspended-by-us Job or cordon of ours; the
owner's Job and the admin's cordon as they were; the policies and CRDs still there.
"""

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness import (
    ROOT,
    Cluster,
    budget,
    events_for,
    free_port,
    get_budget,
    gpu_job,
    helm,
    idle_policy,
    simulated,
    start_operator,
    token_kubeconfig,
    wait_for,
)
from test_admission import kubectl_create, pods_of
from trainwarden.testing.builders import NamespaceBuilder, PodBuilder

CHART = ROOT / "helm" / "trainwarden"
RELEASE = NAMESPACE = "trainwarden-uninstall"
ACCOUNT = RELEASE  # the release name contains the chart's: fullname == release
INSTANCE = "uninstall"
WEBHOOK_PORT = free_port()
WEBHOOK_URL = f"https://127.0.0.1:{WEBHOOK_PORT}/hold"
HOOK_POD = "app.kubernetes.io/component=uninstall"
GATE = "trainwarden.dev/budget"
HELD_BY = "trainwarden.dev/held-by"
SUSPENDED_BY = "trainwarden.dev/suspended-by"
CORDONED_BY = "trainwarden.dev/cordoned-by"
IDLE_NODE = "trainwarden.dev/idle-node"
COMPLETE_AFTER = "sim.trainwarden.dev/complete-after"
FAIL_AFTER = "sim.trainwarden.dev/fail-after"
RELEASED = "released by trainwarden release-all: uninstall"


@dataclass
class Kubelet:
    """Stands in for the kubelet the hook's kwok node lacks: runs the hook pod's command
    here with the ServiceAccount's token, then has kwok end the pod as it ended."""

    cluster: Cluster
    kubeconfig: Path
    ran: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def serve(self) -> None:
        core = client.CoreV1Api(self.cluster.api)
        while not self.stop.wait(0.5):
            for pod in core.list_namespaced_pod(NAMESPACE, label_selector=HOOK_POD).items:
                if pod.metadata.uid in self.seen or pod.status.phase != "Running":
                    continue
                self.seen.add(pod.metadata.uid)
                command = [
                    str(ROOT / ".venv" / "bin" / "trainwarden"),
                    *pod.spec.containers[0].args,
                ]
                done = subprocess.run(
                    [*command, "--kubeconfig", str(self.kubeconfig)],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
                self.ran.append(done)
                end = COMPLETE_AFTER if done.returncode == 0 else FAIL_AFTER
                core.patch_namespaced_pod(
                    pod.metadata.name, NAMESPACE, {"metadata": {"annotations": {end: "0s"}}}
                )


@pytest.fixture
def installed(cluster: Cluster, crds: None, tmp_path: Path) -> Iterator[Path]:
    """The release installed, in a namespace enforcing the restricted Pod Security
    Standard; the ServiceAccount's kubeconfig. Uninstalled afterwards if the test did not."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    namespace = NamespaceBuilder(NAMESPACE).labels(
        {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }
    )
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(namespace.build()))
    helm(
        cluster.kubeconfig, "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", NAMESPACE, "--wait", "--timeout=120s",
        "--set", f"webhook.url={WEBHOOK_URL}", "--set", f"operator.instance={INSTANCE}",
        "--set", "crds.upgrade=false",  # the session applied crds/ (e2e/test_helm.py)
    )  # fmt: skip
    yield token_kubeconfig(cluster, ACCOUNT, NAMESPACE, tmp_path)
    if RELEASE in helm(cluster.kubeconfig, "list", "--namespace", NAMESPACE, "-q"):
        helm(cluster.kubeconfig, "uninstall", RELEASE, "--namespace", NAMESPACE, "--no-hooks")
    objects = client.CustomObjectsApi(cluster.api)
    for plural in ("trainingbudgets", "idlereclaimpolicies"):
        found = objects.list_cluster_custom_object(
            "trainwarden.dev",
            "v1alpha1",
            plural,
            label_selector=f"trainwarden.dev/instance={INSTANCE}",
        )
        for item in found["items"]:
            objects.delete_cluster_custom_object(
                "trainwarden.dev", "v1alpha1", plural, item["metadata"]["name"]
            )


def in_namespace(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    manifest["metadata"]["namespace"] = namespace
    return manifest


def node_marks(cluster: Cluster, name: str) -> tuple[bool, str | None, str | None]:
    node = client.CoreV1Api(cluster.api).read_node(name)
    annotations, labels = node.metadata.annotations or {}, node.metadata.labels or {}
    return bool(node.spec.unschedulable), annotations.get(CORDONED_BY), labels.get(IDLE_NODE)


def cordon(cluster: Cluster, name: str, policy: str | None) -> None:
    meta: dict[str, Any] = {}
    if policy is not None:  # as an IdleReclaimPolicy cordons (idle/nodes.py)
        meta = {"annotations": {CORDONED_BY: policy}, "labels": {IDLE_NODE: "true"}}
    patch = {"spec": {"unschedulable": True}, "metadata": meta}
    client.CoreV1Api(cluster.api).patch_node(name, patch)


def test_helm_uninstall_leaves_no_hold_suspension_or_cordon_of_ours(
    cluster: Cluster, installed: Path, namespace: str, tmp_path: Path
) -> None:
    core, batch = client.CoreV1Api(cluster.api), client.BatchV1Api(cluster.api)
    objects = client.CustomObjectsApi(cluster.api)
    # Before any budget: a Job its owner suspended.
    kubectl_create(cluster, in_namespace(gpu_job("owners", suspend=True), namespace))
    operator = start_operator(
        installed,
        tmp_path / "operator.log",
        prometheus_url=cluster.prometheus_url,
        args=(
            f"--instance={INSTANCE}",
            f"--webhook-port={WEBHOOK_PORT}",
            "--webhook-address=127.0.0.1",
            f"--webhook-secret={NAMESPACE}/{RELEASE}-webhook",
            f"--webhook-configuration={RELEASE}-hold",
            "--webhook-name=127.0.0.1",
            f"--receipt-seal-secret={NAMESPACE}/{RELEASE}-receipt-seal",
        ),
    )
    try:
        name = f"{namespace}-tb"
        spent = budget(name, namespace, 0.001).instance(INSTANCE).build()
        objects.create_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", "trainingbudgets", spent
        )
        # DryRun: it never cordons nor uncordons itself (the cordon below stands for its own).
        idle = idle_policy(f"{namespace}-idle", namespace).instance(INSTANCE).dry_run()
        objects.create_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", "idlereclaimpolicies", idle.build()
        )
        kubectl_create(cluster, in_namespace(gpu_job("spender", 2), namespace))

        def suspended_by_us() -> bool:
            job = batch.read_namespaced_job("spender", namespace)
            recorded = (get_budget(cluster, name).get("status") or {}).get("suspended") or []
            mine = (job.metadata.labels or {}).get(SUSPENDED_BY) == name
            return bool(job.spec.suspend and mine and recorded)

        wait_for(suspended_by_us, timeout=120, what="the spent budget to suspend its Job")
        printed = kubectl_create(cluster, in_namespace(gpu_job("held"), namespace))
        assert "is held (spec.suspend)" in printed, printed
        kubectl_create(cluster, in_namespace(simulated(PodBuilder("solo"), 1).build(), namespace))
        gates = [g.name for g in core.read_namespaced_pod("solo", namespace).spec.scheduling_gates]
        assert gates == [GATE]
    finally:
        operator.stop()  # it stands for the Deployment's pod, which the hook scales away
    ours, admins = sorted(n.metadata.name for n in core.list_node().items)[:2]
    cordon(cluster, ours, f"{namespace}-idle")
    cordon(cluster, admins, None)
    # The confinement policies are in place while the hook runs (pre-delete): they confine it.
    client.AdmissionregistrationV1Api(cluster.api).read_validating_admission_policy(
        f"{RELEASE}-confinement"
    )
    try:
        kubelet = Kubelet(cluster, installed)
        serving = threading.Thread(target=kubelet.serve, daemon=True)
        serving.start()
        began = time.monotonic()
        helm(
            cluster.kubeconfig, "uninstall", RELEASE, "--namespace", NAMESPACE,
            "--wait", "--timeout=300s",
        )  # fmt: skip
        took = time.monotonic() - began
        kubelet.stop.set()
        serving.join(timeout=10)
        print(f"\nhelm uninstall --wait took {took:.1f}s; the hook printed:")
        for run in kubelet.ran:
            print(run.stdout, run.stderr[-2000:])
        for job in ("held", "spender"):
            found = batch.read_namespaced_job(job, namespace)
            assert found.spec.suspend is False, job
            assert HELD_BY not in (found.metadata.annotations or {}), job
            assert SUSPENDED_BY not in (found.metadata.labels or {}), job
        assert not core.read_namespaced_pod("solo", namespace).spec.scheduling_gates
        for released in ("held", "spender", "solo"):
            said = [(e.reason, e.message) for e in events_for(cluster, namespace, released)]
            assert ("ReleasedOnUninstall", RELEASED) in said, (released, said)
        assert node_marks(cluster, ours) == (False, None, None)
        # What is not ours stays as it was.
        assert batch.read_namespaced_job("owners", namespace).spec.suspend is True
        assert node_marks(cluster, admins) == (True, None, None)
        # Policies and CRDs stay (docs/install.md, "Uninstalling").
        assert get_budget(cluster, name)["metadata"]["name"] == name
        objects.get_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", "idlereclaimpolicies", f"{namespace}-idle"
        )
        client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(
            "trainingbudgets.trainwarden.dev"
        )
        assert len(kubelet.ran) == 1, [r.stderr for r in kubelet.ran]
        hook = kubelet.ran[0]
        assert hook.returncode == 0, hook.stderr
        assert f"stopped the operator: Deployment {NAMESPACE}/{RELEASE} scaled to 0" in hook.stdout
        lines = hook.stdout.splitlines()[1:]
        assert sorted(lines) == sorted(
            [
                f"start Job/{namespace}/held (TrainingBudget {name})",
                f"resume Job/{namespace}/spender (TrainingBudget {name})",
                f"start Pod/{namespace}/solo (TrainingBudget {name})",
                f"uncordon Node/{ours} (IdleReclaimPolicy {namespace}-idle)",
            ]
        )
        again = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "trainwarden"), "release-all", f"--instance={INSTANCE}"],
            env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (again.returncode, again.stdout) == (
            0,
            f"nothing to release: instance {INSTANCE} holds, suspends and cordons nothing\n",
        ), again.stderr
        wait_for(
            lambda: any(
                p.status.phase == "Running" for p in pods_of(cluster, namespace, "job-name=held")
            ),
            timeout=60,
            what="the released Job's pod running",
        )
    finally:
        for node in (ours, admins):
            client.CoreV1Api(cluster.api).patch_node(
                node,
                {
                    "spec": {"unschedulable": False},
                    "metadata": {"annotations": {CORDONED_BY: None}, "labels": {IDLE_NODE: None}},
                },
            )
