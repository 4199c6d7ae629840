"""`trainwarden doctor`'s verdicts (doctor/checks.py) over plain data, and the webhook's
answer to the doctor's dry-run probe (admission/review.py)."""

import base64
import datetime as dt
import gzip
import json
import re
import socket
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException
from urllib3 import HTTPHeaderDict

from trainwarden import cli, cluster_access
from trainwarden.adapters.promql import consumer_of
from trainwarden.admission.review import review_response
from trainwarden.api.v1alpha1.conditions import EXHAUSTED
from trainwarden.api.v1alpha1.crd import KINDS, crd
from trainwarden.api.v1alpha1.names import DOCTOR_PROBE
from trainwarden.core import skew
from trainwarden.core.admission import PROBE_ANSWERED, BudgetView, budget_view
from trainwarden.doctor import checks, grants, helm, probe
from trainwarden.doctor.checks import Check, Webhook
from trainwarden.doctor.grants import Grant
from trainwarden.testing.builders import BudgetBuilder, PodBuilder

ROOT = Path(__file__).resolve().parents[1]
NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
NAMES = st.sampled_from(["a", "b", "c", ""])
LABELS = st.dictionaries(
    st.sampled_from(["namespace", "pod", "exported_namespace", "exported_pod", "gpu", "UUID"]),
    NAMES,
)
PODS = st.sets(st.tuples(NAMES.filter(bool), NAMES.filter(bool)))


# --- DCGM series against running accelerator pods ---------------------------------------


@settings(max_examples=1000)
@given(pods=PODS, series=st.lists(LABELS, max_size=8))
def test_a_pod_is_matched_exactly_when_a_series_names_it_as_the_operator_reads_it(
    pods: set[tuple[str, str]], series: list[dict[str, str]]
) -> None:
    m = checks.matching(pods, series)
    read = {consumer_of(labels) for labels in series}
    assert set(m.unmatched) == {p for p in pods if p not in read}
    assert m.plain + m.exported >= m.pods - len(m.unmatched)
    assert set(m.elsewhere) <= set(m.unmatched)
    assert not set(m.strangers) & pods
    assert m.unattributed == sum(1 for labels in series if not all(consumer_of(labels)))
    verdict = checks.dcgm("q", m)
    assert (verdict.status == "PASS") == (bool(pods) and not m.unmatched)
    assert (verdict.status == "FAIL") == (bool(pods) and len(m.unmatched) == len(pods))


def test_a_service_monitor_scrape_matches_by_exported_labels_not_the_exporters_own() -> None:
    series = [
        {"namespace": "gpu-operator", "pod": "dcgm-exporter-x",
         "exported_namespace": "team", "exported_pod": "train-0", "gpu": "0"},
        {"namespace": "gpu-operator", "pod": "dcgm-exporter-x", "gpu": "1"},
    ]  # fmt: skip
    m = checks.matching({("team", "train-0"), ("team", "train-1")}, series)
    assert (m.exported, m.plain, m.unmatched) == (1, 0, (("team", "train-1"),))
    assert m.strangers == (("gpu-operator", "dcgm-exporter-x"),)  # the idle GPU's series
    verdict = checks.dcgm("DCGM_FI_DEV_GPU_UTIL", m)
    assert verdict.status == "WARN"
    assert "1 unmatched (team/train-1)" in verdict.found
    assert "1 with no series at all" in verdict.found


def test_a_pod_named_only_in_the_labels_the_operator_does_not_read_says_so() -> None:
    series = [{"namespace": "team", "pod": "train-0",
               "exported_namespace": "other", "exported_pod": "gone"}]  # fmt: skip
    verdict = checks.dcgm("q", checks.matching({("team", "train-0")}, series))
    assert verdict.status == "FAIL"
    assert "1 named only in labels the operator does not read" in verdict.found
    assert "series for 1 pods not running: other/gone" in verdict.found
    assert verdict.fix == "docs/install.md#doctor-dcgm"


def test_without_accelerator_pods_or_prometheus_dcgm_warns() -> None:
    assert checks.dcgm("q", checks.matching([], [])).status == "WARN"
    assert checks.dcgm("q", None, "Prometheus did not answer").status == "WARN"


