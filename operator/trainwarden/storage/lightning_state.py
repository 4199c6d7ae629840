"""Lightning's own word on its checkpoints: the ModelCheckpoint callback state saved inside
each `.ckpt` (`best_model_path`, `best_k_models` with their scores, `last_model_path`).

A `.ckpt` is a torch archive: a zip whose `<name>/data.pkl` pickles the checkpoint dict,
tensors stored beside it in `<name>/data/<key>`. A tenant writes it, so it is read bounded
and without running anything: the file is opened beneath the pinned directory (no symlink
followed, a regular file only); the zip's central directory is sized from its end record
before zipfile reads it (at most CENTRAL_DIRECTORY_LIMIT bytes and MAX_ENTRIES entries);
`data.pkl` is read at most PICKLE_LIMIT bytes (whatever its compression) and built by
storage/safe_pickle.py, which imports and calls nothing; a score is a 0-dimensional
tensor's few bytes, read from its storage entry only when it is small. torch is never
imported (the pruner image does not have it). Anything else is `Unreadable`, which costs
the checkpoint nothing but the library's word.
"""

import os
import posixpath
import stat
import struct
import zipfile
from dataclasses import dataclass, field

from trainwarden.storage import beneath, safe_pickle
from trainwarden.storage.safe_pickle import StorageRef, TensorRef

PICKLE_LIMIT = 8 * 2**20
"""Bytes of `data.pkl` read: a checkpoint of 10,000 tensors with their optimizer states
pickles to about 3 MiB (the tensors themselves are separate entries, never read)."""
CENTRAL_DIRECTORY_LIMIT = 4 * 2**20
MAX_ENTRIES = 65536
MAX_SCORES = 128
"""Scores read from one state (best_k_models of every callback)."""
_SCORE_OFFSET_LIMIT = 2**20
_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_FORMATS = {
    "FloatStorage": ("<f", 4),
    "DoubleStorage": ("<d", 8),
    "HalfStorage": ("<e", 2),
    "BFloat16Storage": ("bf16", 2),
    "LongStorage": ("<q", 8),
    "IntStorage": ("<i", 4),
}


class Unreadable(ValueError):
    """The file is no torch archive this reader reads within its bounds."""


@dataclass
class Word:
    """What the callbacks of one checkpoint say about the directory's checkpoints, by path
    relative to the callback's dirpath (a metric name with "/" nests one: "a/b.ckpt")."""

    best: dict[str, str] = field(default_factory=dict)
    """Path -> why the library keeps it (best_model_path). The rest of best_k_models is
    Lightning's own retention set (it deletes what falls out of its top k): ranked by
    keepBest with the scores below, not protected, or `save_top_k=-1` would pin every
    checkpoint the callback wrote."""
    last: dict[str, str] = field(default_factory=dict)
    """Path -> why a resume would load it (last_model_path)."""
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    """Path -> {monitor: score} from best_k_models and best_model_score."""
    global_step: int | None = None


