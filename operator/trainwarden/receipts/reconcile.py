"""Write a closed run's receipt, exactly once, whatever else its namespace holds.

One receipt per run: its name is derived from the workload's uid, so a second attempt
(after a restart, or a retry) gets AlreadyExists and writes nothing twice — if the
receipt found there carries this operator's seal. One that does not (a tenant took the
name first) is left alone: the run's receipt goes under a fallback name only the
operator can derive, said with a Warning Event and a metric. Recorded as an Event and an
annotation on the workload while it exists, a log line and metrics; a stored receipt's
figures are copied onto the workload only from a sealed one.
"""

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.adapters.prometheus import Busy, MetricsUnavailable
from trainwarden.adapters.promql import is_selector
from trainwarden.api.v1alpha1.efficiency import DEFAULT_UTILIZATION_QUERY
from trainwarden.api.v1alpha1.names import RECEIPT
from trainwarden.api.v1alpha1.names import RECEIPT_KIND as KIND
from trainwarden.api.v1alpha1.receipt import RunReceiptSpec
from trainwarden.api.v1alpha1.types import API_VERSION
from trainwarden.cache.cluster import CLAIMS, ClusterCache
from trainwarden.core import receipts, run_storage
from trainwarden.core.efficiency import Measure, integrate, query_step
from trainwarden.core.runs import Run
from trainwarden.receipts.identity import fallback_name, receipt_name
from trainwarden.receipts.ledger import Identity

log = logs.get(__name__)
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
    seal: tuple[str, str] = ("default", "trainwarden-receipt-seal")
    """The Secret (namespace, name) holding the key that seals this operator's receipts."""


@dataclass(frozen=True)
class Ledger:
    """What writing receipts needs."""

    kube: Kube
    cache: ClusterCache
    busy: Busy | None
    settings: ReceiptSettings
    instance: str | None


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


def stored_claims(cache: ClusterCache, run: Run) -> run_storage.Claims:
    """The cache's records of the claims of the run's namespace (those seen gone too);
    none read for a run that mounted none."""
    current = cache.claims_watch.current(CLAIMS)
    if not run.claims:
        return run_storage.Claims((), current=current)
    gone = [(c, t) for c, t in cache.claims_gone_now() if c.namespace == run.namespace]
    found = run_storage.records(cache.claims_in(run.namespace), gone)
    return run_storage.Claims(tuple(found), current=current)


Written = Literal["written", "exists", "dropped"]


async def write(
    ledger: Ledger,
    who: Identity,
    run: Run,
    closed: float,
    *,
    located: receipts.Located | None,
    give_up_on_metrics: bool,
    made: Callable[[JSON], None] | None = None,
) -> Written | None:
    """The run's receipt; None when Prometheus failed and it is worth trying again.
    `located`: what is known of its checkpoint location (receipts/locations.py); `made`
    is given the receipt as the server stored it, when written under its own name."""
    if await _written_elsewhere(ledger, who, run):
        return "exists"
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
        claims=stored_claims(ledger.cache, run),
    )
    name = receipt_name(run.kind, run.name, run.uid)
    try:
        if (stored := await ledger.kube.create(who.manifest(name, spec))) is not None:
            if made is not None:
                made(stored)
            await _recorded(ledger, run, name, spec)
            return "written"
        if await _found(ledger, who, run, name):
            return "exists"
        return await _elsewhere(ledger, who, run, name, spec)
    except Gone:  # the namespace is being deleted, and its ledger with it
        log.info("run receipt not written: its namespace is being deleted", receipt=name)
        return "dropped"


