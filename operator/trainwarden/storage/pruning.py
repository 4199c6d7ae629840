"""One pruning run over a checkpoint directory: scan, plan, and delete what the plan says,
each deletion re-checked against the disk right before it happens.

The same code runs in `trainwarden prune` on an engineer's disk and in the pruner Job on a
PVC, so what someone tries locally is what the operator will do.

The directory is opened once and pinned (storage/beneath.py): the scan, the re-check and
the deletion all go through that handle, never through its path again, so swapping the
directory or a checkpoint for a symlink mid-run cannot point a deletion outside it. A
checkpoint is renamed to a tombstone (`.trainwarden-deleting-<name>`) before its contents
go, so one that cannot be deleted completely is never taken for a checkpoint afterwards
(incomplete, kept forever, or a different one); the next run finishes it. A failure of one
checkpoint is reported and the run goes on; a failure of the whole run is a report too.
"""

import json
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec, KeepBest
from trainwarden.api.v1alpha1.checkpoint_status import (
    MAX_COMPLETIONS,
    MAX_POSIX_SECONDS,
    TrainerResult,
)
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core import retention
from trainwarden.core.quantity import parse_quantity
from trainwarden.storage import beneath, layouts, results
from trainwarden.storage.layouts import TOMBSTONE
from trainwarden.storage.trainer_word import resolve_metric

Remover = Callable[[retention.Checkpoint, retention.Rules, datetime], str | None]
"""Deletes one planned checkpoint after re-checking it; returns why it was called off, or
None once deleted; raises DeletionFailed when it could not be deleted (completely)."""


class DeletionFailed(Exception):
    """A checkpoint that should have gone could not be deleted, or only in part."""


REPORT_LIMIT = 3500
"""Bytes of the JSON report (a container's termination message holds at most 4096)."""


def rules_for(spec: CheckpointPolicySpec, *, finished: bool, running: bool) -> retention.Rules:
    """The policy's rules for a directory whose job runs, finished, or is unknown.

    Once the job finished (and the policy has afterCompletion) the stricter rule replaces
    the history rules; while it runs its newest checkpoints are protected outright."""
    r = spec.retention
    size = int(parse_quantity(r.max_total_size)) if r.max_total_size else None
    if finished and spec.after_completion is not None:
        after = spec.after_completion
        return retention.Rules(
            keep_last=after.keep_last,
            keep_best=_best(after.keep_best),
            max_total_size=size,
            min_age=r.min_age,
        )
    return retention.Rules(
        keep_last=r.keep_last,
        keep_every_steps=r.keep_every.steps if r.keep_every else None,
        keep_every_interval=r.keep_every.interval if r.keep_every else None,
        keep_best=_best(r.keep_best),
        max_age=r.max_age,
        max_total_size=size,
        min_age=r.min_age,
        protect_keep_last=running,
    )


def _best(best: KeepBest | None) -> retention.Best | None:
    return retention.Best(best.metric, best.order, best.count) if best else None


def resolved(rules: retention.Rules, layout: str) -> tuple[retention.Rules, list[str]]:
    """The rules with keepBest's metric named as the layout's trainer resolves it (for
    directories and prefixes: a snapshot's metrics are its annotations), and a note when
    that differs from the policy's spelling."""
    if rules.keep_best is None:
        return rules, []
    metric, note = resolve_metric(layout, rules.keep_best.metric)
    best = replace(rules.keep_best, metric=metric)
    return replace(rules, keep_best=best), [note] if note else []


