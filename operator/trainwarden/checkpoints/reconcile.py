"""One CheckpointPolicy evaluation: every location it governs (PVC directories, snapshot
histories, S3 prefixes; checkpoints/locations.py), a run started where one is due, what
finished runs did recorded in status.

The schedule is derived from status alone: the last run of each location plus the
interval (or cron), or the moment its jobs finished plus afterCompletion.delay.
"""

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from trainwarden import logs
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.checkpoint_status import (
    MAX_LOCATIONS,
    CheckpointPolicyStatus,
    PrunedLocation,
)
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND as KIND
from trainwarden.api.v1alpha1.types import Condition
from trainwarden.cache.cluster import ClusterCache
from trainwarden.checkpoints import pruner
from trainwarden.checkpoints.locations import Context as LocationContext
from trainwarden.checkpoints.locations import Store, Target, announce_once
from trainwarden.checkpoints.pvc import ClaimLabels, PvcStore
from trainwarden.checkpoints.s3 import S3Store
from trainwarden.checkpoints.snapshots import SnapshotStore
from trainwarden.controllers.status import (
    RESYNC,
    LastWrite,
    dump_conditions,
    open_policy,
    write_status,
)
from trainwarden.core import locations as loc
from trainwarden.core.announce import Announcements
from trainwarden.core.conditions import ConditionUpdate, readiness, set_condition
from trainwarden.core.scope import selects

log = logs.get(__name__)
KEPT_STATUS = ("conditions", "bytesFreed", "locations")
POLL = timedelta(seconds=5)
"""How often a running pruner Job is looked at (they run for seconds)."""
LAST_RUN = "LastRunSucceeded"
PRUNING = "Pruning"


@dataclass
class Memory(LastWrite):
    announced: Announcements = field(default_factory=Announcements)


@dataclass
class Environment:
    """What the controller knows beyond the policy: training jobs, how pruners run, the
    kill switch."""

    jobs: list[loc.TrainingJob]
    settings: pruner.PrunerSettings | None
    paused: str | None
    """Why pruning is paused cluster-wide (the kill switch), if it is."""
    claims: ClaimLabels | None = None
    """Claims by namespace from the cache, while it is current (checkpoints/pvc.py)."""
    confirm: Callable[[], Awaitable[str | None]] | None = None
    """The kill switch read afresh: `paused` may be a few seconds old, so it is read
    again right before a pruner would start."""


@dataclass
class _MayAct:
    """Whether this evaluation may start a run: the policy's Pruning condition apart from
    the kill switch, and the switch read afresh before the first start (the shared read
    may be a few seconds old: a switch set a moment ago stops the start, one lifted a
    moment ago lets it go)."""

    able: bool
    paused: str | None
    confirm: Callable[[], Awaitable[str | None]] | None
    confirmed: bool = False

    async def __call__(self) -> bool:
        if self.able and self.confirm is not None and not self.confirmed:
            self.paused, self.confirmed = await self.confirm(), True
        return self.able and self.paused is None


def _scoped_namespaces(spec: CheckpointPolicySpec, inventory: ClusterCache) -> list[str]:
    scope = spec.scope
    return sorted(
        ns
        for ns in list(inventory.namespaces)
        if ns in scope.namespaces
        or (
            scope.namespace_selector is not None
            and selects(scope.namespace_selector, inventory.namespace_labels(ns))
        )
    )


def _due(
    entry: PrunedLocation | None,
    location: loc.Location,
    spec: CheckpointPolicySpec,
    created: datetime,
) -> datetime:
    after = spec.after_completion
    return loc.next_run(
        entry.last_run if entry else None,
        location,
        interval=spec.schedule.interval,
        cron=spec.schedule.cron,
        zone=spec.schedule.time_zone,
        after_delay=after.delay if after else None,
        created=created,
        failed_runs=entry.failed_runs if entry else 0,
    )


def _stores(context: Environment) -> list[Store]:
    return [
        PvcStore(context.jobs, context.settings, context.claims),
        SnapshotStore(context.jobs),
        S3Store(context.jobs),
    ]


async def _govern(
    ctx: LocationContext,
    store: Store,
    target: Target,
    entry: PrunedLocation,
    *,
    may_act: Callable[[], Awaitable[bool]],
    created: datetime,
) -> tuple[PrunedLocation, datetime]:
    """One location: fold in what a finished run did, start a run if one is due; the
    entry and when the location next needs looking at."""
    now, spec = ctx.now, ctx.spec
    delay = spec.after_completion.delay if spec.after_completion else None
    entry = entry.model_copy(update={"job_state": target.location.state(now, delay)})
    entry, running = await store.collect(ctx, target, entry)
    if running:
        return entry, now + POLL
    at = _due(entry, target.location, spec, created)
    if at > now:
        return entry, at
    if not await may_act():
        return entry, now + RESYNC  # paused: look again later, not in a tight loop
    started = await store.start(ctx, target, entry, at)
    if target.source == "PVC":
        return started, now + (POLL if started.pruner_uid != entry.pruner_uid else RESYNC)
    return started, _due(started, target.location, spec, created)


def _gained(
    entries: list[PrunedLocation], previous: dict[tuple[str, str, str, str], PrunedLocation]
) -> int:
    """Bytes freed by the runs this evaluation recorded (each entry keeps its own total)."""
    before = {k: e.bytes_freed for k, e in previous.items()}
    return sum(
        e.bytes_freed - before.get((e.source, e.namespace, e.pvc, e.path), 0) for e in entries
    )


def _over_cap(over: int) -> str:
    return (
        f"{over} checkpoint location(s) beyond the first {MAX_LOCATIONS} are not governed "
        "(a status records at most that many): split the policy by namespace or selector"
    )


