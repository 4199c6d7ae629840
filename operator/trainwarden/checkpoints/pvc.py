"""PVC directories: pruned by pruner Jobs (checkpoints/pruner.py), one per directory and
scheduled run, whose report the operator reads back from the pruner pod.

A run's Job name comes from its scheduled time: an operator killed after creating a Job
finds it again (recognized by the uid recorded in status; one killed before it recorded
the uid adopts its Job when name, labels and template are the run's own, never by name
alone), and a finished Job's report is counted once, because the Job's name is recorded
with it.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from trainwarden import failpoints, logs
from trainwarden.adapters.kube import JSON, Gone, Refused
from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND as KIND
from trainwarden.api.v1alpha1.names import PRUNER_FOR
from trainwarden.checkpoints import pruner
from trainwarden.checkpoints.locations import (
    Context,
    Run,
    Target,
    announce_once,
    job_ref,
    record,
)
from trainwarden.core import locations as loc
from trainwarden.core.scope import selects

log = logs.get(__name__)


def _target(location: loc.Location) -> Target:
    return Target(
        "PVC",
        location.namespace,
        location.pvc,
        location.path,
        location,
        f"checkpoint(s) in {location.pvc}:{location.path}",
        location.namespace,
    )


def _run(result: pruner.PrunerOutcome) -> Run:
    if result.report is None:
        return Run(result.finished_at, error=result.error or "", job=result.job)
    r = result.report
    notes = [*(f"failed {f}" for f in r.failures), *r.notes, *(f"skipped {s}" for s in r.skipped)]
    return Run(
        result.finished_at,
        dry_run=r.dry_run,
        scanned=r.scanned,
        kept=r.kept,
        deleted=r.deleted,
        deleted_count=r.deleted_count,
        bytes_freed=r.bytes_freed,
        bytes_retained=r.bytes_retained,
        notes=notes,
        failures=max(r.failure_count, len(r.failures)),
        job=result.job,
        scanned_at=_scanned_at(r, result.finished_at),
        completed=[datetime.fromtimestamp(t, UTC) for t in r.completed],
        result=r.result,
    )


def _scanned_at(report: pruner.PrunerReport, finished_at: datetime | None) -> datetime | None:
    """When the pruner looked, on the node's clock, never later than its Job finished (a
    report is tenant-reachable input); None from a pruner that does not say."""
    if report.scanned_at is None or finished_at is None:
        return None
    return min(datetime.fromtimestamp(report.scanned_at, UTC), finished_at)


ClaimLabels = Callable[[str], Sequence[tuple[str, Mapping[str, str]]]]
"""A namespace's claims (name, labels) as the cache holds them."""


