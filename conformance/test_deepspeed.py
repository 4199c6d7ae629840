"""DeepSpeed: `global_step<N>` tag directories and `latest`, the tag a resume loads (CPU
accelerator, one process, no GPU)."""

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import Prune, policy

os.environ.setdefault("DS_ACCELERATOR", "cpu")
deepspeed = pytest.importorskip("deepspeed")

CONFIG = {"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.03}}}


def engine() -> Any:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29517",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }.items():
        os.environ.setdefault(key, value)
    model = torch.nn.Linear(1, 1, bias=False)
    made, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=CONFIG)
    return made


def train(run: Any, steps: int) -> None:
    x = torch.linspace(-1, 1, 4).unsqueeze(1)
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(run(x), 2 * x)
        run.backward(loss)
        run.step()


def test_deepspeed_tags_are_pruned_and_training_resumes_from_latest(
    tmp_path: Path, prune: Prune
) -> None:
    directory = tmp_path / "ds"
    run = engine()
    for step in (10, 20, 30, 40):
        train(run, 10)
        run.save_checkpoint(str(directory), tag=f"global_step{step}")
    assert (directory / "latest").read_text().strip() == "global_step40"

    report = prune(directory, policy("DeepSpeed", keepLast=2))

    assert sorted(report["deleted"]) == ["global_step10", "global_step20"]
    resumed = engine()
    path, _ = resumed.load_checkpoint(str(directory))  # the tag `latest` names
    assert path is not None, "DeepSpeed found its latest"
    assert resumed.global_steps == run.global_steps
    train(resumed, 1)
