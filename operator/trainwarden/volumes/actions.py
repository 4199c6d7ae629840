"""What a VolumeReclaimPolicy does to claims: report an orphan, leave one alone, request
its snapshot, delete it. Each keeps the project's rule for destructive actions: DryRun,
an Event, an annotation naming the policy and why, a log line, a metric."""

from dataclasses import dataclass, field
from datetime import datetime

from trainwarden import failpoints, logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube, Refused
from trainwarden.api.v1alpha1.names import (
    ORPHANED_SINCE,
    SOURCE_CLAIM_UID,
    VOLUME_POLICY,
)
from trainwarden.api.v1alpha1.names import VOLUME_KIND as KIND
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicySpec
from trainwarden.core import orphans
from trainwarden.core.announce import Announcements
from trainwarden.core.workloads import label_value
from trainwarden.volumes.observe import SNAPSHOT_API, snapshot_name

log = logs.get(__name__)


@dataclass
class Context:
    kube: Kube
    body: JSON
    spec: VolumeReclaimPolicySpec
    now: datetime
    announced: Announcements
    touched: set[str] = field(default_factory=set)
    pending: list[str] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    """The bytes requested by each claim deleted this evaluation."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def enforce(self) -> bool:
        return self.spec.mode == "Enforce"


def claim_obj(rec: orphans.Record) -> JSON:
    meta = {"name": rec.name, "namespace": rec.namespace, "uid": rec.uid}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta}


def where(rec: orphans.Record) -> str:
    return f"PersistentVolumeClaim/{rec.namespace}/{rec.name}"


async def say_once(ctx: Context, rec: orphans.Record, reason: str, message: str) -> None:
    """An Event and a log line said once for as long as it holds (Exempt, a bad keep-until)."""
    key = f"{rec.uid}/{reason}/{message}"
    ctx.touched.add(key)
    if ctx.announced.first(key):
        log.info(reason, object=where(rec), policy=f"{KIND}/{ctx.name}", message=message)
        await ctx.kube.event(
            claim_obj(rec), type_="Normal", reason=reason, message=message, action="Observe"
        )


async def report(ctx: Context, rec: orphans.Record, why: str) -> None:
    """The Orphaned Event (both modes; the grace period runs from it), the metric, and in
    Enforce the orphaned-since annotation on the claim (output only)."""
    message = f"VolumeReclaimPolicy {ctx.name}: orphaned: {why}"
    if ctx.enforce:
        message += f"; deleted after {ctx.spec.grace_period} unless mounted, kept or protected"
        note = {ORPHANED_SINCE: rec.since.isoformat(timespec="seconds"), VOLUME_POLICY: ctx.name}
        try:
            await ctx.kube.merge_patch(
                "v1", "PersistentVolumeClaim", rec.namespace, rec.name,
                {"metadata": {"annotations": note}},
            )  # fmt: skip
        except (Gone, Conflict, Refused) as error:
            log.info("orphan not annotated", object=where(rec), error=str(error)[:200])
    log.warning("Orphaned", object=where(rec), policy=f"{KIND}/{ctx.name}", message=message)
    await ctx.kube.event(
        claim_obj(rec), type_="Warning", reason="Orphaned", message=message, action="Report"
    )
    metrics.report_action(KIND, ctx.name, "Report", "done" if ctx.enforce else "dry-run")


async def request_snapshot(ctx: Context, rec: orphans.Record) -> bool:
    """Create the claim's VolumeSnapshot (Enforce); True once it exists."""
    cls = ctx.spec.snapshot.volume_snapshot_class_name if ctx.spec.snapshot else ""
    name = snapshot_name(rec.name, rec.uid)
    body: JSON = {
        "apiVersion": SNAPSHOT_API,
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": rec.namespace,
            "labels": {VOLUME_POLICY: label_value(ctx.name), SOURCE_CLAIM_UID: rec.uid},
            "annotations": {VOLUME_POLICY: f"{ctx.name}: snapshot of orphaned claim {rec.name}"},
        },
        "spec": {"volumeSnapshotClassName": cls, "source": {"persistentVolumeClaimName": rec.name}},
    }
    try:
        await ctx.kube.create(body)  # None: it exists already (asked before a restart)
    except Exception as error:  # refused, or the kind not served: no snapshot, no deletion
        why = f"{type(error).__name__}: {str(error)[:200]}"
        ctx.pending.append(f"snapshot of {rec.namespace}/{rec.name} not created: {why}")
        return False
    log.info("snapshot requested", object=where(rec), policy=f"{KIND}/{ctx.name}")
    said = f"VolumeReclaimPolicy {ctx.name}: snapshot {name} before deletion"
    await ctx.kube.event(
        claim_obj(rec), type_="Normal", reason="SnapshotRequested", message=said, action="Snapshot"
    )
    metrics.report_action(KIND, ctx.name, "Snapshot", "done")
    return True


async def delete(ctx: Context, rec: orphans.Record, c: orphans.Claim, why: str) -> bool:
    """Annotate (conditional on the version judged), then delete exactly that version.
    A claim changed since it was judged is not deleted this round."""
    note = f"{ctx.name}: {why}"[:1024]
    patch = {
        "metadata": {
            "resourceVersion": c.resource_version,
            "annotations": {
                VOLUME_POLICY: note,
                ORPHANED_SINCE: rec.since.isoformat(timespec="seconds"),
            },
        }
    }
    try:
        patched = await ctx.kube.merge_patch(
            "v1", "PersistentVolumeClaim", rec.namespace, rec.name, patch
        )
        failpoints.hit("volumes-before-delete")
        version = str(patched["metadata"]["resourceVersion"])
        await ctx.kube.delete(
            "v1",
            "PersistentVolumeClaim",
            rec.namespace,
            rec.name,
            uid=rec.uid,
            resource_version=version,
        )
    except Conflict:
        ctx.pending.append(
            f"{rec.namespace}/{rec.name} changed since judged: not deleted this round"
        )
        metrics.report_action(KIND, ctx.name, "Delete", "conflict")
        return False
    except (Gone, Refused) as error:
        ctx.pending.append(f"{rec.namespace}/{rec.name} not deleted: {str(error)[:200]}")
        return False
    message = (
        f"VolumeReclaimPolicy {ctx.name} deleted this claim ({c.bytes} bytes requested): {why}"
    )
    log.warning("Deleted", object=where(rec), policy=f"{KIND}/{ctx.name}", message=message)
    await ctx.kube.event(
        claim_obj(rec), type_="Warning", reason="Deleted", message=message, action="Delete"
    )
    said = f"{rec.namespace}/{rec.name}: {why}"
    await ctx.kube.event(
        ctx.body, type_="Normal", reason="ClaimDeleted", message=said, action="Delete"
    )
    metrics.report_action(KIND, ctx.name, "Delete", "done")
    metrics.report_volume_reclaimed(ctx.name, c.bytes)
    return True
