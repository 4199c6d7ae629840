"""reclaimWhen: UnderPressure: of the reclaims due, only those pending pods wait for go
ahead (their cause names the demand); the others stay warned, kept warm (idle/demand.py
decides)."""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import reclaim
from trainwarden.idle import demand
from trainwarden.idle.actions import Context, Result, Watched, announce_once, pod_obj


@dataclass(frozen=True)
class Gated:
    plan: reclaim.Plan
    """The plan with only the wanted reclaims in act and deferred."""
    kept: tuple[tuple[reclaim.Reclaim, str], ...] = ()
    """Reclaims no pending pod waits for, with why."""
    wake: datetime | None = None
    """When the next unschedulable pod has waited long enough to count."""


def gate(
    ctx: Context, decided: reclaim.Plan, by_uid: Mapping[str, Watched], cache: ClusterCache
) -> Gated:
    """Keep the per-minute cap as plan() applied it: a reclaim kept warm frees its slot
    for a wanted one plan() deferred."""
    spec = ctx.spec
    if spec.reclaim_when != "UnderPressure":
        return Gated(decided)
    due = [*decided.act, *decided.deferred]
    if not due:
        return Gated(decided)
    pods, resources = cache.pods_now(), spec.accelerators
    candidates = [
        demand.Candidate(
            r.group,
            frozenset(by_uid[p.uid].facts.group for p in r.pods),
            demand.held([by_uid[p.uid].facts for p in r.pods], resources),
        )
        for r in due
    ]
    min_pending = spec.pressure.min_pending
    waiting = demand.waiting(pods, resources, now=ctx.now, min_pending=min_pending)
    found = demand.demand(candidates, waiting, demand.rooms(cache.nodes_now(), pods, resources))
    wanted = [
        replace(r, cause=f"{r.cause}, and {found[r.group].describe(ctx.now)}")
        for r in due
        if r.group in found
    ]
    kept = tuple((r, _unwanted(r, by_uid, resources)) for r in due if r.group not in found)
    later = [
        f.unschedulable_since + min_pending
        for f in pods
        if f.unschedulable_since is not None and f.unschedulable_since + min_pending > ctx.now
    ]
    budget = len(decided.act)
    plan = replace(decided, act=tuple(wanted[:budget]), deferred=tuple(wanted[budget:]))
    return Gated(plan, kept, min(later) if kept and later else None)


def _unwanted(r: reclaim.Reclaim, by_uid: Mapping[str, Watched], resources: list[str]) -> str:
    requests = [by_uid[p.uid].facts.snapshot.requests for p in r.pods]
    held = ", ".join(x for x in resources if any(q.get(x, 0.0) > 0 for q in requests))
    return (
        f"idle, but no pending pod wants {held or 'its accelerators'} "
        "in what reclaiming it would free: kept warm"
    )


async def keep_warm(ctx: Context, r: reclaim.Reclaim, why: str, out: Result) -> None:
    """Said once for as long as it lasts: on the pod under Enforce (its warning's deadline
    has passed), on the policy under DryRun (as its other would-be actions)."""
    out.pending.append(f"kept warm {r.pods[0]}: {why}")
    out.kept |= dict.fromkeys((p.uid for p in r.pods), why)
    obj = pod_obj(r.pods[0]) if ctx.enforce else ctx.body
    message = f"IdleReclaimPolicy {ctx.name}: {r.pods[0]} is {why}"
    key = f"warm/{r.group}"  # news, not a problem: its idle warning was the Warning
    await announce_once(ctx, key, obj, "IdleKeptWarm", message, out, warning=False)
