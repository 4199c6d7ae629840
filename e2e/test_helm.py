"""The Helm chart on the real API server, and the operator working under exactly its role.

The chart is rendered by helm, checked by a server-side dry run, and installed with
`helm upgrade --install` (its Deployment's pod lands on a kwok node, where it runs nothing).
Then `trainwarden run` runs here with a token of the chart's ServiceAccount, not the admin
kubeconfig: budgets and idle reclaim must work with that role alone, and what the role does
not grant must be refused by the API server.
"""

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.config import Config as BotoConfig
from kubernetes import client, config

from harness import (
    CLUSTER_DIR,
    KUBE_VERSION,
    PV_ROOT,
    REAL_NODE_TOLERATION,
    ROOT,
    TRAINER_UID,
    Cluster,
    Operator,
    create_budget,
    create_policy,
    delete_policies_of,
    events_for,
    free_port,
    get_budget,
    get_policy,
    gpu_job,
    helm,
    helm_uninstall,
    hostpath_volume,
    idle_policy,
    own,
    publish_utilization,
    read_env,
    samples,
    simulated,
    start_operator,
    token_kubeconfig,
    wait_for,
)
from trainwarden.receipts.identity import Keyring, keyring, verified
from trainwarden.testing.builders import (
    CheckpointPolicyBuilder,
    DeploymentBuilder,
    JobBuilder,
    NamespaceBuilder,
    NodeBuilder,
    PodBuilder,
    SecretBuilder,
)

CHART = ROOT / "helm" / "trainwarden"
HELM = CLUSTER_DIR / "bin" / "helm"
KUBECTL = CLUSTER_DIR / "bin" / "kubectl"
RELEASE = "trainwarden"
NAMESPACE = "trainwarden-system"
ACCOUNT = "trainwarden"  # the release name contains the chart's: fullname == release
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
IDLE = "idlereclaimpolicies"
S3_SECRET = "checkpoint-store"  # the one Secret the release may read (s3CredentialSecrets)
WEBHOOK_PORT = free_port()
WEBHOOK_URL = f"https://127.0.0.1:{WEBHOOK_PORT}/hold"
"""The API server calls the release's webhook here: the operator under test runs on this
host, not in the release's pod (`webhook.url`)."""