# --- Prometheus, Kueue, webhook, clock ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "value"),
    [
        (["run", "--prometheus-url=http://p:9090"], "http://p:9090"),
        (["run", "--prometheus-url", "http://p:9090", "--log-level=INFO"], "http://p:9090"),
        (["--prometheus-url=http://a", "--prometheus-url=http://b"], "http://b"),
        (["run", "--prometheus-url="], None),
        (["run", "--prometheus-url"], None),
        (["run"], None),
    ],
)
def test_the_operators_flag_is_read_as_argparse_reads_it(args: list[str], value: str) -> None:
    assert checks.flag(args, "--prometheus-url") == value


def test_prometheus_passes_only_on_vector_1() -> None:
    one = {"status": "success", "data": {"result": [{"metric": {}, "value": [0, "1"]}]}}
    assert checks.prometheus("http://p", one, None).status == "PASS"
    assert checks.prometheus("http://p", {"status": "error"}, None).status == "FAIL"
    assert checks.prometheus("http://p", {"status": "success", "data": {}}, None).status == "FAIL"
    refused = checks.prometheus("http://p", None, "URLError: refused")
    assert (refused.status, refused.found) == ("FAIL", "http://p: URLError: refused")
    assert checks.prometheus(None, None, None).status == "WARN"


ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
ANSWERS = ANY_JSON | st.builds(
    lambda result, status: {"status": status, "data": {"result": result}},
    ANY_JSON | st.lists(ANY_JSON | st.builds(lambda m, v: {"metric": m, "value": v},
                                             ANY_JSON, ANY_JSON), max_size=3),
    st.sampled_from(["success", "error"]),
)  # fmt: skip


@settings(max_examples=1000)
@given(ANSWERS, PODS)
def test_whatever_prometheus_answers_is_a_verdict_never_a_traceback(
    answer: Any, pods: set[tuple[str, str]]
) -> None:
    assert checks.prometheus("http://p", answer, None).status in ("PASS", "FAIL")
    found = checks.series(answer)
    if found is None:
        assert checks.dcgm("q", None, "no result list").status == "WARN"
    else:
        assert checks.dcgm("q", checks.matching(pods, found)).status in ("PASS", "WARN", "FAIL")


def test_an_answer_of_another_shape_fails_prometheus_and_is_no_series() -> None:
    for answer in ([1], "up", {"status": "success", "data": []}, {"status": "success",
                   "data": {"result": [{"value": [0, "1e999999"]}]}}):  # fmt: skip
        assert checks.prometheus("http://p", answer, None).status == "FAIL"
    assert checks.series([1]) is None
    assert checks.series(
        {"status": "success", "data": {"result": [1, {"metric": {"pod": 2}}]}}
    ) == [
        {},
        {"pod": "2"},
    ]


