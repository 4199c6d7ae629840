"""The Helm chart: lint, render, and check what it renders. No cluster, but the helm
binary, which `e2e/cluster/helm.sh` builds from its Go module into .cluster/bin/helm
(`make helm`; a no-op once built): so this is the e2e tier, and `make unit` needs no
Go-built tool."""

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import trainwarden.metrics  # noqa: F401 - registers every collector
from harness import KUBE_VERSION
from trainwarden.checkpoints.pruner import DEFAULT_UID
from trainwarden.core.admission import POD_CONTROLLERS
from trainwarden.core.kueue import check_controller

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "trainwarden"
HELM = ROOT / ".cluster" / "bin" / "helm"
NAMESPACE = "trainwarden-system"

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> Path:
    subprocess.run([str(ROOT / "e2e" / "cluster" / "helm.sh")], check=True, capture_output=True)
    return HELM


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    def render(*sets: str, crds: bool = False) -> list[dict[str, Any]]:
        args = [
            "template",
            "--kube-version",
            KUBE_VERSION,
            "tw",
            str(CHART),
            "--namespace",
            NAMESPACE,
        ]
        args += ["--include-crds"] if crds else []
        for value in sets:
            args += ["--set", value]
        result = run_helm(helm, *args)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return render


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind}s rendered"
    return found[0]


OPERATOR = "tw-trainwarden"  # the release's full name: the operator's own objects
WEBHOOK = f"{OPERATOR}-webhook"  # the webhook's Secret, Service and roles


def test_helm_lint_is_clean(helm: Path) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


def test_renders_the_operator_and_nothing_optional_by_default(render: Render) -> None:
    docs = render()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        # the operator's, the webhook's, reader-roles.yaml's three, crds-upgrade.yaml's hook
        *["ClusterRole"] * 6,
        *["ClusterRoleBinding"] * 3,
        "Deployment",
        "Job",  # crds-upgrade.yaml: the pre-upgrade hook
        "Job",  # uninstall.yaml: the pre-delete hook
        "MutatingWebhookConfiguration",
        *["Role"] * 5,  # the fifth: uninstall.yaml's, the pre-delete hook's
        *["RoleBinding"] * 5,
        "Secret",
        "Secret",
        "Service",
        "Service",
        "ServiceAccount",
        "ServiceAccount",  # the hook's
        # confinement.yaml (updates, status, pruners, evictions, usage; checks only with
        # Kueue) and receipts-policy.yaml
        *["ValidatingAdmissionPolicy"] * 6,
        *["ValidatingAdmissionPolicyBinding"] * 6,
    ]
    cluster_scoped = (
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "MutatingWebhookConfiguration",
    )
    for doc in docs:
        if not doc["kind"].startswith(cluster_scoped):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
    crds = [d for d in render(crds=True) if d["kind"] == "CustomResourceDefinition"]
    assert sorted(c["metadata"]["name"] for c in crds) == [
        "budgetusages.trainwarden.dev",
        "checkpointpolicies.trainwarden.dev",
        "idlereclaimpolicies.trainwarden.dev",
        "runreceipts.trainwarden.dev",
        "trainingbudgets.trainwarden.dev",
        "volumereclaimpolicies.trainwarden.dev",
    ]


