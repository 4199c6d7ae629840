"""The chart's ValidatingAdmissionPolicies confine the operator's ServiceAccount to the writes
its code makes, on the real API server, as an allow-list of whole objects.

The corpus: every write the operator's code makes (e2e/confinement_corpus.py, through its
own client with the chart's token) must be allowed; and every single-field variation of
each (e2e/confinement_mutations.py: each field of the object changed or removed, each
property the API server's schema knows added) that an admin's request gets through must
be refused for the operator, unless it touches a field the policy names. All are
server-side dry runs: admission runs, nothing is stored. Anyone else is left alone.
(The whole operator running under the chart, confinement included, is test_helm.py.)
"""

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml

from confinement_check import Mutations, Release, entry
from confinement_corpus import NOW, Corpus, Done, World
from confinement_review import review
from confinement_writes import JSON, Client, DryRunApi, manifests, resource
from harness import CLUSTER_DIR, KUBE_VERSION, ROOT, Cluster, token_kubeconfig, wait_for
from test_budget_workload_kinds import workload_crds  # noqa: F401 (a fixture)
from trainwarden.adapters import workloads
from trainwarden.budget.usage_write import Owner
from trainwarden.checkpoints.pruner import PrunerSettings

HELM = CLUSTER_DIR / "bin" / "helm"
PRUNER_IMAGE = "localhost/trainwarden-pruner:confinement"
PRUNER_UID = 4321
TOLERATION = {"key": "example.com/pruners", "operator": "Exists", "effect": "NoSchedule"}
INSTANCE = "confined"
CONTROLLER = f"trainwarden.dev/budget-{INSTANCE}"
TEMPLATES = ("serviceaccount", "clusterrole", "clusterrolebinding", "confinement", "webhook")
POLICIES = ("", "-status", "-checks", "-pruners", "-evictions", "-usage")
RESOURCES = (
    "jobs", "jobsets", "pytorchjobs", "rayjobs", "deployments", "statefulsets", "pods", "nodes",
    "persistentvolumeclaims", "workloads", "admissionchecks", "mutatingwebhookconfigurations",
)  # fmt: skip
"""Every resource the operator's role lets it write (but Events and its own objects)."""
# The webhook template renders a configuration the API server would call: pointed at a
# closed port, it fails open at once (failurePolicy: Ignore) for everyone meanwhile.
CLOSED = "https://127.0.0.1:1/hold"


def _render(release: str, namespace: str) -> str:
    values = {
        "pruner": {"image": PRUNER_IMAGE, "runAsUser": PRUNER_UID, "tolerations": [TOLERATION]},
        "operator": {"instance": INSTANCE},
        "webhook": {"url": CLOSED},
    }
    shown = [arg for t in TEMPLATES for arg in ("--show-only", f"templates/{t}.yaml")]
    return subprocess.run(
        [str(HELM), "template", "--kube-version", KUBE_VERSION, release,
         str(ROOT / "helm" / "trainwarden"), "-n", namespace,
         "--api-versions", "kueue.x-k8s.io/v1beta2/AdmissionCheck", "-f", "-", *shown],
        input=json.dumps(values), capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip


def _checks(cluster: Cluster, tag: str) -> tuple[str, str]:
    ours, other = f"budget-{tag}", f"provisioning-{tag}"
    for name, controller in ((ours, CONTROLLER), (other, "example.com/provisioning")):
        check = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
                 "metadata": {"name": name}, "spec": {"controllerName": controller}}  # fmt: skip
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(check))
    return ours, other


def _workload_waits_on(cluster: Cluster, namespace: str, checks: tuple[str, str]) -> None:
    """As Kueue lists a ClusterQueue's checks on a Workload with quota reserved."""
    entries = [
        {"name": n, "state": "Pending", "message": "", "lastTransitionTime": "2026-12-03T00:00:00Z"}
        for n in checks
    ]
    cluster.kubectl(
        "patch", "workloads.v1beta2.kueue.x-k8s.io", "wl", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"admissionChecks": entries}}),
    )  # fmt: skip


