"""An upgrade of the chart upgrades the CRDs, and loses or repeats nothing (issue 26 item 3).

The previous release: the chart as main had it before CRDs upgraded with the chart
(PREVIOUS), with CRDs one schema change older (OLD_CRDS) in the cluster, running the
released image on the real node. It suspends a Job whose budget is spent and holds one
created after that. Then `helm upgrade` to this release's chart from the registry: its
pre-upgrade hook applies this version's CRDs, the operator's pod is replaced, and the budget,
the suspended Job and the held Job are as they were: still suspended and held, by the same
budget, suspended once.

Needs the real node (root; CI has it): without one it skips.
"""

import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness import (
    CLUSTER_DIR,
    ROOT,
    Cluster,
    budget_manifest,
    free_port,
    gpu_job,
    helm,
    helm_uninstall,
    wait_for,
)
from test_release import env, leading, released, values  # noqa: F401
from trainwarden.testing.builders import INSTANCE_LABEL

PREVIOUS = "7068abca844ede259dce3741e1e5745047c98e32"
"""main before this chart's CRD upgrade hook: the previous release's chart."""
OLD_CRDS = "07ba4b45bc7eeb6469758ab8e7c0f90e041164c7"
"""CRDs before status counts and times were bounded (bb7187f): older than this version's."""
RELEASE = NAMESPACE = "trainwarden-upgrade"
INSTANCE = "upgrade"
PORTS = free_port(), free_port(), free_port()
KUBECTL = CLUSTER_DIR / "bin" / "kubectl"
SUSPENDED_BY, HELD_BY = "trainwarden.dev/suspended-by", "trainwarden.dev/held-by"


