"""What stops a running pod an exhausted budget charges: suspending a workload above it,
evicting it, or nothing trainwarden can do, which is then said, never silent.

Owner references are written by whoever creates the object, so a tenant can point a pod
at anything in its namespace: a ConfigMap, a suspended Job, a JobSet that does not exist,
a cycle. None of these may take a pod out of a budget's reach. The rules, in order:

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

from dataclasses import dataclass
from datetime import datetime, timedelta

from trainwarden.core.pods import OwnerRef
from trainwarden.core.workloads import SUSPEND_FIELD, Chain, WorkloadFacts, group_kind

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