def test_a_port_that_does_not_speak_http_is_a_prometheus_failure() -> None:
    """An SSH server at the URL: http.client's BadStatusLine, neither OSError nor ValueError."""
    server = socket.create_server(("127.0.0.1", 0))

    def greet() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        conn.close()

    thread = threading.Thread(target=greet, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    verdict = probe.Probe(probe.Options("tw", url, "default", 5.0)).prometheus(url)
    thread.join(5)
    server.close()
    assert verdict.status == "FAIL"
    assert verdict.found.startswith(f"{url}: BadStatusLine")


@pytest.mark.parametrize(
    ("versions", "status"),
    [([], "WARN"), (["v1beta1"], "FAIL"), (["v1beta2", "v1beta1"], "PASS")],
)
def test_kueue_absent_warns_and_without_v1beta2_fails(versions: list[str], status: str) -> None:
    assert checks.kueue(versions).status == status


def test_the_webhook_passes_only_when_its_probe_answer_came_back() -> None:
    passed = checks.webhook(Webhook(True, "tw-hold", True, (f'299 - "{PROBE_ANSWERED}"',)))
    assert passed.status == "PASS"
    silent = checks.webhook(Webhook(True, "tw-hold", False, ()))
    assert silent.status == "FAIL"
    assert "caBundle is empty" in silent.found
    assert checks.webhook(Webhook(True, "tw-hold", True, ("299 - other",))).status == "FAIL"
    assert checks.webhook(Webhook(True, "tw-hold", None)).status == "FAIL"
    assert checks.webhook(Webhook(True, "tw-hold", True, error="forbidden")).status == "FAIL"
    assert checks.webhook(Webhook(False, "", None)).status == "WARN"


@settings(max_examples=1000)
@given(st.floats(-3600, 3600, allow_nan=False), st.floats(0, 10, allow_nan=False))
def test_clock_warns_exactly_when_certainly_past_the_operators_bound(
    offset: float, spread: float
) -> None:
    found = skew.Estimate(offset - spread, offset + spread, 0.0)
    verdict = checks.clock(found)
    certainly = offset - spread > skew.BOUND or offset + spread < -skew.BOUND
    assert (verdict.status == "WARN") == certainly
    assert ("ahead of" in verdict.found) == (found.offset > 0)


@settings(max_examples=1000)
@given(st.lists(st.sampled_from(["PASS", "WARN", "FAIL"]), min_size=1, max_size=9))
def test_exit_1_exactly_when_a_check_failed(statuses: list[Any]) -> None:
    found = [Check(str(i), s, "") for i, s in enumerate(statuses)]
    assert checks.exit_code(found) == (1 if "FAIL" in statuses else 0)


# --- CRDs ---------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=1000)
@given(JSON_VALUES, JSON_VALUES)
def test_documents_differ_exactly_when_they_are_unequal(a: Any, b: Any) -> None:
    assert checks.differences(a, a) == []
    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # true is not 1
    assert (checks.differences(a, b) == []) == same


def test_a_served_schema_short_of_the_generated_one_fails_upgrade_crds() -> None:
    kind = KINDS[0]
    want = crd(kind)["spec"]["versions"][0]["schema"]
    stale = crd(kind)["spec"]["versions"][0]["schema"]
    spec = stale["openAPIV3Schema"]["properties"]["spec"]["properties"]
    dropped = sorted(spec)[0]
    del spec[dropped]
    diff = checks.differences(want, stale)
    assert diff == [f".openAPIV3Schema.properties.spec.properties.{dropped} missing"]
    verdict = checks.crds({kind.crd_name: diff, "other.trainwarden.dev": []})
    assert verdict.status == "FAIL"
    assert verdict.found.startswith("upgrade CRDs")
    assert (
        checks.crds({kind.crd_name: None}).found == f"upgrade CRDs; not installed: {kind.crd_name}"
    )
    assert checks.crds({kind.crd_name: []}).status == "PASS"
    assert checks.differences({"minimum": 0}, {"minimum": 0.0}) == []  # JSON numbers


# --- RBAC ----------------------------------------------------------------------------------

ACCOUNT = ("tw-system", "tw")


def binding(kind: str, role: str, subject: tuple[str, str], namespace: str = "") -> dict[str, Any]:
    meta = {"name": f"{role}-b", **({"namespace": namespace} if namespace else {})}
    ref = {"kind": "Role" if kind == "RoleBinding" else "ClusterRole", "name": role}
    subjects = [{"kind": "ServiceAccount", "namespace": subject[0], "name": subject[1]}]
    return {"kind": kind, "metadata": meta, "roleRef": ref, "subjects": subjects}


def test_grants_are_those_of_the_roles_bound_to_the_account_only() -> None:
    manifests = [
        {"kind": "ClusterRole", "metadata": {"name": "tw"},
         "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "patch"]},
                   {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]},
        {"kind": "Role", "metadata": {"name": "kill", "namespace": "tw-system"},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                    "resourceNames": ["switch"]}]},
        {"kind": "ClusterRole", "metadata": {"name": "reader"},
         "rules": [{"apiGroups": ["x"], "resources": ["y"], "verbs": ["get"]}]},
        binding("ClusterRoleBinding", "tw", ACCOUNT),
        binding("RoleBinding", "kill", ACCOUNT, "tw-system"),
        binding("ClusterRoleBinding", "reader", ("other", "sa")),
    ]  # fmt: skip
    assert [str(g) for g in grants.grants(manifests, ACCOUNT)] == [
        "create pods/eviction",
        "get batch/jobs",
        "patch batch/jobs",
        "get configmaps switch in tw-system",
    ]


