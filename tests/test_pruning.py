"""A pruning run on a real directory: plan, re-check, delete; and `trainwarden prune`."""

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwarden.checkpoints.pruner import PrunerReport, parse_report
from trainwarden.cli import main
from trainwarden.storage.pruning import REPORT_LIMIT, Report, load_spec, prune

POLICY: dict[str, Any] = {
    "apiVersion": "trainwarden.dev/v1alpha1",
    "kind": "CheckpointPolicy",
    "metadata": {"name": "hf"},
    "spec": {
        "mode": "Enforce",
        "scope": {"namespaces": ["team"]},
        "storage": {"pvc": {}},
        "layout": {"type": "HuggingFace"},
        "retention": {"keepLast": 2, "keepBest": {"metric": "eval_loss"}, "minAge": "10m"},
        "afterCompletion": {"keepLast": 1, "delay": "1s"},
    },
}


def write(root: Path, step: int, loss: float, age: float = 3600) -> Path:
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    history = [{"step": step, "loss": loss + 0.1}, {"step": step, "eval_loss": loss}]
    state = {"global_step": step, "log_history": history}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    (ckpt / "model.safetensors").write_bytes(b"\0" * 1000)
    stamp = time.time() - age
    for path in (*ckpt.iterdir(), ckpt):
        os.utime(path, (stamp, stamp))
    return ckpt


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = tmp_path / "out"
    for step, loss in ((100, 0.9), (200, 0.1), (300, 0.5), (400, 0.6), (500, 0.4)):
        write(root, step, loss)
    return root


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_enforce_deletes_what_no_rule_keeps(run: Path) -> None:
    report = prune(run, load_spec(yaml.safe_dump(POLICY)), dry_run=False)
    assert sorted(report.deleted) == ["checkpoint-100", "checkpoint-300"]
    assert names(run) == ["checkpoint-200", "checkpoint-400", "checkpoint-500"]
    assert report.bytes_freed > 2000
    assert (report.scanned, report.kept) == (5, 3)


def test_dry_run_deletes_nothing_and_lists_the_same_plan(run: Path) -> None:
    before = names(run)
    report = prune(run, load_spec(yaml.safe_dump(POLICY)), dry_run=True)
    assert sorted(report.deleted) == ["checkpoint-100", "checkpoint-300"]
    assert names(run) == before


def test_after_the_job_finished_only_the_final_survives(run: Path) -> None:
    spec = load_spec(yaml.safe_dump(POLICY))
    report = prune(run, spec, dry_run=False, finished=True, pins={"checkpoint-100"})
    assert names(run) == ["checkpoint-100", "checkpoint-500"]
    assert "checkpoint-100" not in report.deleted


def test_a_checkpoint_rewritten_after_the_scan_is_not_deleted(run: Path) -> None:
    spec = load_spec(yaml.safe_dump(POLICY))
    calls = 0

    def clock() -> datetime:
        """The trainer rewrites checkpoint-100 between the plan and its deletion."""
        nonlocal calls
        calls += 1
        if calls == 2:
            (run / "checkpoint-100" / "model.safetensors").write_bytes(b"\1" * 2000)
        return datetime.now(UTC)

    report = prune(run, spec, dry_run=False, clock=clock)
    assert "checkpoint-100" in names(run)
    assert report.skipped == ["checkpoint-100: changed since the scan"]
    assert report.deleted == ["checkpoint-300"]


def test_a_symlink_out_of_the_directory_is_never_followed(run: Path, tmp_path: Path) -> None:
    precious = write(tmp_path / "elsewhere", 50, 0.01)
    (run / "checkpoint-50").symlink_to(precious, target_is_directory=True)
    prune(run, load_spec(yaml.safe_dump(POLICY)), dry_run=False, finished=True)
    assert (precious / "model.safetensors").exists()


def test_the_summary_fits_a_termination_message(tmp_path: Path) -> None:
    root = tmp_path / "many"
    for step in range(1, 400):
        write(root, step, 1.0)
    report = prune(root, load_spec(yaml.safe_dump(POLICY)), dry_run=True)
    summary = json.dumps(report.summary(), separators=(",", ":"))
    assert len(summary) <= REPORT_LIMIT
    assert report.summary()["deletedCount"] == len(report.deleted) == 50  # the per-run cap
    assert 0 < len(report.summary()["deleted"]) <= 50
    newest = sorted((d.checkpoint.created for d in report.decisions), reverse=True)
    assert report.summary()["completed"] == [int(t.timestamp()) for t in newest[:32]]
    assert isinstance(report.summary()["scannedAt"], int)


def test_the_summary_fits_whatever_the_names_and_messages() -> None:
    """Names and messages are tenant text: non-ASCII takes six bytes each as JSON spells
    it; whatever they are, the report fits and the operator reads it."""
    long = "ckpt-\u2603" * 400
    report = Report(
        long, False, scanned=10, kept=5, deleted=[long] * 5, notes=[long] * 9, error=long
    )
    report.skipped, report.failures = [long] * 9, [long] * 9
    report.scanned_at = datetime(2999, 12, 31, tzinfo=UTC)
    before_1970 = datetime(1960, 1, 1, tzinfo=UTC)  # a tenant's touch: left out, not fatal
    report.completed = [before_1970, *[report.scanned_at] * 40]
    text = json.dumps(report.summary(), separators=(",", ":"))
    assert len(text) <= REPORT_LIMIT
    assert isinstance(parse_report(text), PrunerReport)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kind: TrainingBudget\nspec: {}", "expected a CheckpointPolicy, got a TrainingBudget"),
        ("- a\n- b", "as a mapping"),
        ("spec: {scope: {namespaces: [a]}, storage: {}}", "spec.storage"),
        ("spec: {retention: {keepLast: 0}}", "spec.retention.keepLast"),
        (
            "spec: {scope: {namespaces: [a]}, storage: {pvc: {}}, layout: {type: Glob}}",
            "type Glob needs glob and stepPattern",
        ),
        (
            "spec: {scope: {namespaces: [a]}, storage: {pvc: {}},"
            " layout: {type: Glob, glob: 'c-*', stepPattern: 'c-[0-9]+'}}",
            "stepPattern needs a group",
        ),
        (": : :", "not YAML"),
    ],
)
def test_a_bad_policy_file_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        load_spec(text)


def test_the_command_prints_the_plan(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    assert main(["prune", str(run), "--policy", str(policy), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "WOULD DELETE  NotSelected  checkpoint-100" in out
    assert "KEEP          KeepBest     checkpoint-200" in out
    assert "5 checkpoints, 3 kept, 2 to delete" in out
    assert len(list(run.iterdir())) == 5
    report = tmp_path / "report.json"
    assert main(["prune", str(run), "--policy", str(policy), "--report", str(report)]) == 0
    assert json.loads(report.read_text())["deletedCount"] == 2
    assert len(list(run.iterdir())) == 3


def test_the_command_refuses_bad_input_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("spec: {retention: {keepLast: 0}}")
    assert main(["prune", str(tmp_path), "--policy", str(policy)]) == 2
    assert "invalid policy: spec." in capsys.readouterr().err
    assert main(["prune", str(tmp_path / "nope"), "--policy", str(policy)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_the_pruner_tolerates_a_directory_not_written_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    report = tmp_path / "report.json"
    args = ["prune", str(tmp_path / "later"), "--policy", str(policy), "--report", str(report)]
    assert main([*args, "--missing-ok"]) == 0
    assert json.loads(report.read_text())["notes"] == [f"{tmp_path / 'later'} does not exist yet"]
    capsys.readouterr()
    assert main(args) == 2, "a person naming a missing directory gets an error"
