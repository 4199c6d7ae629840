"""Whether a workload being created starts now or waits for an exhausted budget.

The admission webhook (admission/webhook.py) asks this module about each Job, JobSet,
Kubeflow job, RayJob and bare pod being created, with the labels of its namespace and the
budgets as their status publishes them; the answer is a JSON patch and warnings. A held
workload is created suspended (a bare pod behind a scheduling gate), so pipelines see
their submission succeed, nothing is scheduled, and the budget starts it when it has room
(budget/holds.py). Only what arrives runnable is held: a workload created suspended
was suspended by someone else and is never marked as ours. Pods a known controller
creates (a Job's pods) are never held: a running Job would be left half-started; a pod
whose controller reference names anything else is held like a bare pod.

A budget holds only while its status says so (`status.admission`, renewed by the leader
every few minutes and never past the period's end): an operator that stopped, or a
period that reset, holds nothing for long, whatever the webhook replicas still serve.
"""

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import AdmissionStatus, StorageAdmission
from trainwarden.api.v1alpha1.conditions import EXHAUSTED
from trainwarden.api.v1alpha1.names import HELD_AT, HELD_BY, HOLD_GATE, HOLD_REASON
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core import repeats
from trainwarden.core.budgets import prices
from trainwarden.core.estimate import Demand, demand, describe, estimate, shares, too_costly
from trainwarden.core.ledger import Earlier
from trainwarden.core.pods import parse_time
from trainwarden.core.scope import in_scope
from trainwarden.core.shapes import mapping, mappings
from trainwarden.core.workloads import KINDS, KUEUE_QUEUE, POD, SUSPEND_FIELD, group_kind

JSON = dict[str, Any]
PROBE_ANSWERED = "trainwarden: doctor probe answered"
HOLD_MARKS = (HELD_BY, HOLD_REASON, HELD_AT)
GATE = HOLD_GATE
MAX_MESSAGE = 1024
Outcome = Literal[
    "held",
    "would-hold",
    "allowed",
    "ignored",
    "too-costly",
    "repeat",
    "repeat-held",
    "refused-claim",
    "would-refuse-claim",
]


