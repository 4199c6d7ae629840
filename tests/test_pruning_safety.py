"""A pruning run against a directory someone else can write to while it runs: nothing outside
it is ever deleted, one broken checkpoint never stops the run, and every failure is said."""

import json
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_pruning import POLICY, write
from trainwarden.cli import main
from trainwarden.storage import pruning
from trainwarden.storage.layouts import TOMBSTONE
from trainwarden.storage.pruning import Report, load_spec, prune

KEEP_ONE: dict[str, Any] = {
    "spec": {
        "mode": "Enforce",
        "scope": {"namespaces": ["team"]},
        "storage": {"pvc": {}},
        "layout": {"type": "HuggingFace"},
        "retention": {"keepLast": 1, "minAge": "1s"},
    }
}
SPEC = load_spec(yaml.safe_dump(KEEP_ONE))
NOBODY = 65534


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def run_flipping(flip: Callable[[], None], undo: Callable[[], None], root: Path) -> None:
    """One Enforce run while another thread keeps calling `flip`."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with suppress(OSError):  # the run renamed what the flipper wanted: try again
                flip()

    flipper = threading.Thread(target=loop)
    flipper.start()
    try:
        report = prune(root, SPEC, dry_run=False)
    finally:
        stop.set()
        flipper.join()
        undo()
    assert report.error is None or "cannot read" in report.error


def test_a_root_swapped_for_a_symlink_mid_run_never_leads_a_deletion_out(tmp_path: Path) -> None:
    root, aside, outside = tmp_path / "root", tmp_path / "aside", tmp_path / "outside"

    def flip() -> None:
        os.rename(root, aside)
        os.symlink(outside, root)
        os.unlink(root)
        os.rename(aside, root)

    def undo() -> None:
        if root.is_symlink():
            root.unlink()
        if aside.exists():
            aside.rename(root)

    for _ in range(200):
        for where in (root, outside):
            shutil.rmtree(where, ignore_errors=True)
            for step in range(1, 6):
                write(where, step, 1.0)
        run_flipping(flip, undo, root)
        assert names(outside) == [f"checkpoint-{s}" for s in range(1, 6)]
        assert all(len(list(c.iterdir())) == 2 for c in outside.iterdir())


def test_a_checkpoint_swapped_for_a_symlink_mid_run_never_leads_a_deletion_out(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    victim, aside = root / "checkpoint-2", tmp_path / "aside"

    def flip() -> None:
        os.rename(victim, aside)
        os.symlink(outside / "checkpoint-2", victim)
        os.unlink(victim)
        os.rename(aside, victim)

    def undo() -> None:
        if victim.is_symlink():
            victim.unlink()
        if aside.exists():
            aside.rename(victim)

    for _ in range(200):
        for where in (root, outside):
            shutil.rmtree(where, ignore_errors=True)
            for step in range(1, 4):
                write(where, step, 1.0)
        shutil.rmtree(aside, ignore_errors=True)
        run_flipping(flip, undo, root)
        assert names(outside) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
        assert len(list((outside / "checkpoint-2").iterdir())) == 2


def test_a_symlinked_root_is_a_failed_run_with_a_reason(tmp_path: Path) -> None:
    write(tmp_path / "real", 1, 1.0)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    report = prune(tmp_path / "link", SPEC, dry_run=False)
    assert report.error is not None
    assert report.error.endswith("link is a symlink, not followed")
    assert report.summary()["failed"] is True


def test_the_pruner_refuses_a_symlink_anywhere_below_its_mount(tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    write(tmp_path / "elsewhere" / "run", 1, 1.0)
    mount.mkdir()
    (mount / "runs").symlink_to(tmp_path / "elsewhere")
    report = prune(mount / "runs" / "run", SPEC, dry_run=False, within=mount)
    assert report.error is not None
    assert report.error.endswith("runs is a symlink, not followed")
    write(mount / "real" / "run", 1, 1.0)
    assert prune(mount / "real" / "run", SPEC, dry_run=True, within=mount).error is None


# --- as an unprivileged user: permissions only bind those ---------------------------------


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory an unprivileged user may use (pytest's own is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="trainwarden-test-"))
    base.chmod(0o755)
    yield base
    for path in (base, *base.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(base)


def _as_nobody(queue: Any, action: Callable[[], object]) -> None:
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    queue.put(action())


def unprivileged(action: Callable[[], object]) -> Any:
    """`action()` in a child process that runs as nobody when the tests run as root."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_as_nobody, args=(queue, action))
    child.start()
    result = queue.get(timeout=60)
    child.join(10)
    return result


