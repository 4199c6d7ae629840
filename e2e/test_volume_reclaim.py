"""VolumeReclaimPolicy on the real API server (issue 28 item 2, docs/storage.md).

PersistentVolumes reserved for their claims and bound by the real controller-manager; a
pod on a kwok node mounts one. A DryRun policy lists the orphan (and only it) as planned;
switched to Enforce it reports it again, waits its grace period, asks for a VolumeSnapshot
(this cluster has no snapshot controller: the test writes readyToUse as the controller
would) and deletes it: exactly what DryRun listed. A mounted, a protected, two
StatefulSet's (by its claim template's name, and by an ownerReference) and a
checkpoint-governed claim are never touched.
"""

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from harness import (
    CLUSTER_DIR,
    KUBE_VERSION,
    ROOT,
    Cluster,
    Operator,
    events_for,
    simulated,
    start_operator,
    token_kubeconfig,
    wait_for,
)
from trainwarden.testing.builders import PodBuilder
from trainwarden.testing.cluster import PersistentVolumeBuilder, PVCBuilder
from trainwarden.testing.policies import CheckpointPolicyBuilder
from trainwarden.testing.volumes import VolumePolicyBuilder
from trainwarden.volumes.observe import snapshot_name

INSTANCE = "volumes"  # this module's operator governs only its own policies
TW = ("trainwarden.dev", "v1alpha1")
SNAPSHOTS = ("snapshot.storage.k8s.io", "v1")
UNTOUCHED = ("mounted", "precious", "data-web-0", "ckpt", "cache-web")


@pytest.fixture(scope="module")
def volume_operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    subprocess.run([str(ROOT / "e2e/cluster/snapshot-crds.sh")], check=True, cwd=ROOT)
    running = start_operator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        args=("--volume-reclaim", f"--instance={INSTANCE}"),
    )
    yield running
    running.stop()


