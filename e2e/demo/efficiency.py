"""Scene: how much of what the vision team held did work. The vision-team sample budget
integrates each pod's per-GPU utilization from the real Prometheus into used, idle and
unknown GPU-hours, overall and per project."""

from typing import Any

from demo.shell import budget_status, say
from harness import wait_for

BUDGET = "vision-team"


def _measured() -> dict[str, Any] | None:
    e = budget_status(BUDGET).get("efficiency") or {}
    return e if e.get("total", {}).get("usedAcceleratorHours") else None


def run() -> None:
    say(f"Effective GPU-hours of {BUDGET} (held = used + idle + unknown; gaps are unknown)")
    e = wait_for(_measured, timeout=150, what=f"{BUDGET} to measure its GPUs")
    print(f"measured until {e['measuredUntil']} with {e['query']}")
    rows = [("total", e["total"])]
    rows += [(f"project={r['key']}", r) for r in e["breakdown"]["byLabel"].get("project", [])]
    print(f"{'':22}{'HELD':>9}{'USED':>9}{'IDLE':>9}{'UNKNOWN':>9}  EFFECTIVE")
    for label, r in rows:
        pct = r.get("effectivePercent")
        figures = "".join(
            f"{r[k] * 3600:>8.0f}s"
            for k in (
                "heldAcceleratorHours",
                "usedAcceleratorHours",
                "idleAcceleratorHours",
                "unknownAcceleratorHours",
            )
        )
        print(f"{label:22}{figures}  {'-' if pct is None else f'{pct:.0f} %'}")
    print("  (GPU-seconds; vit is the idle job, detr keeps 2 of 4 GPUs busy)")
