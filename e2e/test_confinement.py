"""The chart's ValidatingAdmissionPolicy confines the operator's ServiceAccount to what its
code changes, on the real API server: RBAC lets it patch pods, Jobs, Deployments and
nodes and create Jobs; admission narrows that to trainwarden's own marks, suspend,
replicas to zero, cordons and pruner Jobs of the fixed template. Anyone else is left
alone. (The whole operator running under the chart, confinement included, is
test_helm.py.)"""

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import CLUSTER_DIR, ROOT, Cluster, read_env, wait_for

HELM = CLUSTER_DIR / "bin" / "helm"
KUBECTL = CLUSTER_DIR / "bin" / "kubectl"
PRUNER_IMAGE = "localhost/trainwarden-pruner:confinement"
TEMPLATES = ("serviceaccount", "clusterrole", "clusterrolebinding", "confinement", "webhook")
# The webhook template renders a configuration the API server would call: pointed at a
# closed port, it fails open at once (failurePolicy: Ignore) for everyone meanwhile.
CLOSED = "https://127.0.0.1:1/hold"


def run(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def confined(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """The chart's account, role and policy under a release of its own; a kubeconfig
    holding only a token of that account."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    tag = uuid.uuid4().hex[:6]
    release, namespace = f"tw-conf-{tag}", f"tw-conf-{tag}"
    cluster.kubectl("create", "namespace", namespace)
    shown = [arg for t in TEMPLATES for arg in ("--show-only", f"templates/{t}.yaml")]
    manifest = subprocess.run(
        [
            str(HELM),
            "template",
            release,
            str(ROOT / "helm" / "trainwarden"),
            "-n",
            namespace,
            "--set",
            f"pruner.image={PRUNER_IMAGE}",
            "--set",
            f"webhook.url={CLOSED}",
            *shown,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)
    token = cluster.kubectl("create", "token", f"{release}-trainwarden", "-n", namespace).strip()
    server = read_env(CLUSTER_DIR / "cluster.env")["KUBE_APISERVER_URL"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server,
                    "certificate-authority": str(CLUSTER_DIR / "state" / "pki" / "ca.crt"),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [
            {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}
        ],
        "current-context": "c",
    }
    path = tmp_path_factory.mktemp("confined") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_pod("probe")))

    def enforced() -> bool:
        """The API server enforces a new policy once it has compiled it."""
        denied = run(path, "annotate", "pod", "probe", "someone-elses=value", "--dry-run=server")
        return denied.returncode != 0 and "trainwarden may change only" in denied.stderr

    wait_for(enforced, timeout=60, what="the confinement policy in force")
    yield namespace, path
    cluster.kubectl("delete", "mutatingwebhookconfiguration", f"{release}-trainwarden-hold")
    cluster.kubectl(
        "delete", "-n", namespace, "-f", "-", "--wait=false", stdin=manifest, check=False
    )
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/trainer:1"}]},
    }


def _pruner(image: str = PRUNER_IMAGE, **pod: Any) -> dict[str, Any]:
    """A Job shaped like the operator's pruner template."""
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
        "containers": [
            {
                "name": "pruner",
                "image": image,
                "args": ["prune", "/checkpoints"],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
            }
        ],
        "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}],
        **pod,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"pruner-{uuid.uuid4().hex[:6]}",
            "labels": {"app.kubernetes.io/name": "trainwarden-pruner"},
        },
        "spec": {
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "trainwarden-pruner"}},
                "spec": spec,
            }
        },
    }


def create(path: Path, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return run(path, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest))


def test_the_operator_may_annotate_pods_with_its_marks_and_nothing_else(
    cluster: Cluster, confined: tuple[str, Path]
) -> None:
    namespace, path = confined
    assert (
        run(
            path, "annotate", "pod", "probe", "trainwarden.dev/idle-since=2026-12-03T00:00:00Z"
        ).returncode
        == 0
    )
    other = run(path, "annotate", "pod", "probe", "team=somebody-else")
    assert other.returncode != 0
    assert "trainwarden may change only its own" in other.stderr
    image = run(path, "set", "image", "pod/probe", "c=evil.example/miner:1")
    assert image.returncode != 0
    assert "trainwarden may not change a pod's spec" in image.stderr
    # The same requests from anyone else are not the policy's business.
    cluster.kubectl("annotate", "-n", namespace, "pod", "probe", "team=somebody-else")


