"""Each trainer's layout, built in a temporary directory the way the library writes it."""

import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from trainwarden.api.v1alpha1.checkpoint import Layout
from trainwarden.core.retention import Checkpoint
from trainwarden.storage import beneath, layouts, metadata
from trainwarden.storage.layouts import PIN_MARKER, scan_directory


def entry(root: Path, name: str, layout: Layout) -> Checkpoint | None:
    """The entry as `layouts.entry` judges it right before a deletion."""
    with beneath.pinned(str(root)) as tree:
        found = layouts.entry(tree, name, layout)
    return found[0] if found else None


def files(root: Path, tree: dict[str, Any]) -> None:
    """Make a tree: a dict is a directory, bytes or str a file."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in tree.items():
        path = root / name
        if isinstance(content, dict):
            files(path, content)
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())


def found(root: Path, layout: Layout) -> dict[str, Checkpoint]:
    return {c.name: c for c in scan_directory(root, layout).checkpoints}


def hf_state(step: int, eval_loss: float) -> str:
    return json.dumps(
        {
            "best_metric": eval_loss,
            "epoch": step / 10,
            "global_step": step,
            "log_history": [
                {"epoch": 0.5, "learning_rate": 5e-05, "loss": 2.0, "step": step // 2},
                {"epoch": step / 10, "grad_norm": 1.5, "loss": 1.2, "step": step},
                {"epoch": step / 10, "eval_loss": eval_loss, "eval_runtime": 3.2, "step": step},
            ],
            "max_steps": 1000,
            "trial_name": None,
        }
    )


def test_hugging_face_checkpoints_their_metrics_and_a_save_in_progress(tmp_path: Path) -> None:
    files(
        tmp_path,
        {
            "checkpoint-500": {
                "model.safetensors": b"\0" * 1000,
                "optimizer.pt": b"\0" * 500,
                "trainer_state.json": hf_state(500, 0.4),
                "rng_state.pth": b"\0" * 10,
            },
            "checkpoint-1000": {"model.safetensors": b"\0" * 1000},  # no state yet: in flight
            "tmp-checkpoint-1500": {"model.safetensors": b"\0"},
            "runs": {"events.out.tfevents": b"x"},
            "README.md": "not a checkpoint",
        },
    )
    got = found(tmp_path, Layout(type="HuggingFace"))
    assert set(got) == {"checkpoint-500", "checkpoint-1000", "tmp-checkpoint-1500"}
    five = got["checkpoint-500"]
    assert (five.step, five.complete) == (500, True)
    assert five.metrics == {"loss": 1.2, "grad_norm": 1.5, "eval_loss": 0.4, "eval_runtime": 3.2}
    assert five.size == 1000 + 500 + len(hf_state(500, 0.4)) + 10
    assert not got["checkpoint-1000"].complete
    assert not got["tmp-checkpoint-1500"].complete
    assert got["tmp-checkpoint-1500"].step == 1500


def test_deep_speed_tags_latest_is_the_resume_point_and_newer_tags_are_in_flight(
    tmp_path: Path,
) -> None:
    shard = {
        "mp_rank_00_model_states.pt": b"\0" * 100,
        "zero_pp_rank_0_mp_rank_00_optim_states.pt": b"\0" * 200,
    }
    files(
        tmp_path,
        {
            "global_step100": shard,
            "global_step200": shard,
            "global_step300": {"zero_pp_rank_0_mp_rank_00_optim_states.pt": b"\0"},
            "latest": "global_step200",
            "zero_to_fp32.py": "# DeepSpeed's helper script",
        },
    )
    got = found(tmp_path, Layout(type="DeepSpeed"))
    assert set(got) == {"global_step100", "global_step200", "global_step300"}
    assert got["global_step200"].resume_point
    assert not got["global_step100"].resume_point
    assert [got[n].complete for n in sorted(got)] == [True, True, False]
    assert got["global_step100"].size == 300


def test_deep_speed_without_latest_trusts_tags_with_model_states(tmp_path: Path) -> None:
    files(
        tmp_path,
        {
            "global_step1": {"mp_rank_00_model_states.pt": b"\0"},
            "global_step2": {"zero_pp_rank_0_mp_rank_00_optim_states.pt": b"\0"},
        },
    )
    got = found(tmp_path, Layout(type="DeepSpeed"))
    assert (got["global_step1"].complete, got["global_step2"].complete) == (True, False)


def test_lightning_files_metrics_from_names_and_last_ckpt(tmp_path: Path) -> None:
    files(
        tmp_path,
        {
            "epoch=0-step=100-val_loss=0.52.ckpt": b"\0" * 10,
            "epoch=1-step=200-val_loss=0.31.ckpt": b"\0" * 10,
            "last.ckpt": b"\0" * 10,
            "hparams.yaml": "lr: 0.1",
        },
    )
    got = found(tmp_path, Layout(type="Lightning"))
    assert set(got) == {
        "epoch=0-step=100-val_loss=0.52.ckpt",
        "epoch=1-step=200-val_loss=0.31.ckpt",
        "last.ckpt",
    }
    two = got["epoch=1-step=200-val_loss=0.31.ckpt"]
    assert (two.step, two.metrics, two.resume_point) == (200, {"val_loss": 0.31}, False)
    assert got["last.ckpt"].resume_point
    assert got["last.ckpt"].step is None


def test_lightning_last_link_marks_its_target(tmp_path: Path) -> None:
    files(tmp_path, {"epoch=1-step=200.ckpt": b"\0", "epoch=0-step=100.ckpt": b"\0"})
    (tmp_path / "last.ckpt").symlink_to("epoch=1-step=200.ckpt")
    got = found(tmp_path, Layout(type="Lightning"))
    assert set(got) == {"epoch=1-step=200.ckpt", "epoch=0-step=100.ckpt"}
    assert got["epoch=1-step=200.ckpt"].resume_point
    assert not got["epoch=0-step=100.ckpt"].resume_point


def test_orbax_steps_tmp_directories_and_commit_markers(tmp_path: Path) -> None:
    item = {"_CHECKPOINT_METADATA": "{}", "default": {"_METADATA": "{}", "d": {"0": b"\0" * 8}}}
    files(
        tmp_path,
        {
            "1000": {**item, "metrics": {"metrics": json.dumps({"accuracy": 0.8})}},
            "2000": item,
            "3000.orbax-checkpoint-tmp-1733140000": {"default": {}},
        },
    )
    got = found(tmp_path, Layout(type="Orbax"))
    assert set(got) == {"1000", "2000", "3000.orbax-checkpoint-tmp-1733140000"}
    assert got["1000"].metrics == {"accuracy": 0.8}
    assert (got["2000"].step, got["2000"].complete) == (2000, True)
    tmp = got["3000.orbax-checkpoint-tmp-1733140000"]
    assert (tmp.step, tmp.complete) == (3000, False)
    # On object stores Orbax commits with a marker: then a step without it is in flight.
    (tmp_path / "1000" / "commit_success.txt").write_text("done")
    got = found(tmp_path, Layout(type="Orbax"))
    assert (got["1000"].complete, got["2000"].complete) == (True, False)


def test_torch_dcp_is_complete_once_metadata_is_written(tmp_path: Path) -> None:
    files(
        tmp_path,
        {
            "step_100": {"__0_0.distcp": b"\0" * 64, "__1_0.distcp": b"\0" * 64, ".metadata": "m"},
            "step_200": {"__0_0.distcp": b"\0" * 64},
            "logs": {"train.log": "x"},
        },
    )
    got = found(tmp_path, Layout(type="TorchDCP"))
    assert set(got) == {"step_100", "step_200"}
    assert (got["step_100"].step, got["step_100"].complete, got["step_100"].size) == (
        100,
        True,
        129,
    )
    assert not got["step_200"].complete


def test_glob_with_a_step_pattern(tmp_path: Path) -> None:
    files(tmp_path, {"ckpt-10.pt": b"\0", "ckpt-final.pt": b"\0", "notes.txt": "x"})
    got = found(tmp_path, Layout(type="Glob", glob="ckpt-*.pt", step_pattern=r"ckpt-(\d+)"))
    assert {n: c.step for n, c in got.items()} == {"ckpt-10.pt": 10, "ckpt-final.pt": None}


def test_pins_and_times(tmp_path: Path) -> None:
    files(
        tmp_path,
        {
            "checkpoint-1": {"trainer_state.json": hf_state(1, 1.0), PIN_MARKER: ""},
            "checkpoint-2": {"trainer_state.json": hf_state(2, 1.0)},
        },
    )
    old = time.time() - 7200
    for path in (tmp_path / "checkpoint-2", tmp_path / "checkpoint-2" / "trainer_state.json"):
        os.utime(path, (old, old))
    got = found(tmp_path, Layout(type="HuggingFace"))
    assert got["checkpoint-1"].pinned
    assert not got["checkpoint-2"].pinned
    assert abs(got["checkpoint-2"].created.timestamp() - old) < 1
    assert got["checkpoint-1"].created.timestamp() > old + 3600
    files(tmp_path, {"e.ckpt": b"\0", f"e.ckpt{PIN_MARKER}": ""})
    assert found(tmp_path, Layout(type="Lightning"))["e.ckpt"].pinned


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    files(outside, {"huge.bin": b"\0" * 100_000, "checkpoint-9": {"trainer_state.json": "{}"}})
    root = tmp_path / "out"
    files(root, {"checkpoint-1": {"trainer_state.json": hf_state(1, 1.0)}})
    (root / "checkpoint-1" / "weights.bin").symlink_to(outside / "huge.bin")
    (root / "checkpoint-9").symlink_to(outside / "checkpoint-9", target_is_directory=True)
    got = found(root, Layout(type="HuggingFace"))
    assert set(got) == {"checkpoint-1"}
    assert got["checkpoint-1"].size == len(hf_state(1, 1.0))


def test_entry_sees_the_disk_as_it_is_now(tmp_path: Path) -> None:
    layout = Layout(type="HuggingFace")
    files(tmp_path, {"checkpoint-1": {"trainer_state.json": hf_state(1, 1.0)}})
    before = entry(tmp_path, "checkpoint-1", layout)
    assert before is not None
    (tmp_path / "checkpoint-1" / "model.safetensors").write_bytes(b"\0" * 10)
    after = entry(tmp_path, "checkpoint-1", layout)
    assert after is not None
    assert after.size == before.size + 10
    assert entry(tmp_path, "checkpoint-2", layout) is None
    files(tmp_path, {"latest": "global_step5", "global_step5": {"x_model_states.pt": b"\0"}})
    deepspeed = entry(tmp_path, "global_step5", Layout(type="DeepSpeed"))
    assert deepspeed is not None
    assert deepspeed.resume_point


def test_hf_later_log_entries_at_the_same_step_win(tmp_path: Path) -> None:
    state = {
        "global_step": 10,
        "log_history": [
            {"loss": 3.0, "step": 10},
            {"eval_loss": 0.9, "step": 10},
            {"eval_loss": 0.7, "step": 10},  # a second evaluation at the same step
        ],
    }
    files(tmp_path, {"checkpoint-10": {"trainer_state.json": json.dumps(state)}})
    assert found(tmp_path, Layout(type="HuggingFace"))["checkpoint-10"].metrics == {
        "loss": 3.0,
        "eval_loss": 0.7,
    }


def test_hf_truncated_state_is_incomplete(tmp_path: Path) -> None:
    # save_to_json is open("w") + write: a reader can see half a file.
    files(tmp_path, {"checkpoint-10": {"trainer_state.json": '{"global_step": 10, "log_'}})
    got = found(tmp_path, Layout(type="HuggingFace"))["checkpoint-10"]
    assert (got.complete, got.metrics) == (False, {})


def test_lightning_versioned_last_and_a_link_out_of_root(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    files(outside, {"epoch=9-step=900.ckpt": b"\0"})
    root = tmp_path / "ckpts"
    files(root, {"epoch=0-step=100-v1.ckpt": b"\0" * 3, "last-v1.ckpt": b"\0"})
    (root / "last.ckpt").symlink_to(outside / "epoch=9-step=900.ckpt")
    got = found(root, Layout(type="Lightning"))
    assert set(got) == {"epoch=0-step=100-v1.ckpt", "last-v1.ckpt"}
    assert got["last-v1.ckpt"].resume_point
    assert (got["epoch=0-step=100-v1.ckpt"].step, got["epoch=0-step=100-v1.ckpt"].size) == (100, 3)
    assert not got["epoch=0-step=100-v1.ckpt"].resume_point


def test_orbax_prefixed_steps_and_prefixed_tmp(tmp_path: Path) -> None:
    item = {"_CHECKPOINT_METADATA": "{}", "state": {"_METADATA": "{}"}}
    files(
        tmp_path,
        {
            "ckpt_0001000": item,  # step_prefix="ckpt", step_format_fixed_length=7
            "ckpt_2000.orbax-checkpoint-tmp-1733140000123456": {"_CHECKPOINT_METADATA": "{}"},
        },
    )
    got = found(tmp_path, Layout(type="Orbax"))
    assert (got["ckpt_0001000"].step, got["ckpt_0001000"].complete) == (1000, True)
    tmp = got["ckpt_2000.orbax-checkpoint-tmp-1733140000123456"]
    assert (tmp.step, tmp.complete) == (2000, False)


def test_dcp_step_is_none_without_digits_and_metadata_tmp_is_not_metadata(tmp_path: Path) -> None:
    files(
        tmp_path,
        {
            "final": {"__0_0.distcp": b"\0", ".metadata": b"m"},
            "step-7": {"__0_0.distcp": b"\0", ".metadata.tmp": b"m"},  # finish() mid-rename
        },
    )
    got = found(tmp_path, Layout(type="TorchDCP"))
    assert (got["final"].step, got["final"].complete) == (None, True)
    assert (got["step-7"].step, got["step-7"].complete) == (7, False)


def test_glob_directories_pins_and_markers(tmp_path: Path) -> None:
    files(
        tmp_path, {"ckpt-3": {"w.bin": b"\0" * 4}, "ckpt-4.pt": b"\0", "ckpt-4.pt" + PIN_MARKER: ""}
    )
    got = found(tmp_path, Layout(type="Glob", glob="ckpt-*", step_pattern=r"ckpt-(\d+)"))
    assert {n: (c.step, c.size, c.pinned) for n, c in got.items()} == {
        "ckpt-3": (3, 4, False),
        "ckpt-4.pt": (4, 1, True),
    }


def test_entry_sees_completion_and_disappearance(tmp_path: Path) -> None:
    layout = Layout(type="TorchDCP")
    files(tmp_path, {"step-1": {"__0_0.distcp": b"\0"}})
    assert [c.complete for c in scan_directory(tmp_path, layout).checkpoints] == [False]
    (tmp_path / "step-1" / ".metadata").write_bytes(b"m")
    now = entry(tmp_path, "step-1", layout)
    assert now is not None
    assert now.complete
    for f in (tmp_path / "step-1").iterdir():
        f.unlink()
    (tmp_path / "step-1").rmdir()
    assert entry(tmp_path, "step-1", layout) is None


def test_created_is_the_newest_mtime_inside(tmp_path: Path) -> None:
    files(tmp_path, {"checkpoint-1": {"trainer_state.json": "{}", "sub": {"deep.bin": b"\0"}}})
    for path, when in (
        (tmp_path / "checkpoint-1", 1_000),
        (tmp_path / "checkpoint-1" / "trainer_state.json", 2_000),
        (tmp_path / "checkpoint-1" / "sub", 3_000),
        (tmp_path / "checkpoint-1" / "sub" / "deep.bin", 5_000),
    ):
        os.utime(path, (when, when))
    assert found(tmp_path, Layout(type="HuggingFace"))["checkpoint-1"].created.timestamp() == 5_000


def _scan_in_child(root: str, kind: str) -> None:
    scan_directory(Path(root), Layout(type=kind))  # type: ignore[arg-type]


def test_orbax_metrics_that_are_not_a_regular_file_are_not_read(tmp_path: Path) -> None:
    """A FIFO (or a link to /dev/zero) where metrics/metrics should be must not hang a scan."""
    files(tmp_path, {"100": {"default": {"x": b"\0"}, "metrics": {}}})
    os.mkfifo(tmp_path / "100" / "metrics" / "metrics")
    child = multiprocessing.get_context("fork").Process(
        target=_scan_in_child, args=(str(tmp_path), "Orbax")
    )
    child.start()
    child.join(5)
    hung = child.is_alive()
    child.kill()
    assert not hung


def test_orbax_metrics_are_not_read_through_a_link_out_of_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    files(outside, {"m.json": json.dumps({"accuracy": 0.99})})
    root = tmp_path / "out"
    files(root, {"100": {"default": {"x": b"\0"}, "metrics": {}}})
    (root / "100" / "metrics" / "metrics").symlink_to(outside / "m.json")
    assert found(root, Layout(type="Orbax"))["100"].metrics == {}


def test_orbax_commit_marker_is_not_looked_for_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    files(outside, {"200": {"commit_success.txt": "Checkpoint commit was successful"}})
    root = tmp_path / "out"
    files(root, {"100": {"default": {"x": b"\0"}}})
    (root / "200").symlink_to(outside / "200", target_is_directory=True)
    assert found(root, Layout(type="Orbax"))["100"].complete


def test_orbax_step_with_no_files_at_all_is_incomplete(tmp_path: Path) -> None:
    files(tmp_path, {"100": {"default": {}}})
    assert not found(tmp_path, Layout(type="Orbax"))["100"].complete


@pytest.mark.parametrize(
    ("name", "metrics"),
    [
        ("epoch=0-step=5-val_loss=1e+20.ckpt", {"val_loss": 1e20}),
        ("lr=1.2.3-step=5.ckpt", {}),  # not a number: skipped, not a crash
    ],
)
def test_lightning_odd_metric_values(tmp_path: Path, name: str, metrics: dict[str, float]) -> None:
    files(tmp_path, {name: b"\0"})
    assert found(tmp_path, Layout(type="Lightning"))[name].metrics == metrics


def test_hf_state_of_an_unexpected_shape_is_no_crash(tmp_path: Path) -> None:
    state = {"global_step": 5, "log_history": 5}
    files(tmp_path, {"checkpoint-5": {"trainer_state.json": json.dumps(state)}})
    got = found(tmp_path, Layout(type="HuggingFace"))["checkpoint-5"]
    assert (got.complete, got.metrics) == (True, {})


def test_lightning_sharded_ckpt_directories(tmp_path: Path) -> None:
    """DeepSpeedStrategy (and FSDP sharded) save `<name>.ckpt/` directories, not files."""
    files(
        tmp_path,
        {
            "epoch=0-step=100.ckpt": {
                "checkpoint": {"mp_rank_00_model_states.pt": b"\0" * 10},
                "latest": "checkpoint",
            }
        },
    )
    got = found(tmp_path, Layout(type="Lightning"))
    assert (got["epoch=0-step=100.ckpt"].step, got["epoch=0-step=100.ckpt"].size) == (100, 20)


def test_dcp_without_collectives_writes_rank_metadata(tmp_path: Path) -> None:
    """torch >= 2.7 FileSystemWriter with use_collectives=False writes __<rank>.metadata."""
    files(tmp_path, {"step-100": {"__0_0.distcp": b"\0", "__0.metadata": b"m"}})
    assert found(tmp_path, Layout(type="TorchDCP"))["step-100"].complete


# --- what tenants write: never a crash, never a checkpoint by accident ----------------------


def test_deeply_nested_state_is_no_recursion_error_just_incomplete(tmp_path: Path) -> None:
    deep = '{"global_step": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    files(tmp_path, {"checkpoint-1": {"trainer_state.json": deep}})
    got = found(tmp_path, Layout(type="HuggingFace"))["checkpoint-1"]
    assert (got.complete, got.metrics) == (False, {})


def test_a_state_over_the_read_limit_is_not_read_and_its_checkpoint_held(tmp_path: Path) -> None:
    padding = "x" * metadata.METADATA_LIMIT
    files(tmp_path, {"checkpoint-1": {"trainer_state.json": json.dumps({"pad": padding})}})
    got = found(tmp_path, Layout(type="HuggingFace"))["checkpoint-1"]
    assert got.held is not None
    assert "over the 1048576-byte limit" in got.held
    assert got.complete, "a state file is there: kept by Held, not mistaken for a write"


def test_numbers_past_a_float_are_skipped_not_an_overflow(tmp_path: Path) -> None:
    huge = "1" + "0" * 400
    state = f'{{"global_step": 5, "log_history": [{{"step": 5, "loss": {huge}, "acc": 0.5}}]}}'
    files(
        tmp_path,
        {
            "checkpoint-5": {"trainer_state.json": state},
            "7": {"w": b"\0", "metrics": {"metrics": f'{{"loss": {huge}, "acc": 1e400}}'}},
        },
    )
    assert found(tmp_path, Layout(type="HuggingFace"))["checkpoint-5"].metrics == {"acc": 0.5}
    assert found(tmp_path, Layout(type="Orbax"))["7"].metrics == {}


@pytest.mark.parametrize(
    "name",
    [
        "checkpoint-100\n",  # `$` matches before a trailing newline
        "checkpoint-²",  # `\d` matches non-ASCII digits, which int() then refuses
        "checkpoint-١٢",
        "checkpoint-" + "9" * 19,  # past an int64
        "check\npoint-1",
    ],
)
def test_odd_names_are_no_checkpoints(tmp_path: Path, name: str) -> None:
    files(tmp_path, {name: {"trainer_state.json": hf_state(1, 1.0)}})
    assert found(tmp_path, Layout(type="HuggingFace")) == {}
    files(tmp_path, {"global_step1\n": {"mp_rank_00_model_states.pt": b"\0"}})
    assert found(tmp_path, Layout(type="DeepSpeed")) == {}


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        (r"ckpt-(.+)", "ckpt-²"),  # "²".isdigit(), but int("²") raises
        (r"ckpt-(\d+)", "ckpt-١٢"),  # the policy's own \d takes Arabic-Indic digits
        (r"ckpt-(\d*)", "ckpt-"),  # a group that can be empty
        (r"ckpt(-\d+)?", "ckpt"),  # a group that can be absent
        (r"ckpt-(.*)", "ckpt-12x"),
    ],
)
def test_a_glob_step_that_is_no_number_is_no_step(tmp_path: Path, pattern: str, name: str) -> None:
    files(tmp_path, {name: b"\0"})
    got = found(tmp_path, Layout(type="Glob", glob="ckpt*", step_pattern=pattern))
    assert got[name].step is None


def test_a_glob_never_takes_a_name_with_a_newline(tmp_path: Path) -> None:
    files(tmp_path, {"ckpt-1\n": b"\0", "ckpt-2": b"\0"})
    got = found(tmp_path, Layout(type="Glob", glob="ckpt-*", step_pattern=r"ckpt-([0-9]+)"))
    assert set(got) == {"ckpt-2"}


def test_a_tree_deeper_than_any_trainer_writes_is_reported_not_walked(tmp_path: Path) -> None:
    deep = tmp_path / "checkpoint-1"
    files(deep, {"trainer_state.json": hf_state(1, 1.0)})
    (deep / "/".join(["d"] * 100)).mkdir(parents=True)
    files(tmp_path, {"checkpoint-2": {"trainer_state.json": hf_state(2, 1.0)}})
    scanned = scan_directory(tmp_path, Layout(type="HuggingFace"))
    assert [c.name for c in scanned.checkpoints] == ["checkpoint-2"]
    assert scanned.failures == [
        "checkpoint-1: not judged, left alone: checkpoint-1/"
        + "/".join(["d"] * 64)
        + " nests deeper than 64 levels"
    ]


def test_deep_speed_latest_is_read_bounded_and_never_from_a_fifo(tmp_path: Path) -> None:
    files(tmp_path, {"global_step1": {"x_model_states.pt": b"\0"}, "latest": "x" * 10_000})
    assert not found(tmp_path, Layout(type="DeepSpeed"))["global_step1"].resume_point
    (tmp_path / "latest").unlink()
    os.mkfifo(tmp_path / "latest")
    child = multiprocessing.get_context("fork").Process(
        target=_scan_in_child, args=(str(tmp_path), "DeepSpeed")
    )
    child.start()
    child.join(5)
    hung = child.is_alive()
    child.kill()
    assert not hung
