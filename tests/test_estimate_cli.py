"""`trainwarden estimate`: the pure report builder, and the command run offline against
budget files (no cluster: any Kubernetes call fails the test)."""

import io
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden import cli, estimates
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION
from trainwarden.core.estimate import KUEUE_MAX_EXEC
from trainwarden.estimate_inputs import InputError, Manifest, check, load, offline_labels
from trainwarden.testing.builders import (
    BudgetBuilder,
    JobBuilder,
    JobSetBuilder,
    ObjectBuilder,
    PodBuilder,
    PyTorchJobBuilder,
)

NOW = datetime(2026, 12, 2, 18, tzinfo=UTC)
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
JSON = dict[str, Any]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline means offline: reading a kubeconfig fails the test."""
    from kubernetes import config

    def must_not(*_: object, **__: object) -> None:
        raise AssertionError("Must not be called!")

    monkeypatch.setattr(config, "load_kube_config", must_not)
    monkeypatch.setattr(config, "load_incluster_config", must_not)


def team_budget(remaining: JSON | None = None, **status: Any) -> JSON:
    """vision's budget: 2.5 per A100-hour, 4 per other GPU-hour, 0.1 per core-hour."""
    body = (
        BudgetBuilder("vision")
        .namespace_selector({"team": "vision"})
        .accelerator_hours(500)
        .cost(2000, currency="EUR")
        .accelerator_rate(2.5, node_labels=A100)
        .accelerator_rate(4.0, node_labels={"nvidia.com/gpu.product": "H100"})
        .cpu_core_rate(0.1)
        .enforce()
        .build()
    )
    if remaining is not None or status:
        body["status"] = {**status, **({"remaining": remaining} if remaining is not None else {})}
    return body


def holding(body: JSON, *, until: datetime = NOW + timedelta(hours=1)) -> JSON:
    body.setdefault("status", {})["admission"] = {"holding": True, "holdUntil": until.isoformat()}
    return body


def job(hours: int | None = 6, *, gpus: int = 8, pods: int = 4, ns: str = "vision") -> JSON:
    j = JobBuilder("pretrain", ns).gpus(gpus).cpu("16").memory("64Gi").parallelism(pods)
    j = j.node_selector(A100)
    return (j.annotations({EXPECTED_DURATION: f"{hours}h"}) if hours else j).build()


def report(manifests: list[JSON], budgets: list[JSON], labels: JSON | None = None) -> JSON:
    found = [Manifest("job.yaml", i, m) for i, m in enumerate(manifests, start=1)]
    namespaces = {str(m.get("metadata", {}).get("namespace") or "default") for m in manifests}
    return estimates.build(
        found,
        budgets,
        offline_labels(namespaces, labels if labels is not None else {"team": "vision"}),
        default_namespace="default",
        now=NOW,
        budget_source="test",
    )


def test_cost_and_share_of_what_is_left_by_each_covering_budget() -> None:
    org = BudgetBuilder("org").namespaces("vision").accelerator_hours(10_000).build()
    other = BudgetBuilder("other").namespaces("audio").accelerator_hours(1).build()
    built = report([job()], [team_budget({"acceleratorHours": 120.0, "cost": 700.0}), org, other])
    (w,) = built["workloads"]
    assert (w["kind"], w["namespace"], w["pods"]) == ("Job", "vision", 4)
    assert w["duration"] == {"seconds": 6 * 3600, "source": EXPECTED_DURATION}
    assert w["total"]["acceleratorHours"] == 192.0
    assert w["total"]["cpuCoreHours"] == 384.0
    org_view, vision = w["budgets"]  # by name; "other" does not cover vision
    assert (org_view["budget"], org_view["remaining"], org_view["cost"]) == ("org", None, None)
    assert org_view["acceleratorHours"] == 192.0, "no status: still the accelerator-hours"
    assert vision["cost"] == 192 * 2.5 + 384 * 0.1
    assert vision["currency"] == "EUR"
    assert vision["percentOfRemaining"] == {
        "acceleratorHours": 160.0,
        "cost": round(100 * vision["cost"] / 700, 4),
    }
    assert vision["wouldExceed"]
    assert vision["usesUpRemainingAfterHours"] == 3.75
    assert (built["wouldExceed"], built["wouldBeHeld"]) == (1, 0)
    text = estimates.table(built)
    assert "WOULD EXCEED WHAT IS LEFT" in text
    assert "518.40 EUR" in text
    assert "unknown (no status)" in text


