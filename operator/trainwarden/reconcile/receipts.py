"""Write a closed run's receipt and keep the run ledger bounded.

One receipt per run: its name is derived from the workload's uid, so a second attempt
(after a restart, or a retry) gets AlreadyExists and writes nothing twice. Recorded as an
Event and an annotation on the workload while it exists, a log line and metrics. The
ledger's bounds (a TTL, a cap per namespace) remove only receipts this instance wrote,
with uid and resourceVersion preconditions.
"""

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import ValidationError

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.adapters.prometheus import Busy, MetricsUnavailable, is_selector
from trainwarden.api.v1alpha1.checkpoint import MAX_COMPLETIONS, PrunedLocation
from trainwarden.api.v1alpha1.efficiency import DEFAULT_UTILIZATION_QUERY
from trainwarden.api.v1alpha1.receipt import Checkpoints, RunReceiptSpec
from trainwarden.api.v1alpha1.types import API_VERSION
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import locations as loc
from trainwarden.core import receipts
from trainwarden.core.efficiency import Measure, integrate, query_step
from trainwarden.core.runs import CheckpointHistory, Run

log = logs.get(__name__)
KIND = "RunReceipt"
MANAGED_BY = "app.kubernetes.io/managed-by"
INSTANCE = "trainwarden.dev/instance"
WORKLOAD_UID = "trainwarden.dev/workload-uid"
NARROWED_PODS = 100
"""Pods a query names one by one at most (a longer regex only makes the URL long)."""


@dataclass(frozen=True)
class ReceiptSettings:
    ttl: timedelta = timedelta(days=90)
    """How long a receipt is kept."""
    per_namespace: int = 500
    """Receipts kept per namespace at most: the oldest go first."""
    query: str = DEFAULT_UTILIZATION_QUERY
    """Per-accelerator utilization (0-100), as IdleReclaimPolicy's signal reads it."""
    resolution: timedelta = timedelta(seconds=60)
    """The step of the utilization query: at least the exporter's scrape interval."""
    checkpoint_wait: timedelta = timedelta(minutes=10)
    """How long a receipt waits for a scan of the run's checkpoint location after its
    last interruption (core/receipts.py `awaits_scan`)."""


@dataclass(frozen=True)
class Ledger:
    """What writing receipts needs."""

    kube: Kube
    cache: ClusterCache
    busy: Busy | None
    settings: ReceiptSettings
    instance: str | None
    policies: Callable[[], Iterable[JSON]]
    """The CheckpointPolicies this instance governs, as last seen (with status)."""

    def selector(self) -> str:
        mine = f"{INSTANCE}={self.instance}" if self.instance else f"!{INSTANCE}"
        return f"{MANAGED_BY}=trainwarden,{mine}"


def _narrowed(query: str, pods: Sequence[str]) -> str:
    """A bare selector narrowed to the run's pods (their names are DNS labels: nothing
    to escape; a `.` matching any character only widens what is then filtered)."""
    if not is_selector(query) or not pods or len(pods) > NARROWED_PODS:
        return query
    matcher = f'pod=~"{"|".join(sorted(pods))}"'
    text = query.strip()
    if text.endswith("}"):
        inner = text[text.index("{") + 1 : -1].strip()
        return f"{text[: text.index('{')]}{{{inner + ', ' if inner else ''}{matcher}}}"
    return f"{text}{{{matcher}}}"


async def measured(ledger: Ledger, run: Run, closed: float) -> tuple[Measure | None, str]:
    """What the run's accelerators did, in one query over its life; MetricsUnavailable
    when Prometheus did not answer."""
    pods = [p for p in run.pods.values() if p.accelerators > 0]
    if ledger.busy is None:
        return None, "no Prometheus (--prometheus-url): used and idle are unknown"
    if not pods:
        return Measure(), ""
    start = min(p.start for p in pods)
    resolution = ledger.settings.resolution.total_seconds()
    step = query_step(closed - start, resolution, len(pods))
    points = await ledger.busy.busy(
        _narrowed(ledger.settings.query, [p.name for p in pods]),
        namespaces=[run.namespace],
        start=datetime.fromtimestamp(start + step, UTC),
        end=datetime.fromtimestamp(closed + step, UTC),
        step=timedelta(seconds=step),
    )
    total = Measure()
    for p in pods:
        total += integrate(
            points.get((run.namespace, p.name), []),
            step=step,
            accelerators=p.accelerators,
            start=p.start,
            end=p.end if p.end is not None else closed,
            lo=start,
            hi=closed,
        )
    return total, ""


