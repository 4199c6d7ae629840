"""Lightning's own word on its checkpoints, read from the callback state inside a `.ckpt`
(a torch zip archive a tenant writes): bounded, never executing anything, and what it
protects in a plan.

tests/data/lightning-2.6.6-last.ckpt is a real checkpoint: Lightning 2.6.6 and torch
2.15 (conformance/test_lightning.py's `fit`, two ModelCheckpoint callbacks into
/ckpt-fixture/run, monitor val_loss, save_top_k=2, save_last=True, 4 epochs)."""

import io
import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.checkpoint import Layout
from trainwarden.core.retention import Checkpoint
from trainwarden.storage import lightning_state
from trainwarden.storage.layouts import scan_directory
from trainwarden.storage.lightning_state import Unreadable

FIXTURE = Path(__file__).parent / "data" / "lightning-2.6.6-last.ckpt"
BEST = "epoch=2-step=12.ckpt"
SECOND = "epoch=3-step=16.ckpt"
RUN = [
    "epoch=0-step=4-v1.ckpt",
    "epoch=1-step=8-v1.ckpt",
    "epoch=2-step=12-v1.ckpt",
    BEST,
    "epoch=3-step=16-v1.ckpt",
    SECOND,
]


def read(path: Path) -> lightning_state.Word:
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return lightning_state.read(fd, path.name)
    finally:
        os.close(fd)


def run_directory(root: Path, last: bytes | None = None) -> Path:
    """The fixture's run as Lightning left it: its checkpoints, last.ckpt the real one."""
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(RUN):
        (root / name).write_bytes(b"\0")
        os.utime(root / name, (1000 + i, 1000 + i))
    (root / "last.ckpt").write_bytes(FIXTURE.read_bytes() if last is None else last)
    return root


def found(root: Path) -> tuple[dict[str, Checkpoint], list[str]]:
    scan = scan_directory(root, Layout(type="Lightning"))
    return {c.name: c for c in scan.checkpoints}, scan.notes