# What the operator calls (docs/install.md says which code needs each rule). A change to the
# chart's RBAC must change this table too: permissions never grow by accident.
EXPECTED_RULES = {
    ("trainwarden.dev", "trainingbudgets"): {"list", "watch"},
    ("trainwarden.dev", "idlereclaimpolicies"): {"list", "watch"},
    ("trainwarden.dev", "checkpointpolicies"): {"list", "watch"},
    ("trainwarden.dev", "trainingbudgets/status"): {"patch"},
    ("trainwarden.dev", "idlereclaimpolicies/status"): {"patch"},
    ("trainwarden.dev", "checkpointpolicies/status"): {"patch"},
    ("trainwarden.dev", "runreceipts"): {"get", "list", "watch", "create", "delete"},
    ("trainwarden.dev", "budgetusages"): {"get", "list", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch", "patch"},
    ("", "pods/eviction"): {"create"},
    ("", "namespaces"): {"list", "watch"},
    ("", "nodes"): {"list", "watch", "patch"},
    ("", "events"): {"create"},
    ("batch", "jobs"): {"get", "list", "watch", "patch", "create"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "patch"},
    ("jobset.x-k8s.io", "jobsets"): {"get", "list", "watch", "patch"},
    **{
        ("kubeflow.org", kind): {"get", "list", "watch", "patch"}
        for kind in ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")
    },
    ("ray.io", "rayjobs"): {"get", "list", "watch", "patch"},
    ("ray.io", "rayclusters"): {"get", "list", "watch"},
    ("apps", "replicasets"): {"get"},
    ("apps", "deployments"): {"get", "patch"},
    ("apps", "statefulsets"): {"get", "patch"},
    ("snapshot.storage.k8s.io", "volumesnapshots"): {"get", "list", "delete"},
    ("snapshot.storage.k8s.io", "volumesnapshotclasses"): {"get"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch", "patch"},
    ("kueue.x-k8s.io", "workloads/status"): {"patch"},
    ("kueue.x-k8s.io", "admissionchecks"): {"list", "watch"},
    ("kueue.x-k8s.io", "admissionchecks/status"): {"patch"},
}


def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    table: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert not rule.get("nonResourceURLs"), rule
        assert not rule.get("resourceNames"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


def test_rbac_grants_exactly_what_the_code_uses(render: Render) -> None:
    role = one(render(), "ClusterRole", OPERATOR)
    table = granted(role)
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert not any("*" in value for value in rule[field]), f"wildcard in {rule}"
    assert table == EXPECTED_RULES
    verbs = set().union(*table.values())
    assert not verbs & {"deletecollection", "update", "escalate", "bind", "impersonate"}
    deletes = {key for key, v in table.items() if "delete" in v}
    # its own records, by label, ownerReference or seal, and precondition
    own = {("trainwarden.dev", "runreceipts"), ("trainwarden.dev", "budgetusages")}
    assert deletes == {("snapshot.storage.k8s.io", "volumesnapshots"), *own}, "nothing else"
    creates = {key for key, v in table.items() if "create" in v}
    assert creates == {("", "events"), ("", "pods/eviction"), ("batch", "jobs"), *own}, "no pods"
    assert not {r for _, r in table} & {"secrets", "configmaps", "serviceaccounts/token"}

    binding = one(render(), "ClusterRoleBinding", OPERATOR)
    account = one(render(), "ServiceAccount", OPERATOR)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]


VOLUME_RECLAIM_RULES = {
    ("trainwarden.dev", "volumereclaimpolicies"): {"list", "watch"},
    ("trainwarden.dev", "volumereclaimpolicies/status"): {"patch"},
    ("", "persistentvolumeclaims"): {"delete"},
    ("", "persistentvolumes"): {"get"},
    ("snapshot.storage.k8s.io", "volumesnapshots"): {"create"},
    **{("apps", k): {"list"} for k in ("deployments", "statefulsets", "daemonsets", "replicasets")},
    ("batch", "cronjobs"): {"list"},
}
"""What volumeReclaim.enabled adds, and nothing else (docs/install.md)."""


def test_volume_reclaim_grants_pvc_delete_only_when_enabled(render: Render) -> None:
    """Off by default: no PVC delete, no snapshot create, no --volume-reclaim flag; on,
    exactly VOLUME_RECLAIM_RULES more, and the operator runs its controller."""
    args = one(render(), "Deployment", OPERATOR)["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "--volume-reclaim" not in args
    assert (
        "delete"
        not in granted(one(render(), "ClusterRole", OPERATOR))[("", "persistentvolumeclaims")]
    )
    on = "volumeReclaim.enabled=true"
    table = granted(one(render(on), "ClusterRole", OPERATOR))
    added = {
        key: verbs - EXPECTED_RULES.get(key, set())
        for key, verbs in table.items()
        if verbs - EXPECTED_RULES.get(key, set())
    }
    assert added == VOLUME_RECLAIM_RULES
    enabled = one(render(on), "Deployment", OPERATOR)["spec"]["template"]["spec"]["containers"][0]
    assert "--volume-reclaim" in enabled["args"]


def test_read_roles_for_people_are_read_only_and_policies_are_not_in_view_by_default(
    render: Render,
) -> None:
    """Receipts aggregate into view/edit/admin (namespaced: a RoleBinding grants one
    namespace's); the cluster-scoped policies get a role of their own, into view only when
    asked (a budget's status names every covered namespace's usage: docs/security.md)."""
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    receipts = one(render(), "ClusterRole", f"{OPERATOR}-receipts-view")
    assert granted(receipts) == {("trainwarden.dev", "runreceipts"): {"get", "list", "watch"}}
    assert {k: v for k, v in receipts["metadata"]["labels"].items() if k.startswith(aggregate)} == {
        f"{aggregate}{role}": "true" for role in ("view", "edit", "admin")
    }
    usage = one(render(), "ClusterRole", f"{OPERATOR}-budget-usage-view")
    assert granted(usage) == {("trainwarden.dev", "budgetusages"): {"get", "list", "watch"}}
    assert {k: v for k, v in usage["metadata"]["labels"].items() if k.startswith(aggregate)} == {
        f"{aggregate}{role}": "true" for role in ("view", "edit", "admin")
    }
    reader = one(render(), "ClusterRole", f"{OPERATOR}-policy-reader")
    kinds = (
        "trainingbudgets",
        "idlereclaimpolicies",
        "checkpointpolicies",
        "volumereclaimpolicies",
    )
    assert granted(reader) == {("trainwarden.dev", k): {"get", "list", "watch"} for k in kinds}
    assert not any(k.startswith(aggregate) for k in reader["metadata"]["labels"])
    bindings = [d for d in render() if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert not [b for b in bindings if b["roleRef"]["name"].endswith(("-view", "-reader"))]

    shared = one(
        render("rbac.readers.policies.aggregateToView=true"),
        "ClusterRole",
        f"{OPERATOR}-policy-reader",
    )
    assert shared["metadata"]["labels"][f"{aggregate}view"] == "true"
    off = (
        "rbac.readers.receipts=false",
        "rbac.readers.budgetUsage=false",
        "rbac.readers.policies.create=false",
    )
    names = {d["metadata"]["name"] for d in render(*off) if d["kind"] == "ClusterRole"}
    assert names == {OPERATOR, WEBHOOK, f"{OPERATOR}-crds"}


def test_rbac_and_account_can_be_left_to_the_admin(render: Render) -> None:
    docs = render("rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=mine")
    assert {d["kind"] for d in docs} == {
        "Deployment",
        "Service",
        "Secret",
        "MutatingWebhookConfiguration",
    }
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mine"


def test_operator_pod_meets_the_restricted_pod_security_standard(render: Render) -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in sc
    # Volumes are only of the kinds "restricted" allows, and the one writable path is /tmp.
    assert [set(v) - {"name"} for v in pod["volumes"]] == [{"emptyDir"}]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])


def test_operator_container_runs_the_operator_with_probes_and_ports(render: Render) -> None:
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "trainwarden:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"][0] == "run"
    assert not any(a.startswith("--prometheus-url") for a in container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "webhook": 9443}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}

    url = "http://prometheus-operated.monitoring:9090"
    container = one(
        render(f"operator.prometheusUrl={url}", "image.tag=abc", "image.repository=localhost/tw"),
        "Deployment",
    )["spec"]["template"]["spec"]["containers"][0]
    assert f"--prometheus-url={url}" in container["args"]
    assert container["image"] == "localhost/tw:abc"


