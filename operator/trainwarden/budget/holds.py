"""What a budget does about the work it holds: know what it holds, say so on each held
workload once, and start it when the budget has room again.

A held workload is one the admission webhook created suspended (or, for a bare pod,
behind trainwarden's scheduling gate) and marked with the budget's name. It has no pods,
so the pod-to-budget index never sees it: `HeldIndex`, kept current from the cache's
events, does, bounded by what is held in the cluster now. The mark is only a claim
(anyone who can edit a Job can write it): a budget is shown only what is in its
namespaces, so a workload elsewhere never enters its queue.

The decision is budget/holding.py's, taken one held workload at a time, oldest first, over
the object re-read just before: it starts only what is still exactly as the webhook left
it, whose pods the budget's scope covers, and whose declared cost fits what is left after
the budget's commitments to what it started before (`status.admission.released`). If
another budget covering it holds new work now, the hold is handed over (its mark
renamed) instead. The record of a start is written before the start, as a suspension's
is: killed in between, the next process finds a record of a workload still held and drops
it, never a started workload nobody accounts for. Starting is a conditional patch.
"""

import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import AdmissionStatus, ReleasedWorkload
from trainwarden.api.v1alpha1.names import BUDGET_KIND as KIND
from trainwarden.api.v1alpha1.names import HELD_BY
from trainwarden.api.v1alpha1.types import Scope
from trainwarden.budget import holding as rules
from trainwarden.budget.holding import Candidate, HeldRef, Plan, State
from trainwarden.cache.budgets import Members
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import BudgetView
from trainwarden.core.announce import Announcements
from trainwarden.core.pods import PodFacts
from trainwarden.core.scope import in_namespaces
from trainwarden.core.workloads import POD, WorkloadFacts, top_level

log = logs.get(__name__)


class HeldIndex:
    """A cache listener; `dirty(budget)` is called for every budget whose holds changed."""

    def __init__(self, dirty: Callable[[str], None]) -> None:
        self._dirty = dirty
        self.by_budget: dict[str, dict[str, HeldRef]] = {}
        self._budget_of: dict[str, str] = {}
        self._events = itertools.count(1)

    def held(
        self, budget: str, scope: Scope | None, namespace_labels: Callable[[str], Mapping[str, str]]
    ) -> list[HeldRef]:
        """What `budget` holds within the namespaces of its `scope` (None: not known yet)."""
        if scope is None:
            return []
        refs = self.by_budget.get(budget, {}).values()
        return [r for r in refs if in_namespaces(scope, r.namespace, namespace_labels(r.namespace))]

    def budgets(self) -> list[str]:
        """Every budget name that holds something (known to this instance or not)."""
        return list(self.by_budget)

    def _set(self, uid: str, found: tuple[str, HeldRef] | None) -> None:
        if found is not None:  # any event may change its cost: judge it again
            found = found[0], replace(found[1], seen=next(self._events))
        before = self._budget_of.pop(uid, None)
        if before is not None:
            held = self.by_budget.get(before, {})
            previous = held.pop(uid, None)
            if not held:
                self.by_budget.pop(before, None)
            if found is not None and (before, previous) == found:
                self.by_budget.setdefault(before, {})[uid] = found[1]
                self._budget_of[uid] = before
                return  # an update that changes nothing held (its status, say)
        if found is not None:
            budget, ref = found
            self.by_budget.setdefault(budget, {})[uid] = ref
            self._budget_of[uid] = budget
        for name in {before, found[0] if found else None} - {None}:
            self._dirty(str(name))

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        workload = new or old
        if workload is None:
            return
        found = rules.held_workload(new)
        if found is not None or workload.uid in self._budget_of:
            self._set(workload.uid, found)

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        pod = new or old
        if pod is None:
            return
        found = rules.held_pod(new)
        if found is not None or pod.snapshot.uid in self._budget_of:
            self._set(pod.snapshot.uid, found)

    def namespace_changed(self, name: str) -> None:
        """A relabelled namespace may enter or leave a budget's scope."""
        for budget in list(self.by_budget):
            self._dirty(budget)


@dataclass(frozen=True)
class Holds:
    """What the hold actions of one evaluation share."""

    kube: Kube
    budget: JSON
    spec: TrainingBudgetSpec
    others: Callable[[], Sequence[BudgetView]]
    """The other budgets as their status says (a hand-over needs their holds)."""
    cache: ClusterCache
    now: datetime
    generation: int
    since: datetime | None
    """This process's first evaluation of the budget (budget/holding.py outstanding)."""
    intend: Callable[[AdmissionStatus | None], Awaitable[None]]
    """Writes status with this admission before any start (the record first)."""

    @property
    def name(self) -> str:
        return str(self.budget["metadata"]["name"])


@dataclass
class HoldMemory:
    """What the hold actions carry between evaluations of one budget."""

    releases: list[datetime] = field(default_factory=list)
    """When held workloads were started in the last minute (for the per-minute cap)."""
    announced: Announcements = field(default_factory=Announcements)
    judged: dict[str, tuple[tuple[int, int], Candidate]] = field(default_factory=dict)
    """How each held workload (by uid) was judged, as of which cache event and spec: one
    that did not fit is not read again until it or the spec changes."""


