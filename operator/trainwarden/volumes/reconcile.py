"""One VolumeReclaimPolicy evaluation: age the records of unmounted claims (core/orphans.py
`track`, clocks moved past every gap), judge those old enough with what else may need them
(volumes/observe.py), act within the caps (volumes/actions.py), record status."""

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.names import VOLUME_KIND as KIND
from trainwarden.api.v1alpha1.volumes import (
    MAX_TRACKED,
    VolumeReclaimPolicySpec,
    VolumeReclaimPolicyStatus,
)
from trainwarden.cache.cluster import CLAIMS, ClusterCache
from trainwarden.controllers.links import Links
from trainwarden.controllers.status import RESYNC, LastWrite, open_policy, write_status_when_due
from trainwarden.core import orphans
from trainwarden.core.announce import Announcements
from trainwarden.volumes import actions, observe
from trainwarden.volumes import status as volume_status

log = logs.get(__name__)
KEPT_STATUS = (
    "conditions",
    "heartbeat",
    "claims",
    "recentActions",
    "claimsDeleted",
    "bytesDeleted",
)
RETRY = timedelta(seconds=10)
RECHECK = timedelta(minutes=5)
"""How long a verdict that does nothing (a claim left alone, waiting out its grace
period, or planned in DryRun) stands before the claim is judged from the API again (its
workloads, volume and labels): at rest a policy re-reads them this often, not every
RESYNC. An action is only ever taken on a judgement made in the same evaluation."""


@dataclass(frozen=True, slots=True)
class Standing:
    """A verdict that did nothing, when it was reached, and the claim it read."""

    at: datetime
    verdict: orphans.Verdict
    claim: orphans.Claim | None


@dataclass
class Memory(LastWrite):
    """The records between evaluations; after a restart they come back from status, their
    clocks moved forward by the time since its heartbeat."""

    records: dict[str, orphans.Record] | None = None
    last: datetime | None = None
    """When the claims were last observed (this process)."""
    announced: Announcements = field(default_factory=Announcements)
    standing: dict[str, Standing] = field(default_factory=dict)
    """Per claim uid, the last verdict that did nothing (bounded by the records)."""
    rules: orphans.Rules | None = None
    """The rules those verdicts were reached under: a changed spec judges all again."""
    yielded: set[str] = field(default_factory=set)
    """Claims left alone that gave their place in the record to a new claim (in scope
    and untracked only: bounded by the claims in scope)."""


def rules(spec: VolumeReclaimPolicySpec) -> orphans.Rules:
    snap = spec.snapshot
    return orphans.Rules(
        unmounted_for=spec.unmounted_for,
        grace=spec.grace_period,
        max_keep=spec.exemptions.max_keep_duration,
        snapshot_timeout=snap.timeout if snap is not None else None,
        enforce=spec.mode == "Enforce",
    )


@dataclass
class Judged:
    verdicts: list[orphans.Verdict] = field(default_factory=list)
    claims: dict[str, orphans.Claim] = field(default_factory=dict)


async def _context(
    ctx: actions.Context,
    rec: orphans.Record,
    obj: JSON | None,
    space: observe.Workloads,
    cache: ClusterCache,
    links: Links,
) -> orphans.Context:
    """What else may need one claim old enough to be judged."""
    c = orphans.claim(obj) if obj is not None else None
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    governor = observe.checkpoint_governor(
        links.checkpoint_scans.checkpoint_scans(),
        links.checkpoint_specs.checkpoint_specs(),
        rec.namespace,
        rec.name,
        labels,
        cache.namespace_labels(rec.namespace),
    )
    snapshot = None
    if rec.snapshot_at is not None:
        snapshot = await observe.snapshot(ctx.kube, rec.namespace, rec.name, rec.uid)
    return orphans.Context(
        references=space.references,
        statefulsets=space.statefulsets,
        unknown=space.unknown,
        checkpoint=governor,
        retain=await observe.retained(ctx.kube, c.volume) if c is not None else False,
        snapshot=snapshot,
    )


def _stands(old: Standing | None, rec: orphans.Record, now: datetime) -> orphans.Verdict | None:
    """The standing verdict for `rec`, if it is recent, not yet due and about the record
    as it is; None: judge the claim from the API."""
    if old is None or now >= old.at + RECHECK or old.verdict.record.state != rec.state:
        return None
    if old.verdict.due is not None and now >= old.verdict.due:
        return None
    return replace(old.verdict, record=rec)


async def _judge(
    ctx: actions.Context,
    records: dict[str, orphans.Record],
    cache: ClusterCache,
    links: Links,
    standing: dict[str, Standing],
) -> Judged:
    """Each record's verdict; the API is read only for claims old enough to be judged
    whose last verdict no longer stands (the claim itself, its namespace's workloads
    once, its volume, its snapshot)."""
    out, spaces = Judged(), dict[str, observe.Workloads]()
    law = rules(ctx.spec)
    for rec in sorted(records.values(), key=lambda r: (r.namespace, r.name)):
        if ctx.now < rec.since + law.unmounted_for:
            out.verdicts.append(orphans.judge(rec, None, orphans.Context(), law, ctx.now))
            continue
        old = standing.get(rec.uid)
        kept = _stands(old, rec, ctx.now)
        if old is not None and kept is not None:
            out.verdicts.append(kept)
            if old.claim is not None:
                out.claims[rec.uid] = old.claim
            continue
        obj = await ctx.kube.get("v1", "PersistentVolumeClaim", rec.namespace, rec.name)
        if rec.namespace not in spaces:
            spaces[rec.namespace] = await observe.workloads(ctx.kube, rec.namespace)
        found = await _context(ctx, rec, obj, spaces[rec.namespace], cache, links)
        c = orphans.claim(obj) if obj is not None else None
        verdict = orphans.judge(rec, c, found, law, ctx.now)
        out.verdicts.append(verdict)
        standing.pop(rec.uid, None)
        if verdict.action is None or (not law.enforce and verdict.action != "Report"):
            standing[rec.uid] = Standing(ctx.now, verdict, c)  # DryRun acts on no plan
        if c is not None:
            out.claims[rec.uid] = c
    return out