def test_metrics_service_selects_the_operator_pod(render: Render) -> None:
    docs = render()
    service = one(docs, "Service", f"{OPERATOR}-metrics")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_the_network_policy_opens_the_metrics_port_to_scrapers_only(render: Render) -> None:
    docs = render("networkPolicy.enabled=true")
    policy = one(docs, "NetworkPolicy")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    metrics, health, _webhook = policy["spec"]["ingress"]
    assert metrics["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert metrics["from"] == [
        {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    assert health == {"ports": [{"port": 8081, "protocol": "TCP"}]}
    assert not [d for d in render() if d["kind"] == "NetworkPolicy"], "off by default"


def test_the_network_policy_opens_the_webhook_port_to_the_api_server(render: Render) -> None:
    """Turning the policy on must not turn holding off: the API server reaches the webhook
    from wherever it runs (a node, the control plane's own network, a tunnel), which no
    selector names portably; only that port is opened to any source."""
    docs = render("networkPolicy.enabled=true")
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    (webhook,) = [p for p in container["ports"] if p["name"] == "webhook"]
    rules = one(docs, "NetworkPolicy")["spec"]["ingress"]
    opened = [
        r for r in rules if {"port": webhook["containerPort"], "protocol": "TCP"} in r["ports"]
    ]
    assert opened == [{"ports": [{"port": 9443, "protocol": "TCP"}]}], "any source, that port"
    moved = one(render("networkPolicy.enabled=true", "webhook.port=10443"), "NetworkPolicy")
    assert {"ports": [{"port": 10443, "protocol": "TCP"}]} in moved["spec"]["ingress"]
    off = one(render("networkPolicy.enabled=true", "webhook.enabled=false"), "NetworkPolicy")
    assert len(off["spec"]["ingress"]) == 2, "no webhook, no open port"


def test_the_webhook_can_require_the_api_servers_client_certificate(render: Render) -> None:
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    docs = render(f"webhook.clientAuth.caBundle={ca}", "webhook.clientAuth.names={apiserver}")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--webhook-client-ca=/etc/trainwarden/webhook-client-ca/ca.crt" in args
    assert "--webhook-client-name=apiserver" in args
    assert "--webhook-timeout=2" in args, "the deadline follows the configuration's timeout"
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "webhook-client-ca"]
    assert mount == {"name": "webhook-client-ca", "readOnly": True,
                     "mountPath": "/etc/trainwarden/webhook-client-ca"}  # fmt: skip
    (volume,) = [v for v in pod["volumes"] if v["name"] == "webhook-client-ca"]
    config_map = one(docs, "ConfigMap", volume["configMap"]["name"])
    assert config_map["data"]["ca.crt"].strip() == ca
    plain = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert not [a for a in plain["containers"][0]["args"] if a.startswith("--webhook-client")]
    assert [v["name"] for v in plain["volumes"]] == ["tmp"]


def metric_names() -> set[str]:
    """Series names of every registered collector, labelled ones with no samples yet too."""
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_sum", "_count"],
        "info": ["_info"],
    }
    names = set()
    for family in REGISTRY.collect():
        names |= {family.name} | {family.name + s for s in suffixes.get(family.type, [])}
    return names