def checkout(commit: str, path: str, into: Path) -> Path:
    """`path` as it was at `commit`, from this clone's history (a shallow clone has none:
    the test says so and skips, as it does without a real node)."""
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, check=False)
    if known.returncode != 0:
        pytest.skip(f"the previous release's chart is commit {commit[:12]}: not in this clone")
    archive = subprocess.run(
        ["git", "archive", commit, path], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / path


def schemas(cluster: Cluster) -> dict[str, Any]:
    crds = client.ApiextensionsV1Api(cluster.api).list_custom_resource_definition(
        label_selector="app.kubernetes.io/name=trainwarden"
    )
    api = cluster.api
    return {c.metadata.name: api.sanitize_for_serialization(c.spec.versions) for c in crds.items}


def shipped() -> dict[str, Any]:
    found = {}
    for path in sorted((ROOT / "helm" / "trainwarden" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        found[crd["metadata"]["name"]] = crd["spec"]["versions"]
    return found


def apply_crds(cluster: Cluster, directory: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory))


@pytest.fixture(scope="module")
def previous(cluster: Cluster, env: dict[str, str], released: dict[str, str]) -> Iterator[None]:  # noqa: F811
    """The previous release installed, the cluster's CRDs older; this version's CRDs put
    back afterwards whatever happened."""
    with tempfile.TemporaryDirectory() as tmp:
        apply_crds(cluster, checkout(OLD_CRDS, "crds", Path(tmp)))
        assert schemas(cluster) != shipped(), "the old CRDs differ from this version's"
        chart = checkout(PREVIOUS, "helm/trainwarden", Path(tmp))
        image = {
            "repository": f"{env['REGISTRY']}/e2e/trainwarden",
            "digest": released["IMAGE_DIGEST"],
        }
        helm(
            env["KUBECONFIG"], "install", RELEASE, str(chart), "--namespace", NAMESPACE,
            "--create-namespace", "--wait", "--timeout=180s", "-f", "-",
            stdin=json.dumps({**values(env, INSTANCE, PORTS), "image": image}),
        )  # fmt: skip
    try:
        wait_for(lambda: leading(PORTS[0]), timeout=60, what="the previous release to lead")
        yield
    finally:
        helm_uninstall(env["KUBECONFIG"], RELEASE, NAMESPACE)
        client.CoreV1Api(cluster.api).delete_namespace(NAMESPACE)
        apply_crds(cluster, ROOT / "crds")


def suspensions(cluster: Cluster, namespace: str) -> list[str]:
    events = client.CoreV1Api(cluster.api).list_namespaced_event(namespace).items
    return sorted(
        f"{e.involved_object.name} x{e.count or 1}"
        for e in events
        if e.reason == "SuspendedByBudget"
    )


def state(cluster: Cluster, namespace: str, budget: str) -> dict[str, Any]:
    """What an upgrade must leave as it was."""
    batch = client.BatchV1Api(cluster.api)
    listed = batch.list_namespaced_job(namespace).items
    jobs = {j.metadata.name: j for j in listed if j.metadata.deletion_timestamp is None}
    tb = client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", budget
    )
    return {
        "budget": (tb["metadata"]["uid"], tb["metadata"]["generation"]),
        "suspended": {n: j.spec.suspend for n, j in jobs.items()},
        "by": {
            n: (
                (j.metadata.labels or {}).get(SUSPENDED_BY),
                (j.metadata.annotations or {}).get(HELD_BY),
            )
            for n, j in jobs.items()
        },
        "events": suspensions(cluster, namespace),
    }


def test_an_upgrade_applies_the_new_crds_and_keeps_suspensions_and_holds(
    cluster: Cluster,
    env: dict[str, str],  # noqa: F811
    released: dict[str, str],  # noqa: F811
    previous: None,
    namespace: str,
) -> None:
    batch = client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("train", 2))
    name = f"{namespace}-tb"
    budget = budget_manifest(
        name, namespace, 0.002, enforcement={"gracePeriod": "0s", "order": ["Newest"]}
    )
    budget["metadata"].setdefault("labels", {})[INSTANCE_LABEL] = INSTANCE
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", budget
    )
    wait_for(
        lambda: (j := batch.read_namespaced_job("train", namespace)).spec.suspend and j,
        timeout=90,
        what="the Job suspended by the previous release",
    )
    late = wait_for(
        lambda: create_held(cluster, namespace, name),
        timeout=60,
        what="a Job created after the budget was spent held by the previous release",
    )
    before = state(cluster, namespace, name)
    assert before["by"] == {"train": (name, None), late: (None, name)}, before
    assert before["events"] == ["train x1"], before

    started = time.monotonic()
    helm(
        env["KUBECONFIG"], "upgrade", RELEASE, f"oci://{env['REGISTRY']}/e2e/charts/trainwarden",
        "--version", released["VERSION"], "--ca-file", env["REGISTRY_CA"],
        "--namespace", NAMESPACE, "--wait", "--timeout=180s", "-f", "-",
        # A new pod, as a new image would make.
        stdin=json.dumps({**values(env, INSTANCE, PORTS), "podAnnotations": {"upgraded": "1"}}),
    )  # fmt: skip
    wait_for(lambda: leading(PORTS[0]), timeout=60, what="the upgraded release to lead")
    print(f"\nhelm upgrade with the CRD hook: {time.monotonic() - started:.1f} s to leading")
    assert schemas(cluster) == shipped(), "the hook applied this version's CRDs"
    hook = f"{RELEASE}-crds"
    assert not cluster.kubectl("get", "job,serviceaccount", "-n", NAMESPACE, "-o", "name",
                               "--field-selector", f"metadata.name={hook}").strip()  # fmt: skip
    assert not cluster.kubectl("get", "clusterrole", "-o", "name", "--field-selector",
                               f"metadata.name={hook}").strip()  # fmt: skip
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(NAMESPACE).items
    assert [p.metadata.annotations.get("upgraded") for p in pods] == ["1"]
    # The new operator has evaluated the budget since, and changed nothing.
    wait_for(
        lambda: evaluated_since(cluster, name, pods[0].status.start_time),
        timeout=60,
        what="the budget evaluated by the upgraded operator",
    )
    assert state(cluster, namespace, name) == before


def create_held(cluster: Cluster, namespace: str, budget: str) -> str | None:
    """A new Job; its name if the webhook held it, else None (deleted: try again)."""
    name = f"late-{int(time.time() * 1000) % 100000}"
    job = client.BatchV1Api(cluster.api).create_namespaced_job(namespace, gpu_job(name, 1))
    if job.spec.suspend and (job.metadata.annotations or {}).get(HELD_BY) == budget:
        return name
    client.BatchV1Api(cluster.api).delete_namespaced_job(
        name, namespace, propagation_policy="Background"
    )
    return None


def evaluated_since(cluster: Cluster, budget: str, since: Any) -> bool:
    tb = client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", budget
    )
    stamp = (tb.get("status") or {}).get("lastEvaluated")
    return bool(stamp) and datetime.fromisoformat(stamp.replace("Z", "+00:00")) > since
