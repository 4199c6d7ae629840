"""Which PersistentVolumeClaims a VolumeReclaimPolicy may delete, and when: pure.

The operator keeps its own record of when each claim in scope was last mounted (`track`),
moved forward by every gap in its observation (`gap`), so downtime never ages a claim. A
claim unmounted for `unmounted_for` is judged (`judge`): the first rule that leaves it
alone wins, each with its reason; an orphan is reported, waits out the grace period, is
snapshotted if the policy says so, and only then planned for deletion. `within_caps`
bounds how many act per minute and how many bytes per hour. docs/storage.md lists the rules.
"""

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from trainwarden.api.v1alpha1.names import KEEP_UNTIL, PROTECT_LABEL
from trainwarden.core import exemptions
from trainwarden.core.claims import ClaimFacts, request_bytes
from trainwarden.core.keep import NAME, SHORT, bounded, cut
from trainwarden.core.pods import PodFacts
from trainwarden.core.shapes import mapping, mappings

RESOLUTION = timedelta(minutes=1)
"""An observation gap longer than this (a restart, a stalled loop) moves every clock
forward by the whole gap: a mount that began and ended unseen must not age a claim."""
MAX_OWNERS = 8
State = Literal["Unmounted", "Orphaned", "Exempt", "Snapshotting", "SnapshotFailed", "Deleting"]
Action = Literal["Report", "Snapshot", "AwaitSnapshot", "Delete"]
PLANNED: frozenset[str] = frozenset({"Snapshot", "AwaitSnapshot", "Delete"})
ANY_CLAIM = "*"
"""In no claim name the API accepts: a workload too large to walk may name any claim."""
UNKNOWN = ""
"""What a pod's record names past MAX_POD_CLAIMS (core/pods.py `mounted_claims`): it may
mount any claim of its namespace, so none there is deleted while it exists."""
"""The verdicts that are (Enforce) or would be (DryRun) a deletion: status.plannedActions."""


@dataclass(frozen=True, slots=True)
class Record:
    """The last-mount record of one claim no pod mounts now (status.claims)."""

    namespace: str
    name: str
    uid: str
    since: datetime
    """When a pod last mounted it, or when it was first seen unmounted."""
    state: State = "Unmounted"
    reported_at: datetime | None = None
    snapshot_at: datetime | None = None
    keep: tuple[str, datetime] | None = None
    """The keep-until value as first seen, and when (the cap runs from then)."""
    reported_in: Literal["DryRun", "Enforce"] | None = None
    """The mode the Orphaned Event was posted in: a DryRun report starts no Enforce grace."""


def gap(last: datetime | None, now: datetime) -> timedelta:
    """How far to move every clock: the time since the last observation when longer than
    RESOLUTION, else nothing."""
    if last is None or now - last <= RESOLUTION:
        return timedelta(0)
    return now - last


def shifted(records: Mapping[str, Record], by: timedelta) -> dict[str, Record]:
    """Every clock moved forward by `by` (a keep-until is wall time: it stays)."""
    if not by:
        return dict(records)

    def move(t: datetime | None) -> datetime | None:
        return t + by if t is not None else None

    return {
        uid: replace(
            r, since=r.since + by, reported_at=move(r.reported_at), snapshot_at=move(r.snapshot_at)
        )
        for uid, r in records.items()
    }


@dataclass(frozen=True)
class Mounts:
    """The claims the pods of one namespace name: mounted now, or until a terminal pod's end."""

    now: frozenset[str] = frozenset()
    ended: Mapping[str, datetime] = field(default_factory=dict)

    def mounted(self, claim: str) -> bool:
        return UNKNOWN in self.now or claim in self.now

    def last(self, claim: str) -> datetime | None:
        found = [t for c, t in self.ended.items() if c in (claim, UNKNOWN)]
        return max(found) if found else None


def mounts(pods: Iterable[PodFacts], now: datetime) -> Mounts:
    """A namespace's pods as mounts: any pod not terminal (Pending, gated, deleting
    included) mounts its claims now; a terminal one until its end (now if unknown)."""
    current: set[str] = set()
    ended: dict[str, datetime] = {}
    for pod in pods:
        if pod.snapshot.outcome == "Running":
            current.update(pod.claims)
            continue
        end = min(pod.snapshot.end or now, now)
        for claim in pod.claims:
            ended[claim] = max(end, ended.get(claim, end))
    return Mounts(frozenset(current), ended)