@dataclass
class Report:
    """What a run found and did; `deleted` names what it deleted (would delete, in DryRun)."""

    root: str
    dry_run: bool
    scanned: int = 0
    kept: int = 0
    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    bytes_retained: int = 0
    skipped: list[str] = field(default_factory=list)
    """Deletions called off at the last moment, with why (a writer came back, say)."""
    notes: list[str] = field(default_factory=list)
    decisions: list[retention.Decision] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Checkpoints that could not be judged or deleted (completely), with why."""
    error: str | None = None
    """Why the whole run failed (nothing was planned), if it did."""
    scanned_at: datetime | None = None
    """When the scan began."""
    completed: list[datetime] = field(default_factory=list)
    """When the complete checkpoints it found were written, newest first (at most
    MAX_COMPLETIONS): run receipts estimate failure waste from them."""
    result: TrainerResult | None = None
    """What the trainer's own state says the run achieved (storage/results.py)."""

    def summary(self) -> dict[str, Any]:
        """A compact JSON-able summary that fits a termination message (4096 bytes): every
        text is cut to a size in bytes as JSON spells it (a name of non-ASCII characters
        takes six times its length), at most three lines of each kind, and the names of
        what was deleted fill what is left; `deletedCount` still tells the whole number."""
        out: dict[str, Any] = {
            "root": _clip(self.root, 256),
            "dryRun": self.dry_run,
            "failed": self.error is not None,
            "error": _clip(self.error or "", 400),
            "scanned": self.scanned,
            "kept": self.kept,
            "deletedCount": len(self.deleted),
            "bytesFreed": self.bytes_freed,
            "bytesRetained": self.bytes_retained,
            "notes": [_clip(n, 200) for n in self.notes[:3]],
            "skipped": [_clip(n, 200) for n in self.skipped[:3]],
            "failureCount": len(self.failures),
            "failures": [_clip(n, 200) for n in self.failures[:3]],
            "scannedAt": _seconds(self.scanned_at) if self.scanned_at else None,
            "completed": _times(self.completed),
            "result": self.result.model_dump(by_alias=True, mode="json") if self.result else None,
            "deleted": [],
        }
        budget = REPORT_LIMIT - len(_dumps(out))
        for name in self.deleted:
            budget -= len(_dumps(name)) + 1
            if budget < 0:
                break
            out["deleted"].append(name)
        return out


def _seconds(t: datetime) -> int:
    return int(t.timestamp())


def _times(times: list[datetime]) -> list[int]:
    """The newest completion times the operator accepts: an mtime before 1970 or after
    MAX_POSIX_SECONDS (a tenant's touch) is left out, not a report refused whole."""
    seconds = (_seconds(t) for t in times)
    return [s for s in seconds if 0 <= s <= MAX_POSIX_SECONDS][:MAX_COMPLETIONS]