def test_without_a_declared_duration_per_hour_figures_and_how_to_declare_one() -> None:
    (w,) = report([job(None)], [team_budget({"acceleratorHours": 120.0})])["workloads"]
    assert (w["duration"], w["total"]) == (None, None)
    assert w["perHour"]["acceleratorHours"] == 32.0
    (b,) = w["budgets"]
    assert (b["cost"], b["costPerHour"]) == (None, 32 * 2.5 + 64 * 0.1)
    assert b["percentOfRemaining"] is None
    assert b["percentOfRemainingPerHour"] == {"acceleratorHours": round(3200 / 120, 4)}
    assert not b["wouldExceed"], "a per-hour share says nothing of the whole run"
    assert any(EXPECTED_DURATION in n and KUEUE_MAX_EXEC in n for n in w["notes"])
    text = estimates.table(report([job(None)], [team_budget({"acceleratorHours": 120.0})]))
    assert "86.40 EUR/h" in text
    assert "uses it all up after 3.75h" in text
    assert "PER HOUR" in text


def test_an_unreadable_duration_says_why() -> None:
    body = JobBuilder("j", "vision").gpus(1).annotations({EXPECTED_DURATION: "soon"}).build()
    (w,) = report([body], [team_budget()])["workloads"]
    assert EXPECTED_DURATION in (w["durationProblem"] or "")
    assert w["notes"][0].startswith(w["durationProblem"])


def test_held_by_an_exhausted_budget_as_the_webhook_would() -> None:
    enforce = holding(team_budget({"acceleratorHours": 0.0}))
    (b,) = report([job()], [enforce])["workloads"][0]["budgets"]
    assert (b["exhausted"], b["held"]) == (True, "Held")
    assert b["percentOfRemaining"] == {"acceleratorHours": None}, "nothing left: no finite share"
    assert b["wouldExceed"]
    assert "EXHAUSTED: WOULD BE HELD" in estimates.table(report([job()], [enforce]))

    dry = holding(team_budget({"acceleratorHours": 0.0}))
    dry["spec"]["mode"] = "DryRun"
    assert report([job()], [dry])["workloads"][0]["budgets"][0]["held"] == "WouldHold"

    expired = holding(team_budget({"acceleratorHours": 0.0}), until=NOW - timedelta(seconds=1))
    assert report([job()], [expired])["workloads"][0]["budgets"][0]["held"] is None

    allow = team_budget(
        {"acceleratorHours": 0.0}, conditions=[{"type": "Exhausted", "status": "True"}]
    )
    allow["spec"]["enforcement"] = {"newWorkloads": "Allow"}
    (b,) = report([job()], [allow])["workloads"][0]["budgets"]
    assert (b["exhausted"], b["held"]) == (True, None)


def test_kueue_managed_work_is_not_held_by_the_webhook_and_says_so() -> None:
    body = job()
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpus"}
    (w,) = report([body], [holding(team_budget({"acceleratorHours": 0.0}))])["workloads"]
    assert w["budgets"][0]["held"] is None
    assert any("Kueue" in n for n in w["notes"])
    workload = ObjectBuilder("kueue.x-k8s.io/v1beta2", "Workload", "wl", "vision").field(
        "spec.podSets", [{"name": "main", "count": 2, "template": PodBuilder("w").template()}]
    )
    (w,) = report([workload.build()], [holding(team_budget({"acceleratorHours": 0.0}))])[
        "workloads"
    ]
    assert (w["pods"], w["budgets"][0]["held"]) == (2, None)
    assert any("Kueue manages it" in n for n in w["notes"])


def test_scope_by_namespace_labels_and_the_name_label_every_namespace_has() -> None:
    by_name = BudgetBuilder("by-name").namespace_selector({"kubernetes.io/metadata.name": "vision"})
    built = report([job(), job(ns="audio")], [team_budget(), by_name.accelerator_hours(1).build()])
    vision, audio = built["workloads"]
    assert [b["budget"] for b in vision["budgets"]] == ["by-name", "vision"]
    assert [b["budget"] for b in audio["budgets"]] == ["vision"], "labels given: team=vision"
    (nobody,) = report([job()], [team_budget()], labels={})["workloads"]
    assert nobody["budgets"] == []
    assert "no TrainingBudget covers it" in nobody["notes"]


def test_an_invalid_budget_is_listed_not_used() -> None:
    bad = team_budget()
    bad["spec"]["scope"] = {}
    built = report([job()], [bad])
    assert built["budgetsIgnored"] == ["vision"]
    assert "ignored (invalid spec): vision" in estimates.table(built)


