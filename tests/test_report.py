"""`trainwarden report` from policy statuses: per budget, never summed across budgets."""

import json
from datetime import UTC, datetime
from typing import Any

from trainwarden import report

NOW = datetime(2026, 12, 2, 18, tzinfo=UTC)


def budget(name: str, hours: float, *, suspended: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {
        "used": {"acceleratorHours": hours, "cost": hours * 4},
        "percent": 50.0,
        "breakdown": {
            "byNamespace": [{"key": "vision", "acceleratorHours": hours, "cost": hours * 4}],
            "byLabel": {"team": [{"key": "", "acceleratorHours": hours}]},
            "byOutcome": [
                {"key": "Failed", "acceleratorHours": hours / 4},
                {"key": "Running", "acceleratorHours": hours * 3 / 4},
            ],
        },
    }
    if suspended:
        status["suspended"] = [
            {
                "ref": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "namespace": "vision",
                    "name": "x",
                },
                "suspendedAt": "2026-12-02T17:00:00Z",
            }
        ]
    return {"metadata": {"name": name}, "spec": {"mode": "Enforce"}, "status": status}


def idle_policy() -> dict[str, Any]:
    return {
        "metadata": {"name": "notebooks"},
        "spec": {"mode": "Enforce"},
        "status": {
            "podsWatched": 3,
            "podsIdle": 1,
            "actionsTaken": 2,
            "acceleratorHoursReclaimed": 16.0,
            "idleAcceleratorHours": {"vision": 1.5, "research": 0.5},
        },
    }


def test_report_per_budget_with_waste_and_savings() -> None:
    built = report.build(
        [budget("team", 8.0, suspended=True), budget("project", 8.0)],
        [idle_policy()],
        [{"metadata": {"name": "ckpt"}, "status": {"deleted": 3, "bytesFreed": 3 * 2**30}}],
        now=NOW,
    )
    assert [b["budget"] for b in built["spent"]] == ["project", "team"]
    assert built["spent"][1]["byOutcome"][0] == {
        "key": "Failed",
        "acceleratorHours": 2.0,
        "cost": 0,
    }
    saved = built["saved"]
    assert saved["suspendedByBudgets"] == ["Job/vision/x"]
    assert saved["idleReclaims"] == 2
    assert saved["acceleratorHoursReclaimed"] == 16.0
    assert saved["idleAcceleratorHoursObserved"] == 2.0
    assert saved["checkpointsDeleted"] == 3
    json.dumps(built)  # -o json
    text = report.table(built)
    assert "Failed" in text
    assert "(unset)" in text, "a pod without the attribution label is shown, not dropped"
    assert "16.00 GPU-hours freed" in text
    assert "3.0 GiB freed" in text
    assert "16.000" not in text.split("WHO SPENT WHAT")[1].split("IDLE")[0], (
        "overlapping budgets are never added up"
    )


def test_report_shows_storage_next_to_accelerators() -> None:
    """A budget that accounts storage (docs/storage.md): its GiB-hours in total and per
    class beside its accelerator-hours, its cost with storage's; one that does not: "-"."""
    with_storage = budget("team", 8.0)
    with_storage["status"]["storage"] = {
        "usedGiBHours": 1500.0,
        "cost": 3.0,
        "requestedGiB": 100.0,
        "byClass": {"fast": 1000.0, "": 500.0},
    }
    built = report.build([with_storage, budget("project", 2.0)], [], [], now=NOW)
    team = built["spent"][1]
    assert team["storage"]["byClass"] == {"fast": 1000.0, "": 500.0}
    assert team["cost"] == 8.0 * 4 + 3.0
    assert built["spent"][0]["storage"] is None
    lines = report.table(built).splitlines()
    header = next(line for line in lines if line.startswith("BUDGET"))
    assert "GPU-HOURS  STORAGE GIB-H" in header
    total = next(line for line in lines if line.startswith("team (Enforce)"))
    assert "8.000" in total
    assert "1500.000" in total
    assert "35.00" in total
    assert any("storage class" in line and "fast" in line and "1000.000" in line for line in lines)
    assert any("storage class" in line and '""' in line and "500.000" in line for line in lines)
    project = next(line for line in lines if line.startswith("project (Enforce)"))
    assert " - " in project


def test_an_unreadable_status_is_shown_empty() -> None:
    mangled = {"metadata": {"name": "b"}, "status": {"used": "lots"}}
    built = report.build([mangled], [], [], now=NOW)
    assert built["spent"][0]["acceleratorHours"] == 0.0
    assert "no IdleReclaimPolicies" in report.table(built)


def test_report_shows_what_each_budget_s_accelerator_hours_did() -> None:
    b = budget("team", 8.0)
    share = {"heldAcceleratorHours": 8.0, "usedAcceleratorHours": 2.0}
    b["status"]["efficiency"] = {
        "total": {
            "key": "total",
            **share,
            "idleAcceleratorHours": 5.0,
            "unknownAcceleratorHours": 1.0,
            "effectivePercent": 25.0,
        },
        "unknownPercent": 12.5,
        "breakdown": {"byNamespace": [{"key": "vision", **share, "effectivePercent": 25.0}]},
    }
    built = report.build([b, budget("other", 1.0)], [], [], now=NOW)
    by_name = {s["budget"]: s for s in built["spent"]}
    assert by_name["team"]["efficiency"]["total"]["idle"] == 5.0
    assert by_name["other"]["efficiency"] is None
    lines = report.table(built).splitlines()
    total = next(line for line in lines if line.startswith("team ") and "25.0%" in line)
    assert total.split()[2:7] == ["8.000", "2.000", "5.000", "1.000", "25.0%"]
    assert any(line.split()[:3] == ["namespace", "vision", "8.000"] for line in lines)


def test_report_lists_over_provisioned_workloads() -> None:
    p = idle_policy()
    p["status"]["overProvisioned"] = [
        {
            "kind": "Job",
            "namespace": "vision",
            "name": "vit",
            "accelerators": 8,
            "busy": 2,
            "idle": 6,
            "recommendedPerPod": 2,
            "since": "2026-12-02T17:00:00Z",
            "message": "Job vision/vit holds 8 GPUs; 6 stayed below 5% for 2h — request 2",
        }
    ]
    text = report.table(report.build([], [p], [], now=NOW))
    assert "Job vision/vit holds 8 GPUs; 6 stayed below 5% for 2h — request 2" in text.splitlines()