def own(root: Path) -> None:
    if os.geteuid() == 0:
        for path in (root, *root.rglob("*")):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def test_an_unreadable_checkpoint_is_reported_and_the_run_goes_on(shared: Path) -> None:
    root = shared / "run"
    for step in range(1, 5):
        write(root, step, 1.0)
    own(root)
    (root / "checkpoint-2").chmod(0)
    report: Report = unprivileged(lambda: prune(root, SPEC, dry_run=False))
    assert report.error is None
    assert report.deleted == ["checkpoint-1", "checkpoint-3"]
    assert len(report.failures) == 1
    assert report.failures[0].startswith("checkpoint-2: not judged, left alone: Permission denied")
    assert (report.scanned, report.kept) == (4, 2)


def test_an_unreadable_root_is_a_failed_run_with_a_report(shared: Path) -> None:
    root = shared / "run"
    write(root, 1, 1.0)
    own(root)
    root.chmod(0)
    report: Report = unprivileged(lambda: prune(root, SPEC, dry_run=False))
    assert report.error is not None
    assert "Permission denied" in report.error


def test_an_undeletable_file_costs_one_checkpoint_never_the_run(shared: Path) -> None:
    """A read-only directory inside checkpoint-2: the rest of it and the other checkpoints
    go; what is left is a tombstone, never a checkpoint-2 missing its state file."""
    root = shared / "run"
    for step in range(1, 5):
        write(root, step, 1.0)
    locked = root / "checkpoint-2" / "locked"
    locked.mkdir()
    (locked / "shard.bin").write_bytes(b"x")
    own(root)
    locked.chmod(0o555)
    for path in (locked / "shard.bin", locked, root / "checkpoint-2"):
        os.utime(path, (time.time() - 7200,) * 2)
    report: Report = unprivileged(lambda: prune(root, SPEC, dry_run=False))
    assert report.deleted == ["checkpoint-1", "checkpoint-3"]
    assert len(report.failures) == 1
    assert f"the rest left as {TOMBSTONE}checkpoint-2" in report.failures[0]
    assert "Permission denied" in report.failures[0]
    assert names(root) == [f"{TOMBSTONE}checkpoint-2", "checkpoint-4"]
    gone = ("checkpoint-1", "checkpoint-3")
    assert report.bytes_freed == sum(
        d.checkpoint.size for d in report.decisions if d.checkpoint.name in gone
    ), "what was not deleted completely is not counted as freed"
    (root / f"{TOMBSTONE}checkpoint-2" / "locked").chmod(0o755)
    again: Report = unprivileged(lambda: prune(root, SPEC, dry_run=False))
    assert names(root) == ["checkpoint-4"]
    assert again.notes == [f"{TOMBSTONE}checkpoint-2: finished deleting what an earlier run left"]


def test_the_command_writes_a_report_for_a_failed_run(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    write(tmp_path / "real", 1, 1.0)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    report = tmp_path / "report.json"
    args = ["prune", str(tmp_path / "link"), "--policy", str(policy), "--report", str(report)]
    assert main(args) == 1
    written = json.loads(report.read_text())
    assert written["failed"] is True
    assert "symlink" in written["error"]


def test_even_a_bug_is_a_report_not_a_bare_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> Report:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(pruning, "prune", broken)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    report = tmp_path / "report.json"
    args = ["prune", str(tmp_path), "--policy", str(policy), "--report", str(report)]
    assert main(args) == 1
    written = json.loads(report.read_text())
    assert written["failed"] is True
    assert written["error"] == "RecursionError: maximum recursion depth exceeded"
