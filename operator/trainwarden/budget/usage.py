"""What a budget's BudgetUsage objects should say, and which writes get them there (pure).

One BudgetUsage per namespace the budget covers and charges (api/v1alpha1/usage.py), from
the budget's status as written: its totals, and that namespace's entry in
status.breakdown.byNamespace, never another's. Bounded:

- at most MAX_OBJECTS per budget, the namespaces with the most usage; status.byNamespace
  itself keeps only its largest keys and folds the rest into "(other)", whose namespaces get
  no object (`Plan.left_out` counts those over the cap; docs/budgets.md);
- a write only when what a reader sees changed: at once when the budget's state, mode,
  period or limits did; when only the clock moved the figures, at most every USAGE_INTERVAL
  and only in an evaluation that wrote the budget's status (the copies ride its writes, they
  add no write moments of their own); never for evaluatedAt alone;
- figures rounded as status rounds them (they are copied from it).

What was written is this process's memory (`Written`), never the stored object: a tenant
who may write BudgetUsages in its namespace cannot make the operator believe anything.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    ResourceUsage,
    TrainingBudgetStatus,
    UsageBreakdown,
    UsageCopies,
)
from trainwarden.api.v1alpha1.usage import BudgetUsageSpec, NamespaceShare, State
from trainwarden.core.tally import OTHER

JSON = dict[str, Any]

MAX_OBJECTS = 12
"""BudgetUsages one budget writes at most (status.byNamespace keeps as many keys)."""
USAGE_INTERVAL = timedelta(minutes=5)
"""The least time between two writes of a BudgetUsage whose figures only the clock moved:
the budget's own clock-only interval (controllers/status.py STATUS_INTERVAL), so at rest
each status write of the budget carries its copies along."""
MOVING = ("used", "remaining", "percent", "mostConstrained", "namespace", "evaluatedAt")
"""Fields that move with the clock while pods run: written at most every USAGE_INTERVAL."""


@dataclass(frozen=True)
class Written:
    """What this process last wrote to one namespace's BudgetUsage (None: an object of
    ours it found at start and has not written yet), the object's uid, and when."""

    spec: JSON | None
    uid: str
    at: datetime
    version: str | None = None
    """The resourceVersion our write left (None: not known): while the object still has
    it, nobody changed it since, and a rewrite needs no read first."""


@dataclass
class UsageMemory:
    """What one budget's BudgetUsages are, as this process wrote them (budget/usage_write.py)."""

    written: dict[str, Written] = field(default_factory=dict)
    listed: bool = False
    """Whether the objects an earlier process wrote were listed (once per process)."""
    foreign: dict[str, datetime] = field(default_factory=dict)
    """Namespaces where a BudgetUsage of the budget's name is not ours, since when."""
    left_out: int = 0
    """Namespaces covered and charged past MAX_OBJECTS at the last publication."""


@dataclass(frozen=True)
class Plan:
    """The writes of one evaluation: namespace -> the whole spec, and the namespaces whose
    object goes (they left the budget's scope, or it no longer charges them)."""

    write: dict[str, JSON] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    left_out: int = 0
    """Namespaces the budget covers and charges past MAX_OBJECTS: no object is written."""


def state(status: TrainingBudgetStatus) -> State:
    """The budget's state in its conditions' words: the first True of Exhausted, Warning,
    Ready."""
    true = {c.type for c in status.conditions if c.status == "True"}
    for kind in (C.EXHAUSTED, C.WARNING, C.READY):
        if kind in true:
            return kind
    return "Unknown"


def _share(accelerator_hours: float, cost: float, used: ResourceUsage) -> NamespaceShare:
    total = used.accelerator_hours
    percent = min(100.0, round(100 * accelerator_hours / total, 6)) if total > 0 else None
    return NamespaceShare(accelerator_hours=accelerator_hours, cost=cost, percent_of_used=percent)


def wanted(
    name: str,
    spec: TrainingBudgetSpec,
    status: TrainingBudgetStatus,
    covered: Callable[[str], bool],
) -> tuple[dict[str, JSON], int]:
    """namespace -> the BudgetUsage spec it should show, for the namespaces status charges
    that the budget `covered` now (at most MAX_OBJECTS, the most used); and how many more
    there were."""
    used = status.used or ResourceUsage()
    shares = [
        s
        for s in (status.breakdown.by_namespace if status.breakdown else [])
        if s.key != OTHER and covered(s.key)
    ]
    shares.sort(key=lambda s: (-s.accelerator_hours, -s.cost, s.key))
    common: JSON = BudgetUsageSpec(
        budget=name,
        mode=spec.mode,
        period=spec.period.type,
        period_start=status.period_start,
        period_end=status.period_end,
        state=state(status),
        percent=status.percent,
        most_constrained=status.most_constrained,
        limits=spec.limits,
        used=used,
        remaining=status.remaining,
        namespace=NamespaceShare(),
        evaluated_at=status.last_evaluated,
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    out: dict[str, JSON] = {}
    for s in shares[:MAX_OBJECTS]:
        share = _share(s.accelerator_hours, s.cost, used)
        out[s.key] = {
            **common,
            "namespace": share.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
    return out, max(0, len(shares) - MAX_OBJECTS)


def _urgent(old: JSON, new: JSON) -> bool:
    def fixed(s: JSON) -> JSON:
        return {k: v for k, v in s.items() if k not in MOVING}

    return fixed(old) != fixed(new)


def _without_time(s: JSON) -> JSON:
    return {k: v for k, v in s.items() if k != "evaluatedAt"}


def decide(
    want: Mapping[str, JSON],
    left_out: int,
    written: Mapping[str, Written],
    now: datetime,
    *,
    fresh: bool,
) -> Plan:
    """The writes that bring the objects to `want`, given what this process wrote;
    `fresh`: this evaluation wrote the budget's status (clock-only changes wait for one)."""
    write: dict[str, JSON] = {}
    for namespace, new in want.items():
        last = written.get(namespace)
        if last is None or last.spec is None or _urgent(last.spec, new):
            write[namespace] = new
        elif _without_time(last.spec) == _without_time(new) or not fresh:
            continue
        elif now - last.at >= USAGE_INTERVAL or now < last.at:  # a clock stepped back
            write[namespace] = new
    delete = tuple(sorted(ns for ns in written if ns not in want))
    return Plan(write, delete, left_out)


def replacing(old: Any, new: JSON) -> JSON:
    """The merge patch (RFC 7386) that turns `old` into `new` (which holds no nulls):
    what `old` has and `new` has not is removed, so nothing a tenant added stays."""
    if not isinstance(old, dict):
        return new
    patch: JSON = {k: None for k in old if k not in new}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            patch[key] = replacing(old[key], value)
        else:
            patch[key] = value
    return patch


def copies(memory: UsageMemory, breakdown: UsageBreakdown | None) -> UsageCopies:
    """What the budget's status says of its BudgetUsages: how many namespaces have one,
    and which charged namespaces have none, and why."""
    missing = []
    other = next((s for s in (breakdown.by_namespace if breakdown else []) if s.key == OTHER), None)
    if other is not None and (other.accelerator_hours > 0 or other.cost > 0):
        missing.append(f'namespaces in "{OTHER}" (past the most used) have none')
    if memory.left_out:
        missing.append(f"{memory.left_out} namespaces past the {MAX_OBJECTS} most used have none")
    if memory.foreign:
        names = ", ".join(sorted(memory.foreign))
        line = f"a BudgetUsage the operator did not write is in the way in {names}"
        missing.append(line if len(line) <= 256 else line[:255] + "…")
    return UsageCopies(namespaces=len(memory.written), missing=missing)
