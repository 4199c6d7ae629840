"""VolumeSnapshots pruned through the API by the same retention engine as directories.

Each PVC's snapshots are one history. Every deletion is of exactly the object that was
planned (preconditions on uid and resourceVersion); a snapshot whose class would destroy
the physical snapshot is kept unless the policy allows it, and the status says why.
"""

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

from trainwarden import logs
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec, SnapshotSource
from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND as KIND
from trainwarden.checkpoints.locations import Context, Run, Target, record
from trainwarden.core import locations as loc
from trainwarden.core import retention
from trainwarden.core.scope import selects
from trainwarden.storage import snapshots as snap
from trainwarden.storage.pruning import rules_for

log = logs.get(__name__)
SNAPSHOT = "VolumeSnapshot"
NO_SOURCE = "(no source PVC)"


@dataclass(frozen=True)
class History:
    namespace: str
    pvc: str
    snapshots: tuple[snap.Snapshot, ...]
    location: loc.Location
    """Whether the jobs writing to the PVC run or finished, their pins and resume points."""


async def histories(
    kube: Kube, source: SnapshotSource, namespaces: list[str], writers: list[loc.Location]
) -> list[History]:
    """The selected snapshots of every scoped namespace, grouped by their source PVC."""
    classes: dict[str, str | None] = {}
    grouped: dict[tuple[str, str], list[snap.Snapshot]] = defaultdict(list)
    for namespace in namespaces:
        for obj in await kube.list(snap.API_VERSION, SNAPSHOT, namespace=namespace):
            if not selects(source.selector, obj["metadata"].get("labels") or {}):
                continue
            class_name = (obj.get("spec") or {}).get("volumeSnapshotClassName")
            if class_name and class_name not in classes:
                found = await kube.get(snap.API_VERSION, "VolumeSnapshotClass", None, class_name)
                classes[class_name] = (found or {}).get("deletionPolicy")
            read = snap.read(
                obj,
                deletion_policy=classes.get(class_name) if class_name else None,
                allow_delete=source.allow_delete_policy_delete,
            )
            if read is not None:
                grouped[(namespace, read.source_pvc or NO_SOURCE)].append(read)
    by_pvc: dict[tuple[str, str], loc.Location] = {}
    for w in writers:
        was = by_pvc.get((w.namespace, w.pvc))
        by_pvc[(w.namespace, w.pvc)] = w if was is None else _merge(was, w)
    return [
        History(ns, pvc, tuple(found), by_pvc.get((ns, pvc)) or loc.Location(ns, pvc, ""))
        for (ns, pvc), found in sorted(grouped.items())
    ]


def _merge(a: loc.Location, b: loc.Location) -> loc.Location:
    """Two directories on one PVC: its snapshots hold both, so both jobs' states count."""
    finished = [t for t in (a.finished_at, b.finished_at) if t is not None]
    return replace(
        a,
        jobs=(*a.jobs, *b.jobs),
        pins=a.pins | b.pins,
        resume_from=a.resume_from | b.resume_from,
        finished_at=max(finished) if finished else None,
        writers=a.writers + b.writers,
    )


def _target(history: History) -> Target:
    return Target(
        "VolumeSnapshots",
        history.namespace,
        history.pvc,
        "",
        history.location,
        f"VolumeSnapshot(s) of {history.pvc}",
        history.namespace,
    )


@dataclass
class SnapshotStore:
    """Each PVC's VolumeSnapshots, pruned through the API at once when due."""

    jobs: list[loc.TrainingJob]
    found: dict[tuple[str, str, str, str], History] = field(default_factory=dict)

    async def targets(self, ctx: Context, namespaces: list[str]) -> list[Target]:
        source = ctx.spec.storage.volume_snapshots
        if source is None:
            return []
        writers, _ = loc.locations([], "/", [j for j in self.jobs if j.namespace in namespaces])
        out = []
        for history in await histories(ctx.kube, source, namespaces, writers):
            target = _target(history)
            self.found[target.key] = history
            out.append(target)
        return out

    async def collect(
        self, ctx: Context, target: Target, entry: PrunedLocation
    ) -> tuple[PrunedLocation, bool]:
        return entry, False  # runs finish within the evaluation that starts them

    async def start(
        self, ctx: Context, target: Target, entry: PrunedLocation, due: datetime
    ) -> PrunedLocation:
        run = await prune(ctx, ctx.spec, self.found[target.key], ctx.now)
        subject = None
        if target.pvc != NO_SOURCE:
            subject = await ctx.kube.get(
                "v1", "PersistentVolumeClaim", target.namespace, target.pvc
            )
        entry, _ = await record(ctx, target, entry, run, subject)
        return entry


async def prune(ctx: Context, spec: CheckpointPolicySpec, history: History, now: datetime) -> Run:
    """One run over one PVC's snapshots: the same engine as directories decides."""
    where = history.location
    state = where.state(now, spec.after_completion.delay if spec.after_completion else None)
    checkpoints = [
        replace(
            s.checkpoint,
            pinned=s.checkpoint.pinned or s.name in where.pins,
            resume_point=s.checkpoint.resume_point or s.name in where.resume_from,
        )
        for s in history.snapshots
    ]
    rules = rules_for(spec, finished=state == "Finished", running=state == "Running")
    plan = retention.plan(checkpoints, rules, now=now, max_deletions=spec.max_deletions_per_run)
    by_name = {s.name: s for s in history.snapshots}
    dry = spec.mode == "DryRun"
    deleted: list[str] = []
    skipped: list[str] = []
    freed = 0
    for decision in plan.delete:
        target = by_name[decision.checkpoint.name]
        if not dry:
            why_not = await _delete(ctx.kube, ctx.name, target, decision.reason)
            if why_not:
                skipped.append(f"{target.name}: {why_not}")
                continue
        deleted.append(target.name)
        freed += target.checkpoint.size
    held = {d.reason for d in plan.keep if d.rule == "Held"}
    return Run(
        now,
        dry_run=dry,
        scanned=len(checkpoints),
        kept=len(checkpoints) - len(deleted),
        deleted=deleted,
        deleted_count=len(deleted),
        bytes_freed=freed,
        bytes_retained=sum(c.size for c in checkpoints) - freed,
        notes=[*plan.notes, *sorted(held), *(f"skipped {s}" for s in skipped)],
    )


async def _delete(kube: Kube, policy: str, target: snap.Snapshot, why: str) -> str | None:
    """Delete one snapshot as it was read, after an Event on it; returns why not."""
    obj: JSON = {
        "apiVersion": snap.API_VERSION,
        "kind": SNAPSHOT,
        "metadata": {"name": target.name, "namespace": target.namespace, "uid": target.uid},
    }
    message = f"{KIND} {policy} deletes VolumeSnapshot {target.name}: {why}"
    await kube.event(
        obj, type_="Normal", reason="CheckpointSnapshotDeleted", message=message, action="Prune"
    )
    try:
        await kube.delete(
            snap.API_VERSION,
            SNAPSHOT,
            target.namespace,
            target.name,
            uid=target.uid,
            resource_version=target.resource_version,
        )
    except Conflict:
        return "changed since it was read (deleted next run if still unneeded)"
    except Gone:
        return "already gone"
    log.info(
        "snapshot deleted",
        object=f"VolumeSnapshot/{target.namespace}/{target.name}",
        policy=f"{KIND}/{policy}",
        reason=why,
    )
    return None
