"""`trainwarden report`: who spent what, on what, and what the operator saved.

Built only from the policies' own status (the operator already did the accounting), so the
report needs read access to the three kinds and nothing else. Budgets may overlap (a team
budget and a project budget both see a pod); the report shows each budget's view and never
adds budgets up.
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from trainwarden.api.v1alpha1.budget_status import StorageStatus, TrainingBudgetStatus
from trainwarden.api.v1alpha1.checkpoint_status import CheckpointPolicyStatus
from trainwarden.api.v1alpha1.efficiency import EfficiencyShare, EfficiencyStatus
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicyStatus

JSON = dict[str, Any]


def _status(model: Any, obj: Mapping[str, Any]) -> Any:
    try:
        return model.model_validate(obj.get("status") or {})
    except ValidationError:
        return model()  # a status the report cannot read shows as empty, not as a crash


def _spent(obj: Mapping[str, Any]) -> JSON:
    """One budget's row: its own view of what was used (budgets are never added up)."""
    status: TrainingBudgetStatus = _status(TrainingBudgetStatus, obj)
    breakdown = status.breakdown
    return {
        "budget": obj["metadata"]["name"],
        "mode": (obj.get("spec") or {}).get("mode", "DryRun"),
        "periodStart": status.period_start.isoformat() if status.period_start else None,
        "periodEnd": status.period_end.isoformat() if status.period_end else None,
        "acceleratorHours": status.used.accelerator_hours if status.used else 0.0,
        "cost": (status.used.cost if status.used else 0.0)
        + (status.storage.cost or 0.0 if status.storage else 0.0),
        "storage": _storage(status.storage),
        "percent": status.percent,
        "byNamespace": _shares(breakdown.by_namespace if breakdown else []),
        "byLabel": {
            key: _shares(shares)
            for key, shares in (breakdown.by_label if breakdown else {}).items()
        },
        "byOutcome": _shares(breakdown.by_outcome if breakdown else []),
        "efficiency": _efficiency(status.efficiency),
        "suspended": [f"{s.ref.kind}/{s.ref.namespace}/{s.ref.name}" for s in status.suspended],
    }


def _storage(st: StorageStatus | None) -> JSON | None:
    """Storage's GiB-hours next to the accelerators' (docs/storage.md); None where the
    budget accounts no storage."""
    if st is None:
        return None
    return {
        "gibHours": st.used_gib_hours,
        "cost": st.cost or 0.0,
        "requestedGiB": st.requested_gib,
        "byClass": dict(st.by_class),
    }


def _idle(obj: Mapping[str, Any]) -> JSON:
    st: IdleReclaimPolicyStatus = _status(IdleReclaimPolicyStatus, obj)
    return {
        "policy": obj["metadata"]["name"],
        "mode": (obj.get("spec") or {}).get("mode", "DryRun"),
        "watched": st.pods_watched,
        "idleNow": st.pods_idle,
        "unknown": st.pods_unknown,
        "idleAcceleratorHours": dict(sorted(st.idle_accelerator_hours.items())),
        "reclaims": st.actions_taken,
        "acceleratorHoursReclaimed": st.accelerator_hours_reclaimed,
        "idleNodes": [n.name for n in st.idle_nodes],
        "overProvisioned": [o.message for o in st.over_provisioned],
    }


def _pruned(obj: Mapping[str, Any]) -> JSON:
    cp: CheckpointPolicyStatus = _status(CheckpointPolicyStatus, obj)
    return {
        "policy": obj["metadata"]["name"],
        "deleted": cp.deleted,
        "bytesFreed": cp.bytes_freed,
        "bytesRetained": cp.bytes_retained,
    }


def _saved(spent: list[JSON], idle: list[JSON], pruned: list[JSON]) -> JSON:
    """What the operator saved, summed over the rows (workloads suspended counted once)."""
    return {
        "suspendedByBudgets": sorted({w for b in spent for w in b["suspended"]}),
        "idleReclaims": sum(p["reclaims"] for p in idle),
        "acceleratorHoursReclaimed": round(sum(p["acceleratorHoursReclaimed"] for p in idle), 3),
        "idleAcceleratorHoursObserved": round(
            sum(h for p in idle for h in p["idleAcceleratorHours"].values()), 3
        ),
        "checkpointsDeleted": sum(p["deleted"] for p in pruned),
        "bytesFreed": sum(p["bytesFreed"] for p in pruned),
    }