left_amount = st.one_of(st.just(0.0), st.floats(0.01, 1e6, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 16), st.integers(1, 64), st.integers(1, 72), left_amount, left_amount)
def test_shares_are_consistent_with_the_totals(
    gpus: int, pods: int, hours: int, left_hours: float, left_cost: float
) -> None:
    """Against the arithmetic done by hand: cost and accelerator-hours of the whole run,
    its share of what is left (over 100 % exactly when it needs more than is left), and
    the per-hour share times the hours. Shares are rounded to 4 decimals in JSON."""
    remaining = {"acceleratorHours": left_hours, "cost": left_cost}
    (w,) = report([job(hours, gpus=gpus, pods=pods)], [team_budget(remaining)])["workloads"]
    (b,) = w["budgets"]
    total = {
        "acceleratorHours": float(gpus * pods * hours),
        "cost": pods * hours * (gpus * 2.5 + 16 * 0.1),
    }
    assert math.isclose(w["total"]["acceleratorHours"], total["acceleratorHours"])
    assert math.isclose(b["cost"], total["cost"], abs_tol=1e-4)
    for dim, left in remaining.items():
        share, hourly = b["percentOfRemaining"][dim], b["percentOfRemainingPerHour"][dim]
        if total[dim] == 0:
            assert share == hourly == 0.0
        elif left == 0:
            assert (share, hourly) == (None, None)
        else:
            assert math.isclose(share, 100 * total[dim] / left, rel_tol=1e-9, abs_tol=6e-5)
            assert math.isclose(hourly * hours, share, rel_tol=1e-9, abs_tol=6e-5 * (hours + 1))
    needs_more = any(total[d] > left for d, left in remaining.items())
    assert b["wouldExceed"] == needs_more


# --- inputs ---------------------------------------------------------------------------


def test_multi_document_yaml_lists_and_empty_documents() -> None:
    jobset = JobSetBuilder("js", "vision").replicated_job("w", replicas=2).build()
    listed = {"apiVersion": "v1", "kind": "List", "items": [job(), jobset]}
    text = yaml.safe_dump_all([job(), None, listed]) + "---\n"
    found = load(text, "all.yaml")
    assert [(m.index, m.item, m.body["kind"]) for m in found] == [
        (1, None, "Job"),
        (3, 1, "Job"),
        (3, 2, "JobSet"),
    ]
    assert found[2].where == "all.yaml document 3 item 2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [Job", "a.yaml: not valid YAML"),
        ("- kind: Job\n- kind: Pod\n", "a.yaml document 1: is a list, not a Kubernetes object"),
        ("just text\n", "a.yaml document 1: is str"),
        ("metadata: {name: x}\n", "a.yaml document 1: has no kind"),
        ("---\nkind: Job\n---\nkind: Deployment\n", "a.yaml document 2: kind 'Deployment'"),
        ("kind: TrainingBudget\n", "pass budgets with --budgets"),
        (
            "kind: Job\nmetadata: {name: big}\nspec: {parallelism: 1000000000}\n",
            "a.yaml document 1 (Job big): spec.parallelism=1000000000 is not a pod count",
        ),
        ("kind: JobSet\nspec: {replicatedJobs: [{replicas: -2}]}\n", "replicatedJobs[0].replicas"),
        ("kind: Job\nspec: {parallelism: '4'}\n", "spec.parallelism='4'"),
        (
            "kind: Pod\nspec: {containers: [{resources: {limits: {nvidia.com/gpu: lots}}}]}\n",
            "unreadable resources: not a Kubernetes quantity: 'lots'",
        ),
        (
            "kind: Pod\nspec: {containers: [{resources: {limits: {nvidia.com/gpu: 1e999}}}]}\n",
            "requests nvidia.com/gpu=inf",
        ),
    ],
)
def test_bad_input_is_refused_with_its_document_and_kind(text: str, message: str) -> None:
    def every(text: str) -> None:
        for m in load(text, "a.yaml"):
            check(m)

    with pytest.raises(InputError) as raised:
        every(text)
    assert message in str(raised.value)


def test_a_pod_count_inside_a_pod_spec_is_not_taken_for_one() -> None:
    pod = PodBuilder("p").gpus(1).build()
    pod["spec"]["containers"][0]["env"] = [{"name": "replicas", "value": "x"}]
    pod["spec"]["containers"][0]["count"] = "not a pod count"
    assert check(Manifest("p.yaml", 1, pod)).pods == 1