def test_service_monitor_and_alerts_only_when_enabled(render: Render) -> None:
    docs = render("serviceMonitor.enabled=true", "prometheusRule.enabled=true")
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service", f"{OPERATOR}-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    alerts = {r["alert"] for r in rules}
    assert {"TrainwardenOperatorDown", "TrainwardenBudgetExceeded"} <= alerts
    # Every trainwarden series an alert names is one the operator exports.
    known = metric_names()
    for rule in rules:
        for name in re.findall(r"\btrainwarden_[a-z_]+", rule["expr"]):
            assert name in known, f"{rule['alert']} uses {name}, which is not exported"
    assert 'job="tw-trainwarden-metrics"' in next(
        r["expr"] for r in rules if r["alert"] == "TrainwardenOperatorDown"
    )


def test_every_alert_links_a_runbook_section_that_exists(render: Render) -> None:
    rules = one(render("prometheusRule.enabled=true"), "PrometheusRule")["spec"]["groups"][0]
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    sections = {h.strip().lower() for h in re.findall(r"^## (.+)$", runbooks, re.M)}
    assert len(rules["rules"]) >= 11
    for rule in rules["rules"]:
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"docs/runbooks.md#{rule['alert'].lower()}"), url
        assert rule["alert"].lower() in sections, f"no runbook section for {rule['alert']}"


def test_the_kill_switch_is_one_configmap_read_by_name(render: Render) -> None:
    docs = render("pruner.killSwitch=stop-pruning")
    role = next(d for d in docs if d["kind"] == "Role" and "kill-switch" in d["metadata"]["name"])
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["stop-pruning"],
            "verbs": ["get"],
        }
    ]
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--kill-switch={NAMESPACE}/stop-pruning" in args


