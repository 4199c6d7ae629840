"""An object listing laid out as a sparse tree is judged exactly as the directory it came
from: built here the way each trainer writes, listed as S3 would list it, compared."""

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from test_layouts import files, hf_state
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec, Layout
from trainwarden.storage import layouts, metadata
from trainwarden.storage.s3_prefix import AUDIT, Object, mirror, normalize_prefix, prune_prefix


def listing(root: Path, prefix: str) -> tuple[list[Object], dict[str, bytes]]:
    """What ListObjectsV2 would say of `root` uploaded under `prefix` (second precision, as
    S3's LastModified), and the bodies a GetObject would return."""
    objects, bodies = [], {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            key = prefix + path.relative_to(root).as_posix()
            modified = datetime.fromtimestamp(int(path.stat().st_mtime), UTC)
            objects.append(Object(key, path.stat().st_size, modified, etag=f'"{key}"'))
            bodies[key] = path.read_bytes()
    return sorted(objects, key=lambda o: o.key), bodies


def judged(
    root: Path, layout: Layout, read: layouts.Reader | None = None
) -> dict[str, tuple[object, ...]]:
    return {
        c.name: (c.step, c.complete, c.size, c.metrics, c.pinned, c.resume_point, c.created)
        for c in layouts.scan_directory(root, layout, read).checkpoints
    }


TREES: dict[str, dict[str, object]] = {
    "HuggingFace": {
        "checkpoint-500": {
            "model.safetensors": b"\0" * 1000,
            "trainer_state.json": hf_state(500, 0.4),
        },
        "checkpoint-1000": {"model.safetensors": b"\0" * 1000},
        "checkpoint-700": {"trainer_state.json": hf_state(700, 0.3), "x": b"1"},
        f"checkpoint-700{layouts.PIN_MARKER}": "",
    },
    "DeepSpeed": {
        "latest": "global_step20",
        "global_step10": {"mp_rank_00_model_states.pt": b"\0" * 50},
        "global_step20": {"mp_rank_00_model_states.pt": b"\0" * 50},
        "global_step30": {"zero_pp_rank_0_optim_states.pt": b"\0" * 50},
    },
    "Lightning": {"epoch=1-step=100-val_loss=0.5.ckpt": b"\0" * 30, "last.ckpt": b"\0" * 30},
    "Orbax": {
        "100": {
            "commit_success.txt": "",
            "default": {"a": b"1"},
            "metrics": {"metrics": '{"loss": 0.2}'},
        },
        "200": {"default": {"a": b"1"}},
        "300.orbax-checkpoint-tmp-1": {"default": {"a": b"1"}},
    },
    "TorchDCP": {
        "step_10": {".metadata": b"m", "__0_0.distcp": b"\0" * 9},
        "step_20": {"__0_0.distcp": b"\0" * 9},
    },
}
TREES["Glob"] = {"ckpt-7": {"w": b"\0" * 5}, "ckpt-8.bin": b"\0" * 3, "notes.txt": "x"}
LAYOUTS = {kind: Layout(type=kind) for kind in TREES if kind != "Glob"}  # type: ignore[arg-type]
LAYOUTS["Glob"] = Layout(type="Glob", glob="ckpt-*", step_pattern=r"ckpt-(\d+)")


@pytest.mark.parametrize("kind", sorted(TREES))
def test_a_mirrored_listing_is_judged_like_the_directory(tmp_path: Path, kind: str) -> None:
    source = tmp_path / "source"
    files(source, TREES[kind])  # type: ignore[arg-type]
    for path in sorted(source.rglob("*"), reverse=True):  # whole seconds, as S3 keeps them
        stamp = int(path.stat().st_mtime)
        os.utime(path, (stamp, stamp))
    objects, bodies = listing(source, "runs/a/")
    read: list[str] = []

    def get(key: str, limit: int) -> bytes:
        read.append(key)
        return bodies[key][: limit + 1]

    tree = mirror(objects, "runs/a/", tmp_path / "mirror", get)
    layout = LAYOUTS[kind]
    original, mirrored = judged(source, layout), judged(tree.root, layout, tree.read)
    assert original, "the tree holds checkpoints of this layout"
    assert mirrored == original, "the same checkpoints, steps, sizes, metrics and times"
    assert all(Path(k).name in ("trainer_state.json", "latest", "metrics") for k in read), (
        f"only metadata is downloaded, never weights: {read}"
    )
    assert (tmp_path / "mirror").stat().st_blocks < 64, "no data is written"


def test_unsafe_keys_and_conflicts_are_skipped_and_said(tmp_path: Path) -> None:
    when = datetime(2026, 12, 1, tzinfo=UTC)
    objects = [
        Object("p/checkpoint-1/../../etc/passwd", 1, when),
        Object("p/checkpoint-2//x", 1, when),
        Object("p/checkpoint-3", 1, when),
        Object("p/checkpoint-3/trainer_state.json", 1, when),
        Object(f"p/{AUDIT}", 10, when),
        Object("p/checkpoint-4/", 0, when),
    ]
    tree = mirror(objects, "p/", tmp_path, lambda key, limit: b"{}")
    assert sorted(tree.objects) == ["checkpoint-3", "checkpoint-4"]
    assert len(tree.skipped) == 3
    assert not (tmp_path.parent / "etc").exists()
    assert (tmp_path / "checkpoint-4").is_dir()


def test_members_are_the_entry_and_its_pin_not_a_longer_name(tmp_path: Path) -> None:
    when = datetime(2026, 12, 1, tzinfo=UTC)
    keys = ["checkpoint-10/a", "checkpoint-100/a", f"checkpoint-10{layouts.PIN_MARKER}"]
    tree = mirror([Object(k, 1, when) for k in keys], "", tmp_path, lambda key, limit: b"")
    assert sorted(tree.members("checkpoint-10")) == sorted([keys[0], keys[2]])


@pytest.mark.parametrize(
    ("given", "expected"),
    [("", ""), ("/", ""), ("runs/a", "runs/a/"), ("/runs//a/", "runs/a/")],
)
def test_prefixes_are_normalized(given: str, expected: str) -> None:
    assert normalize_prefix(given) == expected


def test_only_the_files_a_layout_reads_are_fetched_and_never_past_the_limit(
    tmp_path: Path,
) -> None:
    """A state file where Hugging Face never writes one (deeper, or beside the checkpoints)
    is never downloaded; one over the limit is not downloaded either, and its checkpoint
    is held; what grew since the listing is cut at the limit."""
    when = datetime(2026, 12, 1, tzinfo=UTC)
    state = hf_state(1, 0.5).encode()
    limit = metadata.METADATA_LIMIT
    objects = [
        Object("p/checkpoint-1/trainer_state.json", len(state), when),
        Object("p/checkpoint-1/sub/trainer_state.json", 10, when),
        Object("p/trainer_state.json", 10, when),
        Object("p/checkpoint-2/trainer_state.json", limit + 1, when),
        Object("p/checkpoint-3/trainer_state.json", 10, when),
        Object("p/checkpoint-4/trainer_state.json", 0, when),
    ]
    fetched: list[tuple[str, int]] = []

    def fetch(key: str, at_most: int) -> bytes:
        fetched.append((key, at_most))
        return state if key.startswith("p/checkpoint-1/") else b"{" * (at_most + 1)

    tree = mirror(objects, "p/", tmp_path, fetch)
    got = {
        c.name: c
        for c in layouts.scan_directory(tmp_path, LAYOUTS["HuggingFace"], tree.read).checkpoints
    }
    assert fetched == [
        ("p/checkpoint-1/trainer_state.json", limit),
        ("p/checkpoint-3/trainer_state.json", limit),
    ]
    assert got["checkpoint-1"].metrics == {
        "eval_loss": 0.5,
        "loss": 1.2,
        "grad_norm": 1.5,
        "eval_runtime": 3.2,
    }
    assert got["checkpoint-2"].held is not None
    assert got["checkpoint-3"].held is not None, "it grew past the limit after the listing"
    assert not got["checkpoint-4"].complete


def test_an_empty_prefix_is_never_pruned() -> None:
    class Bucket:
        def objects(self, prefix: str) -> Iterator[Object]:
            raise AssertionError("a whole bucket must not even be listed")

        def read(self, key: str, limit: int) -> bytes:
            raise AssertionError

        def delete(self, keys: list[str]) -> list[str]:
            raise AssertionError

        def write(self, key: str, body: bytes) -> None:
            raise AssertionError

    spec = CheckpointPolicySpec.model_validate(
        {"scope": {"namespaces": ["a"]}, "storage": {"pvc": {}}, "mode": "Enforce"}
    )
    for prefix in ("", "/", "//"):
        report = prune_prefix(Bucket(), prefix, spec, dry_run=False, policy="p")
        assert report.error == "refusing to prune a whole bucket: the prefix is empty"


@pytest.mark.parametrize(
    ("name", "marks"),
    [
        ("trainer_state.json", True),
        ("commit_success.txt", True),
        (".metadata", True),
        ("__3.metadata", True),
        ("mp_rank_00_model_states.pt", True),
        ("model.safetensors", False),
        ("optimizer.pt", False),
        ("__0_0.distcp", False),
        ("trainer_state.json.bak", False),
    ],
)
def test_what_marks_a_checkpoint_complete_is_known_by_name(name: str, marks: bool) -> None:
    assert layouts.marks_completion(name) is marks
