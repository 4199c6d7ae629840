"""What a run achieved, from its trainer's own state (issue 28 item 4): read by a pruning
scan (storage/results.py), carried in the pruner's report into the CheckpointPolicy's
status, and onto the receipt of a run the policy governs — never from an annotation."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_lightning_state import BEST, SECOND, run_directory
from test_receipt_controller import NS, Setup, finish, job_ran, scanned
from test_trainer_word import hf, policy
from trainwarden.api.v1alpha1.checkpoint import Layout
from trainwarden.api.v1alpha1.checkpoint_status import TrainerResult
from trainwarden.checkpoints.pruner import parse_report
from trainwarden.storage import results
from trainwarden.storage.layouts import scan_directory
from trainwarden.storage.pruning import load_spec, prune
from trainwarden.testing.builders import NamespaceBuilder
from world import World


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """Training loss falls all along; eval loss is best at step 10, the Trainer's best."""
    root = tmp_path / "out"
    for step, loss, eval_loss in ((10, 0.9, 0.1), (20, 0.5, 0.3), (30, 0.3, 0.4), (40, 0.1, 0.5)):
        hf(root, step, loss=loss, eval_loss=eval_loss, best="checkpoint-10")
    return root


def test_hugging_face_final_and_best_from_trainer_state(trained: Path) -> None:
    spec = load_spec(yaml.safe_dump(policy("HuggingFace", keepLast=4)))
    report = prune(trained, spec, dry_run=True)
    assert report.result == TrainerResult(
        metric="eval_loss", final=0.5, best=0.1, step=40, source="HuggingFace checkpoint-40"
    )


def test_keep_best_names_the_metric_and_its_order_ranks_without_the_trainer_s_word(
    tmp_path: Path,
) -> None:
    root = tmp_path / "out"
    for step, loss in ((10, 0.9), (20, 0.2), (30, 0.5)):
        hf(root, step, loss=loss, eval_loss=loss)  # no best_model_checkpoint
    spec = load_spec(yaml.safe_dump(policy("HuggingFace", keepBest={"metric": "loss"})))
    report = prune(root, spec, dry_run=True)
    assert report.result is not None
    assert (report.result.metric, report.result.final) == ("eval_loss", 0.5)  # as HF reads it
    assert report.result.best == 0.2
    maxed = load_spec(
        yaml.safe_dump(policy("HuggingFace", keepBest={"metric": "eval_loss", "order": "Max"}))
    )
    found = prune(root, maxed, dry_run=True).result
    assert found is not None
    assert found.best == 0.9


def test_lightning_s_monitored_score_and_its_best_model_path(tmp_path: Path) -> None:
    scan = scan_directory(run_directory(tmp_path), Layout(type="Lightning"))
    found = results.result("Lightning", scan.checkpoints, None)
    assert found is not None
    assert (found.metric, found.step, found.source) == ("val_loss", 16, f"Lightning {SECOND}")
    assert found.final == pytest.approx(0.0052, rel=1e-2)
    assert found.best == pytest.approx(9.8774e-05, rel=1e-3)  # BEST, the callback's own
    assert BEST in {c.name for c in scan.checkpoints if c.trainer_best}


def test_nothing_is_said_where_the_trainer_recorded_no_metric(tmp_path: Path) -> None:
    for name in ("global_step10", "global_step20"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mp_rank_00_model_states.pt").write_bytes(b"\0")
    (tmp_path / "latest").write_text("global_step20")
    scan = scan_directory(tmp_path, Layout(type="DeepSpeed"))
    assert results.result("DeepSpeed", scan.checkpoints, None) is None


def test_the_result_travels_in_the_pruner_s_report(trained: Path) -> None:
    spec = load_spec(yaml.safe_dump(policy("HuggingFace", keepLast=4)))
    summary = prune(trained, spec, dry_run=True).summary()
    parsed = parse_report(json.dumps(summary))
    assert not isinstance(parsed, str)
    assert parsed.result == TrainerResult(
        metric="eval_loss", final=0.5, best=0.1, step=40, source="HuggingFace checkpoint-40"
    )
    forged: dict[str, Any] = {**summary, "result": {**summary["result"], "final": 1e400}}
    assert isinstance(parse_report(json.dumps(forged)), str)  # no infinity in a status


def _with_result(world: World, final: float, as_of_ago: float) -> dict[str, Any]:
    policy_ = scanned(world, [600], as_of_ago=as_of_ago)
    said = {"metric": "eval_loss", "final": final, "best": 0.1, "step": 40, "source": "x"}
    policy_["status"]["locations"][0]["result"] = said
    return policy_


def test_the_receipt_waits_for_a_scan_after_the_run_and_records_what_it_read() -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    setup = Setup(world)
    setup.policies = [_with_result(world, 0.7, as_of_ago=60)]  # before the run finished
    finish(world, job_ran(world, checkpoints="ckpt:/runs"))
    setup.process()
    assert not setup.receipts(), "the final checkpoint is not scanned yet"
    world.advance(10)
    setup.policies = [_with_result(world, 0.5, as_of_ago=0)]
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["result"]["final"] == 0.5
    (event,) = [e for e in world.fake.events if e.reason == "RunReceipt"]
    assert event.message.endswith("; eval_loss 0.5, best 0.1")
    # A run naming the location in a namespace the policy does not govern gets none.
    other = _with_result(world, 0.5, as_of_ago=0)
    other["spec"] = {**other["spec"], "scope": {"namespaces": ["elsewhere"]}}
    setup.policies = [other]
    finish(world, job_ran(world, "second", checkpoints="ckpt:/runs"))
    setup.process()
    second = next(r for r in setup.receipts() if r["spec"]["workload"]["name"] == "second")
    assert "result" not in second["spec"]


def test_the_status_entry_carries_the_newest_scan_s_result() -> None:
    from datetime import UTC, datetime

    from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
    from trainwarden.checkpoints.locations import Run, _folded

    at = datetime(2026, 12, 6, tzinfo=UTC)
    said = TrainerResult(metric="loss", final=0.2, step=3, source="HuggingFace checkpoint-3")
    entry = _folded(PrunedLocation(), Run(at, scanned_at=at, result=said), 0)
    assert entry.result == said
    unscanned = _folded(entry, Run(at, error="cannot read"), 0)
    assert unscanned.result == said  # a run that did not look changes nothing it saw
    rescanned = _folded(entry, Run(at, scanned_at=at), 0)
    assert rescanned.result is None  # the newest look found none: none is claimed
