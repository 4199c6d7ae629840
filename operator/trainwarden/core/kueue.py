"""Kueue's budget AdmissionCheck, as pure decisions over small records.

A ClusterQueue that lists an AdmissionCheck whose controller is trainwarden holds each
Workload it reserved quota for until the check says Ready. The decision is the
TrainingBudgets': those covering the Workload's pods (the same scope as everywhere),
each asked whether it can pay the Workload's estimate (its pods' requests times its
declared maximum run time, core/estimate.py) out of what it has left, minus what the
workloads it already let through are forecast to spend still.

- Ready: every Enforce budget can pay (or nothing covers it); the message says so.
- Pending: a budget is exhausted, or cannot pay the estimate out of what is left this
  period. Kueue keeps the quota reserved and the Workload in its place; the check turns
  Ready as soon as the budget has room (a reset, a raised limit). Retry would release
  the quota, but Kueue then requeues with a backoff and resets the check: the Workload
  would cycle through evictions until the budget resets, and wait out a backoff after.
- Rejected: the estimate alone exceeds a budget's limit, so no period could ever pay
  it. Kueue deactivates the Workload; its owner resubmits it smaller or shorter.

DryRun budgets never hold: what they would say is added to a Ready message.
"""

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import CHECK_CONTROLLER, EXPECTED_DURATION, SUSPENDED_BY
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import BudgetView
from trainwarden.core.budgets import limits, prices
from trainwarden.core.estimate import Demand, PodGroup, demand, describe, estimate, usage_along
from trainwarden.core.keep import LABEL_VALUE, NAME, SHORT, Keep, bounded, cut, kept_labels
from trainwarden.core.pods import parse_time
from trainwarden.core.scope import in_scope
from trainwarden.core.shapes import mapping, mappings

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
"""The version trainwarden reads and writes (Kueue v0.17 stores v1beta2)."""
JOB_UID = "kueue.x-k8s.io/job-uid"
"""Kueue's label on a Workload: the uid of the job it was made for."""
MAX_MESSAGE = 1024
"""Kueue allows 32 KiB; a check message is read in `kubectl describe`."""
State = Literal["Pending", "Ready", "Retry", "Rejected"]
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def check_controller(instance: str | None) -> str:
    """The controllerName an operator instance answers for: two instances on one cluster
    never decide the same check."""
    return CHECK_CONTROLLER if instance is None else f"{CHECK_CONTROLLER}-{instance}"


@dataclass(frozen=True, slots=True)
class CheckState:
    """One entry of a Workload's status.admissionChecks."""

    state: str
    message: str
    last_transition: str


@dataclass(frozen=True, slots=True)
class KueueWorkload:
    """What the cache keeps of a Kueue Workload: its pods, declared time and states."""

    namespace: str
    name: str
    uid: str
    owner_uid: str | None
    """The job it was made for (controller owner, else Kueue's job-uid label)."""
    active: bool
    quota_reserved: bool
    admitted: bool
    admitted_at: datetime | None
    finished: bool
    checks: Mapping[str, CheckState]
    demand: Demand
    suspended_by: str | None = None
    """The budget (label value) that deactivated it, by trainwarden's label."""
    resource_version: str = ""

    def __str__(self) -> str:
        return f"Workload/{self.namespace}/{self.name}"