def test_s3_credentials_are_granted_secret_by_secret(render: Render) -> None:
    assert not [d for d in render() if "s3-credentials" in d["metadata"]["name"]]
    docs = render(
        "s3CredentialSecrets[0].namespace=ml,s3CredentialSecrets[0].name=a",
        "s3CredentialSecrets[1].namespace=ml,s3CredentialSecrets[1].name=b",
        "s3CredentialSecrets[2].namespace=vision,s3CredentialSecrets[2].name=a",
    )
    roles = {
        d["metadata"]["namespace"]: d["rules"]
        for d in docs
        if d["kind"] == "Role" and "s3-credentials" in d["metadata"]["name"]
    }
    secret = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    assert roles == {
        "ml": [{**secret, "resourceNames": ["a", "b"]}],
        "vision": [{**secret, "resourceNames": ["a"]}],
    }
    bindings = [
        d for d in docs if d["kind"] == "RoleBinding" and "s3-credentials" in d["metadata"]["name"]
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["ml", "vision"]
    assert all(b["subjects"][0]["namespace"] == NAMESPACE for b in bindings)
    cluster_roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert all("secrets" not in r["resources"] for c in cluster_roles for r in c["rules"])


def test_the_hold_webhook_fails_open_and_skips_what_it_never_holds(render: Render) -> None:
    docs = render()
    config = one(docs, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 2
    assert hook["sideEffects"] == "None"
    assert {op for r in hook["rules"] for op in r["operations"]} == {"CREATE"}
    claims = [r for r in hook["rules"] if "persistentvolumeclaims" in r["resources"]]
    assert [(r["apiGroups"], r["resources"]) for r in claims] == [
        ([""], ["persistentvolumeclaims"])
    ]
    assert hook["clientConfig"]["service"] == {
        "name": WEBHOOK,
        "namespace": NAMESPACE,
        "path": "/hold",
        "port": 443,
    }
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert {"kube-system", "kube-node-lease", NAMESPACE} <= set(excluded["values"])
    conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    assert f"system:serviceaccount:{NAMESPACE}:{OPERATOR}" in conditions["not-the-operator"]
    assert "kueue.x-k8s.io/queue-name" in conditions["not-kueue"]
    claims_first = "request.resource.resource == 'persistentvolumeclaims' ||"
    assert conditions["not-kueue"].startswith(claims_first), "Kueue's label never skips a claim"
    listed = conditions["not-a-controller-pod"].rsplit("[", 1)[1].rstrip("])").split(", ")
    assert {item.strip("'") for item in listed} == {f"{g}/{k}" for g, k in POD_CONTROLLERS}
    service = one(docs, "Service", WEBHOOK)
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--webhook-secret={NAMESPACE}/{WEBHOOK}" in args
    assert f"--webhook-configuration={config['metadata']['name']}" in args
    assert f"--webhook-name={WEBHOOK}.{NAMESPACE}.svc" in args
    assert "data" not in one(docs, "Secret", WEBHOOK), "the operator issues the certificate"

    outside = render("webhook.url=https://127.0.0.1:9443/hold")
    (hook,) = one(outside, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/hold"}
    assert not [d for d in outside if d["kind"] == "Service" and d["metadata"]["name"] == WEBHOOK]
    args = one(outside, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-name=127.0.0.1" in args

    off = render("webhook.enabled=false")
    assert not [d for d in off if "webhook" in d["metadata"]["name"]]
    args = one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--webhook")]


def test_the_webhook_may_touch_one_secret_and_one_configuration_by_name(render: Render) -> None:
    docs = render()
    role = one(docs, "Role", WEBHOOK)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [WEBHOOK],
         "verbs": ["get", "update"]}
    ]  # fmt: skip
    cluster_role = one(docs, "ClusterRole", WEBHOOK)
    assert cluster_role["rules"] == [
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations"],
         "resourceNames": [one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]],
         "verbs": ["get", "patch"]}
    ]  # fmt: skip
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = one(docs, kind, WEBHOOK)
        assert binding["roleRef"]["name"] == WEBHOOK
        assert binding["subjects"][0]["name"] == OPERATOR


def test_the_receipt_seal_is_one_secret_read_and_filled_in_by_name(render: Render) -> None:
    docs = render()
    seal = f"{OPERATOR}-receipt-seal"
    secret = one(docs, "Secret", seal)
    assert "data" not in secret, "the operator makes the key; upgrades leave it alone"
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert one(docs, "Role", seal)["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [seal],
         "verbs": ["get", "patch"]}
    ]  # fmt: skip
    assert one(docs, "RoleBinding", seal)["subjects"][0]["name"] == OPERATOR
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--receipt-seal-secret={NAMESPACE}/{seal}" in args


