"""`trainwarden estimate`: what manifests will cost against the budgets that would cover
them, before anyone submits them.

Pure, like report.py: the shell (estimate_command.py) reads files or the cluster, the
inputs are checked (estimate_inputs.py), and this module turns manifests, TrainingBudget
objects and namespace labels into the report `-o json` prints (docs/budgets.md documents
it), and its table. It reuses the arithmetic of the admission webhook and of a held
workload's message (core/estimate.py, core/admission.py), so the three never disagree.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any

from trainwarden.api.v1alpha1.conditions import EXHAUSTED
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION
from trainwarden.api.v1alpha1.types import DEFAULT_ACCELERATORS
from trainwarden.core import ledger
from trainwarden.core.accounting import PriceTable, Usage
from trainwarden.core.admission import BudgetView, budget_view, covering, how_held
from trainwarden.core.budgets import prices
from trainwarden.core.estimate import (
    KUEUE_MAX_EXEC,
    Demand,
    describe,
    estimate,
    shares,
    usage_along,
)
from trainwarden.core.shapes import mapping, mappings
from trainwarden.core.workloads import KUEUE_QUEUE
from trainwarden.estimate_inputs import (
    NAME_LABEL,
    Manifest,
    check,
    name_of,
    namespace_of,
)

JSON = dict[str, Any]
HOW_TO_DECLARE = (
    f'declare the expected run time to see totals: annotation {EXPECTED_DURATION}: "6h" '
    f"(or Kueue's label {KUEUE_MAX_EXEC}, or a Job's spec.activeDeadlineSeconds)"
)


def _round(value: float) -> float | None:
    """JSON has no infinity: None stands for "nothing is left and it needs some"."""
    return round(value, 4) if math.isfinite(value) else None


def _usage(u: Usage) -> JSON:
    return {
        "acceleratorHours": _round(u.total_accelerator_hours),
        "acceleratorHoursByResource": {
            r: _round(h) for r, h in sorted(u.accelerator_hours.items()) if h
        },
        "cpuCoreHours": _round(u.cpu_core_hours),
        "memoryGiBHours": _round(u.memory_gib_hours),
    }


def _lasts(hourly: Usage, remaining: Mapping[str, float]) -> float | None:
    """Hours until the workload alone would use up what is left (None: never)."""
    hours = [
        left / usage_along(hourly, name)
        for name, left in remaining.items()
        if usage_along(hourly, name) > 0
    ]
    return round(min(hours), 2) if hours else None


def _percents(values: Mapping[str, float] | None) -> JSON | None:
    return {k: _round(v) for k, v in sorted(values.items())} if values is not None else None


def _against(
    d: Demand, b: BudgetView, obj: Mapping[str, Any], exhausted: bool, now: datetime
) -> JSON:
    """One covering budget's view of the workload: cost by its rates, share of its
    remaining amount, and whether it would be held (as the webhook decides it)."""
    e = estimate(d, b.spec.accelerators, prices(b.spec))
    rated, left = b.spec.rates is not None, b.remaining
    total = shares(e.total, left) if e.total is not None and left is not None else None
    held = None
    if b.holds(now) and b.spec.enforcement.new_workloads == "Hold" and how_held(obj):
        held = "Held" if b.spec.mode == "Enforce" else "WouldHold"
    return {
        "budget": b.name,
        "mode": b.spec.mode,
        "currency": b.spec.rates.currency if b.spec.rates else None,
        "costPerHour": _round(e.hourly.cost) if rated else None,
        "cost": _round(e.total.cost) if rated and e.total is not None else None,
        "costIsUpperBound": rated and e.highest_rate,
        "acceleratorHours": _round(e.total.total_accelerator_hours) if e.total else None,
        "remaining": _percents(left),
        "percentOfRemaining": _percents(total),
        "percentOfRemainingPerHour": _percents(shares(e.hourly, left) if left else None),
        "usesUpRemainingAfterHours": _lasts(e.hourly, left) if left else None,
        "wouldExceed": total is not None and any(v > 100 for v in total.values()),
        "exhausted": exhausted or b.holds(now),
        "held": held,
        "periodEnd": b.period_end.isoformat() if b.period_end else None,
    }


def _notes(d: Demand, obj: Mapping[str, Any], budgets: Sequence[JSON]) -> list[str]:
    notes = []
    if d.duration is None:
        notes.append(f"{d.problem}; {HOW_TO_DECLARE}" if d.problem else HOW_TO_DECLARE)
    if not budgets:
        notes.append("no TrainingBudget covers it")
    if any(b["costIsUpperBound"] for b in budgets):
        notes.append(
            "cost is an upper bound: its pods select no node the rates name, so the highest "
            "rate of the resource is used"
        )
    if any(b["exhausted"] for b in budgets) and how_held(obj) is None:
        why = (
            "Kueue manages it (its AdmissionCheck decides)"
            if d.kind == "Workload"
            or KUEUE_QUEUE in mapping(mapping(obj.get("metadata")).get("labels"))
            else "the webhook holds only runnable top-level workloads (it arrives suspended)"
        )
        notes.append(f"an exhausted budget covers it, but it would not be held: {why}")
    return notes


def _exhausted(body: Mapping[str, Any]) -> bool:
    """Its Exhausted condition is True (it may still let new work start: Allow)."""
    conditions = mappings(mapping(body.get("status")).get("conditions"))
    return any(c.get("type") == EXHAUSTED and c.get("status") == "True" for c in conditions)


def _workload(
    m: Manifest,
    views: Sequence[BudgetView],
    exhausted: AbstractSet[str],
    labels: Mapping[str, str],
    ns: str,
    now: datetime,
) -> JSON:
    d = check(m)
    meta = {**mapping(m.body.get("metadata")), "namespace": ns}
    obj = {**m.body, "metadata": meta}
    found = covering(obj, labels, views)
    accelerators = list(
        dict.fromkeys([*DEFAULT_ACCELERATORS, *(a for b in found for a in b.spec.accelerators)])
    )
    e = estimate(d, accelerators, PriceTable())
    budgets = [_against(d, b, obj, b.name in exhausted, now) for b in found]
    return {
        "source": m.source,
        "document": m.index,
        "item": m.item,
        "apiVersion": str(m.body.get("apiVersion") or ""),
        "kind": d.kind,
        "namespace": ns,
        "name": name_of(m.body),
        "pods": d.pods,
        "summary": describe(d, e),
        "duration": {"seconds": int(d.duration.total_seconds()), "source": d.duration_source}
        if d.duration
        else None,
        "durationProblem": d.problem,
        "perHour": _usage(e.hourly),
        "total": _usage(e.total) if e.total is not None else None,
        "budgets": budgets,
        "notes": _notes(d, obj, budgets),
    }


def build(
    manifests: Sequence[Manifest],
    budgets: Iterable[Mapping[str, Any]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    *,
    default_namespace: str,
    now: datetime,
    budget_source: str,
    receipts: Iterable[Mapping[str, Any]] = (),
) -> JSON:
    """The estimate as plain data (what `-o json` prints; docs/budgets.md documents it).
    `namespace_labels` has the labels of every namespace the manifests land in;
    `receipts`: the RunReceipts of those namespaces, to say which workload repeats a
    finished run (core/repeats.py, as the webhook says it)."""
    runs = _newest(receipts)
    views, invalid, exhausted = [], [], set()
    for body in budgets:
        view = budget_view(body)
        if view is None:
            invalid.append(str(mapping(body.get("metadata")).get("name") or ""))
            continue
        views.append(view)
        if _exhausted(body):
            exhausted.add(view.name)
    workloads = []
    for m in manifests:
        ns = namespace_of(m, default_namespace)
        labels = namespace_labels.get(ns, {NAME_LABEL: ns})
        found = _workload(m, views, exhausted, labels, ns, now)
        key = ledger.repeat_key(ns, mapping(mapping(m.body.get("metadata")).get("annotations")))
        earlier = runs.get(key) if key is not None else None
        found["repeats"] = _earlier(earlier) if earlier is not None else None
        workloads.append(found)
    return {
        "generatedAt": now.isoformat(timespec="seconds"),
        "budgetSource": budget_source,
        "budgetsConsidered": sorted(v.name for v in views),
        "budgetsIgnored": sorted(invalid),
        "workloads": workloads,
        "wouldExceed": sum(any(b["wouldExceed"] for b in w["budgets"]) for w in workloads),
        "wouldBeHeld": sum(any(b["held"] == "Held" for b in w["budgets"]) for w in workloads),
        "repeats": sum(w["repeats"] is not None for w in workloads),
    }


def _newest(receipts: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], ledger.Earlier]:
    found: dict[tuple[str, str, str], ledger.Earlier] = {}
    for body in receipts:
        e = ledger.earlier(body)
        if e is not None and (e.key not in found or found[e.key].finished_at < e.finished_at):
            found[e.key] = e
    return found


def _earlier(e: ledger.Earlier) -> JSON:
    return {
        "receipt": e.receipt,
        "workload": e.workload,
        "outcome": e.outcome,
        "cost": e.cost,
        "finishedAt": e.finished_at,
        "configHash": e.config_hash,
        "dataVersion": e.data_version,
        "message": f"repeats a finished run: {e.describe()}",
    }


def over(report: Mapping[str, Any], percent: float) -> list[str]:
    """What uses more than `percent` of a covering budget's remaining amount (declared
    durations only: a per-hour share says nothing of the whole run)."""
    found = []
    for w in report["workloads"]:
        for b in w["budgets"]:
            for dimension, share in (b["percentOfRemaining"] or {}).items():
                if share is None or share > percent:
                    shown = "everything (nothing is left)" if share is None else f"{share:.1f}%"
                    found.append(
                        f"{w['kind']} {w['namespace']}/{w['name']} would use {shown} of the "
                        f"{dimension} left in TrainingBudget {b['budget']}"
                    )
    return found


def _share(dimension: str, value: float | None, suffix: str = "") -> str:
    return f"{dimension} {'nothing left' if value is None else f'{value:.1f}%{suffix}'}"


def _budget_row(b: Mapping[str, Any], declared: bool) -> list[str]:
    currency = f" {b['currency']}" if b["currency"] else ""
    bound = "≤" if b["costIsUpperBound"] else ""
    if b["costPerHour"] is None:
        cost = "- (no rates)"
    elif declared and b["cost"] is not None:
        cost = f"{bound}{b['cost']:.2f}{currency}"
    else:
        cost = f"{bound}{b['costPerHour']:.2f}{currency}/h"
    if b["remaining"] is None:
        left = "unknown (no status)"
    elif not b["remaining"]:
        left = "-"
    elif declared and b["percentOfRemaining"] is not None:
        left = ", ".join(_share(k, v) for k, v in b["percentOfRemaining"].items())
    else:
        left = ", ".join(_share(k, v, "/h") for k, v in b["percentOfRemainingPerHour"].items())
        if b["usesUpRemainingAfterHours"] is not None:
            left += f"; uses it all up after {b['usesUpRemainingAfterHours']:g}h"
    flags = []
    if b["wouldExceed"]:
        flags.append("WOULD EXCEED WHAT IS LEFT")
    if b["held"] == "Held":
        flags.append("EXHAUSTED: WOULD BE HELD")
    elif b["held"] == "WouldHold":
        flags.append("EXHAUSTED (DryRun: a warning, not held)")
    elif b["exhausted"]:
        flags.append("EXHAUSTED")
    return [b["budget"], b["mode"], cost, left, "; ".join(flags)]


def _rows(headers: list[str], rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [indent + fmt.format(*r).rstrip() for r in [headers, *rows]]


def table(report: Mapping[str, Any]) -> str:
    """The estimate for people: a block per workload, a row per covering budget."""
    considered = len(report["budgetsConsidered"])
    lines = [
        f"trainwarden estimate, {report['generatedAt']}: against {considered} "
        f"TrainingBudget(s) from {report['budgetSource']}"
    ]
    if report["budgetsIgnored"]:
        lines.append(f"ignored (invalid spec): {', '.join(report['budgetsIgnored'])}")
    for w in report["workloads"]:
        item = f".{w['item']}" if w["item"] is not None else ""
        lines += [
            "",
            f"{w['source']}#{w['document']}{item}  {w['kind']} {w['namespace']}/{w['name']}",
            f"  {w['summary']}",
        ]
        if w["budgets"]:
            rows = [_budget_row(b, w["duration"] is not None) for b in w["budgets"]]
            left = "OF WHAT IS LEFT" if w["duration"] else "OF WHAT IS LEFT, PER HOUR"
            lines += _rows(["BUDGET", "MODE", "COST", left, ""], rows, "  ")
        lines += [f"  note: {note}" for note in w["notes"]]
        if w["repeats"] is not None:
            lines.append(f"  repeat: {w['repeats']['message']}")
    lines += [
        "",
        f"{len(report['workloads'])} workload(s); {report['wouldExceed']} would exceed what "
        f"is left of a budget; {report['wouldBeHeld']} would be held; {report['repeats']} "
        "repeat a finished run",
    ]
    return "\n".join(lines) + "\n"