@pytest.fixture(scope="module")
def release(
    cluster: Cluster, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    """The chart's account, role and policies under a release of its own, the objects the
    operator writes to, and clients as the operator (its token) and as an admin."""
    request.getfixturevalue("workload_crds")  # JobSet, PyTorchJob, RayJob served
    request.getfixturevalue("crds")  # BudgetUsage served (the -usage policy's probe)
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    tag = uuid.uuid4().hex[:6]
    name, namespace, team = f"tw-conf-{tag}", f"tw-conf-{tag}", f"team-{tag}"
    for ns in (namespace, team):
        cluster.kubectl("create", "namespace", ns)
    manifest = _render(name, namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)
    checks = _checks(cluster, tag)
    for obj in manifests(team, tag):
        cluster.kubectl("create", "-n", team, "-f", "-", stdin=json.dumps(obj))
    _workload_waits_on(cluster, team, checks)
    wait_for(lambda: _settled(cluster, team), what="the controllers done with the new objects")
    kubeconfig = token_kubeconfig(
        cluster, f"{name}-trainwarden", namespace, tmp_path_factory.mktemp("confined")
    )
    node = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"][0]["metadata"]["name"]
    settings = PrunerSettings(PRUNER_IMAGE, PRUNER_UID, (TOLERATION,))
    world = World(team, node, checks[0], CONTROLLER, f"{name}-trainwarden-hold", settings)
    found = Release(
        name, namespace, team, Client(kubeconfig), Client(cluster.kubeconfig), world, kubeconfig
    )
    wait_for(lambda: _in_force(found), timeout=60, what="the confinement policies in force")
    yield found
    cluster.kubectl("delete", "mutatingwebhookconfiguration", f"{name}-trainwarden-hold")
    cluster.kubectl(
        "delete", "-n", namespace, "-f", "-", "--wait=false", stdin=manifest, check=False
    )
    for check in checks:
        cluster.kubectl(
            "delete", "admissioncheck.kueue.x-k8s.io", check, "--wait=false", check=False
        )
    for ns in (namespace, team):
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _versions(cluster: Cluster, namespace: str) -> dict[str, str]:
    kinds = (
        "jobs,pods,deployments,statefulsets,workloads.kueue.x-k8s.io,jobsets,pytorchjobs,rayjobs"
    )
    found = json.loads(cluster.kubectl("get", kinds, "-n", namespace, "-o", "json"))["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in found}


def _settled(cluster: Cluster, namespace: str) -> bool:
    """No object the corpus writes to changed in a second: their controllers (Job,
    Deployment, Kueue) are done with them, and a write conditional on its version holds."""
    before = _versions(cluster, namespace)
    time.sleep(1)
    return _versions(cluster, namespace) == before


def _in_force(r: Release) -> bool:
    """The API server enforces new policies once it has compiled them: one probe each."""
    team, op = r.team, r.operator
    pods = f"/api/v1/namespaces/{team}/pods"
    probes = {
        "": op.write("PATCH", f"{pods}/bare", {"metadata": {"labels": {"team": "b"}}}),
        "-status": op.write(
            "PATCH", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{team}/workloads/wl/status",
            {"status": {"requeueState": {"count": 3}}},
        ),
        "-checks": op.write(
            "PATCH", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{team}/workloads/wl/status",
            {"status": {"admissionChecks": [entry(r, 0), entry(r, 1, state="Ready")]}},
        ),
        "-pruners": op.write("POST", f"/apis/batch/v1/namespaces/{team}/jobs", _job("probe")),
        "-evictions": op.write(
            "POST", f"{pods}/bare/eviction",
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "bare"},
             "deleteOptions": {"gracePeriodSeconds": 0}},
        ),
        "-usage": op.write(
            "POST", f"/apis/trainwarden.dev/v1alpha1/namespaces/{team}/budgetusages",
            {**_usage(team, "probe", "uid"), "metadata": {"name": "probe"}},
        ),
    }  # fmt: skip
    return all(
        a.status == 403 and f"'{r.name}-trainwarden-confinement{s}'" in a.message
        for s, a in probes.items()
    )


