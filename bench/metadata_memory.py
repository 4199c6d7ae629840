"""Benchmark: peak memory of a pruning run as tenants make its metadata large.

Run (no cluster needed):
    .venv/bin/python bench/metadata_memory.py [checkpoints]          default: 3

Tenants write the trainer_state.json files a pruning run reads. For each kind of state
below it prints the peak resident memory of a fresh process running
- `trainwarden prune --dry-run` on a directory of that many Hugging Face checkpoints, and
- the operator's S3 path (`storage.objects.prune_prefix`, the sparse mirror and its
  on-demand metadata fetches) over the same checkpoints listed by an in-memory bucket,
against the reference measured in the same run: checkpoints whose state holds one entry.
The states: the largest allowed (storage/metadata.py METADATA_LIMIT) as Hugging Face
writes it, the largest allowed in the shape that costs most memory per byte (a list of
empty objects), and one of 64 MiB (over the limit, so never read: sparse on disk, never
fetched from the bucket).
"""

import json
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from trainwarden.storage.metadata import METADATA_LIMIT

KINDS = {
    "reference": "an empty checkpoint (a state of one entry)",
    "huggingface": "the largest allowed Hugging Face state",
    "worst": "the largest allowed state, empty objects",
    "over": "a 64 MiB state (over the limit)",
}
OVER = 64 * 2**20
POLICY = {
    "kind": "CheckpointPolicy",
    "spec": {
        "mode": "DryRun",
        "scope": {"namespaces": ["bench"]},
        "storage": {
            "s3": {
                "endpoint": "http://s3",
                "bucket": "bench",
                "prefix": "runs/a",
                "credentials": {"namespace": "bench", "name": "keys"},
            }
        },
        "layout": {"type": "HuggingFace"},
        "retention": {"keepLast": 1, "keepBest": {"metric": "eval_loss"}, "minAge": "1ms"},
    },
}
WRITTEN = datetime(2026, 12, 1, tzinfo=UTC)


def _largest(head: bytes, item: bytes, tail: bytes) -> bytes:
    """`head` + as many comma-separated `item`s as fit the limit + `tail`."""
    count = (METADATA_LIMIT - len(head) - len(tail) + 1) // (len(item) + 1)
    return head + item + (b"," + item) * (count - 1) + tail  # no list of `count` parts


def state(kind: str, step: int) -> bytes:
    """The trainer_state.json of `kind` (not for "over", which is never read)."""
    last = {"step": step, "eval_loss": 0.5}
    if kind == "reference":
        return json.dumps({"global_step": step, "log_history": [last]}).encode()
    head = f'{{"global_step": {step}, "log_history": ['.encode()
    tail = f",{json.dumps(last)}]}}".encode()
    if kind == "worst":
        return _largest(head, b"{}", tail)
    entry = {"epoch": 0.05, "grad_norm": 1.2345678, "learning_rate": 4.9e-05, "loss": 2.3456}
    text = json.dumps({**entry, "step": 10}, indent=2).replace("\n", "\n    ").encode()
    return _largest(head, b"\n    " + text, tail)


def size(kind: str) -> int:
    return OVER if kind == "over" else len(state(kind, 100))


def make_directory(root: Path, kind: str, count: int) -> None:
    for i in range(1, count + 1):
        ckpt = root / f"checkpoint-{100 * i}"
        ckpt.mkdir(parents=True)
        with open(ckpt / "trainer_state.json", "wb") as file:
            if kind == "over":
                file.truncate(OVER)  # sparse: the size a reader would see, no disk
            else:
                file.write(state(kind, 100 * i))
        (ckpt / "model.safetensors").write_bytes(b"\0" * 16)


class Bucket:
    """An S3 listing of the same checkpoints; bodies made when fetched, never stored."""

    def __init__(self, kind: str, count: int) -> None:
        self.kind, self.count = kind, count
        self.size = size(kind)

    def objects(self, prefix: str) -> Iterator[object]:
        from trainwarden.storage.s3_prefix import Object

        for i in range(1, self.count + 1):
            base = f"runs/a/checkpoint-{100 * i}/"
            if not (base.startswith(prefix) or prefix.startswith(base.rstrip("/"))):
                continue
            yield Object(f"{base}model.safetensors", 10**9, WRITTEN)
            yield Object(f"{base}trainer_state.json", self.size, WRITTEN)

    def read(self, key: str, limit: int) -> bytes:
        if self.kind == "over":
            raise AssertionError("a state over the limit must never be fetched")
        step = int(key.split("/")[2].removeprefix("checkpoint-"))
        return state(self.kind, step)[: limit + 1]

    def delete(self, keys: list[str]) -> list[str]:
        raise AssertionError("DryRun")

    def write(self, key: str, body: bytes) -> None:
        raise AssertionError("DryRun")


def child(path: str, kind: str, count: int) -> None:
    """In a fresh process: one run over the directory (path) or the bucket (path "s3")."""
    from trainwarden.cli import main
    from trainwarden.storage.pruning import load_spec
    from trainwarden.storage.s3_prefix import prune_prefix

    spec = load_spec(json.dumps(POLICY))
    if path == "s3":
        report = prune_prefix(
            Bucket(kind, count),
            "runs/a",
            spec,
            dry_run=True,
            policy="bench",
            clock=lambda: WRITTEN + timedelta(days=1),
        )
        assert report.error is None, report.error
        assert report.scanned == count, report
    else:
        policy = Path(path).parent / "policy.json"
        policy.write_text(json.dumps(POLICY))
        argv = ["prune", path, "--policy", str(policy), "--dry-run", "-o", "json"]
        with open("/dev/null", "w") as quiet:
            sys.stdout = quiet
            assert main(argv) == 0
    print(_high_water_kib(), file=sys.stderr)


def _high_water_kib() -> int:
    """This process's peak resident memory since it started its program (VmHWM: unlike
    ru_maxrss, it does not carry over the parent's memory from before the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak(path: str, kind: str, count: int) -> float:
    """Peak RSS (MiB) of the child process."""
    command = [sys.executable, __file__, "--child", path, kind, str(count)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"{count} Hugging Face checkpoints; metadata limit {METADATA_LIMIT} bytes")
    print(f"{'trainer_state.json of each':<46} {'bytes':>10} {'CLI MiB':>12} {'S3 MiB':>12}")
    reference: tuple[float, float] | None = None
    for kind, said in KINDS.items():
        with tempfile.TemporaryDirectory(prefix="trainwarden-bench-") as tmp:
            root = Path(tmp) / "out"
            make_directory(root, kind, count)
            cli, s3 = peak(str(root), kind, count), peak("s3", kind, count)
        reference = reference or (cli, s3)
        delta = ""
        if kind != "reference":
            more = (cli - reference[0], s3 - reference[1])
            delta = f"  ({more[0]:+.1f} / {more[1]:+.1f} over the reference)"
        print(f"{said:<46} {size(kind):>10} {cli:>12.1f} {s3:>12.1f}{delta}")


if __name__ == "__main__":
    main()