@dataclass
class Released:
    started: int = 0
    handed_over: int = 0
    waiting: int = 0
    """Held workloads not looked at (the per-minute cap was reached first), or whose
    start was deferred (changed meanwhile): both are tried again soon."""
    pending: list[str] = field(default_factory=list)
    released: list[ReleasedWorkload] = field(default_factory=list)


def _body(ref: HeldRef) -> JSON:
    meta = {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid}
    return {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": meta}


async def announce(ctx: Holds, held: Sequence[HeldRef], announced: Announcements) -> None:
    """One HeldByBudget Event per held workload (the webhook cannot post one: the object
    has no uid while it is being created)."""
    for ref in held:
        key = f"held/{ref.uid}"
        if not announced.first(key):
            continue
        message = f"held by TrainingBudget {ctx.name}: starts when the budget has room again"
        await ctx.kube.event(
            _body(ref), type_="Warning", reason="HeldByBudget", message=message, action="Hold"
        )
        log.info("workload held", object=str(ref), policy=f"{KIND}/{ctx.name}")
        metrics.report_action(KIND, ctx.name, "Hold", "done")


async def _hand_over(ctx: Holds, obj: JSON, ref: HeldRef) -> str | None:
    """The name of another budget now holding this workload's scope, after renaming the
    hold to it; None if no other budget holds it."""
    labels = ctx.cache.namespace_labels(ref.namespace)
    to = rules.heir(obj, labels, ctx.others(), ctx.now, leaving=ctx.name)
    if to is None:
        return None
    patch = {
        "metadata": {
            "resourceVersion": obj["metadata"]["resourceVersion"],
            "annotations": {HELD_BY: to.name},
        }
    }
    await workloads.patch_object(ctx.kube, obj, patch)
    log.info("hold handed over", object=str(ref), policy=f"{KIND}/{ctx.name}", to=to.name)
    return to.name


async def _consider(
    ctx: Holds, memory: HoldMemory, plan: Plan, ref: HeldRef, read: dict[str, JSON], out: Released
) -> Plan:
    """The plan with `ref` judged: from how it was judged before if it changed in
    nothing and still does not start, else from the object re-read (kept in `read` for
    the start)."""
    version = (ref.seen, ctx.generation)
    judged = memory.judged.get(ref.uid)
    if judged is not None and judged[0] == version:
        trial = plan.consider(judged[1])
        if len(trial.start) == len(plan.start):
            return trial
    obj = await ctx.kube.get(ref.api_version, ref.kind, ref.namespace, ref.name)
    if obj is None or not rules.still_held(obj, ref, ctx.name):
        return plan  # gone, started by someone, or no longer ours to start
    if await _hand_over(ctx, obj, ref) is not None:
        out.handed_over += 1
        return plan
    found = rules.candidate(ref, obj, ctx.spec, ctx.cache.namespace_labels(ref.namespace))
    memory.judged[ref.uid] = (version, found)
    if not found.covered:
        log.info(
            "held workload outside the scope left alone",
            object=str(ref),
            policy=f"{KIND}/{ctx.name}",
        )
    trial = plan.consider(found)
    if len(trial.start) > len(plan.start):
        read[ref.uid] = obj
    return trial


async def _plan(
    ctx: Holds, memory: HoldMemory, held: Sequence[HeldRef], plan: Plan, out: Released
) -> tuple[Plan, dict[str, JSON]]:
    """Judge the held workloads oldest first until the cap is reached: the decision, and
    the objects it starts as read, by uid."""
    read: dict[str, JSON] = {}
    order = rules.release_order(held)
    for i, ref in enumerate(order):
        if plan.full:
            out.waiting = len(order) - i
            break
        try:
            plan = await _consider(ctx, memory, plan, ref, read, out)
        except (Conflict, Gone) as error:  # changed meanwhile: the next evaluation re-reads
            log.info(
                "release deferred", object=str(ref), policy=f"{KIND}/{ctx.name}", error=str(error)
            )
    return plan, read


async def release(
    ctx: Holds,
    memory: HoldMemory,
    held: Sequence[HeldRef],
    room: int,
    remaining: dict[str, float],
    kept: Sequence[tuple[ReleasedWorkload, Usage]],
    admission: Callable[[list[ReleasedWorkload]], AdmissionStatus | None],
) -> Released:
    """Start up to `room` held workloads, oldest first, whose declared cost fits what is
    left after `kept` (what the budget started before and has not used yet); record each
    start before making it."""
    out = Released(released=[r for r, _ in kept])
    commitments = {r.ref.uid: left for r, left in kept}
    plan, read = await _plan(ctx, memory, held, Plan(max(0, room), remaining, commitments), out)
    out.pending += [f"holding {ref}: {why}" for ref, why in plan.held]
    if out.waiting:  # before deferred starts are counted in
        cap = ctx.spec.enforcement.max_suspensions_per_minute
        out.pending.append(f"{out.waiting} held workloads start later (at most {cap}/minute)")
    if not plan.start:
        return out
    records = {r.ref.uid: r for r in out.released}
    for c in plan.start:
        if c.cost is not None:
            records[c.ref.uid] = rules.released(c.ref, c.cost, ctx.now)
    intended = [records[uid] for uid in plan.commitments]
    if any(c.cost is not None for c in plan.start):
        await ctx.intend(admission(intended))
    failed = set()
    for c in plan.start:
        if await _start(ctx, read[c.ref.uid], c.ref):
            out.started += 1
        else:
            failed.add(c.ref.uid)
    out.released = [r for r in intended if r.ref.uid not in failed]
    out.waiting += len(failed)
    return out


async def _start(ctx: Holds, obj: JSON, ref: HeldRef) -> bool:
    """Start the version read; False if it changed meanwhile (the next evaluation re-reads
    it, and its record is dropped)."""
    try:
        await workloads.patch_object(ctx.kube, obj, rules.start_patch(obj))
    except (Conflict, Gone) as error:  # changed meanwhile: the next evaluation re-reads
        log.info("release deferred", object=str(ref), policy=f"{KIND}/{ctx.name}", error=str(error))
        return False
    message = f"TrainingBudget {ctx.name} has room again: started"
    await ctx.kube.event(
        obj, type_="Normal", reason="ReleasedByBudget", message=message, action="Release"
    )
    log.info("held workload started", object=str(ref), policy=f"{KIND}/{ctx.name}")
    metrics.report_action(KIND, ctx.name, "Release", "done")
    return True


def _state(cache: ClusterCache, record: ReleasedWorkload, budget: str) -> State:
    ref = record.ref
    if (ref.api_version, ref.kind) == POD:
        return rules.pod_state(cache.pods.get(ref.uid))
    return rules.workload_state(cache.workload(ref.uid), budget)


def commitments(
    ctx: Holds, members: Members, records: Sequence[ReleasedWorkload]
) -> list[tuple[ReleasedWorkload, Usage]]:
    """The budget's records of what it started that still commit something, and what."""
    if not records:
        return []
    states = {r.ref.uid: _state(ctx.cache, r, ctx.name) for r in records}
    started = {r.ref.uid: r.released_at for r in records}

    runs: dict[str | None, str | None] = {}  # by owner uid: pods share their owners

    def workload_of(pod: str) -> str:
        """The started workload a charged pod belongs to: its run, else itself (a bare
        pod, or one whose owner runs no pods)."""
        facts = members.facts.get(pod)
        if facts is None or facts.owner is None:
            return pod
        if facts.owner.uid not in runs:
            found = top_level(facts.owner, facts.snapshot.namespace, ctx.cache.workload)
            runs[facts.owner.uid] = found.uid if found is not None else None
        return runs[facts.owner.uid] or pod

    charges = ((workload_of(uid), c) for uid, c in members.live.items())
    used = rules.used_since(charges, started, ctx.now)
    return rules.outstanding(records, states, used, ctx.now, ctx.since)


@dataclass(frozen=True)
class HoldOutcome:
    """What one evaluation's holds came to: the admission status to publish, and more."""

    admission: AdmissionStatus | None
    pending: list[str]
    again: bool
    """Held workloads wait for the per-minute cap: evaluate again soon."""


async def evaluate(
    ctx: Holds,
    held: Sequence[HeldRef],
    memory: HoldMemory,
    members: Members,
    *,
    holding: bool,
    acting: bool,
    remaining: dict[str, float],
    previous: AdmissionStatus | None,
    period_end: datetime | None,
) -> HoldOutcome:
    """Publish whether the budget holds new work and what it keeps committed; while it
    holds (in Enforce), announce what it holds; otherwise start what it held, when
    `acting` (the clock is known). A budget in DryRun holds nothing: what it held before
    is started."""
    memory.announced.keep_only(f"held/{h.uid}" for h in held)
    memory.judged = {h.uid: memory.judged[h.uid] for h in held if h.uid in memory.judged}
    records = list(previous.released) if previous is not None else []
    kept = commitments(ctx, members, records) if acting else []
    out = Released(released=[r for r, _ in kept] if acting else records)
    left = len(held)

    def status(released: list[ReleasedWorkload]) -> AdmissionStatus | None:
        return rules.admission(
            previous,
            holding=holding,
            held=left,
            now=ctx.now,
            period_end=period_end,
            generation=ctx.generation,
            released=released,
        )

    if holding and ctx.spec.mode == "Enforce":
        await announce(ctx, held, memory.announced)
    elif held and acting:
        minute_ago = ctx.now - timedelta(minutes=1)
        recent = [min(t, ctx.now) for t in memory.releases]  # a clock stepped back
        memory.releases = [t for t in recent if t > minute_ago]
        room = ctx.spec.enforcement.max_suspensions_per_minute - len(memory.releases)
        out = await release(ctx, memory, held, room, remaining, kept, status)
        memory.releases += [ctx.now] * out.started
        left = len(held) - out.started - out.handed_over
    return HoldOutcome(status(out.released), out.pending, out.waiting > 0)