def kubectl_as(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    return HELM


@pytest.fixture(scope="module")
def rendered(cluster: Cluster, helm_binary: Path) -> str:
    return helm(
        cluster.kubeconfig, "template", "--kube-version", KUBE_VERSION, RELEASE, str(CHART),
        "--namespace", NAMESPACE, "--include-crds",
        "--set", f"webhook.url={WEBHOOK_URL}",  # as installed: applied over the release
    )  # fmt: skip


@dataclass(frozen=True)
class Release:
    manifests: list[dict[str, Any]]


@pytest.fixture(scope="module")
def release(cluster: Cluster, crds: None, helm_binary: Path) -> Iterator[Release]:
    """`helm install` for real; the CRDs already exist (the session applied crds/), which
    Helm's crds/ directory handles by leaving them alone. The namespace enforces the
    "restricted" Pod Security Standard, so a non-compliant pod would never be created."""
    ensure_namespace(cluster)
    out = helm(
        cluster.kubeconfig,
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout=120s",
        "--set",
        f"operator.prometheusUrl={cluster.prometheus_url}",
        "--set-json",
        f's3CredentialSecrets=[{{"namespace":"{NAMESPACE}","name":"{S3_SECRET}"}}]',
        "--set",
        f"webhook.url={WEBHOOK_URL}",
        # No CRD upgrade hook: its Job's pod would land on a kwok node, which runs nothing,
        # and the upgrade below would wait for it; the session applied crds/ (the hook runs
        # in e2e/test_upgrade.py, on the real node).
        "--set",
        "crds.upgrade=false",
        # Nor the pre-delete hook: `helm uninstall --wait` below would wait for its pod
        # (e2e/test_uninstall.py runs it, standing in for the kubelet).
        "--set",
        "uninstall.releaseAll=false",
    )
    print(out)
    manifest = helm(cluster.kubeconfig, "get", "manifest", RELEASE, "--namespace", NAMESPACE)
    yield Release([d for d in yaml.safe_load_all(manifest) if d])
    helm_uninstall(cluster.kubeconfig, RELEASE, NAMESPACE)


@pytest.fixture(scope="module")
def sa_kubeconfig(
    cluster: Cluster, release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A kubeconfig with nothing but a token of the chart's ServiceAccount (TokenRequest API)."""
    return token_kubeconfig(cluster, ACCOUNT, NAMESPACE, tmp_path_factory.mktemp("sa"))


@pytest.fixture(scope="module")
def sa_operator(
    cluster: Cluster, sa_kubeconfig: Path, image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """`trainwarden run` with the chart's ServiceAccount's credentials only."""
    others = other_operators(cluster)
    assert not others, (
        f"another default trainwarden operator runs against this cluster (pids {others}); "
        "it would act on these tests' policies before this one and prove nothing"
    )
    # The release's confinement policy admits only pruner Jobs of its own pruner template
    # (image, uid, tolerations): make that the one this operator starts, as the chart would.
    helm(
        cluster.kubeconfig, "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--reuse-values", "--wait", "--timeout=120s", "--set", f"pruner.image={image}",
        "--set", f"pruner.runAsUser={TRAINER_UID}",
        "--set-json", f"pruner.tolerations={json.dumps([REAL_NODE_TOLERATION])}",
    )  # fmt: skip
    running = start_operator(
        sa_kubeconfig,
        tmp_path_factory.mktemp("sa-operator") / "operator.log",
        prometheus_url=cluster.prometheus_url,
        # As the chart runs it: behind the Lease its Role grants, in its own namespace.
        args=(
            "--leader-election",
            f"--lease-name={RELEASE}-e2e",
            f"--lease-namespace={NAMESPACE}",
            f"--kill-switch={NAMESPACE}/trainwarden-kill-switch",
            f"--pruner-image={image}",
            f"--pruner-run-as-user={TRAINER_UID}",
            f"--pruner-tolerations={json.dumps([REAL_NODE_TOLERATION])}",
            # As the chart's Deployment runs it (templates/deployment.yaml).
            f"--webhook-port={WEBHOOK_PORT}",
            "--webhook-address=127.0.0.1",
            f"--webhook-secret={NAMESPACE}/{RELEASE}-webhook",
            f"--webhook-configuration={RELEASE}-hold",
            "--webhook-name=127.0.0.1",
            f"--receipt-seal-secret={NAMESPACE}/{RELEASE}-receipt-seal",
        ),
    )
    yield running
    running.stop()
    print(f"\noperator log: {running.log}")


def ensure_namespace(cluster: Cluster) -> None:
    namespace = NamespaceBuilder(NAMESPACE).labels(
        {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }
    )
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(namespace.build()))


def other_operators(cluster: Cluster) -> list[int]:
    """Local `trainwarden run` processes of the default instance (no --instance: they
    govern the same policies as this module's operator) using this cluster's admin
    kubeconfig. One with --instance, like the demo's, governs only its own policies."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not any(a.endswith(b"trainwarden") for a in argv) or b"run" not in argv:
                continue
            if any(a.startswith(b"--instance") for a in argv):
                continue
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"KUBECONFIG={cluster.kubeconfig}".encode() in env:
            found.append(int(proc.name))
    return found


def make_namespace(cluster: Cluster) -> str:
    name = f"tw-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(cluster.api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"team": name}))
    )
    return name


def drop_namespace(cluster: Cluster, name: str) -> None:
    delete_policies_of(cluster, name)
    client.CoreV1Api(cluster.api).delete_namespace(name)


def running_pod(cluster: Cluster, namespace: str, selector: str) -> client.V1Pod:
    core = client.CoreV1Api(cluster.api)

    def probe() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod: client.V1Pod = wait_for(probe, timeout=60, what=f"a running pod ({selector})")
    return pod


def actions_done(operator: Operator, kind: str, policy: str) -> dict[str, float]:
    """What this operator process itself did (its own metrics): another operator running
    against the same cluster (a demo left running) must not be able to pass these tests."""
    done: dict[str, float] = {}
    series = samples(operator, "trainwarden_actions_total", kind=kind, policy=policy, result="done")
    for labels, value in series:
        done[labels["action"]] = done.get(labels["action"], 0) + value
    return done


def no_permission_errors(operator: Operator) -> None:
    text = operator.log.read_text()
    markers = ("Forbidden", "forbidden", '"status": 403', "status=403", "Not enough permissions")
    for marker in markers:
        bad = [line for line in text.splitlines() if marker in line]
        assert not bad, "the operator hit a permission error:\n" + "\n".join(bad[:5])


def test_checkpoints_are_pruned_under_the_charts_role(
    cluster: Cluster, sa_operator: Operator
) -> None:
    """A CheckpointPolicy lists a PVC by label, reads the kill switch, starts a pruner Job,
    reads its report from the pod, annotates the PVC and posts Events, with the chart's role;
    the pruner itself deletes on the real node with no API token."""
    namespace = make_namespace(cluster)
    core = client.CoreV1Api(cluster.api)
    host = PV_ROOT / namespace
    shutil.rmtree(host, ignore_errors=True)
    pv, pvc = hostpath_volume(namespace, host)
    pvc["metadata"]["labels"] = {"checkpoints": "hf"}
    try:
        core.create_persistent_volume(pv)
        core.create_namespaced_persistent_volume_claim(namespace, pvc)
        for step in (100, 200, 300):
            ckpt = host / "checkpoints" / f"checkpoint-{step}"
            ckpt.mkdir(parents=True)
            (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
            old = time.time() - 3600
            for path in (*ckpt.iterdir(), ckpt):
                os.utime(path, (old, old))
        own(host / "checkpoints")
        name = f"{namespace}-ckpt"
        create_policy(
            cluster,
            "checkpointpolicies",
            CheckpointPolicyBuilder(name)
            .enforce()
            .namespaces(namespace)
            .pvc("/checkpoints", labels={"checkpoints": "hf"})
            .keep_last(1)
            .min_age("1m")
            .build(),
        )
        status = wait_for(
            lambda: (
                (s := get_policy(cluster, "checkpointpolicies", name).get("status") or {}).get(
                    "deleted"
                )
                and s
            ),
            timeout=120,
            what="the pruner's report in the policy's status",
        )
        assert status["locations"][0]["deletedNames"] == ["checkpoint-100", "checkpoint-200"]
        assert sorted(p.name for p in (host / "checkpoints").iterdir()) == ["checkpoint-300"]
        assert "CheckpointsPruned" in {
            e.reason for e in events_for(cluster, namespace, "checkpoints")
        }
        no_permission_errors(sa_operator)
    finally:
        delete_policies_of(cluster, namespace)
        drop_namespace(cluster, namespace)
        core.delete_persistent_volume(pv["metadata"]["name"])


def test_s3_checkpoints_are_pruned_with_only_the_secret_the_chart_grants(
    cluster: Cluster, sa_operator: Operator, targets: str
) -> None:
    """The operator reads the credentials Secret listed in s3CredentialSecrets and prunes
    through the S3 API; a policy naming any other Secret (here one it must not read) gets
    "may not read" in its status, and nothing in its bucket is touched."""
    env = read_env(CLUSTER_DIR / "cluster.env")
    s3 = boto3.client(
        "s3",
        endpoint_url=env["S3_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id=env["S3_ACCESS_KEY"],
        aws_secret_access_key=env["S3_SECRET_KEY"],
        config=BotoConfig(s3={"addressing_style": "path"}),
    )
    bucket = f"tw-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    for step in (1, 2, 3):
        s3.put_object(
            Bucket=bucket,
            Key=f"run/checkpoint-{step}/trainer_state.json",
            Body=json.dumps({"global_step": step}).encode(),
        )
    core = client.CoreV1Api(cluster.api)
    keys = {"accessKeyId": env["S3_ACCESS_KEY"], "secretAccessKey": env["S3_SECRET_KEY"]}
    core.create_namespaced_secret(NAMESPACE, SecretBuilder(S3_SECRET).string_data(keys).build())
    time.sleep(1.5)  # minAge 1s, and S3 sets LastModified itself

    def manifest(name: str, secret: tuple[str, str]) -> dict[str, Any]:
        return (
            CheckpointPolicyBuilder(name)
            .enforce()
            .namespaces(targets)
            .s3(env["S3_ENDPOINT"], bucket, prefix="run", secret=secret)
            .keep_last(1)
            .min_age("1s")
            .build()
        )

    def keys() -> list[str]:
        return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents") or [])

    granted, refused = f"{targets}-s3", f"{targets}-s3-refused"
    try:
        create_policy(
            cluster,
            "checkpointpolicies",
            manifest(refused, (targets, "creds")),
        )
        failed = wait_for(
            lambda: next(
                (
                    c
                    for c in (
                        get_policy(cluster, "checkpointpolicies", refused).get("status") or {}
                    ).get("conditions", [])
                    if c["type"] == "LastRunSucceeded" and c["status"] == "False"
                ),
                None,
            ),
            timeout=60,
            what="the refused Secret reported",
        )
        print(f"\n{failed['message']}")
        assert f"may not read Secret {targets}/creds" in failed["message"]
        assert len(keys()) == 3, "nothing touched without credentials"
        create_policy(
            cluster,
            "checkpointpolicies",
            manifest(granted, (NAMESPACE, S3_SECRET)),
        )
        wait_for(
            lambda: (
                keys() == ["run/.trainwarden-pruned.json", "run/checkpoint-3/trainer_state.json"]
            ),
            timeout=60,
            what="checkpoint-1 and -2 deleted with the granted Secret",
        )
    finally:
        for name in (granted, refused):
            with contextlib.suppress(client.ApiException):
                client.CustomObjectsApi(cluster.api).delete_cluster_custom_object(
                    "trainwarden.dev", "v1alpha1", "checkpointpolicies", name
                )
        core.delete_namespaced_secret(S3_SECRET, NAMESPACE)
        for key in keys():
            s3.delete_object(Bucket=bucket, Key=key)
        s3.delete_bucket(Bucket=bucket)


# --- the chart on the API server ---------------------------------------------------------


def test_rendered_chart_passes_a_server_side_dry_run(cluster: Cluster, rendered: str) -> None:
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "Job",  # the pre-upgrade hook applying this version's CRDs (crds.upgrade)
        "MutatingWebhookConfiguration",
        "Role",
        "RoleBinding",
        "Secret",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    ensure_namespace(cluster)
    out = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-",
        stdin=rendered,
    )  # fmt: skip
    assert "serverside-applied (server dry run)" in out, out
    assert out.count("(server dry run)") == len(docs), out


def test_helm_install_runs_the_deployment_with_its_role(cluster: Cluster, release: Release) -> None:
    apps = client.AppsV1Api(cluster.api)
    deployment = apps.read_namespaced_deployment(RELEASE, NAMESPACE)
    assert deployment.status.ready_replicas == 1
    # Admitted in a namespace that enforces the "restricted" Pod Security Standard.
    pod = running_pod(cluster, NAMESPACE, f"app.kubernetes.io/instance={RELEASE}")
    labels = client.CoreV1Api(cluster.api).read_namespace(NAMESPACE).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert pod.spec.service_account_name == ACCOUNT
    assert pod.spec.containers[0].security_context.read_only_root_filesystem is True
    role = client.RbacAuthorizationV1Api(cluster.api).read_cluster_role(RELEASE)
    assert role.rules, "the ClusterRole was installed with its rules"
    service = client.CoreV1Api(cluster.api).read_namespaced_service(f"{RELEASE}-metrics", NAMESPACE)
    assert service.spec.ports[0].port == 8080


# --- the operator under the chart's ServiceAccount ---------------------------------------


def test_budget_suspends_a_job_under_the_charts_role(
    cluster: Cluster, sa_operator: Operator
) -> None:
    namespace = make_namespace(cluster)
    try:
        batch = client.BatchV1Api(cluster.api)
        batch.create_namespaced_job(namespace, gpu_job("train", 2))
        running_pod(cluster, namespace, "job-name=train")
        name = f"{namespace}-tb"
        create_budget(cluster, name, namespace, 0.002)  # 7.2 GPU-seconds: spent in ~4 s
        job = wait_for(
            lambda: (j := batch.read_namespaced_job("train", namespace)).spec.suspend and j,
            timeout=60,
            what="the Job suspended by the budget",
        )
        assert job.metadata.labels["trainwarden.dev/suspended-by"] == name
        status = wait_for(
            lambda: (
                (s := get_budget(cluster, name).get("status", {}))
                and any(
                    c["type"] == "Exhausted" and c["status"] == "True"
                    for c in s.get("conditions", [])
                )
                and s
            ),
            timeout=30,
            what="the budget's status written (Exhausted)",
        )
        assert status["suspended"], status
        assert "SuspendedByBudget" in {e.reason for e in events_for(cluster, namespace, "train")}
        # The namespace's BudgetUsage, written under the chart's role and confinement.
        usage = wait_for(
            lambda: (
                (u := _budget_usage(cluster, namespace, name))
                and u["spec"]["state"] == "Exhausted"
                and u
            ),
            timeout=30,
            what="the namespace's BudgetUsage (Exhausted)",
        )
        assert (
            usage["metadata"]["ownerReferences"][0]["uid"]
            == get_budget(cluster, name)["metadata"]["uid"]
        )
        # The metric is counted just after the suspend patch returns: wait for it, then
        # check that it says exactly one suspension.
        done = wait_for(
            lambda: actions_done(sa_operator, "TrainingBudget", name),
            timeout=10,
            what="the suspension counted in the operator's metrics",
        )
        assert done == {"Suspend": 1.0}
        # The webhook, its certificate issued into the chart's Secret and its CA into the
        # chart's configuration with the chart's role alone, holds what comes next.
        wait_for(
            lambda: (get_budget(cluster, name).get("status") or {}).get("admission"),
            timeout=30,
            what="the budget's hold published",
        )
        held = wait_for(
            lambda: _held_on_create(cluster, namespace, name),
            timeout=30,
            what="a new Job held by the webhook",
        )
        assert held.spec.suspend is True
    finally:
        drop_namespace(cluster, namespace)
    no_permission_errors(sa_operator)


def _budget_usage(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl(
        "get", "budgetusages.trainwarden.dev", name, "-n", namespace, "-o", "json", check=False
    )
    found: dict[str, Any] | None = json.loads(out) if out.startswith("{") else None
    return found


def test_a_run_s_receipt_is_sealed_under_the_charts_role(
    cluster: Cluster, sa_operator: Operator
) -> None:
    """The operator fills the chart's empty seal Secret with its key (the receipts policy
    lets it fill in the missing key, nothing else) and seals the receipt of a finished run
    with it; the policy lets its ServiceAccount write the receipt with its labels."""
    namespace = make_namespace(cluster)
    try:
        create_budget(cluster, f"{namespace}-tb", namespace, 100)
        batch = client.BatchV1Api(cluster.api)
        job = simulated(JobBuilder("train", namespace), 1).backoff_limit(0)
        batch.create_namespaced_job(namespace, job.completes_after("5s").build())
        (receipt,) = wait_for(
            lambda: client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
                "trainwarden.dev", "v1alpha1", namespace, "runreceipts"
            )["items"],
            timeout=120,
            what="the run's receipt",
        )
        seal = client.CoreV1Api(cluster.api).read_namespaced_secret(
            f"{RELEASE}-receipt-seal", NAMESPACE
        )
        ring = keyring({k: base64.b64decode(v) for k, v in (seal.data or {}).items()})
        assert isinstance(ring, Keyring), ring
        meta = receipt["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "trainwarden"
        sealed = meta["annotations"]["trainwarden.dev/seal"]
        spec = verified(
            ring, instance=None, namespace=namespace, name=meta["name"], sealed=sealed,
            spec=receipt["spec"],
        )  # fmt: skip
        assert spec is not None, "the receipt's seal does not verify with the chart's key"
    finally:
        drop_namespace(cluster, namespace)
    no_permission_errors(sa_operator)


def _held_on_create(cluster: Cluster, namespace: str, budget: str) -> client.V1Job | None:
    """Create a Job (a new name each try); it if the webhook held it, else None."""
    batch = client.BatchV1Api(cluster.api)
    job = gpu_job(f"next-{uuid.uuid4().hex[:4]}", 1)
    created: client.V1Job = batch.create_namespaced_job(namespace, job)
    if (created.metadata.annotations or {}).get("trainwarden.dev/held-by") == budget:
        return created
    return None


def _gpu_deployment(name: str) -> dict[str, Any]:
    """One simulated trainer pod labelled app=<name>, restarted Always."""
    return simulated(DeploymentBuilder(name)).build()


def test_idle_reclaim_warns_suspends_evicts_and_scales_down_under_the_charts_role(
    cluster: Cluster, sa_operator: Operator
) -> None:
    """One policy suspends an idle Job and evicts an idle bare pod, another scales an idle
    Deployment to zero: pod annotations, Events, evictions, Job and Deployment patches,
    ReplicaSet reads and status writes, all with the chart's role."""
    suspend_ns, scale_ns = make_namespace(cluster), make_namespace(cluster)
    core, batch, apps = (
        client.CoreV1Api(cluster.api),
        client.BatchV1Api(cluster.api),
        client.AppsV1Api(cluster.api),
    )
    try:
        batch.create_namespaced_job(suspend_ns, gpu_job("idle"))
        bare = simulated(PodBuilder("bare")).labels(scenario="bare")
        core.create_namespaced_pod(suspend_ns, bare.build())
        apps.create_namespaced_deployment(scale_ns, _gpu_deployment("notebooks"))
        pods = {
            (suspend_ns, "job"): running_pod(cluster, suspend_ns, "job-name=idle"),
            (suspend_ns, "bare"): running_pod(cluster, suspend_ns, "scenario=bare"),
            (scale_ns, "deploy"): running_pod(cluster, scale_ns, "app=notebooks"),
        }
        for (namespace, _), pod in pods.items():
            publish_utilization(cluster, namespace, pod.metadata.name, 0.0)
        create_policy(cluster, IDLE, idle_policy(f"{suspend_ns}-idle", suspend_ns).build())
        create_policy(
            cluster,
            IDLE,
            idle_policy(f"{scale_ns}-idle", scale_ns).action("ScaleDown").build(),
        )

        job_pod = pods[(suspend_ns, "job")].metadata.name
        warned = wait_for(
            lambda: (
                (p := core.read_namespaced_pod(job_pod, suspend_ns)).metadata.annotations
                and "trainwarden.dev/idle-since" in p.metadata.annotations
                and p
            ),
            timeout=90,
            what="the idle warning annotated on the Job's pod",
        )
        assert "trainwarden.dev/idle-warned-at" in warned.metadata.annotations
        job = wait_for(
            lambda: (j := batch.read_namespaced_job("idle", suspend_ns)).spec.suspend and j,
            timeout=90,
            what="the idle Job suspended",
        )
        assert job.metadata.labels["trainwarden.dev/reclaimed-by"] == f"{suspend_ns}-idle"

        def evicted() -> bool:
            try:
                core.read_namespaced_pod("bare", suspend_ns)
            except client.ApiException as error:
                return error.status == 404
            return False

        wait_for(evicted, timeout=60, what="the idle bare pod evicted")
        deployment = wait_for(
            lambda: (
                (d := apps.read_namespaced_deployment("notebooks", scale_ns)).spec.replicas == 0
                and d
            ),
            timeout=60,
            what="the idle Deployment scaled to zero",
        )
        assert deployment.metadata.annotations["trainwarden.dev/scaled-down-from"] == "1"
        # Each action is counted just after its patch returns, so just after the test can
        # see it: wait for the count, then check what it says.
        wait_for(
            lambda: (
                "ScaleDown" in actions_done(sa_operator, "IdleReclaimPolicy", f"{scale_ns}-idle")
            ),
            timeout=10,
            what="the scale-down counted in the operator's metrics",
        )
        done = actions_done(sa_operator, "IdleReclaimPolicy", f"{suspend_ns}-idle")
        scaled = actions_done(sa_operator, "IdleReclaimPolicy", f"{scale_ns}-idle")
        print(f"\nactions by the operator under the chart's role: {done} {scaled}")
        assert done.get("Suspend") == 2, done  # the Job, and the bare pod (evicted)
        assert scaled.get("ScaleDown") == 1, scaled
        assert get_policy(cluster, IDLE, f"{suspend_ns}-idle")["status"]["lastEvaluated"]
        reasons = {e.reason for e in events_for(cluster, suspend_ns, job_pod)}
        assert reasons, "Events posted on the idle pod"
    finally:
        drop_namespace(cluster, suspend_ns)
        drop_namespace(cluster, scale_ns)
    no_permission_errors(sa_operator)


def test_idle_node_is_cordoned_under_the_charts_role(
    cluster: Cluster, sa_operator: Operator
) -> None:
    core = client.CoreV1Api(cluster.api)
    tag = uuid.uuid4().hex[:6]
    node = f"tw-helm-node-{tag}"
    core.create_node(
        NodeBuilder(node)
        .kwok()
        .labels({"trainwarden.dev/e2e-node": tag})
        .taint("e2e", tag)
        .cpu("8")
        .memory("64Gi")
        .pods(110)
        .gpus(8)
        .build()
    )
    namespace = make_namespace(cluster)
    try:
        manifest = (
            idle_policy(f"{namespace}-nodes", namespace)
            .action("NotifyOnly")
            .idle_nodes(
                after="5s",
                cordon=True,
                label=True,
                node_labels={"trainwarden.dev/e2e-node": tag},
            )
            .build()
        )
        create_policy(cluster, IDLE, manifest)
        cordoned = wait_for(
            lambda: (
                (n := core.read_node(node)).spec.unschedulable
                and n.metadata.labels.get("trainwarden.dev/idle-node") == "true"
                and n
            ),
            timeout=60,
            what="the idle node cordoned and labelled",
        )
        assert cordoned.metadata.annotations["trainwarden.dev/cordoned-by"] == f"{namespace}-nodes"
        done = wait_for(
            lambda: (
                (d := actions_done(sa_operator, "IdleReclaimPolicy", f"{namespace}-nodes"))
                and len(d) == 2
                and d
            ),
            timeout=10,
            what="the cordon and the label counted by this operator",
        )
        assert done == {"Cordon": 1.0, "Label": 1.0}
    finally:
        core.delete_node(node)
        drop_namespace(cluster, namespace)
    no_permission_errors(sa_operator)


# --- what the role must not allow --------------------------------------------------------


@pytest.fixture(scope="module")
def targets(cluster: Cluster, release: Release) -> Iterator[str]:
    """A namespace with a Secret, a ConfigMap and a Job the operator must not touch."""
    namespace = make_namespace(cluster)
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_secret(
        namespace, SecretBuilder("creds").string_data(key="s3cr3t").build()
    )
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"a": "1"}}
    )
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, gpu_job("train"))
    yield namespace
    drop_namespace(cluster, namespace)