def track(
    records: Mapping[str, Record],
    claims: Sequence[ClaimFacts],
    mounts_in: Mapping[str, Mounts],
    now: datetime,
    cap: int,
    yielded: AbstractSet[str] = frozenset(),
) -> tuple[dict[str, Record], int, list[str]]:
    """The records after one observation, how many unmounted claims went untracked, and
    the records that gave way. A claim mounted now has none; a mount that ended after a
    record began restarts it. Recorded claims keep their place, except that a claim left
    alone by a rule (Exempt, the oldest first) gives its place to a new claim the record
    has no room for: otherwise claims no rule lets go of would fill the record for good.
    A claim that gave way (`yielded`) takes only a free place, never another's, so two
    never take turns; it starts aging again from the time it does (never earlier)."""
    out: dict[str, Record] = {}
    fresh: list[ClaimFacts] = []
    for c in sorted(claims, key=lambda c: (c.created, c.uid)):
        seen = mounts_in.get(c.namespace, Mounts())
        if c.deleting_since is not None or seen.mounted(c.name):
            continue
        old = records.get(c.uid)
        if old is None:
            fresh.append(c)
            continue
        last = seen.last(c.name)
        restarted = last is not None and last > old.since
        out[c.uid] = Record(c.namespace, c.name, c.uid, last) if restarted and last else old
    newcomers = [c for c in fresh if c.uid not in yielded]
    need = len(newcomers) - (cap - len(out)) if newcomers else 0
    exempt = sorted((r for r in out.values() if r.state == "Exempt"), key=_oldest)
    gave_way = [r.uid for r in exempt[: max(0, need)]]
    for uid in gave_way:
        del out[uid]
    untracked = 0
    for c in [*newcomers, *(c for c in fresh if c.uid in yielded)]:
        if len(out) >= cap:
            untracked += 1
            continue
        out[c.uid] = Record(c.namespace, c.name, c.uid, now)
    return out, untracked + len(gave_way), gave_way


def _oldest(r: Record) -> tuple[datetime, str]:
    return (r.since, r.uid)


@dataclass(frozen=True, slots=True)
class Claim:
    """What the API says of a matured claim, read fresh before judging it; bounded."""

    uid: str
    resource_version: str
    protected: bool
    annotations: Mapping[str, str]
    """Only keep-until."""
    owners: tuple[tuple[str, str], ...]
    """(kind, name) of its owner references."""
    volume: str
    bytes: int
    deleting: bool


def claim(obj: Mapping[str, Any]) -> Claim:
    """The judged view of a claim object, whatever its writer put in it."""
    meta, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
    labels, notes = mapping(meta.get("labels")), mapping(meta.get("annotations"))
    keep = notes.get(KEEP_UNTIL)
    owners = mappings(meta.get("ownerReferences"))
    return Claim(
        uid=bounded(meta.get("uid") or "", SHORT),
        resource_version=bounded(str(meta.get("resourceVersion") or ""), SHORT),
        protected=labels.get(PROTECT_LABEL) == "true",
        annotations={KEEP_UNTIL: cut(keep, SHORT)} if keep is not None else {},
        owners=tuple((bounded(o.get("kind"), NAME), bounded(o.get("name"), NAME)) for o in owners)[
            : MAX_OWNERS + 1
        ],
        volume=bounded(spec.get("volumeName") or "", NAME),
        bytes=request_bytes(mapping(mapping(spec.get("resources")).get("requests")).get("storage")),
        deleting=meta.get("deletionTimestamp") is not None,
    )


MAX_NODES = 20_000
"""Nodes of a workload object walked for claim names; past it, it may name any."""


