"""What a deleted TrainingBudget leaves behind, undone: the work it held and the work it
suspended.

The rule (docs/budgets.md "Deleting a budget"): a deleted budget limits nothing, so what
it held starts and what it suspended resumes, except that work another Enforce budget of
this instance would hold right now is handed to that budget instead (held by it, started
when it has room), never started only to be stopped again a moment later. A Kueue-managed
workload is reactivated: Kueue's own admission checks decide again.

Only what the budget can prove is its own is touched: holds the webhook marked with its
name (budget/holding.py `still_held`, re-read), and suspensions its last status recorded
that the cache still shows suspended with its label (budget/targets.py `ours`); that status
is the one the DELETED event carries. A job its owner suspended, or one a label was copied
onto, is never resumed. A budget deleted while no replica of the operator watched (its
DELETED event unseen) leaves its holds and suspensions as they are: docs/budgets.md says
how to find and release them.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from trainwarden import logs, metrics
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.budget_status import TrainingBudgetStatus
from trainwarden.api.v1alpha1.names import BUDGET_KIND as KIND
from trainwarden.api.v1alpha1.names import HELD_AT, HELD_BY, HOLD_REASON
from trainwarden.budget import enforce, enforcement, targets
from trainwarden.budget import holding as rules
from trainwarden.budget.holding import HeldRef
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.status import previous_status
from trainwarden.core.admission import BudgetView

log = logs.get(__name__)


@dataclass(frozen=True)
class Departure:
    """A deleted budget and what its release reads."""

    kube: Kube
    cache: ClusterCache
    body: JSON
    """The budget as its DELETED event left it (its last status: the suspension record)."""
    held: Sequence[HeldRef]
    """What the held index says it holds (empty when a budget of that name exists again:
    the new one holds them)."""
    others: Callable[[], Sequence[BudgetView]]
    """This instance's budgets as their status says (a hold may pass to one of them)."""
    now: datetime

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


@dataclass
class Released:
    """What one pass did; `left`: what must be tried again (a conflict, a fresh record)."""

    started: int = 0
    resumed: int = 0
    handed_over: int = 0
    left: int = 0
    lines: list[str] = field(default_factory=list)


def _marks(to: BudgetView, leaving: str, now: datetime) -> dict[str, str]:
    why = f"TrainingBudget {leaving} was deleted; {to.summary()}: starts when it has room"
    return {HELD_BY: to.name, HOLD_REASON: why, HELD_AT: now.isoformat(timespec="seconds")}


async def _said(d: Departure, obj: JSON, reason: str, message: str, action: str) -> None:
    await d.kube.event(obj, type_="Normal", reason=reason, message=message, action=action)
    meta = obj["metadata"]
    what = f"{obj['kind']}/{meta.get('namespace')}/{meta['name']}"
    log.info(
        "released on the budget's deletion", object=what, policy=f"{KIND}/{d.name}", why=message
    )
    metrics.report_action(KIND, d.name, action, "done")


async def _let_go(d: Departure, ref: HeldRef, out: Released) -> None:
    """One held workload, re-read: handed to another budget, or started."""
    obj = await d.kube.get(ref.api_version, ref.kind, ref.namespace, ref.name)
    if obj is None or not rules.still_held(obj, ref, d.name):
        return  # gone, started by someone, or held by someone else now
    to = rules.heir(obj, d.cache.namespace_labels(ref.namespace), d.others(), d.now, leaving=d.name)
    try:
        if to is not None:
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            patch = {"metadata": {**meta, "annotations": _marks(to, d.name, d.now)}}
            await workloads.patch_object(d.kube, obj, patch)
        else:
            await workloads.patch_object(d.kube, obj, rules.start_patch(obj))
    except (Conflict, Gone) as error:
        out.left += 1
        out.lines.append(f"deferred {ref}: {error}")
        return
    if to is not None:
        out.handed_over += 1
        message = f"TrainingBudget {d.name} was deleted: now held by TrainingBudget {to.name}"
        await _said(d, obj, "HoldHandedOver", message, "Hold")
    else:
        out.started += 1
        message = f"TrainingBudget {d.name} was deleted: started"
        await _said(d, obj, "ReleasedByBudget", message, "Release")


async def _unsuspend(d: Departure, w: enforcement.Workload, out: Released) -> None:
    """One workload the budget suspended: handed to another budget as a hold, or resumed."""
    obj = await enforce.fresh(d.kube, w.ref)
    if obj is None:
        return
    labels = d.cache.namespace_labels(w.ref.namespace)
    to = None if w.kueue_managed else rules.heir(obj, labels, d.others(), d.now, leaving=d.name)
    if to is None:
        done = enforce.EnforceOutcome()
        why = f"TrainingBudget {d.name} was deleted"
        await enforce.resume(d.kube, d.name, w, done, why=why)
        out.resumed += len(done.resumed)
        out.left += 0 if done.resumed else 1
        out.lines += done.pending
        return
    try:
        await workloads.hand_over(d.kube, obj, _marks(to, d.name, d.now))
    except (Conflict, Gone) as error:
        out.left += 1
        out.lines.append(f"deferred {w.ref}: {error}")
        return
    out.handed_over += 1
    message = f"TrainingBudget {d.name} was deleted: held by TrainingBudget {to.name} instead"
    await _said(d, obj, "SuspensionHandedOver", message, "Hold")


async def release(d: Departure) -> Released:
    """Everything the deleted budget holds or suspended, let go once."""
    out = Released()
    for ref in rules.release_order(d.held):
        await _let_go(d, ref, out)
    raw = d.body.get("status")
    read = raw if isinstance(raw, dict) else {}
    old = previous_status(TrainingBudgetStatus, read, ("suspended",), f"{KIND}/{d.name}")
    kept, suspended = targets.ours(d.name, old.suspended, d.cache, d.now)
    out.left += len(kept) - len(suspended)  # recorded just now: the cache may not show it yet
    for w in suspended:
        await _unsuspend(d, w, out)
    return out