def test_a_missing_grant_fails_naming_it() -> None:
    wanted = [Grant("", "batch", "jobs", "patch"), Grant("", "", "pods", "get")]
    verdict = checks.rbac(ACCOUNT, "Helm release tw (revision 1)", wanted, wanted[:1])
    assert verdict.status == "FAIL"
    assert verdict.found == (
        "tw-system/tw lacks 1 of 2 grants of Helm release tw (revision 1): patch batch/jobs"
    )
    assert checks.rbac(ACCOUNT, "r", wanted, []).status == "PASS"
    assert checks.rbac(ACCOUNT, "r", [], []).status == "FAIL"


def release_secret(version: object, release: object) -> dict[str, Any]:
    meta = {"name": f"sh.helm.release.v1.tw.v{version}", "labels": {"version": version}}
    return {"metadata": meta, "data": {"release": release}}


def packed(record: object) -> str:
    inner = base64.b64encode(gzip.compress(json.dumps(record).encode()))
    return base64.b64encode(inner).decode()


def test_the_latest_helm_record_is_read_and_a_bad_one_is_unreadable_not_a_traceback() -> None:
    role = {"kind": "ClusterRole", "metadata": {"name": "tw"}}
    good = [release_secret("2", packed({"manifest": yaml.safe_dump(role)})),
            release_secret("10", packed({"manifest": "kind: Role\n"}))]  # fmt: skip
    assert helm.manifests(good) == ([{"kind": "Role"}], 10)
    assert helm.manifests(good[:1]) == ([role], 2)
    for bad in (
        [release_secret("two", packed({"manifest": ""}))],
        [release_secret(None, packed({"manifest": ""}))],
        [release_secret("1", "not base64!")],
        [release_secret("1", base64.b64encode(b"\x1f\x8b garbage").decode())],
        [release_secret("1", packed(["a list"]))],
        [release_secret("1", packed({"manifest": "a: [b"}))],
        [release_secret("1", None)],
    ):
        with pytest.raises(helm.Unreadable):
            helm.manifests(bad)


def test_live_roles_checked_against_themselves_warn_that_nothing_was_verified() -> None:
    wanted = [Grant("", "batch", "jobs", "patch")]
    why = "no deployed Helm release record of tw"
    verdict = checks.rbac(ACCOUNT, "the roles bound in the cluster", wanted, [], why)
    assert verdict.status == "WARN"
    assert verdict.found == (
        "tw-system/tw holds all 1 grants of the roles bound in the cluster; "
        "not verified against the chart's role (no deployed Helm release record of tw)"
    )
    assert checks.rbac(ACCOUNT, "r", wanted, wanted, why).status == "FAIL"


class BadRecord(probe.Probe):
    """An API server whose release record has a version label Helm never writes, and
    whose live roles grant the account what they grant (every review allowed)."""

    def __init__(self) -> None:
        super().__init__(probe.Options("tw-system", None, "default", 5.0))

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        role = {
            "metadata": {"name": "tw"},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}],
        }
        answers: dict[str, dict[str, Any]] = {
            "list_namespaced_secret": {"items": [release_secret("x", packed({}))]},
            "list_cluster_role": {"items": [role]},
            "list_cluster_role_binding": {"items": [binding("ClusterRoleBinding", "tw", ACCOUNT)]},
            "create_subject_access_review": {"status": {"allowed": True}},
        }  # fmt: skip
        return answers.get(call.__name__, {"items": []})


def test_an_unreadable_release_record_is_a_warning_over_the_live_roles() -> None:
    deployment = {"metadata": {"labels": {"app.kubernetes.io/instance": "tw"}},
                  "spec": {"template": {"spec": {"serviceAccountName": "tw"}}}}  # fmt: skip
    verdict = BadRecord().rbac(deployment)
    assert verdict.status == "WARN"
    assert verdict.found == (
        "tw-system/tw holds all 1 grants of the roles bound in the cluster; not verified "
        "against the chart's role (its Helm release record is unreadable: release Secret "
        "sh.helm.release.v1.tw.vx has version label 'x')"
    )


# --- the webhook's answer to the probe ------------------------------------------------------


