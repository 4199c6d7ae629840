"""One interface for every kind of checkpoint location a CheckpointPolicy governs — PVC
directories (pruner Jobs), VolumeSnapshot histories, S3 prefixes — and the one place
that records what a pruning run did: the status entry, metrics, the Event, the log line,
and (for a PVC) the annotation saying which policy pruned it.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Gone, Kube
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.checkpoint_status import (
    MAX_COMPLETIONS,
    PrunedLocation,
    TrainerResult,
)
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND as KIND
from trainwarden.api.v1alpha1.names import PRUNED, PRUNED_BY
from trainwarden.core import locations as loc
from trainwarden.core.announce import Announcements
from trainwarden.core.retention import UNRANKED
from trainwarden.storage.pruning import human_size

log = logs.get(__name__)
Source = Literal["PVC", "VolumeSnapshots", "S3"]
ACTION: dict[str, str] = {"PVC": "Prune", "VolumeSnapshots": "PruneSnapshots", "S3": "PruneS3"}
"""The `action` label of trainwarden_actions_total per kind of location."""
PRUNED_REASON: dict[str, str] = {
    "PVC": "CheckpointsPruned",
    "VolumeSnapshots": "SnapshotsPruned",
    "S3": "CheckpointsPruned",
}


@dataclass(frozen=True)
class Target:
    """One location a policy governs, and what its jobs are doing."""

    source: Source
    namespace: str
    pvc: str
    path: str
    location: loc.Location
    """The writers' state, pins and resume points."""
    noun: str
    """What a run prunes, for messages: "checkpoint(s) in ckpt:/runs", "VolumeSnapshot(s)
    of ckpt", "checkpoint(s) in s3://bucket/prefix"."""
    metrics_namespace: str
    """The namespace metrics attribute the location to (an S3 prefix: its credentials')."""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.source, self.namespace, self.pvc, self.path)

    def entry(self) -> PrunedLocation:
        return PrunedLocation(
            source=self.source, namespace=self.namespace, pvc=self.pvc, path=self.path
        )


@dataclass(frozen=True)
class Run:
    """What one pruning run did, whichever store ran it; `error` when it failed whole."""

    finished_at: datetime | None
    dry_run: bool = False
    scanned: int = 0
    kept: int = 0
    deleted: Sequence[str] = ()
    deleted_count: int = 0
    bytes_freed: int = 0
    bytes_retained: int = 0
    notes: Sequence[str] = ()
    failures: int = 0
    """Checkpoints the run could not judge or delete (completely): a partial run, which
    fails the location and is retried soon, as a failed one is (core/locations.py)."""
    error: str | None = None
    job: str | None = None
    """The pruner Job that ran it (PVC directories)."""
    scanned_at: datetime | None = None
    """When it looked at the checkpoints (None: it did not get that far)."""
    completed: Sequence[datetime] = ()
    """When the complete checkpoints it saw were written."""
    result: TrainerResult | None = None
    """What the trainer's own state said the run achieved (storage/results.py)."""


@dataclass(frozen=True)
class Context:
    """What every location of one evaluation shares."""

    kube: Kube
    policy: JSON
    spec: CheckpointPolicySpec
    now: datetime
    announced: Announcements = field(default_factory=Announcements)
    """Problems said already (the policy's memory)."""
    touched: set[str] = field(default_factory=set)
    """Problems seen this evaluation: the rest are forgotten, so one that recurs after a
    break is said again and the memory never outgrows what is current."""

    @property
    def name(self) -> str:
        return str(self.policy["metadata"]["name"])


class Store(Protocol):
    """A kind of location: finds what a policy governs, reports finished runs, starts new
    ones. `start` returns the entry as the run left it (done at once for snapshots and S3,
    started for a pruner Job, whose `collect` reads it later)."""

    async def targets(self, ctx: Context, namespaces: list[str]) -> list[Target]: ...

    async def collect(
        self, ctx: Context, target: Target, entry: PrunedLocation
    ) -> tuple[PrunedLocation, bool]:
        """The entry with any finished run folded in, and whether a run is still going."""
        ...

    async def start(
        self, ctx: Context, target: Target, entry: PrunedLocation, due: datetime
    ) -> PrunedLocation: ...


def _message(ctx: Context, target: Target, run: Run) -> str:
    verb = "would delete" if run.dry_run else "deleted"
    count = run.deleted_count
    listed = ", ".join(run.deleted[:10]) + (f" and {count - 10} more" if count > 10 else "")
    return (
        f"{KIND} {ctx.name} {verb} {count} {target.noun} ({human_size(run.bytes_freed)}): "
        f"{listed or 'none'}; {run.kept} kept"
    )


async def _failed(
    ctx: Context, target: Target, entry: PrunedLocation, run: Run, subject: JSON | None
) -> PrunedLocation:
    message = run.error or "failed"
    metrics.report_action(KIND, ctx.name, ACTION[target.source], "failed")
    log.warning("pruning failed", object=target.noun, policy=f"{KIND}/{ctx.name}", error=message)
    if subject is not None:
        await ctx.kube.event(
            subject, type_="Warning", reason="PruneFailed", message=message, action="Prune"
        )
    update = {
        "last_run": run.finished_at,
        "message": message[:1000],
        "failed": True,
        "failed_runs": entry.failed_runs + 1,
    }
    if run.job is not None:
        update["last_job"] = run.job
    return entry.model_copy(update=update)


