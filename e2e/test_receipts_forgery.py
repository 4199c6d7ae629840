"""RunReceipts a tenant forges, on the real API server.

The chart's admission policy (templates/receipts-policy.yaml): nobody but the operator's
ServiceAccount creates a receipt carrying this instance's marks (its labels, its seal)
or adds, changes or removes them on one — refused even for a dry run — while a
tenant's own receipts without them, and another instance's labels, go through; the
operator's patch of its seal's Secret may only fill in a missing key.

The operator itself (no chart: it trusts only the seal): a tenant who takes a run's
receipt name first gets nothing of it — the run's receipt goes under its fallback name,
with a Warning Event, the forged figures never reach the Job — and the seal the operator
wrote verifies once read back from the API server (numbers and times as it re-encodes
them).
"""

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    KUBE_VERSION,
    ROOT,
    Cluster,
    Operator,
    budget,
    create_policy,
    events_for,
    simulated,
    start_operator,
    wait_for,
)
from trainwarden.api.v1alpha1.names import SEAL
from trainwarden.receipts.identity import keyring, verified
from trainwarden.testing.builders import JobBuilder

HELM = CLUSTER_DIR / "bin" / "helm"
GROUP, VERSION, PLURAL = "trainwarden.dev", "v1alpha1", "runreceipts"
TEMPLATES = ("serviceaccount", "clusterrole", "clusterrolebinding", "receipts-policy")
REFUSED = "written by trainwarden's ServiceAccount only"


def receipt(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> str:
    """A RunReceipt whose spec the CRD admits (a forged 0.01 accelerator-hours)."""
    at = "2026-01-01T00:00:00Z"
    spec = {
        "workload": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "namespace": "x",
            "name": "t",
            "uid": "u",
        },
        "outcome": "Succeeded",
        "startedAt": at,
        "finishedAt": at,
        "wallSeconds": 1,
        "wallTime": "1s",
        "acceleratorHours": {"held": 0.01},
    }
    meta = {"name": name, "labels": labels, "annotations": annotations or {}}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RunReceipt",
        "metadata": meta,
        "spec": spec,
    }
    return json.dumps(body)


OURS = {"app.kubernetes.io/managed-by": "trainwarden"}


