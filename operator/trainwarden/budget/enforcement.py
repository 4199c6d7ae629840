"""What an exhausted budget does about the pods it charges: what stops each one
(`stop`), which workloads it suspends and which it may resume (`plan`).

Two rules carry the safety of the product: only what this budget suspended is ever
resumed, and at most `cap` workloads are suspended per minute, whatever the order.
A workload Kueue manages is suspended through its Kueue Workload (spec.active), the way
Kueue expects (which workloads Kueue manages: `kueue_route`).

What stops a running pod: suspending a workload above it, evicting it, or nothing
trainwarden can do, which is then said, never silent. Owner references are written by
whoever creates the object, so a tenant can point a pod at anything in its namespace: a
ConfigMap, a suspended Job, a JobSet that does not exist, a cycle. None of these may take a
pod out of a budget's reach. The rules, in order:

1. The chain stops at an owner of a kind the cache holds but has not seen, and the pod
   started less than SETTLE ago: wait (a JobSet just created may not be listed yet, and
   suspending its child Job would be undone by the JobSet controller).
2. The highest ancestor that can be suspended and is not: suspend it (a JobSet, not its
   Jobs). Under a suspended top (a JobSet whose controller suspends its Jobs) the pod
   waits SETTLE first; a suspended parent that has not stopped its running child by then
   (a tenant's "suspended JobSet" above their Job) evidently does not: the child is
   suspended, or the pod evicted if nothing below can be.
3. A pod run by a controller that recreates what is evicted (ReplicaSet, StatefulSet,
   DaemonSet), which budgets do not scale: it cannot be stopped, and the budget says so.
4. Anything else (no owner, an owner of a foreign kind, a dangling or cyclic reference):
   evict the pod.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from trainwarden.core.budgets import Level
from trainwarden.core.pods import OwnerRef
from trainwarden.core.workloads import SUSPEND_FIELD, Chain, WorkloadFacts, group_kind

SuspendOrder = Literal["Newest", "Oldest", "LowestPriority", "Largest"]
SUSPENDABLE_KINDS = frozenset(
    {
        ("batch/v1", "Job"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
        ("kubeflow.org/v1", "PyTorchJob"),
        ("kubeflow.org/v1", "TFJob"),
        ("kubeflow.org/v1", "MPIJob"),
        ("kubeflow.org/v1", "XGBoostJob"),
        ("kubeflow.org/v1", "PaddleJob"),
        ("kubeflow.org/v1", "JAXJob"),
        ("ray.io/v1", "RayJob"),
        ("v1", "Pod"),
    }
)


@dataclass(frozen=True)
class WorkloadRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Workload:
    """A top-level workload charged to a budget, as the controller observed it."""

    ref: WorkloadRef
    created: datetime
    accelerators: float = 0.0
    priority: int = 0
    suspended: bool = False
    suspended_by: str | None = None
    """The budget named by trainwarden's suspended-by label, if any."""
    suspended_in: tuple[int, datetime] | None = None
    """The budget's (generation, period start) when it suspended this workload."""
    kueue_managed: bool = False
    kueue_workload: str | None = None
    """The name of the active Kueue Workload Kueue runs it by: suspended through it
    (spec.active), never by its own suspend field, which Kueue owns."""
    note: str = ""
    """Why it is acted on this way (a pod evicted rather than its owner suspended)."""


@dataclass(frozen=True)
class Plan:
    suspend: tuple[Workload, ...] = ()
    resume: tuple[Workload, ...] = ()
    skipped: tuple[tuple[Workload, str], ...] = ()
    deferred: tuple[Workload, ...] = field(default=())
    """Due for suspension but over the per-minute cap; acted on in a later minute."""
    grace_ends: datetime | None = None
    """When suspension starts, if the budget is exhausted and still in its grace period."""
    unstoppable: tuple[tuple[Workload, str], ...] = ()
    """Charged pods nothing trainwarden does can stop, and why (said in status and Events)."""
    recheck: datetime | None = None
    """When a pod waited on in `skipped` is looked at again (`stop`)."""


def _sort_key(order: Sequence[SuspendOrder]) -> Callable[[Workload], tuple[float, ...]]:
    def key(w: Workload) -> tuple[float, ...]:
        parts: list[float] = []
        for criterion in order:
            match criterion:
                case "Newest":
                    parts.append(-w.created.timestamp())
                case "Oldest":
                    parts.append(w.created.timestamp())
                case "LowestPriority":
                    parts.append(w.priority)
                case "Largest":
                    parts.append(-w.accelerators)
        return tuple(parts)

    return key


def _resume(
    budget: str, workloads: list[Workload], generation: int, period_start: datetime
) -> Plan:
    """Below the limit: what this budget suspended under another spec or period."""
    return Plan(
        resume=tuple(
            w
            for w in workloads
            if w.suspended
            and w.suspended_by == budget
            and w.suspended_in != (generation, period_start)
        )
    )