def _job(name: str) -> JSON:
    container = {"name": "c", "image": "example.invalid/miner:1"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


@pytest.fixture(scope="module")
def corpus(release: Release) -> list[Done]:
    """Every write the operator's code makes, made by it (dry runs, as its ServiceAccount)."""
    return asyncio.run(Corpus(DryRunApi(release.kubeconfig), release.world).all())


def test_the_policies_compile_without_warnings(cluster: Cluster, release: Release) -> None:
    """Accepted by the API server (CEL cost and type checks), nothing to warn about."""
    for suffix in POLICIES:
        name = f"{release.name}-trainwarden-confinement{suffix}"
        policy = json.loads(cluster.kubectl("get", "validatingadmissionpolicy", name, "-o", "json"))
        assert not policy["status"].get("typeChecking", {}).get("expressionWarnings"), name


def test_every_write_the_operator_makes_is_allowed(release: Release, corpus: list[Done]) -> None:
    refused = [f"{d.what}: {d.error}" for d in corpus if d.error is not None]
    assert not refused, "\n".join(refused)
    kinds = {resource(d.sent) for d in corpus if d.sent is not None}
    assert len(corpus) >= 30, len(corpus)
    assert kinds == set(RESOURCES), sorted(kinds)
    for done in corpus:
        assert done.sent is not None
        again = release.operator.replay(done.sent)
        assert again.ok, f"{done.what}: {again.status} {again.message}"
    print(f"\n{len(corpus)} writes of the operator's code to {len(kinds)} resources: all allowed")


def test_every_other_write_is_refused_and_an_admin_may_make_it(
    release: Release, corpus: list[Done]
) -> None:
    """Each write of the corpus varied in one field the policy does not name (changed,
    removed, or added from the API server's schema): refused for the operator, while the
    same write by an admin goes through."""
    mutations = Mutations(release)
    started = time.monotonic()
    for done in corpus:
        mutations.run(done)
    tally = mutations.tally
    print(
        f"\n{tally.generated} generated writes in {time.monotonic() - started:.0f}s: "
        f"{tally.refused} refused for the operator (an admin's went through), "
        f"{tally.invalid} invalid for an admin too, {tally.unchanged} ignored by the API server"
    )
    assert not tally.allowed, f"{len(tally.allowed)} allowed:\n" + "\n".join(tally.allowed[:80])
    assert not tally.other, "\n".join(tally.other[:40])
    assert tally.refused >= 1000


def test_what_the_review_found_is_refused_and_an_admin_may_do(
    cluster: Cluster, release: Release, corpus: list[Done]
) -> None:
    for namespace in ("kube-system", release.namespace):
        victim = _job("victim")["spec"]["template"] | {"apiVersion": "v1", "kind": "Pod"}
        victim["metadata"] = {"name": "victim"}
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(victim))
    try:
        for why, (method, path, body) in review(release, corpus).items():
            admin = release.admin.write(method, path, body)
            assert admin.ok, f"{why}: an admin's write failed: {admin.message}"
            operator = release.operator.write(method, path, body)
            assert release.refused(operator), f"{why}: {operator.status} {operator.message}"
    finally:
        cluster.kubectl("delete", "pod", "victim", "-n", "kube-system", "--wait=false", check=False)