def probe_review(dry_run: bool, annotated: bool = True) -> dict[str, Any]:
    """A pod's creation in `default`; unannotated, it carries another annotation, so that
    a hold patches both the same way."""
    mark = DOCTOR_PROBE if annotated else "example.com/other"
    meta: dict[str, Any] = {"name": "p", "namespace": "default", "annotations": {mark: "1"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
    request = {"uid": "r-1", "operation": "CREATE", "namespace": "default", "object": pod}
    return {"request": {**request, "dryRun": dry_run}}


class Holding:
    """A webhook's view: an exhausted Enforce budget over `default`, holding until 13:00
    (current or not)."""

    def __init__(self, current: bool = True) -> None:
        self._current = current

    def current(self) -> bool:
        return self._current

    def budgets(self) -> list[BudgetView]:
        body = BudgetBuilder("team").namespaces("default").accelerator_hours(1).enforce().build()
        body["metadata"]["generation"] = 1
        body["status"] = {
            "observedGeneration": 1,
            "percent": 120.0,
            "conditions": [{"type": EXHAUSTED, "status": "True"}],
            "admission": {"holding": True, "holdUntil": "2026-12-06T13:00:00Z",
                          "observedGeneration": 1},
        }  # fmt: skip
        found = budget_view(body)
        assert found is not None
        return [found]

    def namespace_labels(self, name: str) -> dict[str, str]:
        return {}


def test_the_webhook_answers_a_dry_run_probe_with_its_warning_alone() -> None:
    answer, outcome = review_response(probe_review(dry_run=True), Holding(), NOW)
    answered = f"{PROBE_ANSWERED}; view current=true"
    assert answer["response"] == {"uid": "r-1", "allowed": True, "warnings": [answered]}
    assert outcome == "ignored"
    assert checks.webhook(Webhook(True, "tw-hold", True, (f'299 - "{answered}"',))).status == "PASS"


def test_a_webhook_whose_view_is_not_current_warns_it_holds_nothing() -> None:
    answer, _ = review_response(probe_review(dry_run=True), Holding(current=False), NOW)
    (warning,) = answer["response"]["warnings"]
    assert warning == f"{PROBE_ANSWERED}; view current=false"
    verdict = checks.webhook(Webhook(True, "tw-hold", True, (f'299 - "{warning}"',)))
    assert verdict.status == "WARN"
    assert "its view is not current: it holds nothing" in verdict.found


def test_a_real_creation_of_the_annotated_pod_is_held_like_any_other() -> None:
    """The annotation is no way around a hold: only a dry run (nothing stored) is a probe."""
    held, outcome = review_response(probe_review(dry_run=False), Holding(), NOW)
    plain, _ = review_response(probe_review(dry_run=False, annotated=False), Holding(), NOW)
    assert outcome == "held"
    assert "patch" in held["response"]
    assert held == plain


def test_a_dry_run_of_a_pod_without_the_annotation_is_no_probe() -> None:
    answer, outcome = review_response(probe_review(True, annotated=False), Holding(), NOW)
    assert outcome == "held"
    assert PROBE_ANSWERED not in answer["response"].get("warnings", [])


class Refused(probe.Probe):
    """The probe pod's dry run refused (403) by something after the webhook answered,
    for a user who may (or may not) create pods."""

    def __init__(self, may_create: bool, warnings: tuple[str, ...]) -> None:
        super().__init__(probe.Options("tw", None, "default", 5.0))
        self.may_create, self.warnings = may_create, warnings

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"webhooks": [{"clientConfig": {"caBundle": "Q0E="}}]}

    def _dry_run_probe(self) -> tuple[str, ...]:
        error = ApiException(status=403, reason="Forbidden")
        error.body = json.dumps({"message": 'pods "x" is forbidden: exceeded quota: q'})
        error.headers = HTTPHeaderDict([("Warning", w) for w in self.warnings])
        raise error

    def _may_create_pods(self) -> bool:
        return self.may_create


WEBHOOK_FLAGS = ["--webhook-port=9443", "--webhook-configuration=tw-hold"]


def test_a_probe_pod_refused_by_admission_is_the_webhook_line_not_exit_3() -> None:
    answered = f'299 - "{PROBE_ANSWERED}; view current=true"'
    verdict = Refused(True, (answered,)).webhook(WEBHOOK_FLAGS)
    assert verdict.status == "WARN"
    assert verdict.found == (
        "the API server called tw-hold and got its answer, then refused the probe pod: "
        '403 pods "x" is forbidden: exceeded quota: q'
    )
    unanswered = Refused(True, ()).webhook(WEBHOOK_FLAGS)
    assert unanswered.status == "FAIL"
    assert unanswered.found.startswith("not verified: the API server refused the probe pod")
    with pytest.raises(ApiException):  # this user may not create pods there: exit 3
        Refused(False, ()).webhook(WEBHOOK_FLAGS)


def test_the_probe_pod_carries_small_requests_and_limits() -> None:
    (container,) = probe._probe_pod()["spec"]["containers"]
    assert container["resources"] == {"requests": probe.SMALL, "limits": probe.SMALL}


class Paged(probe.Probe):
    """An API server's pod list: `limit` at a time with a continue token, as asked."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        super().__init__(probe.Options("tw", None, "default", 5.0))
        self.pods, self.limits = pods, []

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        limit = kwargs.get("limit")
        self.limits.append(limit)
        start = int(kwargs.get("_continue") or 0)
        end = start + limit if limit else len(self.pods)
        token = str(end) if end < len(self.pods) else None
        return {"items": self.pods[start:end], "metadata": {"continue": token}}


def test_running_pods_are_listed_a_page_at_a_time() -> None:
    pods = [PodBuilder(f"p{i}", "team").gpus(i % 2).build() for i in range(1200)]
    paged = Paged(pods)
    found = list(paged._accelerator_pods())
    assert found == [("team", f"p{i}") for i in range(1, 1200, 2)]
    assert paged.limits == [500, 500, 500]


# --- every fix names a section that exists ----------------------------------------------------


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return out


def test_every_fix_is_a_section_of_install_md() -> None:
    source = (ROOT / "operator" / "trainwarden" / "doctor" / "checks.py").read_text()
    named = set(re.findall(r'fix\("([a-z-]+)"\)', source))
    assert len(named) == 8
    have = anchors((ROOT / "docs" / "install.md").read_text())
    assert {f"doctor-{n}" for n in named} <= have
    assert "doctor" in have


# --- the command: one line per check, the exit code ------------------------------------------


class FakeProbe:
    """The probe's answers, given: what the command prints and returns is under test."""

    verdicts: ClassVar[dict[str, Check]] = {}
    deployment: ClassVar[dict[str, Any] | None] = None

    def __init__(self, options: probe.Options) -> None:
        self.options = options

    def operator(self) -> dict[str, Any]:
        if FakeProbe.deployment is None:
            raise LookupError("no Deployment labelled app.kubernetes.io/name=trainwarden")
        return FakeProbe.deployment

    def __getattr__(self, name: str) -> Any:
        return lambda *args: FakeProbe.verdicts.get(name, Check(name, "PASS", f"{name} ok"))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProbe]:
    monkeypatch.setattr(probe, "Probe", FakeProbe)
    monkeypatch.setattr(cluster_access, "load", lambda *args: None)
    FakeProbe.verdicts = {}
    FakeProbe.deployment = {
        "metadata": {"namespace": "tw", "name": "tw"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "operator", "args": ["run", "--prometheus-url=http://p:9090"]}]}}},
        "status": {"readyReplicas": 1},
    }  # fmt: skip
    return FakeProbe