def _entry(policies: Iterable[JSON], run: Run) -> tuple[str, PrunedLocation] | None:
    """The CheckpointPolicy status entry of the location the run names."""
    raw = run.checkpoint_path or ""
    try:
        if raw.startswith(loc.S3):
            want = ("S3", "", "", loc.s3_url(raw))
        else:
            want = ("PVC", run.namespace, *loc.parse_path(raw))
    except ValueError:
        return None
    for body in policies:
        for found in (body.get("status") or {}).get("locations") or []:
            if not isinstance(found, dict) or _key(found) != want:
                continue
            try:  # only the entry that matches is read whole: this runs as runs close
                return str(body["metadata"]["name"]), PrunedLocation.model_validate(found)
            except ValidationError:
                return None
    return None


def _key(entry: JSON) -> tuple[object, ...]:
    """A raw status entry's location, as PrunedLocation's defaults would read it."""
    fields = (("source", "PVC"), ("namespace", ""), ("pvc", ""), ("path", ""))
    return tuple(entry.get(name, default) for name, default in fields)


def located(policies: Iterable[JSON], run: Run) -> receipts.Located | None:
    """What a CheckpointPolicy's runs at the location found: the checkpoints its last run
    kept, and when the complete ones its scans saw were written."""
    if run.checkpoint_path is None:
        return None
    found = _entry(policies, run)
    where = run.checkpoint_path[:1100]
    if found is None:
        return receipts.Located(Checkpoints(location=where), None)
    name, entry = found
    times = [t.timestamp() for t in entry.completions]
    as_of = entry.completions_as_of
    history = CheckpointHistory(
        complete=times,
        as_of=as_of.timestamp() if as_of else None,
        horizon=min(times) if len(times) >= MAX_COMPLETIONS else None,
    )
    return receipts.Located(
        Checkpoints(
            location=where,
            policy=name,
            count=entry.kept,
            bytes=entry.bytes_retained,
            as_of=entry.last_run,
        ),
        history,
    )