def _by_name(objs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(objs, key=lambda o: o["metadata"]["name"])


def build(
    budgets: Iterable[Mapping[str, Any]],
    idle_policies: Iterable[Mapping[str, Any]],
    checkpoint_policies: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
) -> JSON:
    """The report as plain data (what `-o json` prints)."""
    spent = [_spent(obj) for obj in _by_name(budgets)]
    idle = [_idle(obj) for obj in _by_name(idle_policies)]
    pruned = [_pruned(obj) for obj in _by_name(checkpoint_policies)]
    return {
        "generatedAt": now.isoformat(timespec="seconds"),
        "spent": spent,
        "idle": idle,
        "pruned": pruned,
        "saved": _saved(spent, idle, pruned),
    }


def _efficiency(e: EfficiencyStatus | None) -> JSON | None:
    if e is None:
        return None
    b = e.breakdown
    return {
        "total": _eff(e.total),
        "unknownPercent": e.unknown_percent,
        "measuredUntil": e.measured_until.isoformat() if e.measured_until else None,
        "byNamespace": [_eff(s) for s in b.by_namespace],
        "byLabel": {k: [_eff(s) for s in v] for k, v in b.by_label.items()},
        "byOutcome": [_eff(s) for s in b.by_outcome],
        "message": e.message,
    }


def _eff(s: EfficiencyShare) -> JSON:
    return {
        "key": s.key,
        "held": s.held_accelerator_hours,
        "used": s.used_accelerator_hours,
        "idle": s.idle_accelerator_hours,
        "unknown": s.unknown_accelerator_hours,
        "effectivePercent": s.effective_percent,
    }


def _shares(shares: Iterable[Any]) -> list[JSON]:
    return [{"key": s.key, "acceleratorHours": s.accelerator_hours, "cost": s.cost} for s in shares]


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers), *(fmt.format(*r) for r in rows)]


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def _efficiency_rows(spent: Iterable[Mapping[str, Any]]) -> list[str]:
    rows = []
    for b in spent:
        e = b.get("efficiency")
        if not e:
            continue
        parts = [("total", [e["total"]]), ("namespace", e["byNamespace"]), *e["byLabel"].items()]
        for dimension, shares in [*parts, ("outcome", e["byOutcome"])]:
            for s in shares:
                pct = s["effectivePercent"]
                rows.append(
                    [
                        b["budget"] if dimension == "total" else "",
                        dimension,
                        "" if dimension == "total" else s["key"] or "(unset)",
                        *(f"{s[k]:.3f}" for k in ("held", "used", "idle", "unknown")),
                        f"{pct:.1f}%" if pct is not None else "-",
                    ]
                )
    if not rows:
        return ["no budget has measured its accelerators (--prometheus-url)"]
    headers = ["BUDGET", "BY", "KEY", "HELD", "USED", "IDLE", "UNKNOWN", "EFFECTIVE"]
    return _table(headers, rows)


def _spent_rows(spent: Iterable[Mapping[str, Any]]) -> list[str]:
    rows = []
    for b in spent:
        head = f"{b['budget']} ({b['mode']})"
        pct = f"{b['percent']:.1f}%" if b["percent"] is not None else "-"
        storage = b.get("storage")
        held = f"{storage['gibHours']:.3f}" if storage else "-"
        gpu = f"{b['acceleratorHours']:.3f}"
        rows.append([head, "total", "", gpu, held, f"{b['cost']:.2f}", pct])
        parts = [
            ("namespace", b["byNamespace"]),
            *b["byLabel"].items(),
            ("outcome", b["byOutcome"]),
        ]
        for dimension, shares in parts:
            for share in shares:
                key = share["key"] or "(unset)"
                gpu, cost = f"{share['acceleratorHours']:.3f}", f"{share['cost']:.2f}"
                rows.append(["", dimension, key, gpu, "", cost, ""])
        for klass, hours in (storage or {}).get("byClass", {}).items():
            rows.append(["", "storage class", klass or '""', "", f"{hours:.3f}", "", ""])
    if not rows:
        return ["no TrainingBudgets"]
    headers = ["BUDGET", "BY", "KEY", "GPU-HOURS", "STORAGE GIB-H", "COST", "USED"]
    return _table(headers, rows)


def _idle_rows(idle: Iterable[Mapping[str, Any]]) -> list[str]:
    rows = [
        [
            f"{p['policy']} ({p['mode']})",
            str(p["watched"]),
            str(p["idleNow"]),
            str(p["unknown"]),
            f"{sum(p['idleAcceleratorHours'].values()):.3f}",
            str(p["reclaims"]),
            f"{p['acceleratorHoursReclaimed']:.2f}",
        ]
        for p in idle
    ]
    if not rows:
        return ["no IdleReclaimPolicies"]
    return _table(
        ["POLICY", "WATCHED", "IDLE", "UNKNOWN", "IDLE GPU-H", "RECLAIMS", "GPU-H FREED"], rows
    )


def _saved_lines(saved: Mapping[str, Any]) -> list[str]:
    return [
        "WHAT THE OPERATOR SAVED",
        f"suspended by budgets:      {len(saved['suspendedByBudgets'])} workload(s)"
        + (f": {', '.join(saved['suspendedByBudgets'])}" if saved["suspendedByBudgets"] else ""),
        f"idle reclaims:             {saved['idleReclaims']}, "
        f"~{saved['acceleratorHoursReclaimed']:.2f} GPU-hours freed (estimated)",
        f"idle GPU-hours observed:   {saved['idleAcceleratorHoursObserved']:.3f}",
        f"checkpoints pruned:        {saved['checkpointsDeleted']}, "
        f"{_gib(saved['bytesFreed'])} freed",
    ]


def table(report: Mapping[str, Any]) -> str:
    """The report for people."""
    lines = [f"trainwarden report, {report['generatedAt']}", "", "WHO SPENT WHAT (per budget)"]
    lines += _spent_rows(report["spent"])
    lines += ["", "EFFECTIVE ACCELERATOR-HOURS (per budget: held = used + idle + unknown)"]
    lines += _efficiency_rows(report["spent"])
    lines += ["", "IDLE ACCELERATORS (per idle policy)"]
    lines += _idle_rows(report["idle"])
    advice = [m for p in report["idle"] for m in p.get("overProvisioned", [])]
    lines += ["", "OVER-PROVISIONED (recommendations; nothing was changed)"]
    lines += advice or ["none reported (IdleReclaimPolicy spec.rightsizing)"]
    lines += ["", *_saved_lines(report["saved"])]
    return "\n".join(lines) + "\n"
