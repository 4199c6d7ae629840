"""`trainwarden demo-trainer`: Hugging Face checkpoint layout, atomic saves, SIGTERM, resume."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from trainwarden import demo_trainer
from trainwarden.cli import main
from trainwarden.demo_trainer import Config, latest_checkpoint, train

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def steps(output_dir: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1]) for p in output_dir.iterdir() if p.name.startswith("checkpoint-")
    )


def state_of(checkpoint: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((checkpoint / "trainer_state.json").read_text())
    return loaded


def run_trainer(tmp_path: Path, *args: str) -> int:
    return main(["demo-trainer", "--output-dir", str(tmp_path), "--epoch-seconds", "0", *args])


def test_writes_checkpoints_in_the_hugging_face_layout(tmp_path: Path) -> None:
    assert run_trainer(tmp_path, "--steps-per-epoch", "5", "--max-steps", "12") == 0

    assert steps(tmp_path) == [5, 10, 12]  # every epoch, and a final one
    last = tmp_path / "checkpoint-12"
    state = state_of(last)
    assert state["global_step"] == 12
    history = state["log_history"]
    assert isinstance(history, list)
    evals = [e["eval_loss"] for e in history if "eval_loss" in e]
    assert [e["step"] for e in history if "eval_loss" in e] == [5, 10, 12]
    assert evals == sorted(evals, reverse=True), "the model learns: eval loss goes down"
    assert state["best_metric"] == evals[-1]
    assert state["best_model_checkpoint"] == str(last)
    assert [e["step"] for e in history if "loss" in e] == [5, 10]
    tensors = demo_trainer.read_safetensors(last / "model.safetensors")
    assert len(tensors["linear.weight"]) == demo_trainer.DIM
    assert len(tensors["linear.bias"]) == 1


def test_resumes_where_it_stopped_and_sees_the_same_data(tmp_path: Path) -> None:
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert run_trainer(straight, "--steps-per-epoch", "4", "--max-steps", "20") == 0
    assert run_trainer(interrupted, "--steps-per-epoch", "4", "--max-steps", "8") == 0
    assert run_trainer(interrupted, "--steps-per-epoch", "4", "--max-steps", "20") == 0

    assert steps(interrupted) == [4, 8, 12, 16, 20]
    a = state_of(straight / "checkpoint-20")
    b = state_of(interrupted / "checkpoint-20")
    assert a["log_history"] == b["log_history"]  # history carried over, same numbers
    assert demo_trainer.read_safetensors(
        straight / "checkpoint-20" / "model.safetensors"
    ) == demo_trainer.read_safetensors(interrupted / "checkpoint-20" / "model.safetensors")


def test_half_written_checkpoints_are_never_resumed_from(tmp_path: Path) -> None:
    assert run_trainer(tmp_path, "--steps-per-epoch", "3", "--max-steps", "6") == 0
    (tmp_path / "checkpoint-900").mkdir()  # crashed before anything was written
    broken = tmp_path / "checkpoint-950"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"")
    (broken / "trainer_state.json").write_text('{"global_st')  # torn write
    (tmp_path / ".tmp-checkpoint-999-1").mkdir()  # an interrupted atomic save

    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-6"
    assert run_trainer(tmp_path, "--steps-per-epoch", "3", "--max-steps", "9") == 0
    assert state_of(tmp_path / "checkpoint-9")["global_step"] == 9
    assert not (tmp_path / ".tmp-checkpoint-999-1").exists(), "leftovers are cleaned up"


def test_stop_writes_a_final_checkpoint_at_the_step_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[dict[str, object]] = []
    monkeypatch.setattr(demo_trainer, "_say", lambda event, **fields: said.append(fields))
    stop = threading.Event()
    # 0.2 s a step, an epoch (and a checkpoint) every 10 steps
    config = Config(output_dir=tmp_path, steps_per_epoch=10, epoch_seconds=2.0)
    worker = threading.Thread(target=train, args=(config, stop))
    worker.start()
    wait_for(lambda: latest_checkpoint(tmp_path), timeout=10, what="a first checkpoint")
    started = time.monotonic()
    wait_for(lambda: time.monotonic() - started > 0.5, timeout=5, what="a few more steps")
    stop.set()
    worker.join(timeout=10)
    assert not worker.is_alive()

    last = latest_checkpoint(tmp_path)
    assert last is not None
    reached = said[-1]["step"]
    assert state_of(last)["global_step"] == reached
    assert steps(tmp_path) == [10, reached], "saved where it stopped, not at the last epoch"


def test_sigterm_final_checkpoint_exit_0_and_resume(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "trainwarden",
        "demo-trainer",
        "--output-dir",
        str(tmp_path),
        "--steps-per-epoch",
        "5",
        "--epoch-seconds",
        "1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    wait_for(lambda: latest_checkpoint(tmp_path), timeout=20, what="a first checkpoint")
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=20)
    assert first.returncode == 0, out
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["event"] == "stopped"
    reached = events[-1]["step"]
    assert steps(tmp_path)[-1] == reached
    assert state_of(tmp_path / f"checkpoint-{reached}")["global_step"] == reached

    second = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert second.stdout is not None
    resumed = json.loads(second.stdout.readline())
    assert resumed == {
        "event": "resumed",
        "step": reached,
        "checkpoint": str(tmp_path / f"checkpoint-{reached}"),
    }
    wait_for(lambda: steps(tmp_path)[-1] > reached, timeout=20, what="progress after resume")
    second.send_signal(signal.SIGTERM)
    second.communicate(timeout=20)
    assert second.returncode == 0
    after = state_of(tmp_path / f"checkpoint-{steps(tmp_path)[-1]}")
    history = after["log_history"]
    assert isinstance(history, list)
    eval_steps = [e["step"] for e in history if "eval_loss" in e]
    assert reached in eval_steps, "the first run's history is kept"
    assert eval_steps == sorted(eval_steps), "no step was trained twice"


def test_rejects_a_zero_epoch_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_trainer(tmp_path, "--steps-per-epoch", "0")
    assert "must be at least 1" in capsys.readouterr().err
