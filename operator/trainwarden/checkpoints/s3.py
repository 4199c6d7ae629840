"""An S3 prefix, pruned through the S3 API by the operator with the credentials of the
Secret the policy names, by the same engine as directories and VolumeSnapshots.

The run itself (listing, judging, re-checking, deleting) is blocking boto3 work and runs in
a worker thread, so it holds up only its own policy; what it did is said as everywhere
else (checkpoints/locations.py: `record`), with the Event on the policy, since an object
store has no Kubernetes object, plus an audit record under the prefix
(`.trainwarden-pruned.json`).
"""

import asyncio
from dataclasses import dataclass
from datetime import datetime

from trainwarden.adapters.kube import Unreadable
from trainwarden.adapters.s3 import Bucket, Credentials
from trainwarden.api.v1alpha1.checkpoint import S3Source
from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND as KIND
from trainwarden.checkpoints.locations import (
    Context,
    Run,
    Target,
    announce_once,
    job_ref,
    record,
)
from trainwarden.core import locations as loc
from trainwarden.storage.pruning import Report
from trainwarden.storage.s3_prefix import StoreError, prune_prefix

KEYS = ("accessKeyId", "secretAccessKey")


def _run(report: Report, now: datetime) -> Run:
    return Run(
        now,
        dry_run=report.dry_run,
        scanned=report.scanned,
        kept=report.kept,
        deleted=report.deleted,
        deleted_count=len(report.deleted),
        bytes_freed=report.bytes_freed,
        bytes_retained=report.bytes_retained,
        notes=[
            *(f"failed {f}" for f in report.failures),
            *report.notes,
            *(f"skipped {s}" for s in report.skipped),
        ],
        failures=len(report.failures),
        scanned_at=report.scanned_at,
        completed=report.completed,
        result=report.result,
    )


@dataclass(frozen=True)
class S3Store:
    jobs: list[loc.TrainingJob]

    async def targets(self, ctx: Context, namespaces: list[str]) -> list[Target]:
        """The policy's prefix; a job elsewhere naming it is not heeded (and told so)."""
        source = ctx.spec.storage.s3
        if source is None:
            return []
        scoped = [j for j in self.jobs if j.namespace in namespaces]
        location, foreign = loc.s3_location(source.url, scoped, source.credentials.namespace)
        for job, problem in foreign:
            key = f"job/{job.namespace}/{job.name}/{problem}"
            await announce_once(
                ctx, key, job_ref(job), "AnnotationIgnored", f"{KIND} {ctx.name}: {problem}"
            )
        noun = f"checkpoint(s) in {source.url}"
        return [Target("S3", "", "", source.url, location, noun, source.credentials.namespace)]

    async def collect(
        self, ctx: Context, target: Target, entry: PrunedLocation
    ) -> tuple[PrunedLocation, bool]:
        return entry, False  # runs finish within the evaluation that starts them

    async def start(
        self, ctx: Context, target: Target, entry: PrunedLocation, due: datetime
    ) -> PrunedLocation:
        """One run over the prefix; a failure is reported in the entry, never raised."""
        source = ctx.spec.storage.s3
        assert source is not None
        try:
            report = await _prune(ctx, source, target)
            run = (
                _run(report, ctx.now) if report.error is None else Run(ctx.now, error=report.error)
            )
        except (
            Unreadable,
            StoreError,
            OSError,
            ValueError,
            OverflowError,
        ) as error:  # this one location
            run = Run(ctx.now, error=f"{source.url}: {error}")
        entry, _ = await record(ctx, target, entry, run, ctx.policy)
        return entry


async def _prune(ctx: Context, source: S3Source, target: Target) -> Report:
    spec = ctx.spec
    ref = source.credentials
    keys = await ctx.kube.secret(ref.namespace, ref.name, KEYS)
    credentials = Credentials(keys[KEYS[0]], keys[KEYS[1]])
    bucket = Bucket(source.endpoint, source.region, source.bucket, credentials)
    state = target.location.state(
        ctx.now, spec.after_completion.delay if spec.after_completion else None
    )
    return await asyncio.to_thread(
        prune_prefix,
        bucket,
        source.prefix,
        spec,
        dry_run=spec.mode == "DryRun",
        policy=f"{KIND}/{ctx.name}",
        finished=state == "Finished",
        running=state == "Running",
        pins=target.location.pins,
        resume_from=target.location.resume_from,
    )
