"""`trainwarden demo-trainer`: a small, real training program for demos and e2e tests.

It fits a linear regression by minibatch SGD in plain Python (no NumPy, no GPU), paced so
that an epoch takes a few seconds, and checkpoints the way the Hugging Face Trainer does:

    <output-dir>/checkpoint-<step>/trainer_state.json   global_step, epoch, best_metric,
                                                        best_model_checkpoint, log_history
                                                        (train loss and eval_loss entries)
    <output-dir>/checkpoint-<step>/model.safetensors    the weights (safetensors, F64)

A checkpoint is written into a hidden temporary directory and renamed into place, so a
`checkpoint-<step>` directory is always complete; leftovers of an interrupted write are
ignored and removed on the next start. On SIGTERM (or SIGINT) it finishes the current step,
writes a final checkpoint and exits 0: that is what a suspended Job's pod gets. On start it
resumes from the latest complete checkpoint (weights, step and log history), like
`Trainer.train(resume_from_checkpoint=True)`. Batches are derived from the step number, so
a resumed run sees exactly the data an uninterrupted one would.

Only the standard library: it is imported by the `trainwarden` command on every start.
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.json"
MODEL_FILE = "model.safetensors"
TMP_PREFIX = ".tmp-checkpoint-"
DIM = 16  # features of the synthetic regression problem
EVAL_SAMPLES = 256
NOISE = 0.1


@dataclass(frozen=True)
class Config:
    output_dir: Path
    steps_per_epoch: int = 10
    epoch_seconds: float = 3.0
    save_steps: int = 0  # 0: once per epoch
    max_steps: int = 0  # 0: until stopped
    batch_size: int = 32
    learning_rate: float = 0.05
    seed: int = 0

    @property
    def every(self) -> int:
        return self.save_steps or self.steps_per_epoch


@dataclass
class State:
    step: int = 0
    weights: list[float] = field(default_factory=lambda: [0.0] * (DIM + 1))  # last one: bias
    log_history: list[dict[str, Any]] = field(default_factory=list)
    best_metric: float | None = None
    best_model_checkpoint: str | None = None


# --- the problem: y = <w*, x> + b* + noise, w* fixed by the seed -----------------------------


def _true_weights(seed: int) -> list[float]:
    rng = random.Random(f"weights-{seed}")  # noqa: S311 (synthetic data, not crypto)
    return [rng.uniform(-1, 1) for _ in range(DIM + 1)]


def _sample(rng: random.Random, truth: list[float]) -> tuple[list[float], float]:
    x = [rng.gauss(0, 1) for _ in range(DIM)]
    y = sum(w * v for w, v in zip(truth, x, strict=False)) + truth[DIM] + rng.gauss(0, NOISE)
    return x, y


def _batch(config: Config, step: int, truth: list[float]) -> list[tuple[list[float], float]]:
    rng = random.Random(f"batch-{config.seed}-{step}")  # noqa: S311
    return [_sample(rng, truth) for _ in range(config.batch_size)]


def _eval_set(config: Config, truth: list[float]) -> list[tuple[list[float], float]]:
    rng = random.Random(f"eval-{config.seed}")  # noqa: S311
    return [_sample(rng, truth) for _ in range(EVAL_SAMPLES)]


def _predict(weights: list[float], x: list[float]) -> float:
    return sum(w * v for w, v in zip(weights, x, strict=False)) + weights[DIM]


def mse(weights: list[float], data: list[tuple[list[float], float]]) -> float:
    return sum((_predict(weights, x) - y) ** 2 for x, y in data) / len(data)


def sgd_step(weights: list[float], batch: list[tuple[list[float], float]], lr: float) -> float:
    """One SGD update in place; returns the batch loss before it."""
    grad = [0.0] * (DIM + 1)
    loss = 0.0
    for x, y in batch:
        err = _predict(weights, x) - y
        loss += err * err
        for i in range(DIM):
            grad[i] += 2 * err * x[i]
        grad[DIM] += 2 * err
    n = len(batch)
    for i in range(DIM + 1):
        weights[i] -= lr * grad[i] / n
    return loss / n


# --- checkpoints -----------------------------------------------------------------------------


def write_safetensors(path: Path, tensors: dict[str, list[float]]) -> None:
    """A safetensors file: u64 header length, JSON header, then little-endian F64 data.

    F64, not F32: a resumed run then continues from exactly the weights it stopped with.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    data = bytearray()
    for name, values in tensors.items():
        start = len(data)
        data += struct.pack(f"<{len(values)}d", *values)
        header[name] = {"dtype": "F64", "shape": [len(values)], "data_offsets": [start, len(data)]}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + bytes(data))
        f.flush()
        os.fsync(f.fileno())


def read_safetensors(path: Path) -> dict[str, list[float]]:
    blob = path.read_bytes()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    body = blob[8 + size :]
    tensors: dict[str, list[float]] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F64":
            raise ValueError(f"{path}: tensor {name} is {meta['dtype']}, not F64")
        start, end = meta["data_offsets"]
        tensors[name] = list(struct.unpack(f"<{(end - start) // 8}d", body[start:end]))
    return tensors