def test_a_workload_a_tenant_made_huge_is_still_suspended(
    cluster: Cluster, release: Release
) -> None:
    """Comparing whole objects costs CEL work per key: 10,000 labels and 256 KiB of
    annotations on a Job (what a tenant may write) stay within the API server's cost
    limits, so a tenant cannot make its workload too dear for the operator to suspend."""
    job = _job("huge")
    job["metadata"]["labels"] = {f"l{i}": f"v{i}" for i in range(10_000)}
    job["metadata"]["annotations"] = {f"example.com/a{i}": "x" * 2000 for i in range(120)}
    job["spec"]["suspend"] = True
    cluster.kubectl("create", "-n", release.team, "-f", "-", stdin=json.dumps(job))
    path = f"/apis/batch/v1/namespaces/{release.team}/jobs/huge"
    wait_for(  # the Job controller's last write (a conflict for the operator's otherwise)
        lambda: any(
            c["type"] == "Suspended"
            for c in release.admin.get(path).get("status", {}).get("conditions", [])
        ),
        what="the Job controller to record the suspension",
    )
    corpus = Corpus(DryRunApi(release.kubeconfig), release.world)

    async def suspend_and_resume() -> list[Done]:
        labels, notes = workloads.budget_marks("team-budget", "exhausted", 3, NOW)
        huge = await corpus.read("batch/v1", "Job", "huge")
        await corpus.made("resume", workloads.resume(corpus.kube, huge))
        huge = await corpus.read("batch/v1", "Job", "huge")
        await corpus.made("suspend", workloads.suspend(corpus.kube, huge, labels, notes))
        return corpus.done

    done = asyncio.run(suspend_and_resume())
    assert [d.error for d in done] == [None, None], done
    relabelled = release.operator.write("PATCH", path, {"metadata": {"labels": {"l9999": "x"}}})
    assert release.refused(relabelled), relabelled.message


USAGE_SPEC = {
    "budget": "b",
    "mode": "DryRun",
    "period": "Daily",
    "state": "Ready",
    "limits": {"acceleratorHours": 1},
    "used": {"acceleratorHours": 0.5},
    "namespace": {"acceleratorHours": 0.5, "cost": 0, "percentOfUsed": 100},
}


def _usage(namespace: str, budget: str, uid: str) -> JSON:
    """The BudgetUsage the operator's code writes (budget/usage_write.py `Owner.manifest`)."""
    return Owner(budget, uid, INSTANCE).manifest(namespace, USAGE_SPEC)


def test_the_operator_writes_only_budget_usages_of_its_own(
    cluster: Cluster, release: Release, crds: None
) -> None:
    """-confinement-usage: the operator's BudgetUsages carry its labels and one controller
    reference to the TrainingBudget of their name, and it patches or deletes only such an
    object; a tenant's (without them) is refused to it and left to the admin."""
    team, op, admin = release.team, release.operator, release.admin
    path = f"/apis/trainwarden.dev/v1alpha1/namespaces/{team}/budgetusages"
    tag = uuid.uuid4().hex[:6]
    budget = f"conf-{tag}"
    manifest = {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "TrainingBudget",
        "metadata": {"name": budget},
        "spec": {"scope": {"namespaces": [team]}, "limits": {"acceleratorHours": 1}},
    }
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    try:
        uid = json.loads(cluster.kubectl("get", "tb", budget, "-o", "json"))["metadata"]["uid"]
        ours = _usage(team, budget, uid)
        assert op.write("POST", path, ours).ok
        labels = ours["metadata"]["labels"]
        ref = ours["metadata"]["ownerReferences"][0]
        variants = {
            "no owner": {"ownerReferences": []},
            "a ConfigMap as owner": {"ownerReferences": [{**ref, "kind": "ConfigMap"}]},
            "another budget's name": {"ownerReferences": [{**ref, "name": "other"}]},
            "not the controller": {"ownerReferences": [{**ref, "controller": False}]},
            "two owners": {"ownerReferences": [ref, {**ref, "uid": "u2", "controller": False}]},
            "no managed-by": {"labels": {k: v for k, v in labels.items() if "managed" not in k}},
            "another instance": {"labels": {**labels, "trainwarden.dev/instance": "x"}},
        }
        for what, meta in variants.items():
            body = {**ours, "metadata": {**ours["metadata"], **meta}}
            refused = op.write("POST", path, body)
            assert refused.status == 403, (what, refused.status, refused.message)
            assert f"'{release.name}-trainwarden-confinement-usage'" in refused.message, what
            assert admin.write("POST", path, body).ok, what

        # Stored: the operator's own (as it wrote it) and a tenant's of another name.
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(ours))
        tenant = {**ours, "metadata": {"name": f"tenant-{tag}", "namespace": team}}
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(tenant))
        patch = {"spec": {"state": "Exhausted"}}
        # A DELETE with a body takes its options from the body, not the query's dryRun.
        dry = {"apiVersion": "v1", "kind": "DeleteOptions", "dryRun": ["All"]}
        assert op.write("PATCH", f"{path}/{budget}", patch).ok
        assert op.write("DELETE", f"{path}/{budget}", dry).ok
        stripped = {"metadata": {"ownerReferences": None}}
        assert op.write("PATCH", f"{path}/{budget}", stripped).status == 403
        for method, body in (("PATCH", patch), ("DELETE", dry)):
            refused = op.write(method, f"{path}/tenant-{tag}", body)
            assert refused.status == 403, (method, refused.status, refused.message)
            assert f"'{release.name}-trainwarden-confinement-usage'" in refused.message
            assert admin.write(method, f"{path}/tenant-{tag}", body).ok, method
        names = cluster.kubectl("get", "budgetusages", "-n", team, "-o", "name").split()
        assert sorted(names) == [
            f"budgetusage.trainwarden.dev/{n}" for n in (budget, f"tenant-{tag}")
        ]
    finally:
        cluster.kubectl("delete", "tb", budget, "--wait=false", check=False)


