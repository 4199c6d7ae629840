"""Lightning: `*.ckpt` files named by ModelCheckpoint's templates, the callback's own state
inside each (best_model_path, best_k_models, last_model_path), `-vN` names of a run
restarted into the same directory, `save_last` as a copy or a link, and a metric name
with "/" that nests the file in a directory."""

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from models import TRAIN_SLOPE, VALIDATION_SLOPE, Pairs, Slope
from torch.utils.data import DataLoader

from conftest import Prune, policy


class Module(pl.LightningModule):
    def __init__(self, monitor: str = "val_loss") -> None:
        super().__init__()
        self.model = Slope()
        self.monitor = monitor

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss: torch.Tensor = self.model(batch["x"], batch["labels"])["loss"]
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        out = self.model(batch["x"], batch["labels"])
        self.log(self.monitor, out["loss"])
        self.log("val_mae", (out["logits"] - batch["labels"]).abs().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.03)


def loaders() -> tuple[DataLoader[Any], DataLoader[Any]]:
    return (
        DataLoader(Pairs(TRAIN_SLOPE), batch_size=4),
        DataLoader(Pairs(VALIDATION_SLOPE), batch_size=16),
    )


def fit(
    directory: Path,
    epochs: int,
    monitor: str = "val_loss",
    ckpt_path: str | None = None,
    periodic: bool = True,
    **kw: Any,
) -> tuple[pl.Trainer, Module, ModelCheckpoint]:
    """A run with two callbacks into one directory, as is common: the best by `monitor`
    (save_top_k=2 unless told), and (`periodic`) one checkpoint per epoch, default names."""
    callback = ModelCheckpoint(dirpath=directory, monitor=monitor, **{"save_top_k": 2, **kw})
    callbacks = [callback, ModelCheckpoint(dirpath=directory, save_top_k=-1)]
    trainer = pl.Trainer(
        max_epochs=epochs,
        callbacks=callbacks if periodic else callbacks[:1],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        deterministic=True,
    )
    module = Module(monitor)
    trainer.fit(module, *loaders(), ckpt_path=ckpt_path)
    return trainer, module, callback


def relative(path: str, directory: Path) -> str:
    return str(Path(path).relative_to(directory))


def keep_best(metric: str = "val_loss") -> dict[str, Any]:
    return policy("Lightning", keepLast=1, keepBest={"metric": metric})


def asks_lightning(
    directory: Path, trainer: pl.Trainer, module: Module, callback: ModelCheckpoint
) -> None:
    """The library's own answers after pruning: its best loads (`ckpt_path="best"`), and
    training resumes from the newest checkpoint left."""
    best = Path(callback.best_model_path)
    assert best.is_file(), f"Lightning's best {relative(str(best), directory)} was deleted"
    trainer.validate(module, loaders()[1], ckpt_path="best", verbose=False)
    left = sorted(
        (p for p in directory.rglob("*.ckpt") if not p.is_symlink()),
        key=lambda p: p.stat().st_mtime,
    )
    newest = left[-1]
    step = torch.load(newest, weights_only=False)["global_step"]
    resumed, _, _ = fit(
        directory / "resumed",
        trainer.max_epochs + 1,
        callback.monitor or "val_loss",
        ckpt_path=str(newest),
    )
    assert resumed.global_step > step, "training went on from the newest checkpoint left"


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("default names", {}),
        ("metric names", {"filename": "{epoch}-{val_loss:.4f}-{val_mae:.4f}"}),
        ("save_last copy", {"save_last": True}),
        ("save_last link", {"save_last": "link"}),
    ],
)
def test_lightnings_best_survives_pruning(
    tmp_path: Path, prune: Prune, name: str, options: dict[str, Any]
) -> None:
    directory = tmp_path / "ckpt"
    trainer, module, callback = fit(directory, epochs=6, **options)
    newest = max(directory.glob("epoch=*.ckpt"), key=lambda p: p.stat().st_mtime)
    assert Path(callback.best_model_path) != newest, "the setup: the best is not the newest"

    report = prune(directory, keep_best())

    assert report["deleted"], "something was pruned"
    assert not any("time order" in n for n in report["notes"]), "no restart here"
    asks_lightning(directory, trainer, module, callback)
    if options.get("save_last"):
        assert (directory / "last.ckpt").exists()
        trainer.validate(module, loaders()[1], ckpt_path="last", verbose=False)


def test_save_last_as_a_copy_is_no_restart(tmp_path: Path, prune: Prune) -> None:
    # One callback, save_last=True: last.ckpt (no step in its name) is written after the
    # newest; on main every such run got "step order and time order disagree".
    directory = tmp_path / "ckpt"
    trainer, module, _ = fit(directory, epochs=6, periodic=False, save_top_k=3, save_last=True)
    report = prune(directory, policy("Lightning", keepLast=1))
    assert not any("time order" in n for n in report["notes"]), report["notes"]
    assert (directory / "last.ckpt").is_file()
    trainer.validate(module, loaders()[1], ckpt_path="last", verbose=False)
    trainer.validate(module, loaders()[1], ckpt_path="best", verbose=False)


def test_a_run_restarted_into_the_same_directory_keeps_its_best_v1(
    tmp_path: Path, prune: Prune
) -> None:
    directory = tmp_path / "ckpt"
    template = {"filename": "{epoch}-{val_loss:.4f}-{val_mae:.4f}"}
    fit(directory, epochs=6, **template)
    trainer, module, callback = fit(directory, epochs=6, **template)  # from scratch again
    assert Path(callback.best_model_path).stem.endswith("-v1"), "the setup: Lightning's -v1"

    report = prune(directory, keep_best())

    assert report["deleted"]
    asks_lightning(directory, trainer, module, callback)


def test_a_metric_name_with_a_slash_nests_its_file_and_its_best_survives(
    tmp_path: Path, prune: Prune
) -> None:
    directory = tmp_path / "ckpt"
    options = {"filename": "{epoch}-{val/loss:.4f}"}
    trainer, module, callback = fit(directory, epochs=6, monitor="val/loss", **options)
    assert "/" in relative(callback.best_model_path, directory), "the setup: a nested file"

    report = prune(directory, keep_best("val/loss"))

    assert report["deleted"]
    asks_lightning(directory, trainer, module, callback)


def test_the_best_is_the_one_nearest_the_validation_data(tmp_path: Path) -> None:
    """The models' premise, checked once: the best is early, not the newest."""
    _, _, callback = fit(tmp_path / "ckpt", epochs=6, save_top_k=-1)
    best = torch.load(callback.best_model_path, weights_only=False)
    assert abs(float(best["state_dict"]["model.w"]) - VALIDATION_SLOPE) < 0.2