def test_the_receipts_policy_guards_this_instance_s_marks_from_everyone_else(
    render: Render,
) -> None:
    policy = one(render(), "ValidatingAdmissionPolicy", f"{OPERATOR}-receipts")["spec"]
    rules = policy["matchConstraints"]["resourceRules"]
    assert [(r["resources"], r["operations"]) for r in rules] == [
        (["runreceipts"], ["CREATE", "UPDATE"]),
        (["secrets"], ["UPDATE"]),
    ]
    assert rules[1]["resourceNames"] == [f"{OPERATOR}-receipt-seal"]
    (condition,) = policy["matchConditions"]
    assert f"system:serviceaccount:{NAMESPACE}:{OPERATOR}" in condition["expression"]
    ours = next(v for v in policy["variables"] if v["name"] == "ours")["expression"]
    assert "!('trainwarden.dev/instance' in variables.labels)" in ours
    canary = one(
        render("operator.instance=canary"), "ValidatingAdmissionPolicy", f"{OPERATOR}-receipts"
    )["spec"]
    ours = next(v for v in canary["variables"] if v["name"] == "ours")["expression"]
    assert "orValue('') == \"canary\"" in ours
    off = render("receiptsPolicy.enabled=false")
    left = {d["metadata"]["name"] for d in off if "AdmissionPolicy" in d["kind"]}
    assert left == {
        f"{OPERATOR}-confinement{s}" for s in ("", "-status", "-pruners", "-evictions", "-usage")
    }
    assert one(off, "Secret", f"{OPERATOR}-receipt-seal")


def test_pruner_jobs_run_the_operator_image_unless_told_otherwise(render: Render) -> None:
    def args(*values: str) -> list[str]:
        deployment = one(render(*values), "Deployment")
        found: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return found

    image = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert f"--pruner-image={image}" in args()
    assert "--pruner-image=mine:1" in args("pruner.image=mine:1")
    assert "--pruner-run-as-user=1000" in args("pruner.runAsUser=1000")
    assert not [a for a in args() if a.startswith("--pruner-run-as-user")], "the default, 65532"
    assert not [a for a in args("pruner.enabled=false") if a.startswith("--pruner")]


def _variables(policy: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"].get("variables") or []}


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["pruner.image=mine:1", "pruner.runAsUser=1000", "operator.instance=canary"],
        ['pruner.tolerations=[{"key":"a","operator":"Exists","tolerationSeconds":30},{"key":"b"}]'],
    ],
)
def test_the_confinement_pins_the_pruner_the_deployment_starts(
    helm: Path, values: list[str]
) -> None:
    """The pruner policy's pinned image, uid and tolerations are what the Deployment passes
    the operator (--pruner-*); the check policies name the controller it answers for; the
    release's namespace is protected. (e2e/test_confinement.py proves the policies.)"""
    sets = [a for v in values for a in ("--set-json" if v.endswith("]") else "--set", v)]
    docs = _rendered(helm, *sets, "--api-versions", "kueue.x-k8s.io/v1beta2/AdmissionCheck")
    flags = dict(
        a.removeprefix("--").split("=", 1)
        for a in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        if a.startswith("--") and "=" in a
    )
    pruners = _variables(one(docs, "ValidatingAdmissionPolicy", f"{OPERATOR}-confinement-pruners"))
    assert json.loads(pruners["prunerImage"]) == flags["pruner-image"]
    assert json.loads(pruners["prunerUser"]) == int(flags.get("pruner-run-as-user", DEFAULT_UID))
    tolerations = json.loads(flags.get("pruner-tolerations", "[]"))
    fields = ("key", "operator", "value", "effect", "tolerationSeconds")
    wanted = [[str(t.get(f, "")) for f in fields] for t in tolerations]
    assert json.loads(pruners["prunerTolerations"]) == wanted
    assert NAMESPACE in json.loads(pruners["protected"])
    for suffix in ("-status", "-checks"):
        policy = one(docs, "ValidatingAdmissionPolicy", f"{OPERATOR}-confinement{suffix}")
        controller = json.loads(_variables(policy)["controller"])
        assert controller == check_controller(flags.get("instance")), suffix
    without_kueue = {d["metadata"]["name"] for d in _rendered(helm, *sets)}
    assert f"{OPERATOR}-confinement-checks" not in without_kueue, "a paramKind Kueue does not serve"