@pytest.fixture
def volumes(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[list[str]]:
    """Claims bound to PersistentVolumes reserved for them (reclaimPolicy Delete)."""
    core = client.CoreV1Api(cluster.api)
    made: list[str] = []

    def bound(name: str, labels: dict[str, str] | None = None) -> None:
        pv = f"{namespace}-{name}"
        core.create_persistent_volume(
            PersistentVolumeBuilder(pv).size("1Gi").host_path(str(tmp_path / name))
            .claim(namespace, name).reclaim_policy("Delete").build()
        )  # fmt: skip
        claim = PVCBuilder(name, namespace).size("1Gi").storage_class("").volume(pv)
        core.create_namespaced_persistent_volume_claim(
            namespace, claim.labels(labels or {}).build()
        )
        made.append(pv)

    for name in ("orphan", "mounted", "data-web-0"):
        bound(name)
    bound("precious", {"trainwarden.dev/protect": "true"})
    bound("ckpt", {"ckpt": namespace})
    wait_for(
        lambda: all(
            core.read_namespaced_persistent_volume_claim(n, namespace).status.phase == "Bound"
            for n in ("orphan", "mounted", "precious", "data-web-0", "ckpt")
        ),
        timeout=60,
        what="the controller-manager to bind every claim",
    )
    yield made
    for pv in made:  # the orphan's went with it (reclaimPolicy Delete)
        try:
            core.delete_persistent_volume(pv)
        except client.ApiException as error:
            if error.status != 404:
                raise


def claims(cluster: Cluster, namespace: str) -> set[str]:
    found = client.CoreV1Api(cluster.api).list_namespaced_persistent_volume_claim(namespace)
    return {c.metadata.name for c in found.items if c.metadata.deletion_timestamp is None}


def policy_status(cluster: Cluster, name: str) -> dict[str, Any]:
    api = client.CustomObjectsApi(cluster.api)
    body = api.get_cluster_custom_object(*TW, "volumereclaimpolicies", name)
    return dict(body.get("status") or {})


def planned(cluster: Cluster, name: str) -> set[str] | None:
    found = {c["name"] for c in policy_status(cluster, name).get("claims", []) if c.get("planned")}
    return found or None


def test_an_orphan_is_listed_in_dry_run_then_snapshotted_and_deleted_in_enforce(
    cluster: Cluster, volume_operator: Operator, namespace: str, volumes: list[str]
) -> None:
    apps, custom = client.AppsV1Api(cluster.api), client.CustomObjectsApi(cluster.api)
    core = client.CoreV1Api(cluster.api)
    user = simulated(PodBuilder("user", namespace).claim("mounted")).build()
    core.create_namespaced_pod(namespace, user)
    web = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "none"}]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }
    made = apps.create_namespaced_stateful_set(namespace, web)
    owner = {**web, "metadata": {"name": "web", "uid": made.metadata.uid}}
    owned = PVCBuilder("cache-web", namespace).size("1Gi").storage_class("").owned_by(owner)
    core.create_namespaced_persistent_volume_claim(namespace, owned.build())  # Pending
    ckpt = CheckpointPolicyBuilder(f"{namespace}-ckpt").namespaces(namespace)
    ckpt = ckpt.pvc("/c", labels={"ckpt": namespace}).instance(INSTANCE)
    custom.create_cluster_custom_object(*TW, "checkpointpolicies", ckpt.build())
    name = f"{namespace}-orphans"
    vrp = VolumePolicyBuilder(name).namespaces(namespace).unmounted_for("1m").grace("20s")
    vrp = vrp.snapshot("csi-snap", timeout="5m").instance(INSTANCE)
    custom.create_cluster_custom_object(*TW, "volumereclaimpolicies", vrp.build())
    try:
        # DryRun: the orphan (only) is listed, reported, and nothing is written to claims.
        listed = wait_for(lambda: planned(cluster, name), timeout=180, what="the DryRun plan")
        assert listed == {"orphan"}
        assert "Orphaned" in {e.reason for e in events_for(cluster, namespace, "orphan")}
        states = {c["name"]: c["state"] for c in policy_status(cluster, name)["claims"]}
        assert "mounted" not in states
        assert {states[n] for n in ("precious", "data-web-0", "ckpt", "cache-web")} == {"Exempt"}
        orphan = core.read_namespaced_persistent_volume_claim("orphan", namespace)
        assert "trainwarden.dev/orphaned-since" not in (orphan.metadata.annotations or {})

        # Enforce: reported again, a grace period, a snapshot the test makes ready, deleted.
        patch = {"spec": {"mode": "Enforce"}}
        custom.patch_cluster_custom_object(*TW, "volumereclaimpolicies", name, patch)
        snap = snapshot_name("orphan", orphan.metadata.uid)
        made = wait_for(
            lambda: custom.get_namespaced_custom_object(
                *SNAPSHOTS, namespace, "volumesnapshots", snap
            ),
            timeout=120,
            what="the VolumeSnapshot of the orphan",
        )
        assert made["spec"]["source"] == {"persistentVolumeClaimName": "orphan"}
        assert made["metadata"]["labels"]["trainwarden.dev/source-claim-uid"] == orphan.metadata.uid
        assert "orphan" in claims(cluster, namespace)  # not before its snapshot is ready
        custom.patch_namespaced_custom_object_status(
            *SNAPSHOTS, namespace, "volumesnapshots", snap, {"status": {"readyToUse": True}}
        )
        wait_for(
            lambda: "orphan" not in claims(cluster, namespace),
            timeout=90,
            what="the orphan's deletion",
        )
        assert claims(cluster, namespace) == set(UNTOUCHED)  # deleted: exactly what was listed
        reasons = {e.reason for e in events_for(cluster, namespace, "orphan")}
        assert {"Orphaned", "SnapshotRequested", "Deleted"} <= reasons
        status = policy_status(cluster, name)
        assert (status["claimsDeleted"], status["bytesDeleted"]) == (1, 2**30)
        for kept in UNTOUCHED:
            assert "Deleted" not in {e.reason for e in events_for(cluster, namespace, kept)}
    finally:
        custom.delete_cluster_custom_object(*TW, "volumereclaimpolicies", name)
        custom.delete_cluster_custom_object(*TW, "checkpointpolicies", f"{namespace}-ckpt")


