"""Over-provisioned accelerators, for an IdleReclaimPolicy with `rightsizing`: observe each
accelerator of the watched pods over the window (one pair of instant queries), decide
with core/rightsizing.py, tell the workload (an Event, once per recommendation) and
record (status, a metric). Never changes a workload.

Judged at most every INTERVAL (or a quarter of a shorter window): a verdict over a window
of hours moves slowly, and the queries cover every accelerator in the policy's scope.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON
from trainwarden.adapters.prometheus import MetricsUnavailable, PerGpu
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.names import IDLE_KIND as KIND
from trainwarden.api.v1alpha1.rightsizing import MAX_RECOMMENDED, OverProvisioned, Rightsizing
from trainwarden.api.v1alpha1.types import format_duration
from trainwarden.core.announce import Announcements
from trainwarden.core.rightsizing import Recommendation, holders, recommend
from trainwarden.idle.actions import Context, Watched

log = logs.get(__name__)
Resolve = Callable[[Watched], Awaitable[JSON | None]]
"""The top-level workload of a watched pod (idle/reconcile.py's Owners)."""
GROUP_KINDS = {"jobset.sigs.k8s.io/jobset-name": "JobSet", "ray.io/cluster": "RayCluster"}
INTERVAL = timedelta(minutes=5)
"""How often at most the accelerators are judged (a quarter of a shorter window)."""


@dataclass
class RightsizingMemory:
    at: datetime | None = None
    """When the accelerators were last judged."""
    found: list[OverProvisioned] = field(default_factory=list)
    announced: Announcements = field(default_factory=Announcements)
    """Per workload, the request its last Event recommended (each is told once)."""


def _min_samples(spec: IdleReclaimPolicySpec, r: Rightsizing) -> int:
    """Samples an accelerator's window needs to be covered: at the scrape interval for a
    bare selector, allowing one missed scrape in ten."""
    scrape = spec.signal.scrape_interval or spec.signal.resolution / 2
    return max(1, int(r.window / scrape * 0.9))


def _rows(watched: Sequence[Watched]) -> list[tuple[str, str, str, str, str, int]]:
    """Each pod with the workload it is judged in: its JobSet or Ray cluster where its
    labels name one, else its owner, else itself."""
    rows = []
    for w in watched:
        owner, labels = w.facts.owner, w.facts.snapshot.labels
        kind, name = (owner.kind, owner.name) if owner else ("Pod", w.view.name)
        for label, group_kind in GROUP_KINDS.items():
            if label in labels:
                kind, name = group_kind, labels[label]
                break
        accelerators = int(w.view.accelerators)
        rows.append((w.view.group, kind, w.view.namespace, name, w.view.name, accelerators))
    return rows


def _entry(r: Recommendation, message: str, since: datetime) -> OverProvisioned:
    return OverProvisioned(
        kind=r.kind,
        namespace=r.namespace,
        name=r.name,
        pods=r.pods,
        accelerators=r.held,
        busy=r.busy,
        idle=r.idle,
        recommended_per_pod=r.per_pod,
        since=since,
        message=message[:512],
    )


async def evaluate(
    source: PerGpu | None,
    ctx: Context,
    watched: Sequence[Watched],
    memory: RightsizingMemory,
    now: datetime,
    resolve: Resolve,
) -> list[OverProvisioned]:
    """The workloads to report now (status), posting an Event for each new verdict."""
    r = ctx.spec.rightsizing
    if r is None or source is None:
        memory.found, memory.announced = [], Announcements()
        return []
    if memory.at is not None and now < memory.at + min(INTERVAL, r.window / 4):
        return memory.found
    try:
        series = await source.per_gpu(
            ctx.spec.signal.query,
            namespaces=sorted({w.view.namespace for w in watched}),
            window=r.window,
            resolution=ctx.spec.signal.resolution,
            at=now,
        )
    except MetricsUnavailable as error:
        log.warning("rightsizing skipped", object=f"{KIND}/{ctx.name}", error=str(error))
        return memory.found  # the last verdicts stand until Prometheus answers
    threshold = r.threshold or ctx.spec.signal.threshold
    recs = recommend(
        holders(_rows(watched)),
        series,
        threshold=threshold,
        min_samples=_min_samples(ctx.spec, r),
        min_idle=r.min_idle,
    )[:MAX_RECOMMENDED]
    messages = {rec.key: rec.message(threshold, format_duration(r.window)) for rec in recs}
    since = {(e.namespace, e.kind, e.name): e.since for e in memory.found}
    memory.found = [
        _entry(rec, messages[rec.key], since.get((rec.namespace, rec.kind, rec.name), now))
        for rec in recs
    ]
    memory.at = now
    await _announce(ctx, watched, recs, messages, memory, resolve)
    metrics.report_over_provisioned(ctx.name, len(recs), sum(rec.excess for rec in recs))
    return memory.found


async def _announce(
    ctx: Context,
    watched: Sequence[Watched],
    recs: Sequence[Recommendation],
    messages: dict[str, str],
    memory: RightsizingMemory,
    resolve: Resolve,
) -> None:
    """An Event on each workload whose recommendation is new (its top-level owner, else
    the pod); the memory keeps only the workloads reported now."""
    by_group = {w.view.group: w for w in watched}
    for rec in recs:
        if memory.announced.said(rec.key, rec.per_pod):
            continue
        w = by_group[rec.key]
        target = await resolve(w) or _pod(w)
        message = messages[rec.key]
        await ctx.kube.event(
            target, type_="Normal", reason="OverProvisioned", message=message, action="Recommend"
        )
        log.info(
            "over-provisioned",
            object=f"{KIND}/{ctx.name}",
            workload=f"{rec.kind}/{rec.namespace}/{rec.name}",
            message=message,
        )
        memory.announced.note(rec.key, rec.per_pod)
    memory.announced.keep_only(rec.key for rec in recs)


def _pod(w: Watched) -> JSON:
    meta = {"name": w.view.name, "namespace": w.view.namespace, "uid": w.view.uid}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