async def record(
    ctx: Context, target: Target, entry: PrunedLocation, run: Run, subject: JSON | None
) -> tuple[PrunedLocation, int]:
    """Fold one finished run into the location's status entry and say what it did: an
    Event on `subject` (the PVC; the policy for S3), a log line, metrics, and for a PVC
    the annotation naming the policy. Returns the entry and the bytes it freed."""
    if run.error is not None:
        return await _failed(ctx, target, entry, run, subject), 0
    gained = 0 if run.dry_run else run.bytes_freed
    message = _message(ctx, target, run)
    result = "dry-run" if run.dry_run else "done"
    if run.failures:
        result = "partial"
        await _partial(ctx, target, run, subject)
    metrics.report_action(KIND, ctx.name, ACTION[target.source], result)
    metrics.report_checkpoints_pruned(
        ctx.name, target.metrics_namespace, 0 if run.dry_run else run.deleted_count, gained
    )
    log.info(
        "checkpoints would be pruned" if run.dry_run else "checkpoints pruned",
        object=target.noun,
        policy=f"{KIND}/{ctx.name}",
        job=run.job,
        deleted=run.deleted_count,
        bytes_freed=gained,
        message=message,
    )
    if subject is not None and run.deleted_count:
        await _said(ctx, target, run, subject, message)
    unranked = next((n for n in run.notes if n.startswith(UNRANKED)), None)
    if subject is not None and unranked is not None:  # it holds what it cannot judge: say so
        key = f"unranked {target.key}"
        await announce_once(ctx, key, subject, "KeepBestCannotRank", f"{target.noun}: {unranked}")
    return _folded(entry, run, gained), gained


async def _said(ctx: Context, target: Target, run: Run, subject: JSON, message: str) -> None:
    """The Event on the subject, and (Enforce, a PVC) the annotation naming the policy."""
    reason = PRUNED_REASON[target.source]
    reason = reason.replace("Pruned", "WouldBePruned") if run.dry_run else reason
    await ctx.kube.event(subject, type_="Normal", reason=reason, message=message, action="Prune")
    if run.dry_run or target.source != "PVC":
        return
    marks = {PRUNED_BY: f"{KIND}/{ctx.name}", PRUNED: f"{run.finished_at}: {message}"}
    patch = {"metadata": {"annotations": {k: v[:1000] for k, v in marks.items()}}}
    try:
        await ctx.kube.merge_patch(
            "v1", "PersistentVolumeClaim", target.namespace, target.pvc, patch
        )
    except Gone:  # deleted since it was read: the run still counts
        log.info("pruned PVC is gone", object=target.noun, policy=f"{KIND}/{ctx.name}")


def _folded(entry: PrunedLocation, run: Run, gained: int) -> PrunedLocation:
    """The status entry after a run that went through (whole or in part)."""
    update: dict[str, object] = {
        "last_run": run.finished_at,
        "scanned": run.scanned,
        "kept": run.kept,
        "deleted": run.deleted_count,
        "deleted_names": list(run.deleted[:100]),
        "bytes_freed": min(entry.bytes_freed + gained, 2**63 - 1),
        "bytes_retained": run.bytes_retained,
        "message": _notes(run)[:1000],
        "failed": run.failures > 0,
        "failed_runs": entry.failed_runs + 1 if run.failures else 0,
    }
    if run.job is not None:
        update["last_job"] = run.job
    if run.scanned_at is not None:
        update |= _completions(entry, run.scanned_at, run.completed)
        update["result"] = run.result
    return entry.model_copy(update=update)


def _completions(
    entry: PrunedLocation, scanned_at: datetime, seen: Sequence[datetime]
) -> dict[str, object]:
    """The location's completion history with what one scan saw (run receipts read it)."""
    was = entry.completions_as_of
    scanned_at = scanned_at.replace(microsecond=0)  # down: never claims a later look
    latest = scanned_at if was is None else max(was, scanned_at)
    times = loc.completions(entry.completions, seen, scanned_at, MAX_COMPLETIONS)
    return {"completions": times, "completions_as_of": latest}


def _notes(run: Run) -> str:
    notes = "; ".join(run.notes)
    if not run.failures:
        return notes
    return f"partial run: {run.failures} checkpoint(s) not judged or not deleted; {notes}"


async def _partial(ctx: Context, target: Target, run: Run, subject: JSON | None) -> None:
    """A run that went through but left checkpoints it could not judge or delete."""
    message = f"{target.noun}: {_notes(run)}"[:1000]
    log.warning("pruning partly failed", object=target.noun, policy=f"{KIND}/{ctx.name}")
    if subject is not None:
        await ctx.kube.event(
            subject, type_="Warning", reason="PruneFailed", message=message, action="Prune"
        )


async def announce_once(ctx: Context, key: str, obj: JSON, reason: str, message: str) -> None:
    """A problem that would repeat every evaluation is said once while it lasts."""
    ctx.touched.add(key)
    if not ctx.announced.first(key):
        return
    meta = obj["metadata"]
    log.warning(
        reason, object=f"{obj['kind']}/{meta.get('namespace')}/{meta['name']}", message=message
    )
    await ctx.kube.event(obj, type_="Warning", reason=reason, message=message, action="Observe")


def job_ref(job: loc.TrainingJob) -> JSON:
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "metadata": {"name": job.name, "namespace": job.namespace, "uid": job.uid},
    }