def denied_requests(namespace: str) -> list[tuple[str, list[str]]]:
    pod = yaml.safe_dump(PodBuilder("sneaky", namespace).image("example.invalid/x:1").build())
    return [
        ("read a Secret", ["get", "secret", "creds", "-n", namespace]),
        ("list Secrets cluster-wide", ["get", "secrets", "-A"]),
        ("read the operator's own namespace's Secrets", ["get", "secrets", "-n", NAMESPACE]),
        ("delete a Job", ["delete", "job", "train", "-n", namespace, "--wait=false"]),
        ("create a pod", ["create", "-f", "-", pod]),
        (
            "patch a ConfigMap",
            ["patch", "configmap", "settings", "-n", namespace, "-p", '{"data":{"a":"2"}}'],
        ),
        ("delete a pod", ["delete", "pod", "trainer-0", "-n", namespace, "--wait=false"]),
        ("change a budget's spec", ["patch", "tb", "nope", "--type=merge", "-p", '{"spec":{}}']),
        ("delete a policy", ["delete", "irp", "some-policy"]),
        ("create a ClusterRoleBinding", ["create", "clusterrolebinding", "x", "--clusterrole=admin",
                                         f"--serviceaccount={NAMESPACE}:{ACCOUNT}"]),
        ("mint tokens", ["create", "token", ACCOUNT, "-n", NAMESPACE]),
        ("exec into a pod", ["exec", "-n", namespace, "job/train", "--", "true"]),
    ]  # fmt: skip


