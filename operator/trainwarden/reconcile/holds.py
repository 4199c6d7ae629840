"""What a budget does about the work it holds: say so on each held workload once, and
start it when the budget has room again.

A held workload is started only if it is still exactly as the webhook left it: the same
uid, still suspended (or gated), still marked with this budget, not Kueue's, not since
suspended by a budget or reclaimed as idle. If another budget covering it holds new work
now, the hold is handed over (its mark renamed) instead: it starts when every budget has
room. A workload whose declared cost the budget cannot pay stays held, and status says
why. Starting is a conditional patch of the object re-read just before.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.budget import AdmissionStatus, TrainingBudgetSpec
from trainwarden.core import holds as holds_core
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import GATE, HELD_BY, BudgetView, covering
from trainwarden.core.budgets import prices
from trainwarden.core.estimate import demand, estimate
from trainwarden.core.holds import HeldRef, affordable, release_order, start_patch
from trainwarden.core.workloads import (
    KUEUE_QUEUE,
    POD,
    RECLAIMED_BY,
    SUSPENDED_BY,
    is_suspended,
)

log = logs.get(__name__)
KIND = "TrainingBudget"


@dataclass(frozen=True)
class Holds:
    """What the hold actions of one evaluation share."""

    kube: Kube
    budget: JSON
    spec: TrainingBudgetSpec
    others: Callable[[], Sequence[BudgetView]]
    """The other budgets as their status says (a hand-over needs their holds)."""
    namespace_labels: Callable[[str], Mapping[str, str]]
    now: datetime

    @property
    def name(self) -> str:
        return str(self.budget["metadata"]["name"])


@dataclass
class Released:
    started: int = 0
    handed_over: int = 0
    pending: list[str] = field(default_factory=list)


def _body(ref: HeldRef) -> JSON:
    meta = {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid}
    return {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": meta}


async def announce(ctx: Holds, held: Sequence[HeldRef], announced: set[str]) -> None:
    """One HeldByBudget Event per held workload (the webhook cannot post one: the object
    has no uid while it is being created)."""
    for ref in held:
        key = f"held/{ref.uid}"
        if key in announced:
            continue
        announced.add(key)
        message = f"held by TrainingBudget {ctx.name}: starts when the budget has room again"
        await ctx.kube.event(
            _body(ref), type_="Warning", reason="HeldByBudget", message=message, action="Hold"
        )
        log.info("workload held", object=str(ref), policy=f"{KIND}/{ctx.name}")
        metrics.report_action(KIND, ctx.name, "Hold", "done")


def _still_held(obj: JSON, ref: HeldRef, budget: str) -> bool:
    meta = obj["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if meta.get("uid") != ref.uid or annotations.get(HELD_BY) != budget:
        return False
    if KUEUE_QUEUE in labels or SUSPENDED_BY in labels or RECLAIMED_BY in labels:
        return False
    if (ref.api_version, ref.kind) == POD:
        gates = (obj.get("spec") or {}).get("schedulingGates") or []
        return any(g.get("name") == GATE for g in gates)
    return is_suspended(obj)


async def _hand_over(ctx: Holds, obj: JSON, ref: HeldRef) -> str | None:
    """The name of another budget now holding this workload's scope, after renaming the
    hold to it; None if no other budget holds it."""
    meta = obj["metadata"]
    labels = ctx.namespace_labels(ref.namespace)
    others = [
        b
        for b in covering(obj, labels, [b for b in ctx.others() if b.name != ctx.name])
        if b.holds(ctx.now)
        and b.spec.mode == "Enforce"
        and b.spec.enforcement.new_workloads == "Hold"
    ]
    if not others:
        return None
    patch = {
        "metadata": {
            "resourceVersion": meta["resourceVersion"],
            "annotations": {HELD_BY: others[0].name},
        }
    }
    await workloads.patch_object(ctx.kube, obj, patch)
    return others[0].name


async def release(
    ctx: Holds, held: Sequence[HeldRef], room: int, remaining: dict[str, float]
) -> Released:
    """Start up to `room` held workloads, oldest first, whose declared cost fits."""
    out = Released()
    now_ready, waiting = release_order(held, room)
    if waiting:
        cap = ctx.spec.enforcement.max_suspensions_per_minute
        out.pending.append(f"{len(waiting)} held workloads start later (at most {cap}/minute)")
    committed = Usage()
    for ref in now_ready:
        try:
            obj = await ctx.kube.get(ref.api_version, ref.kind, ref.namespace, ref.name)
            if obj is None or not _still_held(obj, ref, ctx.name):
                continue  # gone, started by someone, or no longer ours to start
            taker = await _hand_over(ctx, obj, ref)
            if taker is not None:
                out.handed_over += 1
                log.info("hold handed over", object=str(ref), policy=f"{KIND}/{ctx.name}", to=taker)
                continue
            cost = estimate(demand(obj), ctx.spec.accelerators, prices(ctx.spec)).total
            fits, why = affordable(cost, committed, remaining)
            if not fits:
                out.pending.append(f"holding {ref}: {why}")
                continue
            await workloads.patch_object(ctx.kube, obj, start_patch(obj))
        except (Conflict, Gone) as error:  # changed meanwhile: the next evaluation re-reads
            log.info(
                "release deferred", object=str(ref), policy=f"{KIND}/{ctx.name}", error=str(error)
            )
            continue
        committed = committed + (cost or Usage())
        out.started += 1
        await _started(ctx, obj, ref)
    return out


async def _started(ctx: Holds, obj: JSON, ref: HeldRef) -> None:
    message = f"TrainingBudget {ctx.name} has room again: started"
    await ctx.kube.event(
        obj, type_="Normal", reason="ReleasedByBudget", message=message, action="Release"
    )
    log.info("held workload started", object=str(ref), policy=f"{KIND}/{ctx.name}")
    metrics.report_action(KIND, ctx.name, "Release", "done")


@dataclass
class HoldMemory:
    """What the hold actions carry between evaluations of one budget."""

    releases: list[datetime] = field(default_factory=list)
    """When held workloads were started in the last minute (for the per-minute cap)."""
    announced: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Outcome:
    admission: AdmissionStatus | None
    pending: list[str]
    again: bool
    """Held workloads wait for the per-minute cap: evaluate again soon."""


async def evaluate(
    ctx: Holds,
    held: Sequence[HeldRef],
    memory: HoldMemory,
    *,
    holding: bool,
    acting: bool,
    remaining: dict[str, float],
    previous: AdmissionStatus | None,
    period_end: datetime | None,
    generation: int,
) -> Outcome:
    """Publish whether the budget holds new work; while it holds (in Enforce), announce
    what it holds; otherwise start what it held, when `acting` (the clock is known). A
    budget in DryRun holds nothing: what it held before is started."""
    memory.announced &= {f"held/{h.uid}" for h in held}
    pending: list[str] = []
    again = False
    left = len(held)
    if holding and ctx.spec.mode == "Enforce":
        await announce(ctx, held, memory.announced)
    elif held and acting:
        minute_ago = ctx.now - timedelta(minutes=1)
        memory.releases = [t for t in memory.releases if t > minute_ago]
        room = ctx.spec.enforcement.max_suspensions_per_minute - len(memory.releases)
        out = await release(ctx, held, room, remaining)
        memory.releases += [ctx.now] * out.started
        left = len(held) - out.started - out.handed_over
        pending, again = out.pending, left > 0
    admission = holds_core.admission(
        previous,
        holding=holding,
        held=left,
        now=ctx.now,
        period_end=period_end,
        generation=generation,
    )
    return Outcome(admission, pending, again)