def test_a_warning_alone_exits_0_and_prints_its_fix(
    fake: type[FakeProbe], capsys: pytest.CaptureFixture[str]
) -> None:
    fake.verdicts["kueue"] = Check("kueue", "WARN", "not served", checks.fix("kueue"))
    assert cli.main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "PASS  operator    Deployment tw/tw: 1/1 ready"
    assert "WARN  kueue       not served" in lines
    assert "                  fix: docs/install.md#doctor-kueue" in lines
    assert lines[-1] == "8 checks: 7 pass, 1 warn, 0 fail (exit 0: warnings alone exit 0)"


def test_a_failure_exits_1_and_json_carries_every_check(
    fake: type[FakeProbe], capsys: pytest.CaptureFixture[str]
) -> None:
    fake.verdicts["rbac"] = Check("rbac", "FAIL", "lacks create pods/eviction", checks.fix("rbac"))
    assert cli.main(["doctor", "-o", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["exitCode"] == 1
    assert [c["name"] for c in document["checks"]] == [
        "operator", "prometheus", "dcgm", "kueue", "crds", "webhook", "rbac", "clock",
    ]  # fmt: skip
    assert document["checks"][6] == {
        "name": "rbac", "status": "FAIL", "found": "lacks create pods/eviction",
        "fix": "docs/install.md#doctor-rbac",
    }  # fmt: skip


def test_without_the_operators_deployment_only_that_fails(
    fake: type[FakeProbe], capsys: pytest.CaptureFixture[str]
) -> None:
    fake.deployment = None
    assert cli.main(["doctor", "-o", "yaml"]) == 1
    assert yaml.safe_load(capsys.readouterr().out)["checks"][0]["name"] == "operator"


def test_dcgm_within_a_namespace_ignores_the_pods_and_series_of_others() -> None:
    """A team's view: another namespace's unmatched pod or stray series says nothing."""
    pods = [("team", "a"), ("team", "b"), ("other", "c")]
    series = [
        {"namespace": "team", "pod": "a"},
        {"exported_namespace": "team", "exported_pod": "b", "namespace": "gpu-operator"},
        {"namespace": "other", "pod": "gone"},
    ]
    mine = checks.matching([p for p in pods if p[0] == "team"], series, "team")
    assert (mine.pods, mine.plain, mine.exported, mine.unmatched, mine.strangers) == (
        2,
        1,
        1,
        (),
        (),
    )
    assert checks.dcgm("q", mine).status == "PASS"
    everyone = checks.matching(pods, series)
    assert everyone.unmatched == (("other", "c"),)
    assert everyone.strangers == (("other", "gone"),)


def test_a_release_record_that_inflates_without_end_is_unreadable() -> None:
    bomb = base64.b64encode(base64.b64encode(gzip.compress(b"0" * (helm.MAX_RECORD + 1))))
    with pytest.raises(helm.Unreadable, match="inflates past"):
        helm.manifests([release_secret("1", bomb.decode())])


def _b64(raw: bytes) -> str:
    return base64.b64encode(base64.b64encode(raw)).decode()


RECORDS = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=40),
    st.binary(max_size=200).map(_b64),
    st.binary(max_size=200).map(lambda b: _b64(gzip.compress(b))),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=10,
    ).map(packed),
    st.text(max_size=200).map(lambda m: packed({"manifest": m})),
)