def test_the_operator_may_create_pruner_jobs_of_its_template_only(
    confined: tuple[str, Path],
) -> None:
    _, path = confined
    assert create(path, _pruner()).returncode == 0, create(path, _pruner()).stderr
    refused = {
        "another image": _pruner("evil.example/miner:1"),
        "a hostPath": _pruner(volumes=[{"name": "checkpoints", "hostPath": {"path": "/"}}]),
        "the host network": _pruner(hostNetwork=True),
        "a service account token": _pruner(automountServiceAccountToken=True),
        "root": _pruner(securityContext={"runAsNonRoot": False}),
    }
    for why, manifest in refused.items():
        result = create(path, manifest)
        assert result.returncode != 0, f"a pruner with {why} was admitted"
        assert "only pruner Jobs of its fixed template" in result.stderr, why


def test_the_operator_may_suspend_a_job_but_not_change_what_it_runs(
    cluster: Cluster, confined: tuple[str, Path]
) -> None:
    namespace, path = confined
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "example.invalid/trainer:1"}],
                }
            },
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    resumed = run(
        path,
        "patch",
        "job",
        "train",
        "--type=merge",
        "-p",
        '{"spec":{"suspend":false}}',
        "--dry-run=server",
    )
    assert resumed.returncode == 0, resumed.stderr
    relabelled = run(path, "label", "job", "train", "queue=somewhere-else", "--dry-run=server")
    assert relabelled.returncode != 0
    assert "trainwarden may change only its own" in relabelled.stderr


def test_the_operator_may_scale_a_deployment_to_zero_and_nothing_more(
    cluster: Cluster, confined: tuple[str, Path]
) -> None:
    namespace, path = confined
    container = {"name": "c", "image": "example.invalid/notebook:1"}
    template = {"metadata": {"labels": {"app": "notebook"}}, "spec": {"containers": [container]}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "notebook"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "notebook"}},
            "template": template,
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(deployment))

    def patch(body: str) -> subprocess.CompletedProcess[str]:
        return run(
            path, "patch", "deployment", "notebook", "--type=merge", "-p", body, "--dry-run=server"
        )

    to_zero = patch('{"spec":{"replicas":0}}')
    assert to_zero.returncode == 0, to_zero.stderr
    for body in (
        '{"spec":{"replicas":9}}',
        json.dumps(
            {
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "c", "image": "evil.example/miner:1"}]}
                    }
                }
            }
        ),
    ):
        refused = patch(body)
        assert refused.returncode != 0, body
        assert "only scale a Deployment or StatefulSet to zero" in refused.stderr


def test_the_operator_may_lift_its_own_scheduling_gate_and_nothing_else(
    cluster: Cluster, confined: tuple[str, Path]
) -> None:
    namespace, path = confined
    gated = _pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "trainwarden.dev/budget"}, {"name": "other"}]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gated))

    def patch(spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        body = json.dumps({"spec": spec})
        return run(path, "patch", "pod", "gated", "--type=merge", "-p", body, "--dry-run=server")

    lifted = patch({"schedulingGates": [{"name": "other"}]})
    assert lifted.returncode == 0, lifted.stderr
    for spec in (
        {"schedulingGates": [{"name": "trainwarden.dev/budget"}]},  # someone else's gate
        {"schedulingGates": [], "nodeSelector": {"pool": "elsewhere"}},  # and a move
    ):
        refused = patch(spec)
        assert refused.returncode != 0, spec
        assert "lifts its own scheduling gate" in refused.stderr, refused.stderr


def test_the_operator_may_change_only_the_ca_bundle_of_its_webhook_configuration(
    cluster: Cluster, confined: tuple[str, Path]
) -> None:
    namespace, path = confined
    name = f"{namespace}-trainwarden-hold"

    def patch(field: str, value: Any) -> subprocess.CompletedProcess[str]:
        body = json.dumps([{"op": "replace", "path": f"/webhooks/0/{field}", "value": value}])
        args = ("patch", "mutatingwebhookconfiguration", name, "--type=json", "-p", body)
        return run(path, *args, "--dry-run=server")

    bundle = patch("clientConfig/caBundle", "bm90IGEgcmVhbCBDQQ==")
    assert bundle.returncode == 0, bundle.stderr
    for field, value in (("failurePolicy", "Fail"), ("clientConfig/url", "https://evil.example/")):
        refused = patch(field, value)
        assert refused.returncode != 0, field
        assert "only the caBundle of its webhook configuration" in refused.stderr, field
    other = run(path, "get", "mutatingwebhookconfigurations")
    assert other.returncode != 0
    assert "forbidden" in other.stderr.lower()