def _rendered(helm: Path, *args: str) -> list[dict[str, Any]]:
    result = run_helm(
        helm, "template", "--kube-version", KUBE_VERSION, "tw", str(CHART), "-n", NAMESPACE, *args
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_leader_election_gets_one_lease_in_its_own_namespace(render: Render) -> None:
    docs = render()
    role = next(d for d in docs if d["kind"] == "Role" and "leader" in d["metadata"]["name"])
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-election" in args
    assert f"--lease-namespace={NAMESPACE}" in args
    assert "strategy" not in deployment["spec"], "rolling updates are safe behind the Lease"
    alone = render("leaderElection.enabled=false")
    assert not [d for d in alone if d["kind"] == "Role" and "leader" in d["metadata"]["name"]]
    single = next(d for d in alone if d["kind"] == "Deployment")
    assert single["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("replicas=-1", "at '/replicas': minimum: got -1, want 0"),
        ("replicas=two", "at '/replicas': got string, want integer"),
        ("replicas=2,leaderElection.enabled=false", "at '/replicas': maximum: got 2, want 1"),
        ("replicas=9", "at '/replicas': maximum: got 9, want 5"),
        ("runAsUser=0", "at '/runAsUser': minimum: got 0, want 1"),
        ("pruner.runAsUser=0", "at '/pruner/runAsUser': minimum: got 0, want 1"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of"),
        ("replica=1", "additional properties 'replica' not allowed"),
        ("operator.prometheusUrl=prometheus:9090", "at '/operator/prometheusUrl'"),
        ("operator.logLevel=LOUD", "at '/operator/logLevel'"),
        ("operator.metricsPort=70000", "at '/operator/metricsPort': maximum"),
        ("resources.limits.memory=lots", "at '/resources/limits/memory'"),
        ("serviceMonitor.interval=30 seconds", "at '/serviceMonitor/interval'"),
        ("prometheusRule.budgetNearlySpentPercent=150", "budgetNearlySpentPercent"),
        ("webhook.clientAuth.caBundle=/etc/ca.crt", "at '/webhook/clientAuth/caBundle'"),
        ("image.digest=latest", "at '/image/digest'"),
        ("image.digest=sha256:abc", "at '/image/digest'"),
    ],
)
def test_schema_rejects_bad_values_naming_the_field(helm: Path, value: str, message: str) -> None:
    result = run_helm(
        helm, "template", "--kube-version", KUBE_VERSION, "tw", str(CHART), "--set", value
    )
    assert result.returncode != 0, f"{value} was accepted"
    assert "don't meet the specifications of the schema" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


def test_schema_rejects_a_values_file_with_the_wrong_shape(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("image: trainwarden:latest\nresources: 1\n")
    result = run_helm(
        helm, "template", "--kube-version", KUBE_VERSION, "tw", str(CHART), "-f", str(values)
    )
    assert result.returncode != 0
    assert "at '/image': got string, want object" in result.stderr, result.stderr
    assert "at '/resources': got number, want object" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "version", ["1.30.0", "1.31.4", "1.32.0", "1.33.1", "v1.34.4", "v1.30.2-eks-1"]
)
def test_renders_on_every_supported_kubernetes_minor(helm: Path, version: str) -> None:
    """From 1.30 (ValidatingAdmissionPolicy v1, matchConditions); a provider's pre-release
    suffix included."""
    result = run_helm(helm, "template", "tw", str(CHART), "--kube-version", version)
    assert result.returncode == 0, result.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(result.stdout) if d}
    assert {"ValidatingAdmissionPolicy", "MutatingWebhookConfiguration"} <= kinds


@pytest.mark.parametrize("version", ["1.29.9", "1.28.0", "v1.20.0"])
def test_refuses_kubernetes_older_than_the_templates_need(helm: Path, version: str) -> None:
    """Rather than an install whose confinement policies the API server does not serve."""
    result = run_helm(helm, "template", "tw", str(CHART), "--kube-version", version)
    assert result.returncode != 0, f"rendered for {version}"
    assert "chart requires kubeVersion: >=1.30.0-0 which is incompatible" in result.stderr


def test_artifact_hub_annotations_say_what_the_chart_installs(render: Render) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    notes = chart["annotations"]
    assert notes["artifacthub.io/operator"] == "true"
    assert notes["artifacthub.io/license"] == "Apache-2.0"
    images = yaml.safe_load(notes["artifacthub.io/images"])
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert images == [{"name": "trainwarden", "image": container["image"]}]
    listed = {
        (c["kind"], c["version"], c["name"]) for c in yaml.safe_load(notes["artifacthub.io/crds"])
    }
    crds = [d for d in render(crds=True) if d["kind"] == "CustomResourceDefinition"]
    served = {
        (c["spec"]["names"]["kind"], v["name"], c["metadata"]["name"])
        for c in crds
        for v in c["spec"]["versions"]
        if v["served"]
    }
    assert listed == served