def template_claims(obj: Mapping[str, Any]) -> frozenset[str]:
    """The claims a workload's pod templates (at any depth: JobSet, Kubeflow, Ray) name
    by persistentVolumeClaim.claimName; ANY_CLAIM for an object too large to walk."""
    found: set[str] = set()
    stack: list[Any] = [obj.get("spec")]
    walked = 0
    while stack:
        node = stack.pop()
        walked += 1
        if walked > MAX_NODES:
            return frozenset({ANY_CLAIM})
        if isinstance(node, Mapping):
            name = mapping(node.get("persistentVolumeClaim")).get("claimName")
            if isinstance(name, str):
                found.add(name if len(name) <= NAME else ANY_CLAIM)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(found)


def snapshot_ready(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and mapping(obj.get("status")).get("readyToUse") is True


@dataclass(frozen=True)
class Context:
    """What else decides a claim's fate: read per namespace and per claim by the shell."""

    references: Mapping[str, str] = field(default_factory=dict)
    """Claim name → the workload whose pod template names it ("Job/x")."""
    statefulsets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """StatefulSet name → its volumeClaimTemplates' names."""
    unknown: str | None = None
    """Why the namespace's workloads could not all be read (then nothing is deleted there)."""
    checkpoint: str | None = None
    """The CheckpointPolicy that governs the claim."""
    retain: bool | None = False
    """Its PersistentVolume's reclaimPolicy is Retain; None: the volume could not be read."""
    snapshot: Mapping[str, Any] | None = None
    """The VolumeSnapshot the policy requested of it, if found."""


@dataclass(frozen=True)
class Rules:
    unmounted_for: timedelta
    grace: timedelta
    max_keep: timedelta
    snapshot_timeout: timedelta | None
    """None: no snapshot is taken."""
    enforce: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    record: Record
    reason: str
    action: Action | None = None
    due: datetime | None = None
    problem: str | None = None
    """An annotation ignored, and why (a keep-until that is no time)."""


def _statefulset(name: str, owners: Sequence[tuple[str, str]], ctx: Context) -> str | None:
    for kind, owner in owners:
        if kind == "StatefulSet":
            return owner
    for sts, templates in ctx.statefulsets.items():
        for template in templates:
            head, _, ordinal = name.rpartition("-")
            if head == f"{template}-{sts}" and ordinal.isdigit():
                return sts
    return None


def _left_alone(rec: Record, c: Claim, ctx: Context) -> str | None:
    """Why a matured claim is never deleted, by the first rule that says so; None: none."""
    sts = _statefulset(rec.name, c.owners, ctx)
    rules: list[tuple[bool, str]] = [
        (c.deleting, "already being deleted"),
        (c.protected, f"labelled {PROTECT_LABEL}=true"),
        (sts is not None, f"StatefulSet {sts}'s persistentVolumeClaimRetentionPolicy governs it"),
        (bool(c.owners), f"owned by {'/'.join(c.owners[0]) if c.owners else ''}: deleted with it"),
        (rec.name in ctx.references, f"named by {ctx.references.get(rec.name)}'s pod template"),
        (ANY_CLAIM in ctx.references, f"{ctx.references.get(ANY_CLAIM)} may name any claim"),
        (ctx.unknown is not None, f"workloads unknown: {ctx.unknown}"),
        (ctx.checkpoint is not None, f"governed by CheckpointPolicy {ctx.checkpoint}"),
        (ctx.retain is None, f"PersistentVolume {c.volume} could not be read"),
        (bool(ctx.retain), f"bound to PersistentVolume {c.volume} with reclaimPolicy Retain"),
    ]
    return next((why for hit, why in rules if hit), None)


def judge(rec: Record, c: Claim | None, ctx: Context, rules: Rules, now: datetime) -> Verdict:
    """One record's next step. Orphaned: reported once, then after the grace period
    snapshotted (waiting for readyToUse at most the timeout) and deleted."""
    matured = rec.since + rules.unmounted_for
    if now < matured:
        return Verdict(replace(rec, state="Unmounted", reported_at=None), "unmounted", due=matured)
    if c is None or c.uid != rec.uid:
        return Verdict(rec, "not read: judged again next time")
    why = _left_alone(rec, c, ctx)
    found = exemptions.exemption(
        c.annotations, None, now=now, allow_opt_out=False, max_keep=rules.max_keep,
        priority_classes=(), seen=rec.keep,
    )  # fmt: skip
    rec = replace(rec, keep=found.acknowledged)
    why = why or found.reason
    if why is not None:
        exempt = replace(rec, state="Exempt", reported_at=None, snapshot_at=None)
        return Verdict(exempt, why, due=found.until, problem=found.problem)
    mode = "Enforce" if rules.enforce else "DryRun"
    if rec.reported_at is None or rec.reported_in != mode:
        orphaned = replace(rec, state="Orphaned", reported_at=None, snapshot_at=None)
        return Verdict(orphaned, _orphaned(rec, rules), "Report", problem=found.problem)
    if now < rec.reported_at + rules.grace:
        due = rec.reported_at + rules.grace
        waiting = replace(rec, state="Orphaned")
        return Verdict(
            waiting, f"grace period until {due.isoformat()}", due=due, problem=found.problem
        )
    after = _after_grace(rec, ctx, rules, now)
    if not rules.enforce and after.record.state == "Deleting":  # DryRun deletes nothing
        after = replace(after, record=replace(after.record, state="Orphaned"))
    return replace(after, problem=found.problem)


def _orphaned(rec: Record, rules: Rules) -> str:
    return (
        f"no pod has mounted it since {rec.since.isoformat()} (unmountedFor {rules.unmounted_for})"
    )


def _after_grace(rec: Record, ctx: Context, rules: Rules, now: datetime) -> Verdict:
    if rules.snapshot_timeout is None:
        return Verdict(replace(rec, state="Deleting"), "orphaned past its grace period", "Delete")
    if rec.snapshot_at is None:
        return Verdict(rec, "orphaned past its grace period: snapshot first", "Snapshot")
    if snapshot_ready(ctx.snapshot):
        return Verdict(replace(rec, state="Deleting"), "its snapshot is ready", "Delete")
    deadline = rec.snapshot_at + rules.snapshot_timeout
    if ctx.snapshot is None:
        return Verdict(replace(rec, state="SnapshotFailed"), "its snapshot is gone: not deleted")
    if now >= deadline:
        failed = replace(rec, state="SnapshotFailed")
        return Verdict(failed, f"snapshot not ready by {deadline.isoformat()}: not deleted")
    return Verdict(
        replace(rec, state="Snapshotting"), "waiting for its snapshot", "AwaitSnapshot", deadline
    )


def within_caps(
    wanted: Sequence[tuple[str, int]],
    recent: Sequence[tuple[datetime, int]],
    now: datetime,
    per_minute: int,
    bytes_per_hour: int,
) -> tuple[list[str], list[str]]:
    """Which of the `wanted` (uid, bytes) actions happen now and which wait: at most
    `per_minute` within any minute, at most `bytes_per_hour` within any hour (one larger
    than that alone only into an hour with nothing deleted)."""
    minute = sum(1 for at, _ in recent if now - at < timedelta(minutes=1))
    hour = sum(b for at, b in recent if now - at < timedelta(hours=1))
    act: list[str] = []
    wait: list[str] = []
    for uid, size in wanted:
        fits = hour + size <= bytes_per_hour or (hour == 0 and size > bytes_per_hour)
        if minute < per_minute and fits:
            act.append(uid)
            minute, hour = minute + 1, hour + size
        else:
            wait.append(uid)
    return act, wait


def compact(recent: Sequence[tuple[datetime, int]], now: datetime) -> list[tuple[datetime, int]]:
    """What the caps need of the actions taken, bounded: each of the last minute, and the
    older ones of the last hour summed per minute at their latest time (so a sum leaves
    the hour no earlier than its actions do): at most 100 + 60 entries."""
    last_minute = sorted((at, b) for at, b in recent if now - at < timedelta(minutes=1))
    older: dict[datetime, tuple[datetime, int]] = {}
    for at, b in recent:
        if timedelta(minutes=1) <= now - at < timedelta(hours=1):
            key = at.replace(second=0, microsecond=0)
            latest, total = older.get(key, (at, 0))
            older[key] = (max(latest, at), total + b)
    return sorted(older.values()) + last_minute