# --- the command ----------------------------------------------------------------------


def write(path: Path, *documents: Any) -> str:
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    pytorch = PyTorchJobBuilder("finetune").replica(
        "Worker", replicas=3, template=PodBuilder("w").gpus(2)
    )
    manifests = write(tmp_path / "jobs.yaml", job(), pytorch.build())
    budgets = write(tmp_path / "budgets.yaml", team_budget({"acceleratorHours": 400.0}), job())
    return manifests, budgets


def test_main_offline_json(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    manifests, budgets = files
    argv = ["estimate", "-f", manifests, "--budgets", budgets, "--namespace-labels", "team=vision"]
    assert cli.main([*argv, "-n", "vision", "-o", "json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["budgetSource"] == budgets
    assert built["budgetsConsidered"] == ["vision"], "the Job in the budget file is skipped"
    job_view, pytorch = built["workloads"]
    assert (pytorch["kind"], pytorch["namespace"], pytorch["pods"]) == ("PyTorchJob", "vision", 3)
    assert job_view["budgets"][0]["percentOfRemaining"] == {"acceleratorHours": 48.0}
    assert pytorch["budgets"][0]["costIsUpperBound"], "no GPU model selected: highest rate"
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "jobs.yaml#2  PyTorchJob default/finetune" in out
    assert "≤24.00 EUR/h" in out


def test_fail_over_for_ci(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    manifests, budgets = files
    argv = ["estimate", "-f", manifests, "--budgets", budgets, "--namespace-labels", "team=vision"]
    assert cli.main([*argv, "--fail-over", "50"]) == 0
    assert cli.main([*argv, "--fail-over", "40"]) == 1
    err = capsys.readouterr().err
    assert "over 40%: Job vision/pretrain would use 48.0% of the acceleratorHours left" in err


def test_stdin_and_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gitops").mkdir()
    write(tmp_path / "gitops" / "budget.yaml", team_budget())
    (tmp_path / "gitops" / "README.md").write_text("not yaml: [")
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(job())))
    argv = ["estimate", "-f", "-", "--budgets", str(tmp_path / "gitops"), "-o", "json"]
    assert cli.main([*argv, "--namespace-labels", "team=vision"]) == 0
    (w,) = json.loads(capsys.readouterr().out)["workloads"]
    assert (w["source"], [b["budget"] for b in w["budgets"]]) == ("stdin", ["vision"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"kind: Job\nspec: [\n", "not valid YAML"),
        (b"- 1\n- 2\n", "document 1: is a list"),
        (b"apiVersion: apps/v1\nkind: Deployment\n", "kind 'Deployment' is not a workload"),
        (b"kind: Job\nspec: {parallelism: 99999999999}\n", "is not a pod count"),
        (b"\xff\xfe\x00kind", "codec can't decode"),
    ],
)
def test_main_bad_input_exits_2_without_a_traceback(
    tmp_path: Path, content: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.yaml").write_bytes(content)
    budgets = write(tmp_path / "b.yaml", team_budget())
    assert cli.main(["estimate", "-f", str(tmp_path / "bad.yaml"), "--budgets", budgets]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainwarden estimate: ")
    assert message in err
    assert "Traceback" not in err


def test_main_bad_budgets_and_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = write(tmp_path / "j.yaml", job())
    bad = team_budget()
    bad["spec"]["scope"] = {}
    budgets = write(tmp_path / "b.yaml", bad)
    assert cli.main(["estimate", "-f", manifests, "--budgets", budgets]) == 2
    err = capsys.readouterr().err
    assert "document 1: TrainingBudget vision has an invalid spec" in err
    assert "spec.scope: scope must name namespaces or a namespaceSelector" in err  # the field
    assert cli.main(["estimate", "-f", str(tmp_path / "none.yaml"), "--budgets", budgets]) == 2
    assert "No such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["estimate", "-f", manifests, "--budgets", budgets, "--namespace-labels", "x"])
    assert exited.value.code == 2


def test_no_cluster_exits_3_with_the_offline_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["estimate", "-f", write(tmp_path / "j.yaml", job())]) == 3
    err = capsys.readouterr().err
    assert err.startswith("trainwarden estimate: cannot read TrainingBudgets from the cluster: ")
    assert f"cannot load cluster credentials: no kubeconfig at {tmp_path / 'none'}" in err
    assert "--budgets FILE" in err
    assert "Traceback" not in err