def _open(dir_fd: int, relative: str) -> int:
    """A regular file below `dir_fd`, no component a symlink."""
    *parents, name = relative.split("/")
    parent = os.dup(dir_fd)
    try:
        for part in parents:
            inner = beneath.open_dir(parent, part)
            os.close(parent)
            parent = inner
        fd = os.open(name, beneath.FILE_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Unreadable(f"{relative} is not a regular file")
    return fd


def _directory_bounds(fd: int, size: int) -> tuple[int, int]:
    """(entries, bytes) of the zip's central directory, from its end record (zip64 too)."""
    tail_size = min(size, 22 + 65535)
    tail = os.pread(fd, tail_size, size - tail_size)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        raise Unreadable("no zip end record")
    _, _, _, _, entries, cd_size, cd_offset, _ = struct.unpack("<4s4H2LH", tail[at : at + 22])
    if 0xFFFF in (entries,) or 0xFFFFFFFF in (cd_size, cd_offset):
        locator = tail[at - 20 : at] if at >= 20 else b""
        if len(locator) != 20 or not locator.startswith(_ZIP64_LOCATOR):
            raise Unreadable("a zip64 end record without its locator")
        (offset,) = struct.unpack("<Q", locator[8:16])
        record = os.pread(fd, 56, offset) if offset < size else b""
        if len(record) != 56 or not record.startswith(_ZIP64_EOCD):
            raise Unreadable("no zip64 end record")
        entries, cd_size = struct.unpack("<QQ", record[32:48])
    return entries, cd_size


def _bounded(fd: int) -> zipfile.ZipFile:
    size = os.fstat(fd).st_size
    entries, cd_size = _directory_bounds(fd, size)
    if entries > MAX_ENTRIES or cd_size > CENTRAL_DIRECTORY_LIMIT:
        raise Unreadable(f"a zip of {entries} entries in {cd_size} bytes: over the limits")
    return zipfile.ZipFile(os.fdopen(os.dup(fd), "rb"))


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    with archive.open(info) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(f"{info.filename} is over {limit} bytes")
    return data


def _score(archive: zipfile.ZipFile, prefix: str, tensor: object) -> float | None:
    """The value of a 0-dimensional tensor, read from its storage entry."""
    if not isinstance(tensor, TensorRef) or tensor.shape != () or tensor.storage is None:
        return None
    storage: StorageRef = tensor.storage
    kind = _FORMATS.get(storage.kind)
    start = tensor.offset * kind[1] if kind else -1
    if kind is None or not 0 <= tensor.offset < storage.numel or start > _SCORE_OFFSET_LIMIT:
        return None
    try:
        raw = _read(archive, archive.getinfo(f"{prefix}/data/{storage.key}"), start + kind[1])
    except (KeyError, Unreadable, zipfile.BadZipFile, OSError):
        return None
    chunk = raw[start : start + kind[1]]
    if len(chunk) != kind[1]:
        return None
    if kind[0] == "bf16":
        return float(struct.unpack("<f", b"\x00\x00" + chunk)[0])
    return float(struct.unpack(kind[0], chunk)[0])


def _relative(path: object, dirpath: object) -> str | None:
    """A path the callback recorded, relative to its dirpath (or just its file name when
    the directory has moved since: the pruner mounts the volume elsewhere)."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    if isinstance(dirpath, str) and dirpath:
        base = dirpath.rstrip("/") + "/"
        if path.startswith(base):
            return posixpath.normpath(path[len(base) :])
    return posixpath.basename(path) or None


def _fold(word: Word, state: dict[object, object], score_of: "_Scores") -> None:
    """One ModelCheckpoint's state into `word`."""
    dirpath, monitor = state.get("dirpath"), state.get("monitor")
    what = f" ({monitor})" if isinstance(monitor, str) else ""
    best = _relative(state.get("best_model_path"), dirpath)
    if best is not None:
        word.best[best] = f"Lightning's best_model_path{what}"
    ranked = state.get("best_k_models")
    for path, tensor in ranked.items() if isinstance(ranked, dict) else []:
        if (relative := _relative(path, dirpath)) is None:
            continue
        value = score_of(tensor)
        if isinstance(monitor, str) and value is not None:
            word.scores.setdefault(relative, {})[monitor] = value
    last = _relative(state.get("last_model_path"), dirpath)
    if last is not None:
        word.last[last] = "Lightning's last_model_path"


class _Scores:
    """Reads at most MAX_SCORES tensor values from one archive."""

    def __init__(self, archive: zipfile.ZipFile, prefix: str) -> None:
        self.archive, self.prefix, self.left = archive, prefix, MAX_SCORES

    def __call__(self, tensor: object) -> float | None:
        if self.left <= 0:
            return None
        self.left -= 1
        return _score(self.archive, self.prefix, tensor)


def _pickle(archive: zipfile.ZipFile) -> tuple[str, bytes]:
    found = [i for i in archive.infolist() if i.filename.count("/") == 1]
    pickles = [i for i in found if i.filename.endswith("/data.pkl")]
    if len(pickles) != 1:
        raise Unreadable("no single <name>/data.pkl: not a torch archive")
    info = pickles[0]
    if info.file_size > PICKLE_LIMIT:
        raise Unreadable(f"data.pkl is {info.file_size} bytes, over {PICKLE_LIMIT}")
    prefix = info.filename.split("/")[0]
    order = next((i for i in found if i.filename == f"{prefix}/byteorder"), None)
    if order is not None and _read(archive, order, 16) != b"little":
        raise Unreadable("a big-endian archive")
    return prefix, _read(archive, info, PICKLE_LIMIT)


def read(dir_fd: int, relative: str) -> Word:
    """The callbacks' word in the checkpoint `relative` below `dir_fd`; raises Unreadable
    (or OSError) when it cannot be read within the bounds."""
    fd = _open(dir_fd, relative)
    try:
        with _bounded(fd) as archive:
            prefix, data = _pickle(archive)
            checkpoint = safe_pickle.loads(data)
            if not isinstance(checkpoint, dict):
                raise Unreadable("data.pkl holds no dict: not a Lightning checkpoint")
            word = Word()
            step = checkpoint.get("global_step")
            word.global_step = step if type(step) is int else None
            callbacks = checkpoint.get("callbacks")
            scores = _Scores(archive, prefix)
            for key, state in callbacks.items() if isinstance(callbacks, dict) else []:
                if (
                    isinstance(key, str)
                    and key.startswith("ModelCheckpoint")
                    and isinstance(state, dict)
                ):
                    _fold(word, state, scores)
            return word
    except Unreadable:
        raise
    except safe_pickle.Refused as error:
        raise Unreadable(f"data.pkl: {error}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as error:
        raise Unreadable(f"not a readable zip: {error}") from None
    except (ValueError, struct.error) as error:  # a name that is no UTF-8, a bad header
        raise Unreadable(f"not a readable zip: {error}") from None
    finally:
        os.close(fd)
