"""Storage in budgets on the real API server (issue 28 item 1, docs/storage.md).

A TrainingBudget with a storage limit is charged each PersistentVolumeClaim in its scope,
bound or not (no provisioner runs here: the claims stay Pending), its request times its
lifetime by the API server's own timestamps; once its storage is exhausted, the chart's
webhook (pointed at this module's operator) refuses new claims in its scope, and not
outside it; in DryRun the same creation succeeds with a warning.
"""

import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    Cluster,
    events_for,
    get_budget,
    wait_for,
)
from test_admission import Webhook, served_webhook
from trainwarden.testing.builders import BudgetBuilder
from trainwarden.testing.cluster import PVCBuilder

INSTANCE = "storage"  # this module's operator governs only its own budgets
KUBECTL = CLUSTER_DIR / "bin" / "kubectl"
HOLD = "e2e.trainwarden.dev/hold"
GIB = 2**30


@pytest.fixture(scope="module")
def hook(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    with served_webhook(cluster, tmp_path_factory, "tw-sto", instance=INSTANCE) as made:
        yield made


@pytest.fixture
def elsewhere(cluster: Cluster) -> Iterator[str]:
    """A namespace no budget of this module covers."""
    name = f"tw-out-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def claim(name: str, namespace: str, size: str = "1Gi") -> dict[str, Any]:
    """A claim no provisioner serves (class ""): it stays Pending, and is charged."""
    return PVCBuilder(name, namespace).size(size).storage_class("").build()


def storage_budget(cluster: Cluster, name: str, namespace: str, hours: float, mode: str) -> None:
    made = BudgetBuilder(name).namespaces(namespace).period("Monthly").storage_gib_hours(hours)
    made = (made.enforce() if mode == "Enforce" else made.dry_run()).instance(INSTANCE)
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", made.build()
    )


def create(cluster: Cluster, manifest: dict[str, Any], dry_run: str = "none") -> tuple[int, str]:
    """`kubectl create -f -` as a user runs it: its exit code and what it printed on stderr."""
    command = [str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), "create", "-f", "-"]
    result = subprocess.run(
        [*command, f"--dry-run={dry_run}"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stderr


def _seconds(stamp: Any) -> float:
    return (
        stamp.timestamp()
        if isinstance(stamp, datetime)
        else datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    )


def test_a_budget_is_charged_each_claims_request_times_its_lifetime(
    cluster: Cluster, hook: Webhook, namespace: str
) -> None:
    """Two claims, one deleted mid-run: status equals the sum of request x (deletion, or
    the status's watermark, - creation) within 1 GiB-second per claim."""
    core = client.CoreV1Api(cluster.api)
    kept = core.create_namespaced_persistent_volume_claim(
        namespace, claim("kept", namespace, "2Gi")
    )
    gone = claim("gone", namespace, "3Gi")
    gone["metadata"]["finalizers"] = [HOLD]  # its deletionTimestamp stays readable
    gone_made = core.create_namespaced_persistent_volume_claim(namespace, gone)
    name = f"{namespace}-tb"
    storage_budget(cluster, name, namespace, 1000, "Enforce")
    wait_for(
        lambda: (
            (get_budget(cluster, name).get("status") or {}).get("storage", {}).get("claims") == 2
        ),
        timeout=90,
        what="the budget to charge both claims",
    )
    core.delete_namespaced_persistent_volume_claim("gone", namespace)
    deleted = core.read_namespaced_persistent_volume_claim("gone", namespace).metadata
    assert deleted.deletion_timestamp is not None
    core.patch_namespaced_persistent_volume_claim(
        "gone", namespace, {"metadata": {"finalizers": None}}
    )
    deletion = deleted.deletion_timestamp.timestamp()

    def after_deletion() -> dict[str, Any] | None:
        storage = (get_budget(cluster, name).get("status") or {}).get("storage") or {}
        seen = storage.get("observedAt")
        return (
            storage if seen and _seconds(seen) > deletion + 2 and storage["claims"] == 1 else None
        )

    storage = wait_for(after_deletion, timeout=150, what="a status written after the deletion")
    watermark = _seconds(storage["observedAt"])
    expected = 2 * (watermark - kept.metadata.creation_timestamp.timestamp())
    expected += 3 * (deletion - gone_made.metadata.creation_timestamp.timestamp())
    charged = storage["usedGiBHours"] * 3600
    print(f"\ncharged {charged:.4f} GiB-s, exact {expected:.4f} GiB-s")
    assert abs(charged - expected) <= 2.0, (charged, expected)
    assert list(storage["byClass"]) == [""]
    assert storage["requestedGiB"] == 2.0


def refusal_seen(cluster: Cluster, manifest: dict[str, Any], says: str) -> bool:
    """The webhook answers as it will (a server-side dry run passes through it)."""
    code, said = create(cluster, manifest, "server")
    return says in said and (code != 0 or "would be refused" in said)


def test_an_exhausted_budget_refuses_new_claims_in_its_scope_only(
    cluster: Cluster, hook: Webhook, namespace: str, elsewhere: str
) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_persistent_volume_claim(namespace, claim("data", namespace))
    name = f"{namespace}-tb"
    storage_budget(cluster, name, namespace, 0.0001, "Enforce")  # 0.36 GiB-seconds
    says = f"TrainingBudget {name} refuses new volumes"
    more = claim("more", namespace)
    wait_for(lambda: refusal_seen(cluster, more, says), timeout=90, what="the webhook refusing")
    code, said = create(cluster, more)
    print(f"\nkubectl create: {said.strip()}")
    assert code != 0
    assert says in said
    assert "storageGiBHours at or past 100% of its limit" in said
    assert "Existing volumes and their data are untouched" in said
    queued = claim("queued", namespace)
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "x"}  # Kueue's, not a claim's
    code, said = create(cluster, queued)
    assert code != 0, "Kueue's queue label takes no claim past the webhook"
    assert says in said
    listed = core.list_namespaced_persistent_volume_claim(namespace).items
    assert sorted(c.metadata.name for c in listed) == ["data"]
    assert listed[0].metadata.deletion_timestamp is None
    assert create(cluster, claim("more", elsewhere)) == (0, "")
    status = get_budget(cluster, name)["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["StorageExhausted"] == "True"
    assert hook.answered("refused-claim") >= 1
    wait_for(
        lambda: any(e.reason == "ClaimRefused" for e in events_for(cluster, "default", name)),
        timeout=30,
        what="the ClaimRefused Event on the budget",
    )


def test_dry_run_allows_the_claim_with_a_warning(
    cluster: Cluster, hook: Webhook, namespace: str
) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_persistent_volume_claim(namespace, claim("data", namespace))
    name = f"{namespace}-tb"
    storage_budget(cluster, name, namespace, 0.0001, "DryRun")
    says = f"TrainingBudget {name} refuses new volumes"
    more = claim("more", namespace)
    wait_for(lambda: refusal_seen(cluster, more, says), timeout=90, what="the webhook warning")
    code, said = create(cluster, more)
    print(f"\nkubectl create: {said.strip()}")
    assert code == 0
    assert "would be refused (the budget is in DryRun)" in said
    assert core.read_namespaced_persistent_volume_claim("more", namespace).metadata.name == "more"
    assert hook.answered("would-refuse-claim") >= 1