async def _found(ledger: Ledger, who: Identity, run: Run, name: str) -> bool:
    """Whether `name` holds this run's receipt, sealed by this operator; the workload's
    annotation is then made to say what that receipt says (never a forgery's figures)."""
    stored = await ledger.kube.get(API_VERSION, KIND, run.namespace, name)
    spec = who.genuine(stored) if stored is not None else None
    if spec is None or spec.workload.uid != run.uid:
        return False
    workload = ledger.cache.workloads.get(run.uid) or ledger.cache.pods.get(run.uid)
    value = receipts.annotation(name, spec)
    if workload is not None and workload.annotations.get(RECEIPT) != value:
        await _annotate(ledger, run, value)
    return True


def _fallbacks(who: Identity, run: Run) -> list[str]:
    """The run's fallback names under each key, the current one first."""
    keys = (who.ring.current, *who.ring.retired)
    return [
        fallback_name(k, kind=run.kind, name=run.name, namespace=run.namespace, uid=run.uid)
        for k in keys
    ]


async def _written_elsewhere(ledger: Ledger, who: Identity, run: Run) -> bool:
    """A restart after the run's receipt went under a fallback name: the workload's
    annotation names it (a tenant may write the annotation, so the name must be one of
    the run's own fallbacks, and the receipt must verify). Found, the primary name is
    not tried again: a squatter removed meanwhile must not make it a second receipt."""
    workload = ledger.cache.workloads.get(run.uid) or ledger.cache.pods.get(run.uid)
    raw = workload.annotations.get(RECEIPT) if workload is not None else None
    try:
        named = json.loads(raw).get("receipt") if raw else None
    except (ValueError, AttributeError):
        return False
    return named in _fallbacks(who, run) and await _found(ledger, who, run, str(named))


async def _elsewhere(
    ledger: Ledger, who: Identity, run: Run, taken: str, spec: RunReceiptSpec
) -> Written:
    """The run's name holds a receipt this operator did not write: the run's receipt is
    under its fallback name (found there, after a restart, or written there now)."""
    current, *retired = _fallbacks(who, run)
    for name in retired:
        if await _found(ledger, who, run, name):
            return "exists"
    if await ledger.kube.create(who.manifest(current, spec)) is None:
        if await _found(ledger, who, run, current):
            return "exists"
        await _not_written(ledger, run, taken, current)
        return "dropped"
    metrics.report_receipts_unverified("name", 1)
    where = f"{run.kind}/{run.namespace}/{run.name}"
    log.warning("run receipt name taken", object=where, taken=taken, receipt=current)
    if _exists(ledger, run):
        text = (
            f"RunReceipt {taken} exists and was not written by trainwarden (it does not "
            f"carry its seal): left alone; this run's receipt is {current}"
        )
        await ledger.kube.event(
            _workload(run),
            type_="Warning",
            reason="ReceiptNameTaken",
            message=text,
            action="Record",
        )
    await _recorded(ledger, run, current, spec)
    return "written"


async def _not_written(ledger: Ledger, run: Run, taken: str, fallback: str) -> None:
    """Both names hold receipts the operator did not write: only someone holding the key,
    or who deleted this run's receipt and took its name, can do that."""
    metrics.report_receipts_unverified("name", 1)
    where = f"{run.kind}/{run.namespace}/{run.name}"
    log.error(
        "run receipt not written: both its names are taken", object=where, taken=[taken, fallback]
    )
    if _exists(ledger, run):
        text = (
            f"RunReceipt not written: {taken} and {fallback} hold receipts trainwarden did "
            "not write (they do not carry its seal)"
        )
        await ledger.kube.event(
            _workload(run),
            type_="Warning",
            reason="ReceiptNotWritten",
            message=text,
            action="Record",
        )


def _workload(run: Run) -> JSON:
    meta = {"name": run.name, "namespace": run.namespace, "uid": run.uid}
    return {"apiVersion": run.api_version, "kind": run.kind, "metadata": meta}


def _exists(ledger: Ledger, run: Run) -> bool:
    return run.uid in ledger.cache.workloads or run.uid in ledger.cache.pods


async def _annotate(ledger: Ledger, run: Run, value: str) -> None:
    patch = {"metadata": {"annotations": {RECEIPT: value}}}
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
