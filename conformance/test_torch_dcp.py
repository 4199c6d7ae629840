"""torch.distributed.checkpoint: a directory per save, complete once `.metadata` is
written (renamed into place last)."""

import shutil
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from models import TRAIN_SLOPE, Pairs, Slope

from conftest import Prune, policy


def train(model: Slope, optimizer: torch.optim.Optimizer, steps: int) -> None:
    data = Pairs(TRAIN_SLOPE)
    for _ in range(steps):
        optimizer.zero_grad()
        model(data.x, data.y)["loss"].backward()
        optimizer.step()


def test_dcp_checkpoints_are_pruned_and_training_resumes_from_the_newest_left(
    tmp_path: Path, prune: Prune
) -> None:
    directory = tmp_path / "dcp"
    model = Slope()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    for step in (10, 20, 30, 40):
        train(model, optimizer, 10)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        dcp.save(state, checkpoint_id=directory / f"step_{step}")
    # A save killed before its .metadata: incomplete, kept, never taken for the newest.
    shutil.copytree(directory / "step_40", directory / "step_50")
    (directory / "step_50" / ".metadata").unlink()

    report = prune(directory, policy("TorchDCP", keepLast=2))

    assert sorted(report["deleted"]) == ["step_10", "step_20"]
    assert {p.name for p in directory.iterdir()} == {"step_30", "step_40", "step_50"}
    resumed = Slope()
    resumed_optimizer = torch.optim.SGD(resumed.parameters(), lr=0.03)
    state = {"model": resumed.state_dict(), "optimizer": resumed_optimizer.state_dict()}
    dcp.load(state, checkpoint_id=directory / "step_40")
    resumed.load_state_dict(state["model"])
    assert torch.equal(resumed.w, model.w), "the newest complete checkpoint loads"
    train(resumed, resumed_optimizer, 1)
