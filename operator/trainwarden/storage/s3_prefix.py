"""Checkpoints in S3-compatible object storage, judged by the same layouts and rules as a
directory on a PVC.

An object listing is laid out as a sparse tree in a scratch directory: every object a file
of its size (no data, so no disk), with its LastModified as mtime. The recognizers then see
exactly what they would see on a volume, so what is complete, pinned or a resume point is
decided by one piece of code for every storage; the few metadata files a layout reads
(`trainer_state.json`, DeepSpeed's `latest`, Orbax's metrics) are fetched when it reads
them, one at a time, at most its limit (a ranged GET), and never written to disk: the
operator's memory and its small scratch volume stay bounded whatever tenants upload. A
planned deletion is re-listed right before it happens and carried out only if its objects
are exactly the ones planned; then exactly those keys are deleted.

The prefix must not be empty: a policy governs a checkpoint directory, never a bucket.
"""

import json
import os
import posixpath
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.core import retention
from trainwarden.storage import layouts
from trainwarden.storage.beneath import TooLarge
from trainwarden.storage.pruning import DeletionFailed, Report, prune

AUDIT = ".trainwarden-pruned.json"
"""Written under the prefix after a run that deleted: which policy deleted what, and why
(the object-storage counterpart of the PVC annotation trainwarden.dev/pruned)."""


class StoreError(Exception):
    """The bucket could not be read or written; the message says what it answered."""


@dataclass(frozen=True)
class Object:
    key: str
    size: int
    modified: datetime
    etag: str = ""


class Store(Protocol):
    """What pruning needs of an S3-compatible bucket."""

    def objects(self, prefix: str) -> Iterator[Object]: ...

    def read(self, key: str, limit: int) -> bytes:
        """The object's first `limit` + 1 bytes at most (more than `limit`: too large)."""
        ...

    def delete(self, keys: list[str]) -> list[str]:
        """Delete the keys; returns the ones that could not be deleted, with why."""
        ...

    def write(self, key: str, body: bytes) -> None: ...


def normalize_prefix(prefix: str) -> str:
    """ "runs/a", "/runs/a/" -> "runs/a/"; "" and "/" -> "" (the whole bucket)."""
    parts = [p for p in prefix.split("/") if p]
    return "/".join(parts) + "/" if parts else ""


def _relative(key: str, prefix: str) -> str | None:
    """The key below the prefix as a safe relative path, or None (a key with an empty,
    "." or ".." segment cannot be laid out without leaving the tree)."""
    rest = key[len(prefix) :]
    parts = rest.rstrip("/").split("/")
    if not rest or any(p in ("", ".", "..") for p in parts):
        return None
    return "/".join(parts) + ("/" if rest.endswith("/") else "")


@dataclass
class Mirror:
    """The sparse tree of one prefix and the listing it was made from."""

    root: Path
    objects: dict[str, Object]
    """Every laid-out object by its path relative to the prefix."""
    skipped: list[str]
    fetch: Callable[[str, int], bytes] = lambda key, limit: b""
    """Reads an object's first bytes (Store.read)."""

    def read(self, relative: str, limit: int) -> bytes | None:
        """A layouts.Reader over the bucket: the object the scan asks for, fetched now."""
        obj = self.objects.get(relative)
        if obj is None or relative.endswith("/"):
            return None
        if obj.size > limit:
            raise TooLarge(f"{relative} is {obj.size} bytes, over the {limit}-byte limit")
        if obj.size == 0:
            return b""  # a range of an empty object is not satisfiable: nothing to fetch
        try:
            data = self.fetch(obj.key, limit)
        except StoreError as error:
            raise OSError(str(error)) from None  # this checkpoint is not judged; others are
        if len(data) > limit:
            raise TooLarge(f"{relative} grew over the {limit}-byte limit")
        return data

    def members(self, name: str) -> dict[str, Object]:
        """The objects that make up the top-level entry `name` (and its pin marker)."""
        return {
            rel: o
            for rel, o in self.objects.items()
            if rel == name or rel.startswith(f"{name}/") or rel == f"{name}{layouts.PIN_MARKER}"
        }


def mirror(
    listing: Iterable[Object], prefix: str, root: Path, fetch: Callable[[str, int], bytes]
) -> Mirror:
    """Lay the listing out under `root` (see the module docstring)."""
    objects: dict[str, Object] = {}
    skipped: list[str] = []
    newest: dict[str, float] = {}
    for obj in listing:
        relative = _relative(obj.key, prefix)
        if relative is None or relative == AUDIT:
            if relative is None:
                skipped.append(f"{obj.key}: not laid out (empty, '.' or '..' path segment)")
            continue
        path = root / relative
        stamp = obj.modified.timestamp()
        try:
            if relative.endswith("/"):
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "xb") as file:
                    file.truncate(obj.size)
                os.utime(path, (stamp, stamp))
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            skipped.append(f"{obj.key}: both an object and a directory prefix")
            continue
        objects[relative.rstrip("/")] = obj
        parent = posixpath.dirname(relative.rstrip("/"))
        while parent:
            newest[parent] = max(newest.get(parent, 0.0), stamp)
            parent = posixpath.dirname(parent)
    for directory, stamp in newest.items():
        os.utime(root / directory, (stamp, stamp))
    return Mirror(root, objects, skipped, fetch)