def test_the_chart_role_refuses_what_the_operator_must_not_do(
    cluster: Cluster, sa_kubeconfig: Path, targets: str
) -> None:
    refused = {}
    for what, args in denied_requests(targets):
        stdin = args.pop() if args[:2] == ["create", "-f"] else None
        result = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(sa_kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode != 0, f"{what}: allowed!\n{result.stdout}"
        assert "forbidden" in result.stderr.lower(), f"{what}: {result.stderr}"
        assert USER in result.stderr, result.stderr
        refused[what] = result.stderr.strip().splitlines()[-1]
    print("\n" + "\n".join(f"{what}: {message}" for what, message in refused.items()))
    # The same requests straight to the API (no kubectl GET before the PATCH).
    api = config.new_client_from_config(config_file=str(sa_kubeconfig))
    raw: list[tuple[str, Callable[[], object]]] = [
        (
            "PATCH configmap",
            lambda: client.CoreV1Api(api).patch_namespaced_config_map(
                "settings", targets, {"data": {"a": "3"}}
            ),
        ),
        (
            "PATCH budget spec",
            lambda: client.CustomObjectsApi(api).patch_cluster_custom_object(
                "trainwarden.dev", "v1alpha1", "trainingbudgets", "nope", {"spec": {}}
            ),
        ),
        ("DELETE job", lambda: client.BatchV1Api(api).delete_namespaced_job("train", targets)),
        ("GET secret", lambda: client.CoreV1Api(api).read_namespaced_secret("creds", targets)),
    ]
    for what, call in raw:
        with pytest.raises(client.ApiException) as refused_call:
            call()
        assert refused_call.value.status == 403, f"{what}: {refused_call.value}"
    # Nothing changed.
    core = client.CoreV1Api(cluster.api)
    assert core.read_namespaced_config_map("settings", targets).data == {"a": "1"}
    assert client.BatchV1Api(cluster.api).read_namespaced_job("train", targets)
    assert not [p for p in core.list_namespaced_pod(targets).items if p.metadata.name == "sneaky"]


def test_auth_can_i_matches_the_role(cluster: Cluster, release: Release) -> None:
    """The API server's own view of the ServiceAccount (impersonated by the admin)."""

    def can(*args: str) -> bool:
        out = cluster.kubectl("auth", "can-i", f"--as={USER}", *args, check=False)
        return out.strip().splitlines()[0] == "yes"

    allowed = [
        ("patch", "jobs.batch", "-n", "default"),
        ("list", "jobs.batch", "--all-namespaces"),
        ("create", "pods", "--subresource=eviction", "-n", "default"),
        ("patch", "pods", "-n", "default"),
        ("patch", "nodes"),
        ("create", "events", "-n", "default"),
        ("patch", "trainingbudgets.trainwarden.dev", "--subresource=status"),
        ("create", "runreceipts.trainwarden.dev", "-n", "default"),
        ("list", "runreceipts.trainwarden.dev", "--all-namespaces"),
        ("watch", "runreceipts.trainwarden.dev", "--all-namespaces"),  # the repeat check
        ("delete", "runreceipts.trainwarden.dev", "-n", "default"),
        ("create", "budgetusages.trainwarden.dev", "-n", "default"),
        ("patch", "budgetusages.trainwarden.dev", "-n", "default"),
        ("delete", "budgetusages.trainwarden.dev", "-n", "default"),
        ("list", "budgetusages.trainwarden.dev", "--all-namespaces"),
        ("watch", "idlereclaimpolicies.trainwarden.dev"),
        ("patch", "deployments.apps", "-n", "default"),
        ("create", "jobs.batch", "-n", "default"),
        ("patch", "persistentvolumeclaims", "-n", "default"),
        ("get", "configmaps/trainwarden-kill-switch", "-n", NAMESPACE),
        ("get", f"secrets/{S3_SECRET}", "-n", NAMESPACE),
        ("update", f"secrets/{RELEASE}-webhook", "-n", NAMESPACE),
        ("get", f"secrets/{RELEASE}-receipt-seal", "-n", NAMESPACE),
        ("patch", f"secrets/{RELEASE}-receipt-seal", "-n", NAMESPACE),
        ("patch", f"mutatingwebhookconfigurations/{RELEASE}-hold"),
    ]
    denied = [
        ("get", "secrets", "-n", "default"),
        ("list", "secrets", "--all-namespaces"),
        ("get", "secrets/other", "-n", NAMESPACE),
        ("get", f"secrets/{S3_SECRET}", "-n", "default"),
        ("list", "secrets", "-n", NAMESPACE),
        ("update", f"secrets/{S3_SECRET}", "-n", NAMESPACE),
        ("create", "secrets", "-n", NAMESPACE),
        ("delete", f"secrets/{RELEASE}-webhook", "-n", NAMESPACE),
        ("delete", f"secrets/{RELEASE}-receipt-seal", "-n", NAMESPACE),
        ("update", f"secrets/{RELEASE}-receipt-seal", "-n", NAMESPACE),
        ("patch", f"secrets/{RELEASE}-receipt-seal", "-n", "default"),
        ("patch", "mutatingwebhookconfigurations/someone-elses"),
        ("patch", "validatingwebhookconfigurations"),
        ("delete", f"mutatingwebhookconfigurations/{RELEASE}-hold"),
        ("delete", "jobs.batch", "-n", "default"),
        ("create", "pods", "-n", "default"),
        ("get", "configmaps", "-n", NAMESPACE),
        ("get", "configmaps/trainwarden-kill-switch", "-n", "default"),
        ("delete", "persistentvolumeclaims", "-n", "default"),
        ("delete", "pods", "-n", "default"),
        ("patch", "configmaps", "-n", "default"),
        ("patch", "trainingbudgets.trainwarden.dev"),
        ("delete", "checkpointpolicies.trainwarden.dev"),
        ("update", "runreceipts.trainwarden.dev", "-n", "default"),
        ("patch", "runreceipts.trainwarden.dev", "-n", "default"),
        ("update", "budgetusages.trainwarden.dev", "-n", "default"),
        ("watch", "budgetusages.trainwarden.dev", "--all-namespaces"),
        ("update", "nodes"),
        ("delete", "nodes"),
        ("create", "serviceaccounts", "--subresource=token", "-n", NAMESPACE),
        ("create", "pods", "--subresource=exec", "-n", "default"),
        ("patch", "daemonsets.apps", "-n", "default"),
        ("escalate", "clusterroles.rbac.authorization.k8s.io"),
        ("*", "*"),
    ]
    assert [a for a in allowed if not can(*a)] == []
    assert [d for d in denied if can(*d)] == []