@dataclass(frozen=True)
class BudgetView:
    """A budget as the webhook sees it: its spec and what its status publishes."""

    name: str
    spec: TrainingBudgetSpec
    hold_until: datetime | None
    """Until when it holds new work: None unless its status holds for the current spec."""
    percent: float | None = None
    dimension: str | None = None
    remaining: Mapping[str, float] | None = None
    period_end: datetime | None = None
    exhausted: bool = False
    """Its status says Exhausted (whether or not it holds new work)."""
    current: bool = True
    """Its status was written for its current spec (a raised limit is not yet reflected
    while False)."""
    refuse_claims_until: datetime | None = None
    """Until when it refuses new PersistentVolumeClaims (core/claim_admission.py): None
    unless its status refuses for the current spec."""
    storage_message: str | None = None
    """The limit its status refuses by."""
    storage_used: float | None = None
    """GiB-hours of storage its status says were used this period."""

    def holds(self, now: datetime) -> bool:
        return self.hold_until is not None and now < self.hold_until

    def refuses_claims(self, now: datetime) -> bool:
        return self.refuse_claims_until is not None and now < self.refuse_claims_until

    def summary(self) -> str:
        used = f"{self.percent:.1f}% of {self.dimension} used" if self.dimension else "exhausted"
        resets = f", resets at {self.period_end.isoformat()}" if self.period_end else ""
        return f"TrainingBudget {self.name} is exhausted ({used}{resets})"


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def budget_view(body: Mapping[str, Any]) -> BudgetView | None:
    """The view of a TrainingBudget object; None for a spec the operator rejects."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    spec = parse_spec(TrainingBudgetSpec, body.get("spec") or {})
    if isinstance(spec, list):  # its own reconciler reports it (InvalidSpec)
        return None
    try:
        admission = AdmissionStatus.model_validate(status.get("admission") or {})
    except ValidationError:
        return None
    try:
        storage = StorageAdmission.model_validate(status.get("storageAdmission") or {})
    except ValidationError:
        storage = StorageAdmission()
    generation = int(meta.get("generation") or 0)
    current = admission.observed_generation == generation
    refusing = storage.refusing and storage.observed_generation == generation
    remaining = status.get("remaining")
    exhausted = any(
        isinstance(c, Mapping) and c.get("type") == EXHAUSTED and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return BudgetView(
        name=str(meta.get("name") or ""),
        spec=spec,
        hold_until=admission.hold_until if admission.holding and current else None,
        percent=_number(status.get("percent")),
        dimension=str(status.get("mostConstrained") or "") or None,
        remaining={str(k): float(v) for k, v in remaining.items() if _number(v) is not None}
        if isinstance(remaining, Mapping)
        else None,
        period_end=parse_time(status.get("periodEnd")),
        exhausted=exhausted,
        current=status.get("observedGeneration") == generation,
        refuse_claims_until=storage.refuse_until if refusing else None,
        storage_message=storage.message if refusing else None,
        storage_used=_number((status.get("storage") or {}).get("usedGiBHours"))
        if isinstance(status.get("storage"), Mapping)
        else None,
    )


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    held_by: str | None = None
    patch: tuple[JSON, ...] = ()
    warnings: tuple[str, ...] = ()
    refusal: str | None = None
    """Why the creation is refused (a claim of an exhausted storage budget); None: allowed."""


POD_CONTROLLERS = frozenset(
    {
        ("batch", "Job"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("ray.io", "RayCluster"),
        ("", "Node"),  # a static pod's mirror
        *(group_kind(*k.key) for k in KINDS if k.suspend_path is not None),
    }
)
"""Controllers whose pods are never held: a Job's pods (the Job is held instead, never
left half-started), a Deployment's or StatefulSet's, a RayCluster's, a Kubeflow job's.
A pod whose controller reference names anything else (a ConfigMap, a kind nobody runs)
was made by whoever wrote the reference: it is held like a bare pod."""


def how_held(obj: Mapping[str, Any]) -> Literal["suspend", "gate"] | None:
    """How this object would be held, or None if it never is: it is Kueue's (Kueue's
    AdmissionCheck holds it), a known controller runs it (its parent is held instead),
    it arrives suspended, or it is not a kind budgets act on."""
    meta = mapping(obj.get("metadata"))
    if KUEUE_QUEUE in mapping(meta.get("labels")):
        return None
    owner = next((r for r in mappings(meta.get("ownerReferences")) if r.get("controller")), None)
    key = (str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    if key == POD:
        run_by = (
            group_kind(str(owner.get("apiVersion") or ""), str(owner.get("kind") or ""))
            if owner
            else None
        )
        return None if run_by in POD_CONTROLLERS else "gate"
    path = SUSPEND_FIELD.get(key)
    if path is None or (
        owner is not None and (owner.get("apiVersion"), owner.get("kind")) in SUSPEND_FIELD
    ):
        return None
    node: Any = obj
    for part in path:
        node = (node or {}).get(part) if isinstance(node, Mapping) else None
    return None if node else "suspend"


def covering(
    obj: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    budgets: Sequence[BudgetView],
    demanded: Demand | None = None,
) -> list[BudgetView]:
    """The budgets whose scope includes any of the object's pods, by name (`demanded`:
    the object's demand, if already read)."""
    namespace = str(mapping(obj.get("metadata")).get("namespace") or "")
    groups = (demanded or demand(obj)).groups
    return sorted(
        (
            b
            for b in budgets
            if any(in_scope(b.spec.scope, namespace, namespace_labels, g.labels) for g in groups)
        ),
        key=lambda b: b.name,
    )


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _marks(
    obj: Mapping[str, Any], marks: Mapping[str, str], ours: AbstractSet[str] = frozenset()
) -> list[JSON]:
    """JSON patch setting trainwarden's hold annotations to `marks`. Without marks, the
    ones naming a budget of `ours` are removed: a manifest copied from a held workload
    is not held. A hold naming another instance's budget was just made by that
    instance's webhook (budget names are cluster-wide): it stays."""
    current = mapping(obj.get("metadata")).get("annotations")
    if not isinstance(current, Mapping):
        return (
            [{"op": "add", "path": "/metadata/annotations", "value": dict(marks)}] if marks else []
        )
    if not marks and current.get(HELD_BY) not in ours:
        return []
    ops: list[JSON] = [
        {"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"}
        for k in HOLD_MARKS
        if k in current and k not in marks
    ]
    ops += [
        {"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
        for k, v in marks.items()
    ]
    return ops


def _hold(obj: Mapping[str, Any], how: Literal["suspend", "gate"]) -> list[JSON]:
    if how == "gate":
        gates = mapping(obj.get("spec")).get("schedulingGates")
        if isinstance(gates, list):
            return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
    path = SUSPEND_FIELD[(str(obj.get("apiVersion")), str(obj.get("kind")))]
    node: Any = obj
    for depth, part in enumerate(path[:-1]):
        node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):  # e.g. no spec.runPolicy yet
            value: Any = True
            for inner in reversed(path[depth + 1 :]):
                value = {inner: value}
            return [{"op": "add", "path": "/" + "/".join(path[: depth + 1]), "value": value}]
    return [{"op": "add", "path": "/" + "/".join(path), "value": True}]