def manifest(ledger: Ledger, name: str, spec: RunReceiptSpec) -> JSON:
    labels = {MANAGED_BY: "trainwarden", WORKLOAD_UID: spec.workload.uid[:63]}
    if ledger.instance:
        labels[INSTANCE] = ledger.instance
    labels = {
        **{k: v for k, v in spec.labels.items() if not k.startswith("trainwarden.dev/")},
        **labels,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": spec.workload.namespace, "labels": labels},
        "spec": spec.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


Written = Literal["written", "exists", "dropped"]


async def write(
    ledger: Ledger,
    run: Run,
    closed: float,
    *,
    located: receipts.Located | None,
    give_up_on_metrics: bool,
) -> Written | None:
    """The run's receipt; None when Prometheus failed and it is worth trying again.
    `located`: what is known of its checkpoint location (`located`)."""
    try:
        measure, note = await measured(ledger, run, closed)
    except MetricsUnavailable as error:
        if not give_up_on_metrics:
            return None
        measure, note = None, f"Prometheus did not answer: {error}"[:512]
    spec = receipts.spec(
        run,
        closed=closed,
        measure=measure,
        measurement=note,
        located=located,
    )
    name = receipts.receipt_name(run.kind, run.name, run.uid)
    try:
        created = await ledger.kube.create(manifest(ledger, name, spec))
    except Gone:  # the namespace is being deleted, and its ledger with it
        log.info("run receipt not written: its namespace is being deleted", receipt=name)
        return "dropped"
    if created is None:
        await _annotated_from_stored(ledger, run, name)
        return "exists"
    await _recorded(ledger, run, name, spec)
    return "written"


def _workload(run: Run) -> JSON:
    meta = {"name": run.name, "namespace": run.namespace, "uid": run.uid}
    return {"apiVersion": run.api_version, "kind": run.kind, "metadata": meta}


def _exists(ledger: Ledger, run: Run) -> bool:
    return run.uid in ledger.cache.workloads or run.uid in ledger.cache.pods


async def _annotate(ledger: Ledger, run: Run, value: str) -> None:
    patch = {"metadata": {"annotations": {receipts.ANNOTATION: value}}}
    with contextlib.suppress(Gone, Conflict):  # deleted meanwhile: the receipt is what lasts
        await ledger.kube.merge_patch(run.api_version, run.kind, run.namespace, run.name, patch)


async def _recorded(ledger: Ledger, run: Run, name: str, spec: RunReceiptSpec) -> None:
    a = spec.accelerator_hours
    waste = spec.failure_waste.accelerator_hours if spec.failure_waste else None
    if _exists(ledger, run):
        text = receipts.message(spec)
        await ledger.kube.event(
            _workload(run), type_="Normal", reason="RunReceipt", message=text, action="Record"
        )
        await _annotate(ledger, run, receipts.annotation(name, spec))
    hours = {"held": a.held, "used": a.used, "idle": a.idle, "unknown": a.unknown}
    metrics.report_run_receipt(spec.outcome, {**hours, "lost": waste or 0.0})
    log.info(
        "run receipt written",
        object=f"{run.kind}/{run.namespace}/{run.name}",
        receipt=name,
        outcome=spec.outcome,
        wall=spec.wall_time,
        **{k: round(v, 4) for k, v in hours.items()},
        cost=round(spec.cost, 4),
        budgets=[c.budget for c in spec.charges],
        failed_pods=spec.pods.failed,
        lost=waste,
        partial=spec.partial,
    )


async def _annotated_from_stored(ledger: Ledger, run: Run, name: str) -> None:
    """A receipt written before (by this operator before a restart): the workload gets
    its annotation if that write was lost, from the stored receipt, never recomputed."""
    workload = ledger.cache.workloads.get(run.uid) or ledger.cache.pods.get(run.uid)
    if workload is None or receipts.ANNOTATION in workload.annotations:
        return
    stored = await ledger.kube.get(API_VERSION, KIND, run.namespace, name)
    if stored is None:
        return
    spec = RunReceiptSpec.model_validate(stored.get("spec") or {})
    await _annotate(ledger, run, receipts.annotation(name, spec))


def _stored(obj: JSON) -> receipts.Stored | None:
    meta: dict[str, Any] = obj.get("metadata") or {}
    stamp = str(meta.get("creationTimestamp") or "")
    try:
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return receipts.Stored(
        str(meta.get("namespace")),
        str(meta.get("name")),
        str(meta.get("uid")),
        str(meta.get("resourceVersion")),
        created,
    )


async def sweep(ledger: Ledger, namespace: str, now: datetime) -> int:
    """Remove this instance's receipts in `namespace` past the TTL or over the cap."""
    found = await ledger.kube.list(
        API_VERSION, KIND, namespace=namespace, selector=ledger.selector()
    )
    stored = [s for s in (_stored(o) for o in found) if s is not None]
    settings = ledger.settings
    removed = 0
    for s in receipts.expired(stored, now=now, ttl=settings.ttl, cap=settings.per_namespace):
        try:
            await ledger.kube.delete(
                API_VERSION,
                KIND,
                s.namespace,
                s.name,
                uid=s.uid,
                resource_version=s.resource_version,
            )
        except (Gone, Conflict):
            continue
        removed += 1
    if removed:
        metrics.report_receipts_removed(removed)
        log.info("run receipts removed", namespace=namespace, removed=removed)
    return removed
