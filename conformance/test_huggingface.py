"""Hugging Face Trainer: checkpoint-<step> directories, trainer_state.json, and the
Trainer's own best (`metric_for_best_model`, `load_best_model_at_end`)."""

import json
import shutil
from pathlib import Path

import pytest
from models import TRAIN_SLOPE, VALIDATION_SLOPE, Pairs, Slope
from safetensors.torch import load_file
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from conftest import Prune, policy


def arguments(output: Path, max_steps: int) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(output),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=16,
        learning_rate=0.05,
        optim="sgd",
        lr_scheduler_type="constant",
        eval_strategy="steps",
        eval_steps=5,
        save_strategy="steps",
        save_steps=5,
        logging_steps=5,
        metric_for_best_model="loss",  # the Trainer reads it as eval_loss
        greater_is_better=False,
        load_best_model_at_end=True,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )


def trainer(output: Path, max_steps: int) -> Trainer:
    return Trainer(
        model=Slope(),
        args=arguments(output, max_steps),
        train_dataset=Pairs(TRAIN_SLOPE),
        eval_dataset=Pairs(VALIDATION_SLOPE),
    )


def state(checkpoint: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((checkpoint / "trainer_state.json").read_text())
    return loaded


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("hf") / "out"
    trainer(output, max_steps=40).train()
    return output


def test_the_trainers_best_survives_and_training_resumes(
    tmp_path: Path, trained: Path, prune: Prune
) -> None:
    output = tmp_path / "out"
    shutil.copytree(trained, output)  # times kept
    newest = Path(get_last_checkpoint(str(output)))
    best = Path(str(state(newest)["best_model_checkpoint"])).name
    assert best != newest.name, "the setup: the Trainer's best is not its newest checkpoint"

    # keepBest by "loss", as the Trainer's own metric_for_best_model spells it.
    report = prune(output, policy("HuggingFace", keepLast=1, keepBest={"metric": "loss"}))

    assert (output / best).is_dir(), f"the Trainer's best {best} was deleted: {report}"
    assert report["deleted"], "something was pruned"
    assert not any("time order" in n for n in report["notes"]), "no restart here"
    weights = load_file(str(output / best / "model.safetensors"))
    model = Slope()
    model.load_state_dict(weights)
    assert abs(float(model.w) - VALIDATION_SLOPE) < 0.2, "the best is the one nearest 0.5x"

    resumed = trainer(output, max_steps=50)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 50
    assert Path(str(resumed.state.best_model_checkpoint)).is_dir(), "load_best_model_at_end"


def test_a_checkpoint_cut_short_is_kept_and_not_taken_for_the_newest(
    tmp_path: Path, trained: Path, prune: Prune
) -> None:
    output = tmp_path / "out"
    output.mkdir()
    for name in ("checkpoint-35", "checkpoint-40"):
        shutil.copytree(trained / name, output / name)
    (output / "checkpoint-40" / "trainer_state.json").unlink()  # killed mid-save
    report = prune(output, policy("HuggingFace", keepLast=1))
    assert (output / "checkpoint-40").is_dir()
    assert (output / "checkpoint-35").is_dir()
    assert report["deleted"] == []
