"""What the trainer itself says in what it wrote, in a pruning run: Hugging Face's
best_model_checkpoint, its `loss` meaning `eval_loss`, a keepBest that cannot rank, and
`trainwarden prune -o json` printing the whole plan."""

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwarden.cli import main
from trainwarden.storage.pruning import load_spec, prune


def policy(layout: str, **retention: Any) -> dict[str, Any]:
    return {
        "kind": "CheckpointPolicy",
        "spec": {
            "mode": "Enforce",
            "scope": {"namespaces": ["team"]},
            "storage": {"pvc": {}},
            "layout": {"type": layout},
            "retention": {"minAge": "10m", **retention},
        },
    }


def hf(root: Path, step: int, *, loss: float, eval_loss: float, best: str | None = None) -> None:
    """A checkpoint as the Trainer writes it (training loss and eval loss logged at its
    step; best_model_checkpoint as the Trainer records it, a path under output_dir)."""
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    history = [{"step": step, "loss": loss}, {"step": step, "eval_loss": eval_loss}]
    state: dict[str, Any] = {"global_step": step, "log_history": history}
    if best is not None:
        state |= {"best_model_checkpoint": f"/data/out/{best}", "best_metric": 0.1}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    (ckpt / "model.safetensors").write_bytes(b"\0" * 100)
    stamp = time.time() - 3600 + step  # written in step order, an hour ago
    for path in (*ckpt.iterdir(), ckpt):
        os.utime(path, (stamp, stamp))


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """Training loss falls all along; eval loss is best at step 10 (the issue's setup)."""
    root = tmp_path / "out"
    for step, loss, eval_loss in ((10, 0.9, 0.1), (20, 0.5, 0.3), (30, 0.3, 0.4), (40, 0.1, 0.5)):
        hf(root, step, loss=loss, eval_loss=eval_loss, best="checkpoint-10")
    return root


def decisions(report: Any) -> dict[str, str]:
    return {d.checkpoint.name: d.rule for d in report.decisions}


def test_hugging_faces_best_model_checkpoint_is_never_deleted(trained: Path) -> None:
    # On main nothing read best_model_checkpoint: keepLast 1 deleted checkpoint-10.
    report = prune(
        trained, load_spec(yaml.safe_dump(policy("HuggingFace", keepLast=1))), dry_run=False
    )
    assert decisions(report)["checkpoint-10"] == "TrainerBest"
    assert (trained / "checkpoint-10").is_dir()
    assert sorted(report.deleted) == ["checkpoint-20", "checkpoint-30"]
    (reason,) = [d.reason for d in report.decisions if d.checkpoint.name == "checkpoint-10"]
    assert "best_model_checkpoint (in checkpoint-40)" in reason


def test_only_the_newest_states_name_the_best(tmp_path: Path) -> None:
    root = tmp_path / "out"
    hf(root, 10, loss=0.9, eval_loss=0.1, best="checkpoint-10")
    hf(root, 20, loss=0.5, eval_loss=0.05, best="checkpoint-20")
    hf(root, 30, loss=0.3, eval_loss=0.4, best="checkpoint-20")
    report = prune(root, load_spec(yaml.safe_dump(policy("HuggingFace", keepLast=1))), dry_run=True)
    assert decisions(report) == {
        "checkpoint-10": "NotSelected",  # an old state's word is stale
        "checkpoint-20": "TrainerBest",
        "checkpoint-30": "Newest",
    }


def test_keep_best_loss_means_eval_loss_as_in_hugging_face(tmp_path: Path) -> None:
    # On main keepBest "loss" ranked by the training loss and kept checkpoint-40.
    root = tmp_path / "out"
    for step, loss, eval_loss in ((10, 0.9, 0.1), (20, 0.5, 0.3), (30, 0.3, 0.4), (40, 0.1, 0.5)):
        hf(root, step, loss=loss, eval_loss=eval_loss)  # no metric_for_best_model
    spec = policy("HuggingFace", keepLast=1, keepBest={"metric": "loss"})
    report = prune(root, load_spec(yaml.safe_dump(spec)), dry_run=False)
    assert decisions(report)["checkpoint-10"] == "KeepBest"
    assert sorted(report.deleted) == ["checkpoint-20", "checkpoint-30"]
    assert (
        "keepBest: metric 'loss' is read as 'eval_loss', as Hugging Face's "
        "metric_for_best_model resolves it"
    ) in report.notes


def test_enforce_deletes_nothing_keep_best_cannot_rank(tmp_path: Path) -> None:
    # Lightning's default names carry no metric and this state cannot be read: on main
    # Enforce deleted all but the newest, Lightning's best among them.
    root = tmp_path / "ckpt"
    root.mkdir()
    for i, name in enumerate(
        ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"]
    ):
        (root / name).write_bytes(b"not a torch archive")
        os.utime(root / name, (time.time() - 3600 + i, time.time() - 3600 + i))
    spec = policy("Lightning", keepLast=1, keepBest={"metric": "val_loss"})
    report = prune(root, load_spec(yaml.safe_dump(spec)), dry_run=False)
    assert report.deleted == []
    assert decisions(report) == {
        "epoch=0-step=4.ckpt": "KeepBestUnranked",
        "epoch=1-step=8.ckpt": "KeepBestUnranked",
        "epoch=2-step=12.ckpt": "Newest",
    }
    assert report.notes[0] == (
        "keepBest cannot rank: no checkpoint records the metric 'val_loss'; "
        "the 3 it would judge are kept until one does"
    )
    assert any("epoch=2-step=12.ckpt not read" in n for n in report.notes)


def test_prune_json_is_the_whole_plan(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # On main -o json printed the summary: no checkpoints, at most three notes.
    for step in range(50, 130, 10):
        hf(trained, step, loss=0.1, eval_loss=0.5, best="checkpoint-10")
    spec = policy("HuggingFace", keepLast=1, keepBest={"metric": "loss"}, maxTotalSize="1")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(spec))
    args = ["prune", str(trained), "--policy", str(tmp_path / "policy.yaml"), "--dry-run"]
    assert main([*args, "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = {c["name"]: c for c in plan["checkpoints"]}
    assert len(rows) == 12
    assert rows["checkpoint-10"] == {
        "name": "checkpoint-10",
        "step": 10,
        "complete": True,
        "written": rows["checkpoint-10"]["written"],
        "size": len((trained / "checkpoint-10" / "trainer_state.json").read_bytes()) + 100,
        "metrics": {"loss": 0.9, "eval_loss": 0.1},
        "pinned": False,
        "resumePoint": False,
        "trainerBest": "Hugging Face's best_model_checkpoint (in checkpoint-120)",
        "rule": "TrainerBest",
        "verdict": "KEEP",
        "reason": "the trainer's own best: Hugging Face's best_model_checkpoint "
        "(in checkpoint-120)",
    }
    assert rows["checkpoint-20"]["verdict"] == "WOULD DELETE"
    assert rows["checkpoint-20"]["rule"] == "NotSelected"
    assert plan["deleted"] == [c for c in rows if rows[c]["verdict"] == "WOULD DELETE"]
    assert len(plan["notes"]) == 2
    assert plan["notes"][1].startswith("keepBest: metric 'loss' is read as 'eval_loss'")
