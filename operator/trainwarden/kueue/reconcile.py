"""Kueue's budget AdmissionCheck, acted on: the Active condition of trainwarden's
AdmissionChecks, and each waiting Workload's check state, decided by core/kueue.py.

A check state is written by server-side apply of the Workload's status with trainwarden's
controllerName as field manager (as Kueue's own check controllers do), so only our entry
of status.admissionChecks is ours; conditional on the version the decision was made on:
a Workload Kueue changed meanwhile is decided again from the new version. Nothing is
kept in memory that a restart would need: the states are on the Workloads.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.names import BUDGET_KIND
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import BudgetView
from trainwarden.core.estimate import Demand
from trainwarden.core.kueue import (
    API_VERSION,
    CheckState,
    KueueWorkload,
    Verdict,
    active_condition,
    changes,
    check_entry,
    cost,
    covers,
    decide,
    forecast,
    passed,
    with_owner_duration,
)

log = logs.get(__name__)
EVENT_REASONS = {
    "Ready": "BudgetCheckReady",
    "Pending": "HeldByBudget",
    "Rejected": "RejectedByBudget",
}


@dataclass(frozen=True)
class Checks:
    """What the decisions of one pass share."""

    kube: Kube
    cache: ClusterCache
    controller: str
    """The AdmissionChecks' controllerName, and the field manager of what we apply."""
    budgets: Sequence[BudgetView]
    now: datetime


def demand_of(cache: ClusterCache, w: KueueWorkload) -> Demand:
    """The Workload's pods and declared time, or its job's declared time."""
    owner = cache.workload(w.owner_uid) if w.owner_uid else None
    return with_owner_duration(w.demand, owner.annotations if owner else {})


def covering(ctx: Checks, w: KueueWorkload) -> list[BudgetView]:
    labels = ctx.cache.namespace_labels(w.namespace)
    return sorted((b for b in ctx.budgets if covers(b, w, labels)), key=lambda b: b.name)


def promise(ctx: Checks, promised: dict[str, Usage], w: KueueWorkload, at: datetime | None) -> None:
    """Add what `w` will still spend to each covering budget's promises."""
    d = demand_of(ctx.cache, w)
    for b in covering(ctx, w):
        ahead = forecast(cost(d, b.spec), d, at, ctx.now)
        promised[b.name] = promised.get(b.name, Usage()) + ahead


def promised(ctx: Checks, ours: frozenset[str], recent: Mapping[str, datetime]) -> dict[str, Usage]:
    """Per budget: what the workloads our checks let through (or just did, `recent`,
    before the cache shows it) are forecast to spend still."""
    found: dict[str, Usage] = {}
    for w in list(ctx.cache.kueue.workloads.values()):
        if passed(w, ours) or (w.uid in recent and not w.finished):
            promise(ctx, found, w, w.admitted_at)
    return found


def _ref(w: KueueWorkload) -> JSON:
    meta = {"name": w.name, "namespace": w.namespace, "uid": w.uid}
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": meta}


async def decide_one(
    ctx: Checks, w: KueueWorkload, check: str, promises: Mapping[str, Usage]
) -> Verdict:
    """Decide our check on one Workload and write it if it changed (Conflict: Kueue
    changed the Workload since the cache saw it)."""
    verdict = decide(demand_of(ctx.cache, w), covering(ctx, w), promises, ctx.now)
    previous = w.checks.get(check)
    if not changes(verdict, previous):
        return verdict
    body = _ref(w)
    body["metadata"]["resourceVersion"] = w.resource_version
    body["status"] = {"admissionChecks": [check_entry(check, verdict, previous, ctx.now)]}
    await ctx.kube.apply(body, field_manager=ctx.controller, subresource="status")
    await _report(ctx, w, check, verdict, moved=_moved(previous, verdict))
    return verdict


def _moved(previous: CheckState | None, v: Verdict) -> bool:
    """A decision worth an Event: a new state, or our first word (Kueue adds the entry
    Pending, without a message). A message that only updates the numbers is not."""
    return previous is None or previous.state != v.state or not previous.message


async def _report(ctx: Checks, w: KueueWorkload, check: str, v: Verdict, *, moved: bool) -> None:
    budgets = ",".join(v.budgets) or None
    if moved:
        type_ = "Normal" if v.state == "Ready" else "Warning"
        await ctx.kube.event(
            _ref(w),
            type_=type_,
            reason=EVENT_REASONS.get(v.state, v.state),
            message=v.message,
            action="AdmissionCheck",
        )
        metrics.report_kueue_check(v.state)
    (log.info if moved else log.debug)(  # only the numbers changed: no news
        "admission check decided",
        object=str(w),
        check=check,
        state=v.state,
        budgets=budgets,
        message=v.message,
    )
    for would in v.would if moved else ():
        await ctx.kube.event(
            _ref(w),
            type_="Normal",
            reason="WouldHoldByBudget",
            action="AdmissionCheck",
            message=f"DryRun: TrainingBudget {would.budget} would say {would.state}: {would.why}",
        )
        log.info(
            "admission check would hold",
            object=str(w),
            policy=f"TrainingBudget/{would.budget}",
            state=would.state,
            why=would.why,
        )
        metrics.report_action(BUDGET_KIND, would.budget, "AdmissionCheck", "dry-run")


async def activate(kube: Kube, cache: ClusterCache, controller: str, now: datetime) -> None:
    """Mark our AdmissionChecks Active: Kueue admits nothing through an inactive one."""
    for check in list(cache.kueue.checks.values()):
        if check.controller != controller:
            continue
        condition = active_condition(check.conditions, check.generation, now)
        if condition is None:
            continue
        body: JSON = {
            "apiVersion": API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": check.name},
            "status": {"conditions": [condition]},
        }
        await kube.apply(body, field_manager=controller, subresource="status")
        log.info("admission check active", object=f"AdmissionCheck/{check.name}")