def _write_json(path: Path, value: object) -> None:
    with path.open("w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint_step(path: Path) -> int | None:
    """The step of a complete checkpoint directory, or None (not one, or half-written)."""
    match = CHECKPOINT.match(path.name)
    if not match or not (path / MODEL_FILE).is_file():
        return None
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    step = state.get("global_step") if isinstance(state, dict) else None
    return step if isinstance(step, int) and step == int(match.group(1)) else None


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step (Hugging Face's get_last_checkpoint)."""
    if not output_dir.is_dir():
        return None
    found = [(s, p) for p in output_dir.iterdir() if (s := checkpoint_step(p)) is not None]
    return max(found)[1] if found else None


def save_checkpoint(config: Config, state: State, epoch: float) -> Path:
    """Write checkpoint-<step> atomically: a temporary directory, then one rename."""
    final = config.output_dir / f"checkpoint-{state.step}"
    if checkpoint_step(final) is not None:
        return final  # this step is already saved (e.g. SIGTERM right after a save)
    tmp = config.output_dir / f"{TMP_PREFIX}{state.step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_safetensors(
        tmp / MODEL_FILE, {"linear.weight": state.weights[:DIM], "linear.bias": state.weights[DIM:]}
    )
    trainer_state = {
        "global_step": state.step,
        "epoch": epoch,
        "max_steps": config.max_steps,
        "num_train_epochs": math.ceil(config.max_steps / config.steps_per_epoch)
        if config.max_steps
        else 0,
        "save_steps": config.every,
        "logging_steps": config.steps_per_epoch,
        "eval_steps": config.every,
        "train_batch_size": config.batch_size,
        "best_metric": state.best_metric,
        "best_model_checkpoint": state.best_model_checkpoint,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "is_hyper_param_search": False,
        "trial_name": None,
        "log_history": state.log_history,
    }
    _write_json(tmp / STATE_FILE, trainer_state)
    _fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)  # an incomplete one with the same name
    tmp.rename(final)
    _fsync_dir(config.output_dir)
    return final


def load_checkpoint(path: Path) -> State:
    saved = json.loads((path / STATE_FILE).read_text())
    tensors = read_safetensors(path / MODEL_FILE)
    return State(
        step=saved["global_step"],
        weights=tensors["linear.weight"] + tensors["linear.bias"],
        log_history=list(saved.get("log_history", [])),
        best_metric=saved.get("best_metric"),
        best_model_checkpoint=saved.get("best_model_checkpoint"),
    )


def _clean_leftovers(output_dir: Path) -> None:
    for path in output_dir.iterdir():
        if path.name.startswith(TMP_PREFIX) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


# --- the loop --------------------------------------------------------------------------------


def _say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def train(config: Config, stop: threading.Event) -> State:
    """Train until max_steps or until `stop` is set; checkpoint on the way and at the end."""
    config.output_dir.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(config.output_dir)
    truth = _true_weights(config.seed)
    eval_set = _eval_set(config, truth)
    resume_from = latest_checkpoint(config.output_dir)
    if resume_from is not None:
        state = load_checkpoint(resume_from)
        _say("resumed", step=state.step, checkpoint=str(resume_from))
    else:
        state = State()
        _say("started", step=0, output_dir=str(config.output_dir))
    step_seconds = config.epoch_seconds / config.steps_per_epoch
    last_saved = state.step if resume_from is not None else -1

    def checkpoint() -> None:
        nonlocal last_saved
        epoch = round(state.step / config.steps_per_epoch, 4)
        eval_loss = mse(state.weights, eval_set)
        name = f"checkpoint-{state.step}"
        if state.best_metric is None or eval_loss < state.best_metric:
            state.best_metric = eval_loss
            state.best_model_checkpoint = str(config.output_dir / name)
        state.log_history.append({"eval_loss": eval_loss, "epoch": epoch, "step": state.step})
        path = save_checkpoint(config, state, epoch)
        last_saved = state.step
        _say("checkpoint", step=state.step, eval_loss=eval_loss, path=str(path))

    next_tick = time.monotonic()
    while not stop.is_set() and not (config.max_steps and state.step >= config.max_steps):
        loss = sgd_step(state.weights, _batch(config, state.step, truth), config.learning_rate)
        state.step += 1
        if state.step % config.steps_per_epoch == 0:
            epoch = round(state.step / config.steps_per_epoch, 4)
            entry = {"loss": loss, "learning_rate": config.learning_rate, "epoch": epoch}
            state.log_history.append({**entry, "step": state.step})
            _say("epoch", step=state.step, epoch=epoch, loss=loss)
        if state.step % config.every == 0:
            checkpoint()
        next_tick += step_seconds
        stop.wait(max(0.0, next_tick - time.monotonic()))
    if state.step != last_saved:
        checkpoint()
    _say("stopped" if stop.is_set() else "finished", step=state.step)
    return state


def _run(args: argparse.Namespace) -> int:
    config = Config(
        output_dir=Path(args.output_dir),
        steps_per_epoch=args.steps_per_epoch,
        epoch_seconds=args.epoch_seconds,
        save_steps=args.save_steps,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        _say("signal", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    train(config, stop)
    return 0


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `demo-trainer` on the `trainwarden` command."""
    p = sub.add_parser(
        "demo-trainer",
        help="a small real training program that checkpoints like the Hugging Face Trainer",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    env = os.environ.get
    p.add_argument(
        "--output-dir",
        default=env("TRAINWARDEN_DEMO_OUTPUT_DIR", "/data/checkpoints"),
        help="where checkpoint-<step>/ directories go (a PVC mount)",
    )
    p.add_argument("--steps-per-epoch", type=_positive_int, default=10)
    p.add_argument("--epoch-seconds", type=float, default=3.0, help="pacing of one epoch")
    p.add_argument("--save-steps", type=int, default=0, help="default: once per epoch")
    p.add_argument("--max-steps", type=int, default=0, help="default: until stopped")
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_run)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
