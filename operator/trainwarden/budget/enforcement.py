"""Which workloads an exhausted budget suspends, and which it may resume.

Two rules carry the safety of the product: only what this budget suspended is ever
resumed, and at most `cap` workloads are suspended per minute, whatever the order.
A workload Kueue manages is suspended through its Kueue Workload (spec.active), the way
Kueue expects (which workloads Kueue manages: budget/containment.py `kueue_route`).
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from trainwarden.core.budgets import Level

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
    """When a pod waited on in `skipped` is looked at again (budget/containment.py)."""


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
