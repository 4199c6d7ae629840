"""An S3 prefix pruned through the S3 API by the operator, with credentials from the Secret
the policy names, by the same engine as directories and VolumeSnapshots.

The run itself (listing, judging, re-checking, deleting) is blocking boto3 work and runs in
a worker thread; what it did is said as everywhere else: an Event (on the policy, since an
object store has no Kubernetes object), a log line, metrics, the status entry, and an audit
record under the prefix (`.trainwarden-pruned.json`).
"""

import asyncio
from dataclasses import dataclass
from datetime import datetime

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube, Unreadable
from trainwarden.adapters.s3 import Bucket, Credentials
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec, PrunedLocation, S3Source
from trainwarden.core import locations as loc
from trainwarden.storage.objects import StoreError, prune_prefix
from trainwarden.storage.pruning import human_size

log = logs.get(__name__)
KIND = "CheckpointPolicy"
KEYS = ("accessKeyId", "secretAccessKey")


@dataclass(frozen=True)
class Outcome:
    entry: PrunedLocation
    freed: int


async def prune(
    kube: Kube,
    policy: JSON,
    spec: CheckpointPolicySpec,
    source: S3Source,
    location: loc.Location,
    entry: PrunedLocation,
    now: datetime,
) -> Outcome:
    """One run over the prefix; a failure is reported in the entry, never raised."""
    name = policy["metadata"]["name"]
    where = f"{KIND}/{name}"
    dry = spec.mode == "DryRun"
    state = location.state(now, spec.after_completion.delay if spec.after_completion else None)
    ref = source.credentials
    try:
        keys = await kube.secret(ref.namespace, ref.name, KEYS)
        bucket = Bucket(
            source.endpoint, source.region, source.bucket, Credentials(keys[KEYS[0]], keys[KEYS[1]])
        )
        report = await asyncio.to_thread(
            prune_prefix,
            bucket,
            source.prefix,
            spec,
            dry_run=dry,
            policy=where,
            finished=state == "Finished",
            running=state == "Running",
            pins=location.pins,
            resume_from=location.resume_from,
        )
        if report.error is not None:  # the run could not start (an empty prefix, say)
            raise StoreError(report.error)
    except (Unreadable, StoreError, OSError, ValueError, OverflowError) as error:  # one location
        message = f"{source.url}: {error}"
        metrics.report_action(KIND, name, "PruneS3", "failed")
        log.warning("s3 pruning failed", object=source.url, policy=where, error=str(error))
        await kube.event(
            policy, type_="Warning", reason="PruneFailed", message=message, action="Prune"
        )
        failed = entry.model_copy(
            update={"last_run": now, "message": str(error)[:1000], "failed": True}
        )
        return Outcome(failed, 0)
    gained = 0 if dry else report.bytes_freed
    count = len(report.deleted)
    updated = entry.model_copy(
        update={
            "last_run": now,
            "failed": False,
            "scanned": report.scanned,
            "kept": report.kept,
            "deleted": count,
            "deleted_names": report.deleted[:100],
            "bytes_freed": entry.bytes_freed + gained,
            "bytes_retained": report.bytes_retained,
            "message": "; ".join(
                [
                    *(f"failed {f}" for f in report.failures),
                    *report.notes,
                    *(f"skipped {s}" for s in report.skipped),
                ]
            )[:1000],
        }
    )
    metrics.report_action(KIND, name, "PruneS3", "dry-run" if dry else "done")
    metrics.report_checkpoints_pruned(name, ref.namespace, 0 if dry else count, gained)
    verb = "would delete" if dry else "deleted"
    listed = ", ".join(report.deleted[:10]) + (f" and {count - 10} more" if count > 10 else "")
    message = (
        f"{KIND} {name} {verb} {count} checkpoint(s) in {source.url} "
        f"({human_size(report.bytes_freed)}): {listed or 'none'}; {report.kept} kept"
    )
    log.info(
        "s3 checkpoints would be pruned" if dry else "s3 checkpoints pruned",
        object=source.url,
        policy=where,
        deleted=count,
        bytes_freed=gained,
        job_state=state,
        message=message,
    )
    if count:
        reason = "CheckpointsWouldBePruned" if dry else "CheckpointsPruned"
        await kube.event(policy, type_="Normal", reason=reason, message=message, action="Prune")
    return Outcome(updated, gained)