def test_without_any_admission_check_kueue_still_writes_workload_status(
    cluster: Cluster,
) -> None:
    """The -checks binding finds no AdmissionCheck (its selector narrowed to a label none
    carries: the same "no params" path as a cluster without checks). The API server
    resolves a binding's params before the policy's matchConditions, so its
    parameterNotFoundAction decides for every user. A copy with Deny (the chart before)
    refuses an admin's (Kueue's) Workload status update; with the chart's own binding
    alone it goes through."""
    tag = uuid.uuid4().hex[:6]
    name, team = f"tw-nochk-{tag}", f"team-nochk-{tag}"
    cluster.kubectl("create", "namespace", team)
    docs = [d for d in yaml.safe_load_all(_render(name, team)) if d]
    policy, binding = [d for d in docs if d["metadata"]["name"].endswith("-confinement-checks")]
    binding["spec"]["paramRef"]["selector"] = {"matchLabels": {"test.trainwarden.dev/none": tag}}
    only = {"matchLabels": {"kubernetes.io/metadata.name": team}}  # no other test's Workloads
    policy["spec"]["matchConstraints"]["namespaceSelector"] = only
    deny = json.loads(json.dumps(binding))
    deny["metadata"]["name"] += "-deny"
    deny["spec"]["paramRef"]["parameterNotFoundAction"] = "Deny"
    status = {"status": {"conditions": [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "test",
        "lastTransitionTime": "2026-12-07T00:00:00Z",
    }]}}  # fmt: skip

    def patch() -> str | None:
        """None when the update went through, else the refusal."""
        try:
            cluster.kubectl(
                "patch", "workloads.v1beta2.kueue.x-k8s.io", "wl", "-n", team,
                "--subresource=status", "--type=merge", "-p", json.dumps(status),
            )  # fmt: skip
        except AssertionError as refused:
            return str(refused)
        return None

    try:
        workload = next(o for o in manifests(team, tag) if o["kind"] == "Workload")
        cluster.kubectl("create", "-n", team, "-f", "-", stdin=json.dumps(workload))
        for obj in (policy, deny):
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj))
        wait_for(
            lambda: "no params found" in (patch() or ""),
            timeout=60,
            what="the Deny copy to refuse the admin's update",
        )
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(binding))
        cluster.kubectl("delete", "validatingadmissionpolicybinding", deny["metadata"]["name"])
        wait_for(lambda: patch() is None, timeout=60, what="the admin's update, chart binding only")
    finally:
        for obj in (deny, binding, policy):
            kind = obj["kind"].lower()
            cluster.kubectl("delete", kind, obj["metadata"]["name"], "--ignore-not-found")
        cluster.kubectl("delete", "namespace", team, "--wait=false", check=False)