def _outcome(entries: list[PrunedLocation], over: int) -> ConditionUpdate:
    failures = [f"{e.where}: {e.message}" for e in entries if e.failed]
    if failures:
        return ConditionUpdate(LAST_RUN, "False", "PrunerFailed", "; ".join(failures)[:1000])
    governed = f"{len(entries)} checkpoint location(s) governed"
    if over:
        return ConditionUpdate(LAST_RUN, "False", "TooManyLocations", _over_cap(over))
    return ConditionUpdate(LAST_RUN, "True", "Succeeded", governed)


async def reconcile(
    body: JSON,
    cache: ClusterCache,
    kube: Kube,
    memory: Memory,
    now: datetime,
    context: Environment,
) -> datetime:
    """Evaluate one policy: every location it governs, through its store; return when it
    next needs evaluating."""
    models = (CheckpointPolicySpec, CheckpointPolicyStatus)
    opened = await open_policy(kube, body, models, KEPT_STATUS, memory, now)
    if opened is None:
        return now + RESYNC
    generation, stamp, spec, old = opened.generation, opened.stamp, opened.spec, opened.old
    meta = body["metadata"]
    created = datetime.fromisoformat(str(meta["creationTimestamp"]).replace("Z", "+00:00"))
    conds, _ = set_condition(old.conditions, readiness([]), now=stamp, generation=generation)
    acting = _pruning(spec, context)
    conds, _ = set_condition(conds, acting, now=stamp, generation=generation)
    ctx = LocationContext(kube, body, spec, now, memory.announced)
    namespaces = _scoped_namespaces(spec, cache)
    previous: dict[tuple[str, str, str, str], PrunedLocation] = {
        (e.source, e.namespace, e.pvc, e.path): e for e in old.locations
    }
    found = [(store, t) for store in _stores(context) for t in await store.targets(ctx, namespaces)]
    over = len(found) - MAX_LOCATIONS
    if over > 0:
        await announce_once(ctx, "over-cap", body, "TooManyLocations", _over_cap(over))
    entries, dues = [], [now + RESYNC]
    able = _pruning(spec, replace(context, paused=None)).status == "True"
    may_act = _MayAct(able, context.paused, context.confirm)
    for store, target in found[:MAX_LOCATIONS]:
        was = previous.get(target.key) or target.entry()
        entry, due = await _govern(ctx, store, target, was, may_act=may_act, created=created)
        entries.append(entry)
        dues.append(due)
    if may_act.confirmed:  # the switch as read afresh
        fresh = _pruning(spec, replace(context, paused=may_act.paused))
        conds, _ = set_condition(conds, fresh, now=stamp, generation=generation)
    outcome = _outcome(entries, max(over, 0))
    conds, _ = set_condition(conds, outcome, now=stamp, generation=generation)
    freed = old.bytes_freed + _gained(entries, previous)
    status = _status(generation, conds, entries, freed)
    memory.announced.keep_only(ctx.touched)
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped["conditions"] = dump_conditions(conds)
    await write_status(kube, KIND, body, memory, dumped)
    return min(dues)


def _status(
    generation: int, conds: list[Condition], entries: list[PrunedLocation], freed: int
) -> CheckpointPolicyStatus:
    """One evaluation's status: the totals over the locations it governs."""
    last_runs = [e.last_run for e in entries if e.last_run]
    return CheckpointPolicyStatus(
        observed_generation=generation,
        conditions=conds,
        last_run=max(last_runs) if last_runs else None,
        scanned=sum(e.scanned for e in entries),
        kept=sum(e.kept for e in entries),
        deleted=sum(e.deleted for e in entries),
        bytes_freed=freed,
        bytes_retained=sum(e.bytes_retained for e in entries),
        locations=fitted(entries),
    )


def _pruning(spec: CheckpointPolicySpec, context: Environment) -> ConditionUpdate:
    """Whether the policy can act, apart from whether its spec is valid (Ready)."""
    if context.paused:
        return ConditionUpdate(PRUNING, "False", "KillSwitch", context.paused)
    storage = spec.storage
    acts, notes = [], []
    if storage.pvc is not None and context.settings is None:
        notes.append("PVC directories are not pruned: the operator runs without --pruner-image")
    elif storage.pvc is not None:
        acts.append("PVC directories (pruner Jobs)")
    if storage.volume_snapshots is not None:
        acts.append("VolumeSnapshots (through the API)")
    if storage.s3 is not None:
        acts.append(f"{storage.s3.url} (through the S3 API)")
    message = "; ".join([*([f"pruning {' and '.join(acts)} on schedule"] if acts else []), *notes])
    if acts:
        return ConditionUpdate(PRUNING, "True", "Active", message)
    return ConditionUpdate(PRUNING, "False", "NoPrunerImage", message)


STATUS_BUDGET = 1 << 20
"""Bytes the locations may take in status: etcd keeps an object of at most 1.5 MiB."""


def fitted(entries: list[PrunedLocation], budget: int = STATUS_BUDGET) -> list[PrunedLocation]:
    """The entries, made to fit `budget` as JSON: the names of what the last runs deleted
    and the messages are cut, evenly and by steps (their Events and log lines keep them);
    counts, schedules, pruner uids and completion times are never cut."""

    def size(found: list[PrunedLocation]) -> int:
        dumped = [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in found]
        return len(json.dumps(dumped, separators=(",", ":")))

    trimmed = entries
    for names, chars in ((50, 1000), (10, 200), (0, 200), (0, 0)):
        if size(trimmed) <= budget:
            break
        trimmed = [
            e.model_copy(
                update={"deleted_names": e.deleted_names[:names], "message": e.message[:chars]}
            )
            for e in entries
        ]
    return trimmed