def plan(
    budget: str,
    level: Level,
    workloads: Iterable[Workload],
    *,
    now: datetime,
    exhausted_since: datetime | None,
    grace: timedelta,
    order: Sequence[SuspendOrder],
    resume_automatically: bool,
    recent_suspensions: int,
    max_per_minute: int,
    generation: int,
    period_start: datetime,
) -> Plan:
    """What to do this cycle. DryRun callers report the plan instead of applying it.

    A suspended workload is resumed only once something changed since it was suspended:
    the period reset or the spec (a raised limit). Merely dropping below the threshold is
    not enough: usage that stopped exactly at the limit would otherwise resume and suspend
    the same job forever.
    """
    workloads = list(workloads)
    if level != "Exhausted":
        if not resume_automatically:
            return Plan()
        return _resume(budget, workloads, generation, period_start)

    # A transition stamped "later than now" was stamped by a clock ahead of ours (this
    # process before its clock was corrected, another replica): it began by now at most,
    # or a skewed stamp would put the grace period off by the skew.
    grace_ends = min(exhausted_since or now, now) + grace
    skipped: list[tuple[Workload, str]] = []
    candidates: list[Workload] = []
    for w in workloads:
        if w.suspended:
            continue
        if (w.ref.api_version, w.ref.kind) not in SUSPENDABLE_KINDS:
            skipped.append((w, f"{w.ref.kind} cannot be suspended by trainwarden"))
        else:
            candidates.append(w)
    if not candidates:  # nothing left to suspend: no grace period to announce or wait for
        return Plan(skipped=tuple(skipped))
    if now < grace_ends:
        return Plan(skipped=tuple(skipped), grace_ends=grace_ends)
    candidates.sort(key=_sort_key(order))
    room = max(0, max_per_minute - recent_suspensions)
    return Plan(
        suspend=tuple(candidates[:room]),
        skipped=tuple(skipped),
        deferred=tuple(candidates[room:]),
        grace_ends=grace_ends,
    )


def held(plan: Plan, why: str) -> tuple[Plan, list[str]]:
    """The plan with its suspensions and resumes held back (the operator cannot tell the
    time well enough to act on it: "when in doubt, don't act"), and a line for each."""
    lines = [f"not suspending {w.ref}: {why}" for w in plan.suspend]
    lines += [f"not resuming {w.ref}: {why}" for w in plan.resume]
    return replace(plan, suspend=(), resume=()), lines


SETTLE = timedelta(seconds=60)
"""How long the cache may lag behind a new owner, Kueue behind a new job, or a workload's
controller behind its suspension, before the pod is taken to be beyond them."""
RECREATING = frozenset({("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("apps", "DaemonSet")})


@dataclass(frozen=True, slots=True)
class Suspend:
    workload: WorkloadFacts


@dataclass(frozen=True, slots=True)
class Evict:
    why: str


@dataclass(frozen=True, slots=True)
class Unstoppable:
    why: str
    until: datetime | None = None
    """When it is looked at again with other eyes (a wait ends); None: it stays so."""


Stop = Suspend | Evict | Unstoppable


def _ref(ref: OwnerRef) -> str:
    return f"{ref.kind} {ref.name}"


def stop(
    chain: Chain,
    owner: OwnerRef | None,
    *,
    started: datetime | None,
    stray_since: datetime | None,
    now: datetime,
) -> Stop:
    """How to stop a running pod owned by `owner`, whose ancestors are `chain`.

    `started`: when the pod started; `stray_since`: since when it has been seen waiting
    on something else to stop it (None: not seen so before)."""
    if chain.pending and chain.unresolved is not None and (started or now) > now - SETTLE:
        return Unstoppable(
            f"its owner {_ref(chain.unresolved)} is not in the operator's view yet",
            (started or now) + SETTLE,
        )
    suspendable = [w for w in chain.links if w.key in SUSPEND_FIELD]
    running = [w for w in suspendable if not w.suspended]
    top = suspendable[-1] if suspendable else None
    if top is not None and top.suspended:
        since = stray_since or now
        if since > now - SETTLE:
            return Unstoppable(
                f"{top.kind} {top.name} is suspended; waiting for its controller to stop the pod",
                since + SETTLE,
            )
        if not running:
            return Evict(f"still running {SETTLE.seconds}s after {top} was suspended")
    if running:
        return Suspend(running[-1])
    recreating = [o for o in (owner, *(w.owner for w in chain.links)) if o is not None]
    for ref in recreating:
        if group_kind(ref.api_version, ref.kind) in RECREATING:
            return Unstoppable(
                f"run by {_ref(ref)}, which recreates an evicted pod; budgets do not scale "
                f"{ref.kind}s (an IdleReclaimPolicy with ScaleDown can)"
            )
    if owner is None:
        return Evict("a bare pod")
    if chain.pending and chain.unresolved is not None:
        return Evict(f"its owner {_ref(chain.unresolved)} was not found in {SETTLE.seconds}s")
    if chain.unresolved is not None:
        return Evict(f"its owner {_ref(chain.unresolved)} is not a workload trainwarden suspends")
    return Evict(f"no ancestor of kind trainwarden suspends above {_ref(owner)}")


def kueue_route(
    target: WorkloadFacts,
    workload: tuple[bool, bool] | None,
    *,
    stray_since: datetime | None,
    now: datetime,
) -> Suspend | Unstoppable | None:
    """For a workload labelled with a Kueue queue, whose Kueue Workload is `workload`
    (active or not; None: there is none): None to suspend it through its active Workload,
    the way Kueue expects. The label alone proves nothing (Kueue may not manage the
    namespace, or not be installed): with no Workload SETTLE after its creation, or an
    inactive one that has not stopped it for SETTLE, the workload is suspended itself."""
    if workload is not None and workload[1]:
        return None
    if workload is not None:
        since = stray_since or now
        if since > now - SETTLE:
            return Unstoppable(
                "its Kueue Workload is inactive: Kueue is stopping it", since + SETTLE
            )
        return Suspend(target)
    if target.created > now - SETTLE:
        return Unstoppable(
            "labelled for Kueue, which has no Workload of it yet", target.created + SETTLE
        )
    return Suspend(target)
