"""Teams read their own numbers under namespace RBAC, on the real API server.

The chart's read roles (templates/reader-roles.yaml), rendered by helm and applied: the
ClusterRoles it renders for people (bound to nobody by the chart) are aggregated by
kube-controller-manager into the built-in view, edit and admin roles. A user holding one
of those in one namespace (a RoleBinding) reads that namespace's RunReceipts and
BudgetUsages (the operator's copy of a budget's figures with that namespace's share) and is
refused every other namespace's, and writes none; the cluster-scoped policies stay
unreadable to them, and readable, never writable, through the policy reader role.
Users are impersonated with the admin kubeconfig (`kubectl --as`).
"""

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
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
    get_budget,
    gpu_job,
    read_env,
    wait_for,
)

HELM = CLUSTER_DIR / "bin" / "helm"
RECEIPTS = "runreceipts.trainwarden.dev"
BUDGETS = "trainingbudgets.trainwarden.dev"
USAGES = "budgetusages.trainwarden.dev"
AGGREGATION_SECONDS = 30  # the controller fills an aggregated role within a second or two


@dataclass(frozen=True)
class Teams:
    ours: str  # the namespace the users hold a role in
    theirs: str  # another team's
    tag: str
    policy_reader: str  # the chart's ClusterRole for reading policies


def receipt(name: str) -> str:
    """A RunReceipt the CRD admits, as a tenant could write it (no operator marks)."""
    at = "2026-01-01T00:00:00Z"
    workload = {"apiVersion": "batch/v1", "kind": "Job", "namespace": "x", "name": "t", "uid": "u"}
    spec = {
        "workload": workload,
        "outcome": "Succeeded",
        "startedAt": at,
        "finishedAt": at,
        "wallSeconds": 1,
        "wallTime": "1s",
        "acceleratorHours": {"held": 1.5},
    }
    body = {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "RunReceipt",
        "metadata": {"name": name},
        "spec": spec,
    }
    return json.dumps(body)