def _true(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next(
        (c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None
    )


_SUSPENDED_BY = frozenset({SUSPENDED_BY})
MAX_CHECKS = 8
"""Kueue lists at most 8 AdmissionChecks on a Workload, and runs at most 8 pod sets."""


def _owner(meta: Mapping[str, Any]) -> str | None:
    owner = next((r for r in mappings(meta.get("ownerReferences")) if r.get("controller")), None)
    uid = (owner or {}).get("uid") or mapping(meta.get("labels")).get(JOB_UID)
    return bounded(uid, SHORT) if uid else None


def _checks(status: Mapping[str, Any]) -> dict[str, CheckState]:
    return {
        bounded(c.get("name"), NAME): CheckState(
            bounded(c.get("state") or "", SHORT),
            bounded(c.get("message") or "", MAX_MESSAGE),  # compared whole with ours
            cut(c.get("lastTransitionTime") or "", SHORT),
        )
        for c in mappings(status.get("admissionChecks"))[:MAX_CHECKS]
        if c.get("name")
    }


def _kept(d: Demand, keep: Keep) -> Demand:
    """The pod sets as scopes and prices read them: the labels, node selector keys and
    resources `keep` names, at most MAX_CHECKS sets."""
    groups = tuple(
        PodGroup(
            bounded(g.name, LABEL_VALUE),
            g.count,
            {sys.intern(r): n for r, n in g.requests.items() if r in keep.resources},
            kept_labels(g.node_selector, keep.node_labels),
            kept_labels(g.labels, keep.pod_labels),
        )
        for g in d.groups[:MAX_CHECKS]
    )
    return Demand(d.kind, groups, d.duration, d.duration_source, d.problem)


def kueue_workload(obj: Mapping[str, Any], keep: Keep) -> KueueWorkload:
    """The record of a Workload object (read defensively: Kueue and users write it), with
    only what `keep` names of its pod sets."""
    meta, spec, status = (mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    conditions = mappings(status.get("conditions"))
    admitted = _true(conditions, "Admitted")
    return KueueWorkload(
        namespace=bounded(meta.get("namespace") or "", LABEL_VALUE),
        name=bounded(meta.get("name") or "", NAME),
        uid=bounded(meta.get("uid") or "", SHORT),
        owner_uid=_owner(meta),
        active=spec.get("active") is not False,
        quota_reserved=_true(conditions, "QuotaReserved") is not None,
        admitted=admitted is not None,
        admitted_at=parse_time((admitted or {}).get("lastTransitionTime")),
        finished=_true(conditions, "Finished") is not None,
        checks=_checks(status),
        demand=_kept(demand({**obj, "kind": "Workload"}), keep),
        suspended_by=kept_labels(meta.get("labels"), _SUSPENDED_BY).get(SUSPENDED_BY),
        resource_version=bounded(meta.get("resourceVersion") or "", SHORT),
    )


def with_owner_duration(d: Demand, owner_annotations: Mapping[str, str]) -> Demand:
    """The Workload's demand, with the run time its job declares when the Workload itself
    declares none (Kueue copies no annotations to the Workload)."""
    if d.duration is not None or d.problem or EXPECTED_DURATION not in owner_annotations:
        return d
    declared = demand({"kind": "Job", "metadata": {"annotations": dict(owner_annotations)}})
    return Demand(d.kind, d.groups, declared.duration, declared.duration_source, declared.problem)


def covers(budget: BudgetView, w: KueueWorkload, namespace_labels: Mapping[str, str]) -> bool:
    return any(
        in_scope(budget.spec.scope, w.namespace, namespace_labels, g.labels)
        for g in w.demand.groups
    )


def cost(d: Demand, spec: TrainingBudgetSpec) -> Usage | None:
    """What the workload's whole declared run costs in this budget's terms."""
    return estimate(d, spec.accelerators, prices(spec)).total


def forecast(total: Usage | None, d: Demand, admitted_at: datetime | None, now: datetime) -> Usage:
    """What an admitted workload will still spend: its estimate times the part of its
    declared time not yet run (from its admission). Without a declared time there is no
    forecast: its use is counted as it accrues, like any running pod's."""
    if total is None or d.duration is None or not d.duration.total_seconds():
        return Usage()
    elapsed = (now - admitted_at).total_seconds() if admitted_at else 0.0
    left = min(1.0, max(0.0, 1.0 - elapsed / d.duration.total_seconds()))
    return total.scaled(left)


@dataclass(frozen=True)
class Answer:
    """One budget's answer about one workload."""

    budget: str
    state: State
    why: str
    dry_run: bool = False


def answer(b: BudgetView, d: Demand, committed: Usage, now: datetime) -> Answer:
    """Whether budget `b` can pay for workload `d`, given what the workloads it already
    let through are forecast to spend (`committed`). A budget that holds new work at the
    webhook holds it here too: while it keeps what it suspended suspended, its usage may
    read a hair below the limit once the suspended pods' ends are in (budget/holding.py)."""
    dry = b.spec.mode == "DryRun"
    wanted = cost(d, b.spec)
    said = describe(d, estimate(d, b.spec.accelerators, prices(b.spec)))
    if not b.current:
        why = f"TrainingBudget {b.name} has not been evaluated since its spec changed"
        return Answer(b.name, "Pending", why, dry)
    for dim, (need, limit) in limits(b.spec).dimensions(wanted or Usage()).items():
        if wanted is not None and need > limit:
            why = (
                f"its estimate ({said}) needs {need:.4g} {dim}, more than TrainingBudget "
                f"{b.name}'s whole limit of {limit:g} per period"
            )
            return Answer(b.name, "Rejected", why, dry)
    if b.exhausted or b.holds(now):
        why = f"{b.summary()}: admitted when it resets or its limit is raised. Estimate: {said}"
        return Answer(b.name, "Pending", why, dry)
    for dim, left in (b.remaining or {}).items():
        need, promised = usage_along(wanted or Usage(), dim), usage_along(committed, dim)
        if wanted is not None and need > left - promised + 1e-9:
            why = (
                f"TrainingBudget {b.name} has {left:.4g} {dim} left, {promised:.4g} of it "
                f"forecast for workloads it admitted; its estimate ({said}) needs {need:.4g}"
            )
            return Answer(b.name, "Pending", why, dry)
    return Answer(b.name, "Ready", said, dry)


@dataclass(frozen=True)
class Verdict:
    state: State
    message: str
    budgets: tuple[str, ...] = ()
    """The Enforce budgets that decided it (all covering ones when Ready)."""
    would: tuple[Answer, ...] = field(default=())
    """What DryRun budgets would have held or rejected."""


def decide(
    d: Demand, budgets: Sequence[BudgetView], committed: Mapping[str, Usage], now: datetime
) -> Verdict:
    """The check state for a workload from the budgets covering it: Rejected if any
    Enforce budget can never pay, else Pending if any cannot now, else Ready."""
    answers = [answer(b, d, committed.get(b.name, Usage()), now) for b in budgets]
    enforcing = [a for a in answers if not a.dry_run]
    would = tuple(a for a in answers if a.dry_run and a.state != "Ready")
    dry = "".join(
        f" DryRun: TrainingBudget {a.budget} would say {a.state}: {a.why}." for a in would
    )
    for state in ("Rejected", "Pending"):
        against = [a for a in enforcing if a.state == state]
        if against:
            text = "; ".join(a.why for a in against) + "." + dry
            return Verdict(state, text[:MAX_MESSAGE], tuple(a.budget for a in against), would)
    if not enforcing:
        text = "No TrainingBudget in Enforce covers this workload." + dry
        return Verdict("Ready", text[:MAX_MESSAGE], (), would)
    names = ", ".join(a.budget for a in enforcing)
    text = f"TrainingBudget {names} can pay for it: {enforcing[0].why}." + dry
    return Verdict("Ready", text[:MAX_MESSAGE], tuple(a.budget for a in enforcing), would)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_entry(
    name: str, v: Verdict, previous: CheckState | None, now: datetime
) -> dict[str, str]:
    """Our entry of status.admissionChecks; its lastTransitionTime moves only when the
    state does."""
    kept = previous.last_transition if previous and previous.state == v.state else ""
    return {
        "name": name,
        "state": v.state,
        "message": v.message,
        "lastTransitionTime": kept or rfc3339(now),
    }


def changes(v: Verdict, previous: CheckState | None) -> bool:
    """Whether the check must be written: a new state, or a message that says something
    else. A message whose numbers alone moved (what is left shrinks while other work
    runs) is not rewritten: it would cost a write per Workload per budget evaluation."""
    if previous is None or previous.state != v.state:
        return True
    return _NUMBER.sub("#", previous.message) != _NUMBER.sub("#", v.message)


def to_decide(w: KueueWorkload, ours: frozenset[str]) -> list[str]:
    """Our checks this workload waits on: it holds quota, is not admitted, finished or
    deactivated, and Kueue listed our check on it still undecided. A Ready check is never
    taken back (Kueue resets checks to Pending when it evicts), a Rejected one is final."""
    if not w.quota_reserved or w.admitted or w.finished or not w.active:
        return []
    return sorted(n for n, c in w.checks.items() if n in ours and c.state in ("Pending", "Retry"))


def passed(w: KueueWorkload, ours: frozenset[str]) -> bool:
    """Let through by one of our checks and still running or about to: what it will
    spend is promised against the budgets covering it."""
    return (
        not w.finished
        and w.active
        and any(c.state == "Ready" for n, c in w.checks.items() if n in ours)
    )


def active_condition(
    conditions: Sequence[Mapping[str, Any]], generation: int, now: datetime
) -> dict[str, Any] | None:
    """The Active condition trainwarden sets on its AdmissionChecks; None if it is set."""
    message = "trainwarden decides this check from the TrainingBudgets covering each Workload"
    old = next((c for c in conditions if c.get("type") == "Active"), None)
    if (
        old is not None
        and old.get("status") == "True"
        and old.get("message") == message
        and old.get("observedGeneration") == generation
    ):
        return None
    kept = old is not None and old.get("status") == "True" and old.get("lastTransitionTime")
    return {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": str(old["lastTransitionTime"]) if kept and old else rfc3339(now),
    }