def archive(
    pickled: bytes, extra: dict[str, bytes] | None = None, byteorder: bytes = b"little"
) -> bytes:
    """A torch-style archive holding `pickled` as its data.pkl."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/byteorder", byteorder)
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return out.getvalue()


def test_the_callback_state_of_a_real_checkpoint() -> None:
    word = read(FIXTURE)
    assert word.best == {
        BEST: "Lightning's best_model_path (val_loss)",
        # the periodic callback (no monitor): its "best" is the last it had saved
        "epoch=2-step=12-v1.ckpt": "Lightning's best_model_path",
    }
    assert word.last == {"last.ckpt": "Lightning's last_model_path"}
    assert word.scores[BEST]["val_loss"] == pytest.approx(9.8774e-05, rel=1e-3)
    assert word.scores[SECOND]["val_loss"] == pytest.approx(0.0052, rel=1e-2)
    assert word.global_step == 16


def test_the_trainers_best_and_last_are_protected_with_their_own_rule(tmp_path: Path) -> None:
    # On main only names were read: default names carry no metric, keepBest could not
    # rank, and Enforce deleted Lightning's best (ckpt_path="best" then failed).
    got, notes = found(run_directory(tmp_path))
    assert got[BEST].trainer_best == "Lightning's best_model_path (val_loss)"
    assert got[SECOND].trainer_best is None, "the rest of the top k is ranked, not pinned"
    assert got[SECOND].metrics["val_loss"] == pytest.approx(0.0052, rel=1e-2)
    assert got["last.ckpt"].resume_by == "Lightning's last_model_path"
    assert got[BEST].metrics["val_loss"] == pytest.approx(9.8774e-05, rel=1e-3)
    assert {n for n, c in got.items() if c.trainer_best} == {BEST, RUN[2]}
    assert notes == []


def test_an_unreadable_newest_falls_back_to_the_next_and_says_so(tmp_path: Path) -> None:
    root = run_directory(tmp_path, last=FIXTURE.read_bytes()[:2000])  # cut mid-write
    (root / "older.ckpt").write_bytes(FIXTURE.read_bytes())
    os.utime(root / "older.ckpt", (2000, 2000))  # older than last.ckpt, newer than the rest
    got, notes = found(root)
    assert got[BEST].trainer_best
    assert any("last.ckpt not read" in n for n in notes)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (FIXTURE.read_bytes()[: len(FIXTURE.read_bytes()) // 2], "zip"),
        (b"", "zip"),
        (b"PK\x05\x06" + b"\0" * 18, "torch archive"),
        (archive(b"\x80\x02]r\xff\xff\xff\x3f."), "no dict"),
        (archive(b"garbage"), "data.pkl"),
        (archive(pickle.dumps({"callbacks": 1}), byteorder=b"big"), "big-endian"),
    ],
)
def test_truncated_or_foreign_archives_are_unreadable(
    tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / "x.ckpt").write_bytes(content)
    with pytest.raises(Unreadable, match=why):
        read(tmp_path / "x.ckpt")


class Shell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_whose_pickle_runs_a_shell_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    state = {"best_model_path": Shell(marker), "last_model_path": "/x/last.ckpt"}
    evil = {"callbacks": {"ModelCheckpoint{}": state}, "x": Shell(marker)}
    (tmp_path / "a.ckpt").write_bytes(archive(pickle.dumps(evil, protocol=2)))
    word = read(tmp_path / "a.ckpt")
    assert not marker.exists()
    assert word.best == {}
    assert word.last == {"last.ckpt": "Lightning's last_model_path"}


def test_the_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "big.ckpt").write_bytes(archive(b"\0" * 4096))  # compresses to nothing
    monkeypatch.setattr(lightning_state, "PICKLE_LIMIT", 1024)
    with pytest.raises(Unreadable, match="over 1024"):
        read(tmp_path / "big.ckpt")
    monkeypatch.setattr(lightning_state, "MAX_ENTRIES", 2)
    (tmp_path / "many.ckpt").write_bytes(
        archive(b"N.", {f"archive/data/{i}": b"" for i in range(5)})
    )
    with pytest.raises(Unreadable, match="over the limits"):
        read(tmp_path / "many.ckpt")


def test_a_deflated_pickle_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\0" * (64 * 2**20))  # 64 MiB in some 64 KiB
    (tmp_path / "bomb.ckpt").write_bytes(out.getvalue())
    with pytest.raises(Unreadable, match="over"):
        read(tmp_path / "bomb.ckpt")


def test_links_and_fifos_are_never_read(tmp_path: Path) -> None:
    root = run_directory(tmp_path / "run")
    (root / "last.ckpt").unlink()
    (tmp_path / "elsewhere.ckpt").write_bytes(FIXTURE.read_bytes())
    (root / "last.ckpt").symlink_to(tmp_path / "elsewhere.ckpt")
    os.mkfifo(root / "fifo.ckpt")
    got, _notes = found(root)
    assert not any(c.trainer_best for c in got.values()), "the link out was not followed"
    with pytest.raises(Unreadable, match="not a regular file"):
        read(root / "fifo.ckpt")


_FIXTURE_BYTES = FIXTURE.read_bytes()


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(_FIXTURE_BYTES) - 1), st.integers(0, 255)), max_size=6),
    st.integers(0, len(_FIXTURE_BYTES)),
)
def test_a_damaged_checkpoint_is_read_or_unreadable_never_a_crash(
    edits: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(_FIXTURE_BYTES)
    for at, value in edits:
        data[at] = value
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "last.ckpt"
        path.write_bytes(bytes(data[: max(cut, len(data) - 64)] if cut % 2 else data))
        try:
            word = read(path)
        except (Unreadable, OSError):
            return
        assert all(isinstance(k, str) for k in word.best)
