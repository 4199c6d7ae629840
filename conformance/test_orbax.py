"""Orbax: a directory per step with `commit_success.txt` and `metrics/metrics`, and the
CheckpointManager's own best (`best_fn` over those metrics) and latest step."""

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import Prune, policy

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ocp = pytest.importorskip("orbax.checkpoint")

LOSSES = {10: 0.5, 20: 0.1, 30: 0.3, 40: 0.4}


def manager(directory: Path) -> "ocp.CheckpointManager":
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None, best_fn=lambda m: m["eval_loss"], best_mode="min", create=True
    )
    return ocp.CheckpointManager(directory, options=options)


def test_orbax_keeps_its_best_and_latest_and_both_restore(tmp_path: Path, prune: Prune) -> None:
    directory = tmp_path / "orbax"
    with manager(directory) as saving:
        for step, loss in LOSSES.items():
            state = {"w": np.array([step / 10.0])}
            saving.save(step, args=ocp.args.StandardSave(state), metrics={"eval_loss": loss})
        saving.wait_until_finished()

    spec = policy("Orbax", keepLast=1, keepBest={"metric": "eval_loss", "order": "Min"})
    report = prune(directory, spec)

    assert sorted(report["deleted"]) == ["10", "30"]
    with manager(directory) as reading:
        assert (reading.best_step(), reading.latest_step()) == (20, 40)
        for step in (20, 40):
            restored = reading.restore(step, args=ocp.args.StandardRestore())
            assert float(restored["w"][0]) == step / 10.0