def test_an_image_digest_pins_the_operator_and_its_pruners(helm: Path, render: Render) -> None:
    digest = "sha256:" + "ab" * 32
    sets = ("image.repository=registry.example/tw", "image.tag=ignored", f"image.digest={digest}")
    docs = _rendered(helm, *[a for s in sets for a in ("--set", s)])
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"registry.example/tw@{digest}"
    assert f"--pruner-image=registry.example/tw@{digest}" in container["args"]
    pruners = _variables(one(docs, "ValidatingAdmissionPolicy", f"{OPERATOR}-confinement-pruners"))
    assert json.loads(pruners["prunerImage"]) == f"registry.example/tw@{digest}"
    default = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert default == "trainwarden:0.1.0", "no digest: the tag, as before"


def test_the_dashboard_queries_only_exported_series(render: Render) -> None:
    assert "ConfigMap" not in {d["kind"] for d in render()}, "off by default"
    config_map = one(render("grafanaDashboard.enabled=true"), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["trainwarden.json"])
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    known = metric_names()
    for expr in exprs:
        for name in re.findall(r"\btrainwarden_[a-z_]+", expr):
            assert name in known, f"the dashboard uses {name}, which is not exported"


def test_the_crd_upgrade_hook_may_only_patch_the_charts_own_crds(render: Render) -> None:
    """crds-upgrade.yaml: a pre-upgrade hook (never install or rollback) whose role gets and
    patches the CRDs in crds/, by name, and nothing else; it runs the operator's image."""
    docs = render()
    shipped = sorted(
        d["metadata"]["name"] for d in render(crds=True) if d["kind"] == "CustomResourceDefinition"
    )
    assert len(shipped) == 6
    hooks = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook")]
    hooks = [d for d in hooks if d["metadata"]["name"] == f"{OPERATOR}-crds"]
    assert sorted(d["kind"] for d in hooks) == [
        "ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount",
    ]  # fmt: skip
    for hook in hooks:
        annotations = hook["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    role = one(docs, "ClusterRole", f"{OPERATOR}-crds")
    assert role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get", "patch"],
            "resourceNames": shipped,
        }
    ]
    job = one(docs, "Job", f"{OPERATOR}-crds")["spec"]["template"]["spec"]
    operator = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert job["serviceAccountName"] == f"{OPERATOR}-crds"
    assert job["containers"][0]["image"] == operator["image"]
    assert job["containers"][0]["args"] == ["crds", "--apply"]
    for off in ("crds.upgrade=false", "rbac.create=false"):
        assert not [d for d in render(off) if d["metadata"]["name"] == f"{OPERATOR}-crds"], off


def test_the_uninstall_hook_stops_the_operator_then_releases_as_the_operator(
    render: Render,
) -> None:
    """uninstall.yaml: a pre-delete hook Job running `release-all --stop-operator` as the
    operator's own ServiceAccount (so the confinement policies confine it), whose only
    added grant is patching the scale of the operator's one Deployment; restricted like
    the operator's pod; not the Deployment's pod (it waits for those to go)."""
    docs = render()
    name = f"{OPERATOR}-uninstall"
    hooks = [d for d in docs if d["metadata"]["name"] == name]
    assert sorted(d["kind"] for d in hooks) == ["Job", "Role", "RoleBinding"]
    for hook in hooks:
        annotations = hook["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert one(docs, "Role", name)["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "verbs": ["patch"],
            "resourceNames": [OPERATOR],
        }
    ]
    binding = one(docs, "RoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": OPERATOR, "namespace": NAMESPACE}
    ]
    deployment = one(docs, "Deployment")
    pod = one(docs, "Job", name)["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == OPERATOR
    (container,) = pod["spec"]["containers"]
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["args"] == ["release-all", f"--stop-operator={NAMESPACE}/{OPERATOR}"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    instance = one(render("operator.instance=canary"), "Job", name)
    args = instance["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--instance=canary"
    for off in ("uninstall.releaseAll=false", "rbac.create=false"):
        assert not [d for d in render(off) if d["metadata"]["name"] == name], off