def prune_prefix(
    store: Store,
    prefix: str,
    spec: CheckpointPolicySpec,
    *,
    dry_run: bool,
    policy: str,
    finished: bool = False,
    running: bool = False,
    pins: Collection[str] = (),
    resume_from: Collection[str] = (),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Report:
    """One run over the checkpoints under `prefix`, the same engine as `trainwarden prune`."""
    prefix = normalize_prefix(prefix)
    if not prefix:
        return Report("/", dry_run, error="refusing to prune a whole bucket: the prefix is empty")
    with tempfile.TemporaryDirectory(prefix="trainwarden-s3-") as scratch:
        tree = mirror(store.objects(prefix), prefix, Path(scratch), store.read)

        def remove(
            planned: retention.Checkpoint, rules: retention.Rules, now: datetime
        ) -> str | None:
            return _remove(store, prefix, tree, planned.name, spec)

        report = prune(
            tree.root,
            spec,
            dry_run=dry_run,
            finished=finished,
            running=running,
            pins=pins,
            resume_from=resume_from,
            clock=clock,
            remover=remove,
            reader=tree.read,
        )
    report.root = prefix or "/"
    report.notes.extend(tree.skipped[:5])
    if report.deleted and not dry_run:
        try:
            _audit(store, prefix, policy, report, clock())
        except StoreError as error:
            report.notes.append(f"audit record not written: {error}")
    return report


def _remove(
    store: Store, prefix: str, tree: Mirror, name: str, spec: CheckpointPolicySpec
) -> str | None:
    """Delete one planned checkpoint's objects if they are still exactly what was planned
    (a trainer re-saving that step, or a pin put on it since the scan, calls it off); what
    marks it complete goes last, once the rest is gone, so one the bucket deleted only in
    part is still complete, and the next run deletes the rest instead of keeping it as
    being written, forever."""
    planned = tree.members(name)
    listed: dict[str, Object] = {}
    for o in _listing(store, f"{prefix}{name}"):
        relative = _relative(o.key, prefix)
        if relative is not None:
            listed[relative.rstrip("/")] = o
    now = Mirror(tree.root, listed, []).members(name)
    if not now:
        return "gone before it was deleted"
    if _fingerprint(now) != _fingerprint(planned):
        return "changed since the scan"
    if spec.layout.type == "DeepSpeed" and "latest" in tree.objects:
        seen = tree.objects["latest"]
        latest = [o for o in _listing(store, f"{prefix}latest") if o.key == seen.key]
        if [(o.size, o.modified, o.etag) for o in latest] != [
            (seen.size, seen.modified, seen.etag)
        ]:
            return "DeepSpeed's latest changed since the scan"
    keys = sorted(o.key for o in now.values())
    markers = [k for k in keys if layouts.marks_completion(posixpath.basename(k))]
    failed = store.delete([k for k in keys if k not in markers])
    if not failed and markers:  # a checkpoint left half-deleted is still complete
        failed = store.delete(markers)
    if failed:
        raise DeletionFailed(f"{len(failed)} object(s) not deleted: {'; '.join(failed[:3])}")
    return None


def _listing(store: Store, prefix: str) -> list[Object]:
    """The re-check's listing, whole: one the bucket cannot answer fails this checkpoint
    (not deleted, and the run partial), never the run and what it already deleted."""
    try:
        return list(store.objects(prefix))
    except StoreError as error:
        raise DeletionFailed(f"not re-checked, so not deleted: {error}") from None


def _fingerprint(objects: dict[str, Object]) -> set[tuple[str, int, datetime, str]]:
    return {(rel, o.size, o.modified, o.etag) for rel, o in objects.items()}


def _audit(store: Store, prefix: str, policy: str, report: Report, now: datetime) -> None:
    deleted = set(report.deleted[:1000])
    body = {
        "prunedBy": policy,
        "time": now.isoformat(),
        "deleted": report.deleted[:1000],
        "bytesFreed": report.bytes_freed,
        "why": {
            d.checkpoint.name: d.reason for d in report.decisions if d.checkpoint.name in deleted
        },
    }
    store.write(f"{prefix}{AUDIT}", json.dumps(body, indent=1).encode())
