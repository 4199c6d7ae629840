"""Benchmark: planning a checkpoint directory with many entries, as the pruner does it.

Run (no cluster needed):
    .venv/bin/python bench/checkpoint_planning.py [entries ...]      default: 10000 100000

For each size it prints two figures:
- plan: the retention engine alone over that many checkpoints (keepLast, keepEvery,
  keepBest, maxAge, maxTotalSize and the deletion cap all on), with its peak Python memory;
- scan+plan: `trainwarden prune --dry-run` on a real directory of that many Hugging Face
  checkpoints (each a directory with its trainer_state.json and a weights file) in a
  temporary directory, in a fresh process, with the process's peak resident memory. The
  time to create the directory is not counted.
"""

import json
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from trainwarden.core.retention import Best, Checkpoint, Rules, plan

NOW = datetime(2026, 12, 2, tzinfo=UTC)
RULES = Rules(
    keep_last=3,
    keep_every_steps=5000,
    keep_best=Best("eval_loss", "Min", 2),
    max_age=timedelta(days=14),
    max_total_size=2 * 2**40,
    min_age=timedelta(minutes=15),
)
POLICY = {
    "kind": "CheckpointPolicy",
    "spec": {
        "mode": "DryRun",
        "scope": {"namespaces": ["bench"]},
        "storage": {"pvc": {}},
        "layout": {"type": "HuggingFace"},
        "retention": {
            "keepLast": 3,
            "keepEvery": {"steps": 5000},
            "keepBest": {"metric": "eval_loss", "count": 2},
            "maxAge": "14d",
            "maxTotalSize": "2Ti",
            "minAge": "1ms",  # the directory was just made: let the rules decide
        },
        "maxDeletionsPerRun": 10000,
    },
}


def history(n: int) -> list[Checkpoint]:
    rng = random.Random(n)
    return [
        Checkpoint(
            name=f"checkpoint-{100 * i}",
            created=NOW - timedelta(minutes=n - i),
            size=rng.randrange(10**8, 10**9),
            step=100 * i,
            metrics={"eval_loss": rng.random()},
            complete=i < n - 1,
        )
        for i in range(1, n + 1)
    ]


def bench_plan(n: int) -> None:
    checkpoints = history(n)
    started = time.perf_counter()
    decided = plan(checkpoints, RULES, now=NOW, max_deletions=10_000)
    elapsed = time.perf_counter() - started
    tracemalloc.start()  # a second run for memory: tracing slows it down several times
    plan(checkpoints, RULES, now=NOW, max_deletions=10_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"plan       {n:>7} checkpoints: {elapsed:6.2f} s, peak {peak / 2**20:6.1f} MiB "
        f"allocated; {len(decided.delete)} to delete (cap 10000), {len(decided.keep)} kept"
    )


def make_directory(root: Path, n: int) -> None:
    for i in range(1, n + 1):
        step = 100 * i
        ckpt = root / f"checkpoint-{step}"
        ckpt.mkdir()
        state = {"global_step": step, "log_history": [{"step": step, "eval_loss": 1 / i}]}
        (ckpt / "trainer_state.json").write_text(json.dumps(state))
        (ckpt / "model.safetensors").write_bytes(b"\0" * 16)


def bench_scan(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="trainwarden-bench-") as tmp:
        root = Path(tmp) / "out"
        root.mkdir()
        made = time.perf_counter()
        make_directory(root, n)
        made = time.perf_counter() - made
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps(POLICY))
        # The pruner's command in a fresh interpreter that reports its own peak RSS.
        measure = (
            "import resource, sys; from trainwarden.cli import main; code = main(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
            "sys.exit(code)"
        )
        args = ["prune", str(root), "--policy", str(policy), "--dry-run", "-o", "json"]
        command = [sys.executable, "-c", measure, *args]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        elapsed = time.perf_counter() - started
        peak = int(done.stderr.strip().splitlines()[-1]) / 1024
        report = json.loads(done.stdout)
        print(
            f"scan+plan  {n:>7} directories: {elapsed:6.2f} s (process start included), "
            f"peak RSS {peak:6.1f} MiB; scanned {report['scanned']}, would delete "
            f"{report['deletedCount']} (made in {made:.1f} s)"
        )


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 100_000]
    for n in sizes:
        bench_plan(n)
    for n in sizes:
        bench_scan(n)


if __name__ == "__main__":
    main()
