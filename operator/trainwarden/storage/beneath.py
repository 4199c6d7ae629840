"""File operations beneath one pinned directory: what a pruning run reads and deletes.

The checkpoint directory is opened once (`pinned`) and everything after is relative to that
handle, one path component at a time, never following a symlink (O_NOFOLLOW, dir_fd) and
never descending onto another filesystem. A path re-resolved after planning could have
been swapped for a symlink out of the directory in between (a trainer's namespace user can
do that on a shared volume); a handle cannot. Each directory entered is checked to be the
very inode that was listed (device and inode), so a swap between listing and opening is
seen, not followed. Iterative, with a depth limit: a tenant's 10,000-level tree is a
reported problem, not a RecursionError or an exhausted file table.
"""

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_DEPTH = 64
"""Directory levels inside one checkpoint (real ones have fewer than ten)."""
MAX_PROBLEMS = 5
"""Problems named per checkpoint; the rest are counted."""

Identity = tuple[int, int]
"""(st_dev, st_ino): which file an entry is, whatever its name."""


def why(error: Exception) -> str:
    """An error as a person reads it, without a traceback."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


class Moved(OSError):
    """An entry is no longer the file it was when it was listed."""


class TooLarge(ValueError):
    """A file is larger than the caller is willing to read."""


class TooDeep(OSError):
    """A tree nests deeper than MAX_DEPTH."""


class SymlinkRefused(OSError):
    """A path component is a symlink, which is never followed."""


def _open_component(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        link = False
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            with suppress(OSError):
                link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        if link:
            raise SymlinkRefused(f"{name} is a symlink, not followed") from None
        raise


def identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino)


@dataclass(frozen=True)
class Pinned:
    """An open directory: `fd` is what every operation goes through; `path` only names it."""

    fd: int
    path: str
    identity: Identity


@contextmanager
def pinned(path: str, *, within: str | None = None) -> Iterator[Pinned]:
    """Open `path` as a directory, refusing a symlink as its last component; with `within`
    (the pruner's volume mount) every component below `within` is refused as a symlink
    too, so nothing in the volume can redirect the run out of it."""
    if within is None:
        fd = _open_component(path, None)
    else:
        relative = os.path.relpath(path, within)
        if relative == ".." or relative.startswith("../"):
            raise NotADirectoryError(f"{path} is not inside {within}")
        mount = os.open(within, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = _descend(mount, [p for p in relative.split("/") if p not in ("", ".")])
        finally:
            os.close(mount)
    try:
        yield Pinned(fd, path, identity(os.fstat(fd)))
    finally:
        os.close(fd)


def open_dir(dir_fd: int, name: str, expected: os.stat_result | None = None) -> int:
    """Open the directory `name` of `dir_fd`; with `expected` (its listing), only if it is
    still that inode."""
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    if expected is not None and identity(os.fstat(fd)) != identity(expected):
        os.close(fd)
        raise Moved(f"{name} was replaced while it was read")
    return fd


def entries(fd: int) -> list[tuple[str, os.stat_result]]:
    """Every entry of an open directory with its lstat."""
    with os.scandir(fd) as listing:
        return [(e.name, e.stat(follow_symlinks=False)) for e in listing]


def _descend(dir_fd: int, parts: list[str]) -> int:
    """A new handle of the directory `parts` below `dir_fd`, no component a symlink."""
    fd = os.dup(dir_fd)
    for part in parts:
        try:
            inner = _open_component(part, fd)
        finally:
            os.close(fd)
        fd = inner
    return fd


def read_file(dir_fd: int, relative: str, limit: int) -> bytes | None:
    """A small regular file below `dir_fd`, or None when it is absent or not a regular file
    (a link, a FIFO, a device: none could hang or redirect the read); TooLarge past
    `limit` bytes, which are all that is ever read."""
    *parents, name = relative.split("/")
    try:
        parent = _descend(dir_fd, parents)
    except OSError:
        return None
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            raise TooLarge(f"{relative} is {info.st_size} bytes, over the {limit}-byte limit")
        chunks, total = [], 0
        while total <= limit and (chunk := os.read(fd, min(2**16, limit + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise TooLarge(f"{relative} grew over the {limit}-byte limit while read")
        return data
    finally:
        os.close(fd)


def exists(dir_fd: int, relative: str) -> bool:
    """Whether `relative` names an entry (any kind) without passing through a symlink."""
    *parents, name = relative.split("/")
    try:
        parent = _descend(dir_fd, parents)
    except OSError:
        return False
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(parent)


def listdir(dir_fd: int, name: str) -> list[str]:
    fd = open_dir(dir_fd, name)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Walked:
    """What a walk of one entry found, without following a link."""

    identity: Identity
    size: int
    """Bytes of the regular files inside (or of the file itself)."""
    newest: float
    inside: dict[str, int]
    """Modes of the entries directly inside, from lstat."""
    files: int
    """Regular files anywhere inside."""


def walk(dir_fd: int, name: str) -> Walked:
    """Sizes and times of the entry `name`, on its own filesystem only."""
    top = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(top.st_mode):
        regular = stat.S_ISREG(top.st_mode)
        return Walked(identity(top), top.st_size if regular else 0, top.st_mtime, {}, int(regular))
    inside: dict[str, int] = {}
    total = _Total(newest=top.st_mtime)

    def visit(depth: int, parent: int, child: str, info: os.stat_result) -> bool:
        if depth == 1:
            inside[child] = info.st_mode
        total.newest = max(total.newest, info.st_mtime)
        if stat.S_ISREG(info.st_mode):
            total.size += info.st_size
            total.files += 1
        return stat.S_ISDIR(info.st_mode) and info.st_dev == top.st_dev

    _traverse(dir_fd, name, top, visit)
    return Walked(identity(top), total.size, total.newest, inside, total.files)


@dataclass
class _Total:
    size: int = 0
    newest: float = 0.0
    files: int = 0


Visit = Callable[[int, int, str, os.stat_result], bool]
"""(depth, the parent's handle, name, lstat) -> whether to descend into it."""
After = Callable[[int, str, str], None]
"""(the parent's handle, name, path) once a directory's entries are done."""


@dataclass
class _Frame:
    fd: int
    pending: Iterator[tuple[str, os.stat_result]]
    name: str
    path: str


def _enter(parent: int, name: str, info: os.stat_result, path: str, depth: int) -> _Frame:
    if depth >= MAX_DEPTH:
        raise TooDeep(f"{path} nests deeper than {MAX_DEPTH} levels")
    fd = open_dir(parent, name, info)
    try:
        return _Frame(fd, iter(entries(fd)), name, path)
    except OSError:
        os.close(fd)
        raise


def _traverse(
    dir_fd: int,
    name: str,
    top: os.stat_result,
    visit: Visit,
    *,
    after: After | None = None,
    skip: Callable[[str, OSError], None] | None = None,
) -> None:
    """Depth first below the directory `name` (which must still be the inode `top`), one
    handle per level: `visit` every entry, `after` every directory bottom-up (deletion);
    a directory that cannot be entered goes to `skip`, or raises without it."""
    stack = [_enter(dir_fd, name, top, name, 0)]
    try:
        while stack:
            frame = stack[-1]
            item = next(frame.pending, None)
            if item is None:
                os.close(frame.fd)
                stack.pop()
                if after is not None:
                    after(stack[-1].fd if stack else dir_fd, frame.name, frame.path)
                continue
            child, info = item
            if not visit(len(stack), frame.fd, child, info):
                continue
            path = f"{frame.path}/{child}"
            try:
                stack.append(_enter(frame.fd, child, info, path, len(stack)))
            except OSError as error:
                if skip is None:
                    raise
                skip(path, error)
    finally:
        for frame in stack:
            os.close(frame.fd)


@dataclass
class Removal:
    """What deleting one entry left behind: nothing, when `count` is 0."""

    problems: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, path: str, error: OSError | str) -> None:
        self.count += 1
        if len(self.problems) < MAX_PROBLEMS:
            why = error if isinstance(error, str) else error.strerror or str(error)
            self.problems.append(f"{path}: {why}")

    def __str__(self) -> str:
        more = self.count - len(self.problems)
        return "; ".join(self.problems) + (f" and {more} more" if more > 0 else "")


def remove(dir_fd: int, name: str, expected: Identity) -> Removal:
    """Delete the entry `name` of `dir_fd` if it is still the inode `expected`, with all
    inside it on its own filesystem; what cannot be deleted is skipped and reported, the
    rest still goes. Raises FileNotFoundError when it is gone, Moved when replaced."""
    top = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if identity(top) != expected:
        raise Moved(f"{name} is no longer the entry that was planned")
    removal = Removal()
    if not stat.S_ISDIR(top.st_mode):
        _attempt(removal, name, lambda: os.unlink(name, dir_fd=dir_fd))
        return removal

    def visit(depth: int, parent: int, child: str, info: os.stat_result) -> bool:
        if not stat.S_ISDIR(info.st_mode):
            _attempt(removal, child, lambda: os.unlink(child, dir_fd=parent))
            return False
        if info.st_dev != top.st_dev:
            removal.add(child, "another filesystem is mounted there: not entered")
            return False
        return True

    def after(parent: int, directory: str, path: str) -> None:
        _attempt(removal, path, lambda: os.rmdir(directory, dir_fd=parent))

    try:
        _traverse(dir_fd, name, top, visit, after=after, skip=removal.add)
    except OSError as error:  # the entry itself cannot be entered
        removal.add(name, error)
    return removal


def _attempt(removal: Removal, path: str, action: Callable[[], None]) -> None:
    try:
        action()
    except FileNotFoundError:
        pass  # already gone: what was wanted
    except OSError as error:
        removal.add(path, error)