async def _act_on(
    ctx: actions.Context,
    judged: Judged,
    recent: list[tuple[datetime, int]],
    cache: ClusterCache,
) -> tuple[dict[str, orphans.Record], list[tuple[datetime, int]]]:
    """Report, explain, then (Enforce) snapshot and delete what the caps allow; the records
    left and the actions of the last hour."""
    records: dict[str, orphans.Record] = {}
    wanted: list[tuple[str, int]] = []
    for v in judged.verdicts:
        rec = v.record
        if v.problem is not None:
            await actions.say_once(ctx, rec, "AnnotationIgnored", v.problem)
        if rec.state == "Exempt" or rec.state == "SnapshotFailed":
            await actions.say_once(
                ctx, rec, "LeftAlone" if rec.state == "Exempt" else "NotDeleted", v.reason
            )
        if v.action == "Report":
            await actions.report(ctx, rec, v.reason)
            rec = replace(rec, reported_at=ctx.now, reported_in=ctx.spec.mode)
        elif v.action in ("Snapshot", "Delete"):
            wanted.append((rec.uid, judged.claims[rec.uid].bytes if v.action == "Delete" else 0))
        records[rec.uid] = rec
    if not ctx.enforce:
        return records, recent
    by_uid = {v.record.uid: v for v in judged.verdicts}
    act, wait = orphans.within_caps(
        wanted, recent, ctx.now, ctx.spec.max_actions_per_minute, ctx.spec.max_gib_per_hour * 2**30
    )
    ctx.pending += [
        f"deferred {records[u].namespace}/{records[u].name}: over the policy's caps" for u in wait
    ]
    for uid in act:
        v, rec = by_uid[uid], records[uid]
        if orphans.mounts(cache.pods_in(rec.namespace), ctx.now).mounted(rec.name):
            ctx.pending.append(f"{rec.namespace}/{rec.name} mounted again: not deleted")
            continue
        if v.action == "Snapshot":
            if await actions.request_snapshot(ctx, rec):
                records[uid] = replace(rec, state="Snapshotting", snapshot_at=ctx.now)
                recent.append((ctx.now, 0))
        elif await actions.delete(ctx, rec, judged.claims[uid], v.reason):
            del records[uid]
            ctx.deleted.append(judged.claims[uid].bytes)
            recent.append((ctx.now, judged.claims[uid].bytes))
    return records, recent


async def reconcile(
    body: JSON, cache: ClusterCache, kube: Kube, memory: Memory, now: datetime, links: Links
) -> datetime:
    """Evaluate one policy; return when it next needs evaluating."""
    models = (VolumeReclaimPolicySpec, VolumeReclaimPolicyStatus)
    opened = await open_policy(kube, body, models, KEPT_STATUS, memory, now)
    if opened is None:
        return now + RESYNC
    spec, old = opened.spec, opened.old
    if not cache.claims_watch.current(CLAIMS):  # an unseen claim list ages nothing
        log.info("claims not current: policy waits", object=f"{KIND}/{opened.name}")
        return now + RETRY
    if memory.records is None:
        memory.records = {c.uid: volume_status.record(c) for c in old.claims}
    last = memory.last if memory.last is not None else old.heartbeat
    records = orphans.shifted(memory.records, orphans.gap(last, now))
    claims = observe.in_scope(spec, cache)
    seen = observe.mounts(cache, {c.namespace for c in claims}, now)
    records, untracked, gave_way = orphans.track(
        records, claims, seen, now, MAX_TRACKED, memory.yielded
    )
    scoped = {c.uid for c in claims}
    memory.yielded = {u for u in memory.yielded | set(gave_way) if u in scoped and u not in records}
    ctx = actions.Context(kube, body, spec, now, memory.announced)
    if memory.rules != rules(spec):
        memory.standing, memory.rules = {}, rules(spec)
    judged = await _judge(ctx, records, cache, links, memory.standing)
    recent = [(a.at, a.bytes) for a in old.recent_actions if now - a.at < timedelta(hours=1)]
    kept, recent = await _act_on(ctx, judged, recent, cache)
    memory.records, memory.last = kept, now
    memory.standing = {u: v for u, v in memory.standing.items() if u in kept}
    memory.announced.keep_only(ctx.touched)
    outcome = volume_status.Outcome(
        judged.verdicts, kept, untracked, len(claims), recent, ctx.pending, ctx.deleted,
        {uid: c.bytes for uid, c in judged.claims.items()},
    )  # fmt: skip
    status = volume_status.build(spec, old, outcome, opened.generation, now, opened.stamp)
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    await write_status_when_due(kube, KIND, body, memory, dumped, now)
    metrics.report_volumes(opened.name, volume_status.counts(kept))
    dues = [v.due for v in judged.verdicts if v.due is not None and v.due > now]
    if ctx.pending:
        dues.append(now + RETRY)
    return max(min([now + RESYNC, *dues]), now + timedelta(seconds=1))