def _clip(text: str, size: int) -> str:
    """`text` cut so that its JSON spelling takes at most `size` bytes."""
    while len(_dumps(text)) > size:
        text = text[: len(text) * 3 // 4]
    return text


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def prune(
    root: Path,
    spec: CheckpointPolicySpec,
    *,
    dry_run: bool,
    finished: bool = False,
    running: bool = False,
    pins: Collection[str] = (),
    resume_from: Collection[str] = (),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    remover: Remover | None = None,
    reader: layouts.Reader | None = None,
    within: Path | None = None,
) -> Report:
    """Scan `root`, plan by the policy and delete (unless `dry_run`) what the plan says;
    `remover` carries out one deletion (by default `remove`, through the pinned directory),
    `reader` reads metadata (by default through the pinned directory).
    With `within` (the pruner's mount), no component of `root` below it may be a symlink.
    Never raises for what is on the disk: a run that cannot start reports `error`."""
    try:
        with beneath.pinned(str(root), within=str(within) if within else None) as tree:
            state = _State(finished, running, frozenset(pins), frozenset(resume_from))
            act = _Acts(clock, remover, reader)
            return _run(tree, spec, state, act, dry_run=dry_run)
    except OSError as error:
        return Report(str(root), dry_run, error=f"cannot read {root}: {beneath.why(error)}")


@dataclass(frozen=True)
class _Acts:
    """How a run reads time and metadata and deletes (the S3 mirror brings its own)."""

    clock: Callable[[], datetime]
    remover: Remover | None
    reader: layouts.Reader | None


@dataclass(frozen=True)
class _State:
    """What the operator knows of the jobs writing into the directory."""

    finished: bool
    running: bool
    pins: frozenset[str]
    resume_from: frozenset[str]


def _run(
    tree: beneath.Pinned,
    spec: CheckpointPolicySpec,
    state: _State,
    act: _Acts,
    *,
    dry_run: bool,
) -> Report:
    clock, remover = act.clock, act.remover
    scanned_at = clock()
    scanned = layouts.scan(tree, spec.layout, act.reader)
    found = [
        replace(
            c,
            pinned=c.pinned or c.name in state.pins,
            resume_point=c.resume_point or c.name in state.resume_from,
        )
        for c in scanned.checkpoints
    ]
    rules = rules_for(spec, finished=state.finished, running=state.running)
    rules, metric_notes = resolved(rules, spec.layout.type)
    result = results.result(spec.layout.type, found, rules.keep_best)
    plan = retention.plan(found, rules, now=clock(), max_deletions=spec.max_deletions_per_run)
    report = Report(tree.path, dry_run, scanned=len(found) + len(scanned.failures))
    report.scanned_at = scanned_at
    report.result = result
    report.completed = sorted((c.created for c in found if c.complete), reverse=True)[
        :MAX_COMPLETIONS
    ]
    notes = [*plan.notes, *metric_notes, *scanned.notes]
    report.notes, report.decisions = notes, list(plan.decisions)
    report.failures = list(scanned.failures)
    if remover is None:
        _finish_tombstones(tree, report)
    freed = 0
    for decision in plan.delete:
        c = decision.checkpoint
        try:
            if dry_run:
                why_not = None
            elif remover is not None:
                why_not = remover(c, rules, clock())
            else:
                why_not = remove(tree, c, scanned.identities[c.name], spec, rules, clock())
        except (DeletionFailed, OSError, ValueError, OverflowError) as error:
            report.failures.append(f"{c.name}: {beneath.why(error)}")
            continue
        if why_not is not None:
            report.skipped.append(f"{c.name}: {why_not}")
            continue
        report.deleted.append(c.name)
        freed += c.size
    report.bytes_freed = freed
    report.kept = report.scanned - len(report.deleted)
    report.bytes_retained = sum(c.size for c in found) - freed
    return report


def _finish_tombstones(tree: beneath.Pinned, report: Report) -> None:
    """Checkpoints an earlier run renamed for deletion and could not delete completely:
    deleted now (Enforce), or named (DryRun)."""
    for name in sorted(n for n in os.listdir(tree.fd) if n.startswith(TOMBSTONE)):
        if report.dry_run:
            report.notes.append(f"{name}: left half-deleted by an earlier run")
            continue
        try:
            info = os.stat(name, dir_fd=tree.fd, follow_symlinks=False)
            removal = beneath.remove(tree.fd, name, beneath.identity(info))
        except OSError as error:
            report.failures.append(f"{name}: still not deleted: {beneath.why(error)}")
            continue
        if removal.count:
            report.failures.append(f"{name}: still not deleted: {removal}")
        else:
            report.notes.append(f"{name}: finished deleting what an earlier run left")


def remove(
    tree: beneath.Pinned,
    planned: retention.Checkpoint,
    scanned_as: beneath.Identity,
    spec: CheckpointPolicySpec,
    rules: retention.Rules,
    now: datetime,
) -> str | None:
    """Delete one planned checkpoint unless the disk says otherwise; returns why not.

    A trainer may have written to it since the scan (a resumed run re-saving a step): it is
    deleted only if it is exactly what was planned (the same file, still complete, the
    same size and time, old enough). Nothing outside the pinned directory is touched: the
    entry is renamed to its tombstone and deleted through the handle, never following a
    link; raises DeletionFailed for what could not be deleted.
    """
    current = layouts.entry(tree, planned.name, spec.layout)
    if current is None:
        return "gone (or no longer a checkpoint) before it was deleted"
    now_as, identity = current
    if identity != scanned_as:
        return "replaced since the scan"
    if not now_as.complete:
        return "incomplete now (being written again)"
    if (now_as.created, now_as.size) != (planned.created, planned.size):
        return "changed since the scan"
    if now_as.pinned or now_as.resume_point:
        return "pinned or named by a resume pointer since the scan"
    if now - now_as.created < rules.min_age:
        return "younger than minAge"
    if identity[0] != tree.identity[0]:
        return "another filesystem is mounted there"
    tombstone = f"{TOMBSTONE}{planned.name}"
    os.rename(planned.name, tombstone, src_dir_fd=tree.fd, dst_dir_fd=tree.fd)
    try:
        removal = beneath.remove(tree.fd, tombstone, identity)
    except beneath.Moved:  # swapped between the check and the rename: put it back
        os.rename(tombstone, planned.name, src_dir_fd=tree.fd, dst_dir_fd=tree.fd)
        return "replaced while it was being deleted"
    if removal.count:
        raise DeletionFailed(f"partly deleted, the rest left as {tombstone}: {removal}")
    return None


def load_spec(text: str) -> CheckpointPolicySpec:
    """A CheckpointPolicy manifest (as kept in a GitOps repo) or just its spec, YAML or
    JSON; raises ValueError with every problem, as the API server would list them."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"not YAML: {error}") from None
    if not isinstance(doc, dict):
        raise ValueError("expected a CheckpointPolicy or its spec, as a mapping")
    if doc.get("kind") not in (None, CHECKPOINT_KIND):
        raise ValueError(f"expected a CheckpointPolicy, got a {doc.get('kind')}")
    parsed = parse_spec(CheckpointPolicySpec, doc.get("spec", doc))
    if isinstance(parsed, list):
        raise ValueError("; ".join(parsed))
    return parsed


def human_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
