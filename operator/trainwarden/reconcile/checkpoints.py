"""One CheckpointPolicy evaluation: find the directories it governs, start a pruner Job for
each one that is due, and record what finished pruner Jobs report.

The schedule is derived from status alone (the last run of each directory plus the
interval, or the moment its jobs finished plus afterCompletion.delay), and a run's Job name
from its scheduled time: an operator killed after creating a Job finds it again, and a
finished Job's report is counted once, because the Job's name is recorded with it.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.checkpoint import (
    CheckpointPolicySpec,
    CheckpointPolicyStatus,
    PrunedLocation,
)
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import locations as loc
from trainwarden.core.conditions import ConditionUpdate, set_condition
from trainwarden.core.readiness import readiness
from trainwarden.core.scope import selects
from trainwarden.reconcile import objects, pruner, snapshots
from trainwarden.reconcile.status import (
    RESYNC,
    LastWrite,
    dump_conditions,
    previous_status,
    report_invalid,
    write_status,
)
from trainwarden.storage.pruning import human_size

log = logs.get(__name__)
KIND = "CheckpointPolicy"
KEPT_STATUS = ("bytesFreed", "locations")
POLL = timedelta(seconds=5)
"""How often a running pruner Job is looked at (they run for seconds)."""
LAST_RUN = "LastRunSucceeded"
PRUNING = "Pruning"
PRUNED_BY = "trainwarden.dev/pruned-by"
PRUNED = "trainwarden.dev/pruned"


@dataclass
class Memory(LastWrite):
    announced: set[str] = field(default_factory=set)


@dataclass
class Context:
    """What one cycle of the controller shares between policies."""

    jobs: list[loc.TrainingJob]
    settings: pruner.PrunerSettings | None
    paused: str | None
    """Why pruning is paused cluster-wide (the kill switch), if it is."""


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
    )


async def reconcile(
    body: JSON,
    inventory: ClusterCache,
    kube: Kube,
    memory: Memory,
    now: datetime,
    context: Context,
) -> datetime:
    """Evaluate one policy; return when it next needs evaluating."""
    meta = body["metadata"]
    name = meta["name"]
    generation = int(meta.get("generation") or 0)
    stamp = now.replace(microsecond=0)
    old = previous_status(
        CheckpointPolicyStatus, body.get("status") or {}, KEPT_STATUS, f"{KIND}/{name}"
    )
    parsed = parse_spec(CheckpointPolicySpec, body.get("spec") or {})
    if isinstance(parsed, list):
        await report_invalid(kube, body, parsed, old.conditions, memory, stamp)
        return now + RESYNC
    spec = parsed
    created = datetime.fromisoformat(str(meta["creationTimestamp"]).replace("Z", "+00:00"))
    metrics.report_policy_ready(KIND, name, ready=True)
    conds, _ = set_condition(old.conditions, readiness([]), now=stamp, generation=generation)
    acting = _pruning(spec, context)
    conds, _ = set_condition(conds, acting, now=stamp, generation=generation)

    namespaces = set(_scoped_namespaces(spec, inventory))
    pvcs: list[tuple[str, str]] = []
    source = spec.storage.pvc
    if source is not None and source.selector is not None:
        for ns in sorted(namespaces):
            for pvc in await kube.list("v1", "PersistentVolumeClaim", namespace=ns):
                if selects(source.selector, (pvc["metadata"].get("labels") or {})):
                    pvcs.append((ns, pvc["metadata"]["name"]))
    jobs = [
        j
        for j in context.jobs
        if j.namespace in namespaces and source is not None and source.from_workload_annotation
    ]
    found, problems = loc.locations(pvcs, source.path if source else "/", jobs)
    for job, problem in problems:
        await _announce_once(
            kube,
            memory,
            f"job/{job.namespace}/{job.name}/{problem}",
            _job_ref(job),
            "AnnotationIgnored",
            f"{KIND} {name}: {problem}",
        )

    previous: dict[tuple[str, str, str, str], PrunedLocation] = {
        (e.source, e.namespace, e.pvc, e.path): e for e in old.locations
    }
    entries: list[PrunedLocation] = []
    dues = [now + RESYNC]
    freed = old.bytes_freed
    delay = spec.after_completion.delay if spec.after_completion else None
    for location in found:
        entry = previous.get(("PVC", location.namespace, location.pvc, location.path))
        state = location.state(now, delay)
        entry = (
            entry
            or PrunedLocation(namespace=location.namespace, pvc=location.pvc, path=location.path)
        ).model_copy(update={"job_state": state})
        listed = await kube.list(
            "batch/v1",
            "Job",
            namespace=location.namespace,
            selector=f"{pruner.PRUNER}={location.key}",
        )
        pruners = [j for j in listed if pruner.ours(j, entry.pruner_uid, location, name)]
        recorded, gained = await _record(kube, name, location, entry, pruners)
        freed += gained
        entries.append(recorded)
        if any(not pruner.finished(j)[0] for j in pruners):
            dues.append(now + POLL)
            continue
        at = _due(recorded, location, spec, created)
        if at > now:
            dues.append(at)
            continue
        if acting.status != "True" or context.settings is None:
            continue
        manifest = pruner.manifest(location, name, spec, state, at, context.settings)
        made = await kube.create(manifest)
        if made is None:  # a Job of this name we have no record of: never adopted
            why = pruner.not_adopted(manifest["metadata"]["name"])
            entries[-1] = recorded.model_copy(update={"failed": True, "message": why})
            dues.append(now + RESYNC)
            continue
        entries[-1] = recorded.model_copy(update={"pruner_uid": made["metadata"]["uid"]})
        log.info(
            "pruner started",
            object=f"PersistentVolumeClaim/{location.namespace}/{location.pvc}",
            policy=f"{KIND}/{name}",
            job=manifest["metadata"]["name"],
            path=location.path,
            mode=spec.mode,
            job_state=state,
        )
        dues.append(now + POLL)

    if spec.storage.volume_snapshots is not None:
        writers, _ = loc.locations([], "/", [j for j in context.jobs if j.namespace in namespaces])
        histories = await snapshots.histories(
            kube, spec.storage.volume_snapshots, sorted(namespaces), writers
        )
        for history in histories:
            key = ("VolumeSnapshots", history.namespace, history.pvc, "")
            entry = previous.get(key) or PrunedLocation(
                source="VolumeSnapshots", namespace=history.namespace, pvc=history.pvc
            )
            state = history.location.state(now, delay)
            at = _due(entry, history.location, spec, created)
            if at <= now and acting.status == "True":
                entry, gained = await snapshots.prune(
                    kube, name, spec, history, entry.model_copy(update={"job_state": state}), now
                )
                freed += gained
                at = _due(entry, history.location, spec, created)
            elif at <= now:
                at = now + RESYNC  # paused: look again later, not in a tight loop
            entries.append(entry.model_copy(update={"job_state": state}))
            dues.append(at)

    s3 = spec.storage.s3
    if s3 is not None:
        scoped = [j for j in context.jobs if j.namespace in namespaces]
        location, foreign = loc.s3_location(s3.url, scoped, s3.credentials.namespace)
        for job, problem in foreign:
            said = f"{KIND} {name}: {problem}"
            seen = f"job/{job.namespace}/{job.name}/{problem}"
            await _announce_once(kube, memory, seen, _job_ref(job), "AnnotationIgnored", said)
        entry = previous.get(("S3", "", "", s3.url)) or PrunedLocation(source="S3", path=s3.url)
        state = location.state(now, delay)
        at = _due(entry, location, spec, created)
        if at <= now and acting.status == "True":
            ran = await objects.prune(kube, body, spec, s3, location, entry, now)
            entry, freed = ran.entry, freed + ran.freed
            at = _due(entry, location, spec, created)
        elif at <= now:
            at = now + RESYNC  # paused: look again later, not in a tight loop
        entries.append(entry.model_copy(update={"job_state": state}))
        dues.append(at)

    failures = [f"{e.where}: {e.message}" for e in entries if e.failed]
    last_runs = [e.last_run for e in entries if e.last_run]
    outcome = (
        ConditionUpdate(LAST_RUN, "False", "PrunerFailed", "; ".join(failures)[:1000])
        if failures
        else ConditionUpdate(
            LAST_RUN, "True", "Succeeded", f"{len(entries)} checkpoint location(s) governed"
        )
    )
    conds, _ = set_condition(conds, outcome, now=stamp, generation=generation)
    status = CheckpointPolicyStatus(
        observed_generation=generation,
        conditions=conds,
        last_run=max(last_runs) if last_runs else None,
        scanned=sum(e.scanned for e in entries),
        kept=sum(e.kept for e in entries),
        deleted=sum(e.deleted for e in entries),
        bytes_freed=freed,
        bytes_retained=sum(e.bytes_retained for e in entries),
        locations=entries[:500],
    )
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped["conditions"] = dump_conditions(conds)
    await write_status(kube, KIND, body, memory, dumped)
    return min(dues)


def _pruning(spec: CheckpointPolicySpec, context: Context) -> ConditionUpdate:
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


async def _record(
    kube: Kube, policy: str, location: loc.Location, entry: PrunedLocation, jobs: list[JSON]
) -> tuple[PrunedLocation, int]:
    """Fold the newest finished pruner Job into the entry, once; returns the bytes it freed."""
    done = sorted((j for j in jobs if pruner.finished(j)[0]), key=lambda j: j["metadata"]["name"])
    if not done:
        return entry, 0
    newest = done[-1]
    job_name = newest["metadata"]["name"]
    if entry.last_job is not None and job_name <= entry.last_job:
        return entry, 0
    pods = await kube.list(
        "v1", "Pod", namespace=location.namespace, selector=f"job-name={job_name}"
    )
    result = pruner.outcome(newest, pods)
    update: dict[str, Any] = {"last_job": job_name, "last_run": result.finished_at}
    pvc = await kube.get("v1", "PersistentVolumeClaim", location.namespace, location.pvc)
    where = f"PersistentVolumeClaim/{location.namespace}/{location.pvc}"
    if result.report is None:
        message = result.error or ""
        metrics.report_action(KIND, policy, "Prune", "failed")
        log.warning("pruner failed", object=where, policy=f"{KIND}/{policy}", error=message)
        if pvc is not None:
            await kube.event(
                pvc, type_="Warning", reason="PruneFailed", message=message, action="Prune"
            )
        return entry.model_copy(update={**update, "message": message, "failed": True}), 0
    report = result.report
    dry, names, count, kept = report.dry_run, report.deleted, report.deleted_count, report.kept
    gained = 0 if dry else report.bytes_freed
    notes = [
        *(f"failed {f}" for f in report.failures),
        *report.notes,
        *(f"skipped {s}" for s in report.skipped),
    ]
    update |= {
        "failed": False,
        "scanned": report.scanned,
        "kept": kept,
        "deleted": count,
        "deleted_names": names[:100],
        "bytes_freed": min(entry.bytes_freed + gained, 2**63 - 1),
        "bytes_retained": report.bytes_retained,
        "message": "; ".join(notes)[:1000],
    }
    listed = ", ".join(names[:10]) + (f" and {count - 10} more" if count > 10 else "")
    verb = "would delete" if dry else "deleted"
    message = (
        f"{KIND} {policy} {verb} {count} checkpoint(s) in {location.pvc}:{location.path} "
        f"({human_size(report.bytes_freed)}): {listed or 'none'}; {kept} kept"
    )
    metrics.report_action(KIND, policy, "Prune", "dry-run" if dry else "done")
    metrics.report_checkpoints_pruned(policy, location.namespace, 0 if dry else count, gained)
    log.info(
        "checkpoints would be pruned" if dry else "checkpoints pruned",
        object=where,
        policy=f"{KIND}/{policy}",
        job=job_name,
        deleted=count,
        bytes_freed=gained,
        message=message,
    )
    if pvc is not None and count:
        reason = "CheckpointsWouldBePruned" if dry else "CheckpointsPruned"
        await kube.event(pvc, type_="Normal", reason=reason, message=message, action="Prune")
        if not dry:
            marks = {PRUNED_BY: f"{KIND}/{policy}", PRUNED: f"{result.finished_at}: {message}"}
            await kube.merge_patch(
                "v1",
                "PersistentVolumeClaim",
                location.namespace,
                location.pvc,
                {"metadata": {"annotations": {k: v[:1000] for k, v in marks.items()}}},
            )
    return entry.model_copy(update=update), gained


async def _announce_once(
    kube: Kube, memory: Memory, key: str, obj: JSON, reason: str, message: str
) -> None:
    if key in memory.announced:
        return
    memory.announced.add(key)
    log.warning(
        reason,
        object=f"{obj['kind']}/{obj['metadata'].get('namespace')}/{obj['metadata']['name']}",
        message=message,
    )
    await kube.event(obj, type_="Warning", reason=reason, message=message, action="Observe")


def _job_ref(job: loc.TrainingJob) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "namespace": job.namespace, "uid": job.uid},
    }