@pytest.fixture(scope="module")
def policy(cluster: Cluster, crds: None) -> Iterator[tuple[str, str]]:
    """The chart's account, role and receipts policy under a release of its own (the
    default instance); (its namespace, its ServiceAccount's user name)."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    tag = uuid.uuid4().hex[:6]
    release = namespace = f"tw-rcpt-{tag}"
    cluster.kubectl("create", "namespace", namespace)
    shown = [arg for t in TEMPLATES for arg in ("--show-only", f"templates/{t}.yaml")]
    manifest = subprocess.run(
        [
            str(HELM),
            "template",
            "--kube-version",
            KUBE_VERSION,
            release,
            str(ROOT / "helm" / "trainwarden"),
            "-n",
            namespace,
            *shown,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)
    account = f"system:serviceaccount:{namespace}:{release}-trainwarden"

    def enforced() -> bool:
        """The API server enforces a new policy once it has compiled it (anyone but the
        operator is refused: the admin too)."""
        probe = receipt("probe", OURS)
        out = cluster.kubectl(
            "create", "-n", namespace, "--dry-run=server", "-f", "-", stdin=probe, check=False
        )
        return REFUSED in out

    try:
        wait_for(enforced, timeout=60, what="the receipts policy in force")
        yield namespace, account
    finally:  # a policy left behind would refuse another default operator's receipts
        cluster.kubectl(
            "delete", "-n", namespace, "-f", "-", "--wait=false", stdin=manifest, check=False
        )
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def as_tenant(cluster: Cluster, namespace: str, *args: str, stdin: str | None = None) -> str:
    """kubectl as a namespace admin (impersonated: admission sees the tenant's name)."""
    return cluster.kubectl(
        "--as=tenant",
        "--as-group=system:authenticated",
        "-n",
        namespace,
        *args,
        stdin=stdin,
        check=False,
    )


@pytest.fixture
def tenant(cluster: Cluster, policy: tuple[str, str], namespace: str) -> str:
    """`namespace`, where the user "tenant" may do anything with RunReceipts."""
    rules = "--verb=get,list,create,update,patch,delete --resource=runreceipts.trainwarden.dev"
    cluster.kubectl("create", "role", "receipts", "-n", namespace, *rules.split())
    cluster.kubectl(
        "create", "rolebinding", "receipts", "-n", namespace, "--role=receipts", "--user=tenant"
    )
    return namespace


def test_only_the_operator_creates_receipts_with_its_marks(
    cluster: Cluster, policy: tuple[str, str], tenant: str
) -> None:
    _, account = policy
    refused = {
        "its labels": receipt("forged", OURS),
        "its labels, dry run": receipt("forged", OURS),
        "its labels and a seal": receipt(
            "forged", {**OURS, "trainwarden.dev/seal-key": "x"}, {SEAL: "x.y"}
        ),
    }
    for what, body in refused.items():
        dry = ["--dry-run=server"] if "dry run" in what else []
        out = as_tenant(cluster, tenant, "create", *dry, "-f", "-", stdin=body)
        assert REFUSED in out, f"{what}: {out}"
    assert "not found" in as_tenant(cluster, tenant, "get", "rcpt", "forged")
    allowed = {
        "no marks": receipt("mine", {"team": "a"}),
        "another instance's labels": receipt(
            "other", {**OURS, "trainwarden.dev/instance": "canary"}
        ),
    }
    for what, body in allowed.items():
        out = as_tenant(cluster, tenant, "create", "-f", "-", stdin=body)
        assert "created" in out, f"{what}: {out}"
    out = cluster.kubectl(
        f"--as={account}", "-n", tenant, "create", "-f", "-", stdin=receipt("genuine", OURS)
    )
    assert "created" in out, out


def test_nobody_else_adds_changes_or_removes_the_marks(
    cluster: Cluster, policy: tuple[str, str], tenant: str
) -> None:
    _, account = policy
    marked = receipt("genuine", {**OURS, "team": "a"}, {SEAL: "k.mac"})
    cluster.kubectl(f"--as={account}", "-n", tenant, "create", "-f", "-", stdin=marked)
    as_tenant(cluster, tenant, "create", "-f", "-", stdin=receipt("mine", {}))
    refused = [
        (
            "label its own receipt as the operator's",
            ["label", "rcpt", "mine", "app.kubernetes.io/managed-by=trainwarden"],
        ),
        ("unlabel the operator's", ["label", "rcpt", "genuine", "app.kubernetes.io/managed-by-"]),
        ("label it another instance's", ["label", "rcpt", "genuine", "trainwarden.dev/instance=x"]),
        ("strip its seal", ["annotate", "rcpt", "genuine", f"{SEAL}-"]),
        ("change its seal", ["annotate", "--overwrite", "rcpt", "genuine", f"{SEAL}=k.other"]),
    ]
    for what, args in refused:
        for dry in (["--dry-run=server"], []):
            out = as_tenant(cluster, tenant, *args, *dry)
            assert REFUSED in out, f"{what} {dry}: {out}"
    out = as_tenant(cluster, tenant, "label", "rcpt", "genuine", "experiment=e1")
    assert "labeled" in out, out  # the team's own attribution labels are its own
    labels = json.loads(cluster.kubectl("get", "rcpt", "genuine", "-n", tenant, "-o", "json"))[
        "metadata"
    ]["labels"]
    assert labels == {**OURS, "team": "a", "experiment": "e1"}


def test_the_operator_may_only_fill_in_its_missing_key(
    cluster: Cluster, policy: tuple[str, str]
) -> None:
    namespace, account = policy
    secret = f"{namespace}-trainwarden-receipt-seal"
    key = base64.b64encode(b"k" * 32).decode()

    def patch(data: dict[str, Any], *, who: str = account) -> str:
        body = json.dumps({"data": data})
        return cluster.kubectl(
            f"--as={who}",
            "-n",
            namespace,
            "patch",
            "secret",
            secret,
            "--type=merge",
            "-p",
            body,
            check=False,
        )

    assert "patched" in patch({"key": key})
    refused = patch({"key": base64.b64encode(b"o" * 32).decode()})
    assert "may only fill in the missing key" in refused, refused
    assert "may only fill in the missing key" in patch({"retired-1": key})
    assert "forbidden" in cluster.kubectl(
        f"--as={account}", "-n", namespace, "delete", "secret", secret, check=False
    )
    assert "patched" in cluster.kubectl(  # an admin rotating the key: not the policy's business
        "-n", namespace, "patch", "secret", secret, "--type=json", "-p",
        json.dumps([{"op": "move", "from": "/data/key", "path": "/data/retired-1"}]),
    )  # fmt: skip


# --- the operator, without the chart ---------------------------------------------------


@pytest.fixture
def receipts_operator(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> Iterator[tuple[Operator, str]]:
    instance = f"forgery-{namespace}"
    running = start_operator(
        cluster.kubeconfig, tmp_path / "operator.log", args=(f"--instance={instance}",)
    )
    yield running, instance
    running.stop()


def _receipts(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    found = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    return {r["metadata"]["name"]: r for r in found["items"]}


def test_a_squatted_name_gets_the_run_s_receipt_elsewhere_sealed_and_true(
    cluster: Cluster, namespace: str, receipts_operator: tuple[Operator, str]
) -> None:
    _, instance = receipts_operator
    spec = budget(f"{namespace}-b", namespace, 100).instance(instance)
    create_policy(cluster, "trainingbudgets", spec.build())
    batch = client.BatchV1Api(cluster.api)
    job = simulated(JobBuilder("train", namespace), 2).backoff_limit(0).completes_after("20s")
    uid = batch.create_namespaced_job(namespace, job.build()).metadata.uid
    taken = f"job-train-{uid.replace('-', '')[:8]}"
    labels = {**OURS, "trainwarden.dev/instance": instance, "trainwarden.dev/workload-uid": uid}
    squatter = json.loads(receipt(taken, labels))
    squatter["spec"]["workload"] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": namespace,
        "name": "train",
        "uid": uid,
    }
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(squatter))

    def written() -> dict[str, Any] | None:
        found = [r for n, r in _receipts(cluster, namespace).items() if n != taken]
        return found[0] if found else None

    genuine = wait_for(written, timeout=120, what="the run's receipt under another name")
    name = genuine["metadata"]["name"]
    assert name.startswith(taken + "-")
    held = genuine["spec"]["acceleratorHours"]["held"]
    assert held == pytest.approx(2 * 20 / 3600, rel=0.5)  # what ran, not the forged 0.01
    assert _receipts(cluster, namespace)[taken]["spec"]["acceleratorHours"]["held"] == 0.01
    (warning,) = wait_for(
        lambda: [
            e for e in events_for(cluster, namespace, "train") if e.reason == "ReceiptNameTaken"
        ],
        timeout=10,
        what="the Warning on the Job",
    )
    assert warning.type == "Warning"
    assert name in warning.message
    note = wait_for(
        lambda: (batch.read_namespaced_job("train", namespace).metadata.annotations or {}).get(
            "trainwarden.dev/receipt"
        ),
        timeout=10,
        what="the receipt annotation on the Job",
    )
    assert json.loads(note)["receipt"] == name
    assert json.loads(note)["held"] == pytest.approx(held, abs=1e-3)
    # The seal, as the API server gives the receipt back, verifies with the operator's key.
    data = (
        client.CoreV1Api(cluster.api)
        .read_namespaced_secret("trainwarden-receipt-seal", "default")
        .data
    )
    ring = keyring({k: base64.b64decode(v) for k, v in data.items()})
    assert not isinstance(ring, str), ring
    meta = genuine["metadata"]
    back = verified(
        ring,
        instance=instance,
        namespace=namespace,
        name=name,
        sealed=meta["annotations"][SEAL],
        spec=genuine["spec"],
    )
    assert back is not None, "the seal read back from the API server does not verify"
    assert back.accelerator_hours.held == held
