"""A VolumeReclaimPolicy's status from one evaluation's outcome: pure."""

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.volumes import (
    MAX_NOTES,
    MAX_TRACKED,
    NOTE_LENGTH,
    Deletion,
    Planned,
    TrackedClaim,
    VolumeReclaimPolicySpec,
    VolumeReclaimPolicyStatus,
)
from trainwarden.core import orphans
from trainwarden.core.conditions import ConditionUpdate, readiness, set_condition


def record(t: TrackedClaim) -> orphans.Record:
    keep = (t.keep_until, t.keep_seen) if t.keep_until is not None and t.keep_seen else None
    return orphans.Record(
        t.namespace, t.name, t.uid, t.unmounted_since, t.state, t.reported_at, t.snapshot_at, keep,
        t.reported_in,
    )  # fmt: skip


def tracked(r: orphans.Record, planned: Planned | None = None, size: int = 0) -> TrackedClaim:
    return TrackedClaim(
        namespace=r.namespace,
        name=r.name,
        uid=r.uid,
        unmounted_since=r.since,
        state=r.state,
        reported_at=r.reported_at,
        reported_in=r.reported_in,
        snapshot_at=r.snapshot_at,
        keep_until=r.keep[0] if r.keep else None,
        keep_seen=r.keep[1] if r.keep else None,
        planned=planned,
        bytes=size,
    )


def counts(records: Mapping[str, orphans.Record]) -> dict[str, int]:
    return dict(Counter(r.state for r in records.values()))


def heartbeat(spec: VolumeReclaimPolicySpec, old: datetime | None, now: datetime) -> datetime:
    """Refreshed at most every max(RESOLUTION, unmountedFor/10): a restart then loses at
    most that much observed time, and an idle policy writes no status for it alone."""
    every = max(orphans.RESOLUTION, spec.unmounted_for / 10)
    if old is None or now < old or now - old >= every:
        return now
    return old


@dataclass(frozen=True)
class Outcome:
    verdicts: Sequence[orphans.Verdict]
    records: Mapping[str, orphans.Record]
    untracked: int
    watched: int
    recent: Sequence[tuple[datetime, int]]
    notes: Sequence[str]
    deleted: Sequence[int]
    sizes: Mapping[str, int]
    """The bytes each judged claim requests, by uid."""


def planned(spec: VolumeReclaimPolicySpec, o: Outcome) -> dict[str, Planned]:
    """The same in DryRun and Enforce: every claim past its grace period that nothing
    leaves alone, whether the caps let it go now or later; by uid."""
    action: Planned = "SnapshotThenDelete" if spec.snapshot is not None else "Delete"
    return {v.record.uid: action for v in o.verdicts if v.action in orphans.PLANNED}


def build(
    spec: VolumeReclaimPolicySpec,
    old: VolumeReclaimPolicyStatus,
    o: Outcome,
    generation: int,
    now: datetime,
    stamp: datetime,
) -> VolumeReclaimPolicyStatus:
    conds, _ = set_condition(old.conditions, readiness([]), now=stamp, generation=generation)
    full = ConditionUpdate(C.TRACKING, "True", "AllTracked")
    if o.untracked:
        message = (
            f"{o.untracked} unmounted claims beyond the record's {MAX_TRACKED}: not aged "
            "(claims left alone give their place to new ones, and wait for a free one)"
        )
        full = ConditionUpdate(C.TRACKING, "False", "RecordFull", message)
    conds, _ = set_condition(conds, full, now=stamp, generation=generation)
    failed = sorted(
        f"{r.namespace}/{r.name}" for r in o.records.values() if r.state == "SnapshotFailed"
    )
    snaps = ConditionUpdate(C.SNAPSHOTS_READY, "True", "NoneFailed")
    if failed:
        snaps = ConditionUpdate(
            C.SNAPSHOTS_READY, "False", "SnapshotNotReady", "not deleted: " + ", ".join(failed[:10])
        )
    conds, _ = set_condition(conds, snaps, now=stamp, generation=generation)
    records = sorted(o.records.values(), key=lambda r: (r.namespace, r.name))
    plan = planned(spec, o)
    return VolumeReclaimPolicyStatus(
        observed_generation=generation,
        conditions=conds,
        heartbeat=heartbeat(spec, old.heartbeat, now),
        claims_watched=o.watched,
        claims_untracked=o.untracked,
        claims=[tracked(r, plan.get(r.uid), o.sizes.get(r.uid, 0)) for r in records],
        claims_planned=len(plan),
        notes=[n[:NOTE_LENGTH] for n in o.notes[:MAX_NOTES]],
        recent_actions=[Deletion(at=at, bytes=b) for at, b in orphans.compact(o.recent, now)],
        claims_deleted=old.claims_deleted + len(o.deleted),
        bytes_deleted=old.bytes_deleted + sum(o.deleted),
    )