def test_an_invalid_unmounted_for_is_refused_by_the_api_server(
    cluster: Cluster, crds: None
) -> None:
    """unmountedFor below 1m is the operator's check (Ready=False); a spec without it is
    the API server's."""
    custom = client.CustomObjectsApi(cluster.api)
    body = VolumePolicyBuilder(f"tw-{uuid.uuid4().hex[:6]}").namespaces("x").unchecked()
    del body["spec"]["unmountedFor"]
    with pytest.raises(client.ApiException) as refused:
        custom.create_cluster_custom_object(*TW, "volumereclaimpolicies", body)
    assert refused.value.status == 422
    assert "unmountedFor" in str(refused.value.body)


def _confined(cluster: Cluster, release: str, namespace: str, where: Path) -> client.ApiClient:
    """The chart's account, role and confinement (volumeReclaim.enabled) applied under a
    release of their own; a client with that account's token."""
    shown = ("serviceaccount", "clusterrole", "clusterrolebinding", "confinement")
    manifest = subprocess.run(
        [str(CLUSTER_DIR / "bin" / "helm"), "template", "--kube-version", KUBE_VERSION, release,
         str(ROOT / "helm" / "trainwarden"), "-n", namespace, "--set", "volumeReclaim.enabled=true",
         *(a for t in shown for a in ("--show-only", f"templates/{t}.yaml"))],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)
    kubeconfig = token_kubeconfig(cluster, f"{release}-trainwarden", namespace, where)
    return config.new_client_from_config(str(kubeconfig))


def _refused(call: Any) -> str | None:
    """The API server's refusal of a dry-run call, or None if it was allowed."""
    try:
        call()
    except client.ApiException as error:
        return str(error.body)
    return None


def test_the_chart_confines_the_operators_claim_deletes_and_snapshots(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    """With volumeReclaim.enabled the operator's account may delete a claim (RBAC), but the
    confinement policy lets it delete only one it annotated first, and create only labelled
    snapshots of a claim: server-side dry runs, as the operator's account."""
    subprocess.run([str(ROOT / "e2e/cluster/snapshot-crds.sh")], check=True, cwd=ROOT)
    subprocess.run([str(ROOT / "e2e/cluster/helm.sh")], check=True, capture_output=True)
    release = f"tw-vc-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", release)
    try:
        operator = _confined(cluster, release, release, tmp_path)
        core = client.CoreV1Api(cluster.api)
        mark = {"trainwarden.dev/volume-policy": "p: orphaned"}
        core.create_namespaced_persistent_volume_claim(
            namespace, PVCBuilder("plain", namespace).build()
        )
        marked = PVCBuilder("marked", namespace).annotations(mark).build()
        core.create_namespaced_persistent_volume_claim(namespace, marked)
        as_operator = client.CoreV1Api(operator)

        def delete(name: str) -> Any:
            return lambda: as_operator.delete_namespaced_persistent_volume_claim(
                name, namespace, dry_run="All"
            )

        policy = f"{release}-trainwarden-confinement-volumes"
        refusal = wait_for(
            lambda: _refused(delete("plain")), timeout=60, what="the policy in force"
        )
        assert policy in refusal
        assert _refused(delete("marked")) is None
        snapshots = client.CustomObjectsApi(operator)
        labels = {"trainwarden.dev/volume-policy": "p", "trainwarden.dev/source-claim-uid": "u"}
        snap = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "s", "namespace": namespace, "labels": labels},
            "spec": {"source": {"persistentVolumeClaimName": "marked"}},
        }

        def create(body: dict[str, Any]) -> Any:
            return lambda: snapshots.create_namespaced_custom_object(
                *SNAPSHOTS, namespace, "volumesnapshots", body, dry_run="All"
            )

        assert _refused(create(snap)) is None
        unlabelled = {**snap, "metadata": {"name": "s", "namespace": namespace}}
        assert policy in (_refused(create(unlabelled)) or "")
        assert claims(cluster, namespace) == {"plain", "marked"}  # dry runs: nothing deleted
    finally:
        for suffix in ("", "-status", "-pruners", "-evictions", "-usage", "-volumes"):
            name = f"{release}-trainwarden-confinement{suffix}"
            cluster.kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
            cluster.kubectl("delete", "validatingadmissionpolicy", name, check=False)
        cluster.kubectl("delete", "clusterrolebinding", f"{release}-trainwarden", check=False)
        cluster.kubectl("delete", "clusterrole", f"{release}-trainwarden", check=False)
        cluster.kubectl("delete", "namespace", release, "--wait=false", check=False)