def people_roles(release: str) -> list[dict[str, Any]]:
    """The ClusterRoles the chart renders and binds to nobody: the roles for people."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    out = subprocess.run(
        [
            str(HELM),
            "template",
            "--kube-version",
            KUBE_VERSION,
            release,
            str(ROOT / "helm" / "trainwarden"),
            "-n",
            release,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    bound = {d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"}
    return [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] not in bound]


def as_user(cluster: Cluster, user: str, *args: str, stdin: str | None = None) -> str:
    """kubectl as `user` (impersonated), stdout and stderr together; never raises."""
    return cluster.kubectl(
        f"--as={user}", "--as-group=system:authenticated", *args, stdin=stdin, check=False
    )


def can(cluster: Cluster, user: str, *args: str) -> bool:
    return as_user(cluster, user, "auth", "can-i", *args).strip().startswith("yes")


@pytest.fixture(scope="module")
def teams(cluster: Cluster, crds: None) -> Iterator[Teams]:
    """Two namespaces with a receipt each, and the chart's people roles applied."""
    tag = uuid.uuid4().hex[:6]
    release = f"tw-team-{tag}"
    roles = people_roles(release)
    names = [r["metadata"]["name"] for r in roles]
    ours, theirs = f"tw-ours-{tag}", f"tw-theirs-{tag}"
    try:
        for namespace in (ours, theirs):
            cluster.kubectl("create", "namespace", namespace)
            cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=receipt(f"run-{namespace}"))
        if roles:
            manifest = "\n---\n".join(json.dumps(r) for r in roles)
            cluster.kubectl("apply", "-f", "-", stdin=manifest)
        yield Teams(ours, theirs, tag, f"{release}-trainwarden-policy-reader")
    finally:
        for name in names:
            cluster.kubectl("delete", "clusterrole", name, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterrolebinding", f"policy-reader-{tag}", check=False)
        for namespace in (ours, theirs):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def holds_role(cluster: Cluster, teams: Teams, role: str) -> str:
    """A user holding the built-in `role` in our namespace only, once the API server
    authorizes them to list its receipts (aggregation is asynchronous)."""
    user = f"{role}-{teams.tag}@example.com"
    cluster.kubectl(
        "create", "rolebinding", f"{role}-{uuid.uuid4().hex[:6]}", "-n", teams.ours,
        f"--clusterrole={role}", f"--user={user}",
    )  # fmt: skip
    wait_for(
        lambda: can(cluster, user, "list", RECEIPTS, "-n", teams.ours),
        timeout=AGGREGATION_SECONDS,
        what=f"{user} ({role} in {teams.ours}) allowed to list its RunReceipts",
    )
    return user


def test_a_namespace_viewer_reads_its_own_receipts_and_no_one_elses(
    cluster: Cluster, teams: Teams
) -> None:
    user = holds_role(cluster, teams, "view")
    listed = as_user(cluster, user, "get", RECEIPTS, "-n", teams.ours, "-o", "name")
    assert listed.split() == [f"runreceipt.trainwarden.dev/run-{teams.ours}"], listed
    one = as_user(
        cluster, user, "get", RECEIPTS, f"run-{teams.ours}", "-n", teams.ours, "-o", "json"
    )
    assert json.loads(one)["spec"]["acceleratorHours"]["held"] == 1.5
    assert can(cluster, user, "watch", RECEIPTS, "-n", teams.ours)

    for refused in (
        ("get", RECEIPTS, "-n", teams.theirs),
        ("get", RECEIPTS, f"run-{teams.theirs}", "-n", teams.theirs),
        ("get", RECEIPTS, "--all-namespaces"),
    ):
        out = as_user(cluster, user, *refused, "-o", "json")
        assert "Error from server (Forbidden)" in out, out
        assert '"acceleratorHours"' not in out, out
    for verb in ("create", "delete", "patch", "update", "deletecollection"):
        assert not can(cluster, user, verb, RECEIPTS, "-n", teams.ours), verb


@pytest.mark.parametrize("role", ["edit", "admin"])
def test_namespace_editors_and_admins_read_receipts_but_never_write_them(
    cluster: Cluster, teams: Teams, role: str
) -> None:
    """Receipts are the operator's ledger: read-only even for a namespace admin."""
    user = holds_role(cluster, teams, role)
    assert not can(cluster, user, "list", RECEIPTS, "-n", teams.theirs)
    for verb in ("create", "delete", "patch", "update", "deletecollection"):
        assert not can(cluster, user, verb, RECEIPTS, "-n", teams.ours), (role, verb)
    out = as_user(
        cluster, user, "delete", RECEIPTS, f"run-{teams.ours}", "-n", teams.ours, "--wait=false"
    )
    assert "Forbidden" in out, out


def test_policies_are_read_through_the_policy_reader_only(cluster: Cluster, teams: Teams) -> None:
    """Cluster-scoped: a namespace's view never grants them, and the chart does not
    aggregate them into view by default; its policy reader, bound by an admin, reads them."""
    viewer = holds_role(cluster, teams, "view")
    assert "Forbidden" in as_user(cluster, viewer, "get", BUDGETS)

    reader = f"auditor-{teams.tag}@example.com"
    assert "Forbidden" in as_user(cluster, reader, "get", BUDGETS)
    cluster.kubectl(
        "create", "clusterrolebinding", f"policy-reader-{teams.tag}",
        f"--clusterrole={teams.policy_reader}", f"--user={reader}",
    )  # fmt: skip
    wait_for(
        lambda: can(cluster, reader, "list", BUDGETS),
        timeout=AGGREGATION_SECONDS,
        what=f"{reader} allowed to list budgets through {teams.policy_reader}",
    )
    for kind in ("trainingbudgets", "idlereclaimpolicies", "checkpointpolicies"):
        for verb in ("get", "list", "watch"):
            assert can(cluster, reader, verb, f"{kind}.trainwarden.dev"), (kind, verb)
        for verb in ("create", "patch", "delete"):
            assert not can(cluster, reader, verb, f"{kind}.trainwarden.dev"), (kind, verb)
        assert not can(cluster, reader, "patch", f"{kind}.trainwarden.dev", "--subresource=status")
    assert not can(cluster, reader, "list", RECEIPTS, "--all-namespaces")


def token_kubeconfig(cluster: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding nothing but a token of `account` (TokenRequest API)."""
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h").strip()
    server = read_env(CLUSTER_DIR / "cluster.env")["KUBE_APISERVER_URL"]
    ca = str(CLUSTER_DIR / "state" / "pki" / "ca.crt")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "team", "context": {"cluster": "local", "user": account}}],
        "current-context": "team",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_trainwarden_report_runs_reads_the_team_s_ledger_with_view_alone(
    cluster: Cluster, teams: Teams, tmp_path: Path
) -> None:
    """The CLI as a team member runs it: a ServiceAccount of the team's namespace holding
    only `view` there reads its receipts; another namespace's is one line, exit 3."""
    account = f"member-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "serviceaccount", account, "-n", teams.ours)
    user = f"system:serviceaccount:{teams.ours}:{account}"
    cluster.kubectl(
        "create", "rolebinding", account, "-n", teams.ours, "--clusterrole=view",
        f"--serviceaccount={teams.ours}:{account}",
    )  # fmt: skip
    wait_for(
        lambda: can(cluster, user, "list", RECEIPTS, "-n", teams.ours),
        timeout=AGGREGATION_SECONDS,
        what=f"{user} allowed to list its RunReceipts",
    )
    kubeconfig = token_kubeconfig(cluster, teams.ours, account, tmp_path / "kubeconfig")

    def report(namespace: str) -> subprocess.CompletedProcess[str]:
        argv = ["report", "--runs", "-n", namespace, "-o", "json", "--kubeconfig", str(kubeconfig)]
        return subprocess.run(
            [sys.executable, "-m", "trainwarden", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    ours = report(teams.ours)
    assert ours.returncode == 0, ours.stderr
    assert [row["receipt"] for row in json.loads(ours.stdout)] == [f"run-{teams.ours}"]
    theirs = report(teams.theirs)
    assert theirs.returncode == 3, theirs.stderr
    assert theirs.stdout == ""
    assert theirs.stderr == (
        "trainwarden report: forbidden (403 Forbidden): runreceipts.trainwarden.dev is "
        f'forbidden: User "{user}" cannot list resource "runreceipts" in API group '
        f'"trainwarden.dev" in the namespace "{teams.theirs}"\n'
    )


def usage_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", USAGES, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(out) if out.startswith("{") else None


def test_a_namespace_viewer_reads_its_share_of_the_budget_and_no_one_elses(
    cluster: Cluster, teams: Teams, operator: Operator
) -> None:
    """A budget over both namespaces, a running Job in each (1 and 3 GPUs): the operator
    writes a BudgetUsage in each; the namespace's viewer reads its own, whose share is its
    entry in the budget's status.breakdown.byNamespace, and is refused the other's and the
    budget itself. Deleting the budget removes them (their ownerReference)."""
    name = f"shared-{teams.tag}"
    batch = client.BatchV1Api(cluster.api)
    for namespace, gpus in ((teams.ours, 1), (teams.theirs, 3)):
        batch.create_namespaced_job(namespace, gpu_job(f"train-{teams.tag}", gpus))
    core = client.CoreV1Api(cluster.api)
    wait_for(
        lambda: all(
            [p.status.phase for p in core.list_namespaced_pod(ns).items] == ["Running"]
            for ns in (teams.ours, teams.theirs)
        ),
        timeout=60,
        what="a running pod in each namespace",
    )
    manifest = budget(name, teams.ours, 1000).namespaces(teams.ours, teams.theirs).build()
    manifest["spec"]["mode"] = "DryRun"
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", manifest
    )
    user = holds_role(cluster, teams, "view")
    try:
        seen: dict[str, Any] = {}

        def consistent() -> bool:
            """Our BudgetUsage, as the viewer reads it, and the budget's status of the same
            evaluation (a copy is rewritten with its budget's status writes)."""
            status = get_budget(cluster, name).get("status") or {}
            out = as_user(cluster, user, "get", USAGES, name, "-n", teams.ours, "-o", "json")
            if not out.startswith("{"):
                return False
            seen.update(status=status, usage=json.loads(out)["spec"])
            return bool(seen["usage"].get("evaluatedAt") == status.get("lastEvaluated"))

        wait_for(consistent, timeout=90, what="the viewer's BudgetUsage of the current status")
        by_namespace = {s["key"]: s for s in seen["status"]["breakdown"]["byNamespace"]}
        share = seen["usage"]["namespace"]
        assert share["acceleratorHours"] == by_namespace[teams.ours]["acceleratorHours"] > 0
        assert share["acceleratorHours"] < by_namespace[teams.theirs]["acceleratorHours"]
        assert seen["usage"]["used"] == seen["status"]["used"]
        assert (seen["usage"]["budget"], seen["usage"]["mode"]) == (name, "DryRun")
        assert teams.theirs not in json.dumps(seen["usage"])
        listed = as_user(cluster, user, "get", USAGES, "-n", teams.ours, "-o", "name")
        assert listed.split() == [f"budgetusage.trainwarden.dev/{name}"], listed
        assert usage_of(cluster, teams.theirs, name) is not None  # it exists: refused, not absent

        for refused in (
            ("get", USAGES, name, "-n", teams.theirs),
            ("get", USAGES, "-n", teams.theirs),
            ("get", USAGES, "--all-namespaces"),
            ("get", BUDGETS, name),
        ):
            out = as_user(cluster, user, *refused, "-o", "json")
            assert "Error from server (Forbidden)" in out, out
            assert '"acceleratorHours"' not in out, out
        for verb in ("create", "delete", "patch", "update"):
            assert not can(cluster, user, verb, USAGES, "-n", teams.ours), verb
    finally:
        cluster.kubectl("delete", BUDGETS, name, "--wait=false", check=False)
    wait_for(
        lambda: all(usage_of(cluster, ns, name) is None for ns in (teams.ours, teams.theirs)),
        timeout=60,
        what="the BudgetUsages collected with their budget",
    )
