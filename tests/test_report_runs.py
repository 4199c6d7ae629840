"""`trainwarden report --runs` over the experiment ledger (issue 28 item 4): runs filtered by
config hash, data version, a parameter or a label, and summed by any of them."""

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainwarden import cli, report_runs
from trainwarden.api.v1alpha1.receipt import (
    AcceleratorHours,
    Charged,
    Experiment,
    RunReceiptSpec,
)
from trainwarden.api.v1alpha1.types import ObjectReference

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def receipt(
    name: str, *, cost: float, outcome: str = "Succeeded", team: str = "vision", **declared: Any
) -> dict[str, Any]:
    spec = RunReceiptSpec(
        workload=ObjectReference(
            api_version="batch/v1", kind="Job", namespace="ml", name=name, uid=f"u-{name}"
        ),
        outcome=outcome,  # type: ignore[arg-type]
        started_at=NOW - timedelta(hours=2),
        finished_at=NOW - timedelta(hours=1),
        wall_seconds=3600,
        wall_time="1h",
        accelerator_hours=AcceleratorHours(held=cost / 2, unknown=cost / 2),
        cost=cost,
        charges=[Charged(budget="b", cost=cost)],
        labels={"team": team},
        experiment=Experiment(**declared) if declared else None,
    )
    return {
        "metadata": {"name": f"job-{name}", "namespace": "ml"},
        "spec": spec.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


RECEIPTS = [
    receipt("a", cost=10, config_hash="h1", data_version="v3", params={"lr": "0.1"}),
    receipt("b", cost=30, config_hash="h1", data_version="v3", params={"lr": "0.1"}),
    receipt("c", cost=5, outcome="Failed", config_hash="h2", data_version="v2", params={"lr": "1"}),
    receipt("d", cost=1, team="nlp"),
]


def _args(*argv: str) -> argparse.Namespace:
    return cli.parser().parse_args(["report", "--runs", *argv])


def test_where_keeps_the_runs_matching_every_condition() -> None:
    rows = report_runs.build(RECEIPTS, now=NOW, since=None)
    args = _args("--where", "data-version=v3", "--where", "param.lr=0.1")
    assert [r["receipt"] for r in report_runs.where(rows, args.where)] == ["job-b", "job-a"]
    assert [r["receipt"] for r in report_runs.where(rows, [("config-hash", "h2")])] == ["job-c"]
    assert [r["receipt"] for r in report_runs.where(rows, [("label.team", "nlp")])] == ["job-d"]
    assert report_runs.where(rows, [("data-version", "v9")]) == []


def test_group_by_config_hash_sums_the_runs_and_counts_outcomes() -> None:
    rows = report_runs.build(RECEIPTS, now=NOW, since=None)
    groups = report_runs.grouped(rows, _args("--group-by", "config-hash").group_by)
    assert [(g["group"], g["runs"], g["cost"]) for g in groups] == [
        ("h1", 2, 40.0),
        ("h2", 1, 5.0),
        ("", 1, 1.0),
    ]
    assert (groups[0]["succeeded"], groups[1]["failed"]) == (2, 1)
    assert groups[0]["receipts"] == ["job-a", "job-b"]
    text = report_runs.group_table(groups)
    assert text.splitlines()[0].split() == [
        "CONFIG-HASH", "RUNS", "SUCCEEDED", "FAILED", "DELETED", "COST", "HELD", "USED",
        "STORAGE", "GIB-H",
    ]  # fmt: skip
    assert text.splitlines()[3].split()[:2] == ["(none)", "1"]
    by_param = report_runs.grouped(rows, "param.lr")
    assert [(g["group"], g["runs"]) for g in by_param] == [("0.1", 2), ("1", 1), ("", 1)]


def test_the_run_table_shows_data_and_config_only_when_a_run_declares_them() -> None:
    rows = report_runs.build(RECEIPTS, now=NOW, since=None)
    head = report_runs.table(rows).splitlines()[0].split()
    assert head[-3:] == ["DATA", "CONFIG", "LABELS"]
    undeclared = report_runs.build(RECEIPTS[3:], now=NOW, since=None)
    assert "CONFIG" not in report_runs.table(undeclared)
    assert "configHash,dataVersion,codeVersion,metric,final,best" in report_runs.to_csv(rows)


def test_a_run_s_result_is_in_its_row() -> None:
    body = receipt("e", cost=2, config_hash="h1", data_version="v3")
    body["spec"]["result"] = {"metric": "eval_loss", "final": 0.5, "best": 0.35, "source": "x"}
    (row,) = report_runs.build([body], now=NOW, since=None)
    assert (row["metric"], row["final"], row["best"]) == ("eval_loss", 0.5, 0.35)
    line = report_runs.to_csv([row]).splitlines()[1]
    assert line.endswith(",h1,v3,,eval_loss,0.500,0.350,vision")


@pytest.mark.parametrize(
    "argv", [["--group-by", "params"], ["--where", "lr=1"], ["--where", "data-version"]]
)
def test_unknown_fields_are_refused_as_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _args(*argv)
    assert exited.value.code == 2


def test_where_and_group_by_need_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", "--group-by", "config-hash"]) == 2
    assert "need --runs" in capsys.readouterr().err


def test_storage_by_team_is_summed_next_to_accelerator_hours() -> None:
    """issue 28 item 3: `--runs --group-by label.team` shows each team's storage GiB-hours
    beside its accelerator-hours; a run with claims not known is marked, never guessed."""
    held = [
        receipt("a", cost=10),
        receipt("b", cost=4),
        receipt("c", cost=2, team="nlp"),
        receipt("d", cost=1, team="nlp"),
    ]
    held[0]["spec"]["storage"] = {"gibHours": 20.5, "claims": 2}
    held[1]["spec"]["storage"] = {"gibHours": 1.5, "claims": 1, "unknownClaims": 1}
    held[2]["spec"]["storage"] = {"unknownClaims": 1, "unknown": ["gone"]}
    rows = report_runs.build(held, now=NOW, since=None)
    groups = {g["group"]: g for g in report_runs.grouped(rows, "label.team")}
    assert groups["vision"]["storageGiBHours"] == 22.0
    assert groups["vision"]["held"] == 7.0
    assert groups["nlp"]["storageGiBHours"] == 0.0
    text = report_runs.group_table(report_runs.grouped(rows, "label.team"))
    head, vision = text.splitlines()[:2]
    assert head.endswith("USED  STORAGE GIB-H")
    assert vision.split()[0] == "vision"
    assert vision.split()[-1] == "22.00"
    cells = {r["receipt"]: r for r in rows}
    table = report_runs.table(rows).splitlines()
    assert "STORAGE GIB-H" in table[0]
    marks = {line.split()[1]: line.split()[9] for line in table[1:]}
    assert marks == {"Job/a": "20.50", "Job/b": "1.50?", "Job/c": "0.00?", "Job/d": "-"}
    assert cells["job-a"]["storageGiBHours"] == 20.5
    assert "storageGiBHours" in report_runs.to_csv(rows).splitlines()[0]