@dataclass(frozen=True)
class PvcStore:
    jobs: list[loc.TrainingJob]
    settings: pruner.PrunerSettings | None
    claims: ClaimLabels | None = None
    """The cache's claims while its claim watch is current (labels kept for every PVC
    selector: core/reads.py); None: list them from the API. Either way a claim is read
    again before a pruner mounts it (`collect`), and one the cache does not hold yet is
    only picked at a later evaluation."""

    async def _labelled(self, ctx: Context, ns: str) -> list[tuple[str, Mapping[str, str]]]:
        if self.claims is not None:
            return list(self.claims(ns))
        listed = await ctx.kube.list("v1", "PersistentVolumeClaim", namespace=ns)
        return [(c["metadata"]["name"], c["metadata"].get("labels") or {}) for c in listed]

    async def targets(self, ctx: Context, namespaces: list[str]) -> list[Target]:
        """PVCs picked by label, and directories training jobs name in their annotation."""
        source = ctx.spec.storage.pvc
        if source is None:
            return []
        pvcs: list[tuple[str, str]] = []
        if source.selector is not None:
            for ns in namespaces:
                for name, labels in await self._labelled(ctx, ns):
                    if selects(source.selector, labels):
                        pvcs.append((ns, name))
        jobs = (
            [j for j in self.jobs if j.namespace in namespaces]
            if source.from_workload_annotation
            else []
        )
        found, problems = loc.locations(pvcs, source.path, jobs)
        for job, problem in problems:
            key = f"job/{job.namespace}/{job.name}/{problem}"
            await announce_once(
                ctx, key, job_ref(job), "AnnotationIgnored", f"{KIND} {ctx.name}: {problem}"
            )
        return [_target(location) for location in found]

    async def _pruners(self, ctx: Context, target: Target, entry: PrunedLocation) -> list[JSON]:
        listed = await ctx.kube.list(
            "batch/v1",
            "Job",
            namespace=target.namespace,
            selector=f"{PRUNER_FOR}={target.location.key}",
        )
        return [j for j in listed if pruner.ours(j, entry.pruner_uid, target.location, ctx.name)]

    async def collect(
        self, ctx: Context, target: Target, entry: PrunedLocation
    ) -> tuple[PrunedLocation, bool]:
        jobs = await self._pruners(ctx, target, entry)
        running = any(not pruner.finished(j)[0] for j in jobs)
        done = sorted(
            (j for j in jobs if pruner.finished(j)[0]), key=lambda j: j["metadata"]["name"]
        )
        if not done:
            return entry, running
        newest = done[-1]
        name = newest["metadata"]["name"]
        if entry.last_job is not None and name <= entry.last_job:
            return entry, running
        pods = await ctx.kube.list(
            "v1", "Pod", namespace=target.namespace, selector=f"job-name={name}"
        )
        subject = await ctx.kube.get("v1", "PersistentVolumeClaim", target.namespace, target.pvc)
        entry, _ = await record(ctx, target, entry, _run(pruner.outcome(newest, pods)), subject)
        return entry, running

    async def start(
        self, ctx: Context, target: Target, entry: PrunedLocation, due: datetime
    ) -> PrunedLocation:
        if self.settings is None:
            return entry
        state = target.location.state(ctx.now, _delay(ctx))
        manifest = pruner.manifest(target.location, ctx.name, ctx.spec, state, due, self.settings)
        name = manifest["metadata"]["name"]
        try:
            made = await ctx.kube.create(manifest) or await self._adopt(
                ctx, target, entry, manifest
            )
        except Gone:  # its namespace is being deleted: nothing to prune for long
            return entry.model_copy(update={"message": f"{target.namespace} is being deleted"})
        except Refused as error:  # an admission policy or RBAC: this location, not the others
            log.warning(
                "pruner refused",
                object=f"PersistentVolumeClaim/{target.namespace}/{target.pvc}",
                policy=f"{KIND}/{ctx.name}",
                error=str(error),
            )
            return entry.model_copy(update={"failed": True, "message": f"pruner refused: {error}"})
        if made is None:  # a Job of this name that is not this run's: never adopted
            return entry.model_copy(update={"failed": True, "message": pruner.not_adopted(name)})
        failpoints.hit("pruner-before-record")
        log.info(
            "pruner started",
            object=f"PersistentVolumeClaim/{target.namespace}/{target.pvc}",
            policy=f"{KIND}/{ctx.name}",
            job=manifest["metadata"]["name"],
            path=target.path,
            mode=ctx.spec.mode,
            job_state=state,
        )
        return entry.model_copy(update={"pruner_uid": made["metadata"]["uid"]})

    async def _adopt(
        self, ctx: Context, target: Target, entry: PrunedLocation, manifest: JSON
    ) -> JSON | None:
        """The run's Job, created by this operator before it was killed (no uid recorded):
        adopted if it is exactly the run's own (pruner.adoptable), else None."""
        name = manifest["metadata"]["name"]
        found = await ctx.kube.get("batch/v1", "Job", target.namespace, name)
        if found is None or not pruner.adoptable(found, manifest, entry.last_job):
            return None
        log.warning(
            "pruner adopted: started before a restart and never recorded",
            object=f"PersistentVolumeClaim/{target.namespace}/{target.pvc}",
            policy=f"{KIND}/{ctx.name}",
            job=name,
        )
        return found


def _delay(ctx: Context) -> timedelta | None:
    after = ctx.spec.after_completion
    return after.delay if after else None