@settings(max_examples=1000)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(), st.text(max_size=6)), RECORDS),
        min_size=1,
        max_size=3,
    )
)
@example([("¹", None)])  # str.isdigit() holds for a superscript one, int() refuses it
def test_whatever_a_release_record_holds_it_is_read_or_unreadable(
    records: list[tuple[object, object]],
) -> None:
    """Whoever may write Secrets in the release's namespace writes the record: the doctor
    reads documents from it or says it cannot, never a traceback."""
    try:
        docs, number = helm.manifests([release_secret(v, r) for v, r in records])
    except helm.Unreadable:
        return
    assert all(isinstance(d, dict) for d in docs)
    assert number >= 0


def test_only_its_own_operator_s_answer_passes_the_webhook_check() -> None:
    """Every trainwarden webhook the probe pod matches answers it (a second instance, the
    demo's release): each answer names the configuration its operator serves, and only
    the checked configuration's counts. An answer naming none (an older operator) counts."""
    answer, _ = review_response(probe_review(dry_run=True), Holding(), NOW, "demo-hold")
    (other,) = answer["response"]["warnings"]
    assert other == f"{PROBE_ANSWERED} by demo-hold; view current=true"
    mine = f"{PROBE_ANSWERED} by tw-hold; view current=true"
    alone = checks.webhook(Webhook(True, "tw-hold", True, (f'299 - "{other}"',)))
    assert alone.status == "FAIL"
    assert "answered only by demo-hold: another instance" in alone.found
    both = (f'299 - "{other}"', f'299 - "{mine}"')
    assert checks.webhook(Webhook(True, "tw-hold", True, both)).status == "PASS"
    unnamed = f'299 - "{PROBE_ANSWERED}; view current=true"'
    assert checks.webhook(Webhook(True, "tw-hold", True, (unnamed,))).status == "PASS"