def _what(obj: Mapping[str, Any]) -> str:
    meta = mapping(obj.get("metadata"))
    name = meta.get("name") or f"{meta.get('generateName', '')}…"
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{name}"


def message(
    obj: Mapping[str, Any], d: Demand, budget: BudgetView, how: str, *, dry_run: bool
) -> str:
    """What the submitter is told (kubectl prints it) and what the hold-reason says."""
    what = _what(obj)
    held = "spec.suspend" if how == "suspend" else f"scheduling gate {GATE}"
    e = estimate(d, budget.spec.accelerators, prices(budget.spec))
    cost = describe(d, e)
    if e.total is not None and budget.remaining:
        worst = max(shares(e.total, budget.remaining).items(), key=lambda kv: kv[1])
        cost += f", {worst[1]:.0f}% of the {worst[0]} left" if worst[1] != math.inf else ""
    if dry_run:
        text = f"{budget.summary()}: {what} would be held (the budget is in DryRun). {cost}"
    else:
        text = (
            f"{budget.summary()}: {what} is held ({held}) and starts when the budget has "
            f"room again. Estimate: {cost}"
        )
    return text[:MAX_MESSAGE]


def admit(
    obj: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    budgets: Sequence[BudgetView],
    now: datetime,
    earlier: Earlier | None = None,
) -> Verdict:
    """Hold the object for the first Enforce budget that holds it (by name), warn for
    the DryRun ones that would; otherwise let it start, without hold marks of ours it
    may have arrived with. `budgets` are this instance's. An object too costly to read
    (estimate.py `too_costly`) is let through unread, with a warning: it fails open.
    `earlier`: the finished run it repeats (core/repeats.py), if any: found by what its
    annotations declare, so the repeat's marks are added to annotations that exist."""
    ours = {b.name for b in budgets}
    costly = too_costly(obj)
    if costly is not None:
        why = f"trainwarden: {_what(obj)} was not checked against budgets: {costly}"
        return Verdict("too-costly", patch=tuple(_marks(obj, {}, ours)), warnings=(why,))
    how = how_held(obj)
    if how is None:
        return Verdict("ignored", patch=tuple(_marks(obj, {}, ours)))
    d = demand(obj)
    covered = covering(obj, namespace_labels, budgets, d)
    holding = [b for b in covered if b.holds(now) and b.spec.enforcement.new_workloads == "Hold"]
    enforcing = [b for b in holding if b.spec.mode == "Enforce"]
    warnings = [message(obj, d, b, how, dry_run=True) for b in holding if b.spec.mode == "DryRun"]
    hold = [(b.name, b.spec.mode == "Enforce") for b in covered if b.spec.repeats == "Hold"]
    held_as = "spec.suspend" if how == "suspend" else f"scheduling gate {GATE}"
    said = repeats.check(obj, hold, earlier, held_already=bool(enforcing), holds_as=held_as)
    if not enforcing and said.held_by is None:
        return Verdict(
            "repeat" if said.warnings else "would-hold" if warnings else "allowed",
            patch=(*said.marks, *_marks(obj, {}, ours)),
            warnings=(*said.warnings, *warnings),
        )
    if not enforcing:
        patch = (*said.marks, *_hold(obj, how), *_marks(obj, {}, ours))
        return Verdict("repeat-held", said.held_by, patch, (*said.warnings, *warnings))
    budget = enforcing[0]
    reason = message(obj, d, budget, how, dry_run=False)
    marks = {HELD_BY: budget.name, HOLD_REASON: reason, HELD_AT: now.isoformat(timespec="seconds")}
    held = (*said.marks, *_hold(obj, how), *_marks(obj, marks))
    return Verdict("held", budget.name, held, (reason, *said.warnings, *warnings))
