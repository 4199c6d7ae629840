"""Scene: how much of what the vision team held did work. The vision-team sample budget
integrates each pod's per-GPU utilization from the real Prometheus into used, idle and
unknown GPU-hours, overall and per project."""

from datetime import datetime, timedelta
from typing import Any

from demo.shell import budget_status, pods_of, say
from demo.workloads import OVERSIZED_JOB
from harness import wait_for

BUDGET = "vision-team"
MEASURED = timedelta(minutes=2)
"""How much of detr-finetune's run the scene waits to see measured."""


def _measured(since: datetime) -> dict[str, Any] | None:
    e = budget_status(BUDGET).get("efficiency") or {}
    until = e.get("measuredUntil")
    return e if until and datetime.fromisoformat(until) >= since + MEASURED else None


def run() -> None:
    say(f"Effective GPU-hours of {BUDGET} (held = used + idle + unknown; gaps are unknown)")
    started = datetime.fromisoformat(pods_of("vision", OVERSIZED_JOB)[0]["status"]["startTime"])
    e = wait_for(lambda: _measured(started), timeout=240, what=f"{BUDGET} to measure 2m of detr")
    print(f"measured until {e['measuredUntil']} with {e['query']}")
    rows = [("total", e["total"])]
    projects = e["breakdown"]["byLabel"].get("project", [])
    rows += [(f"project={r['key'] or '(unset)'}", r) for r in projects]
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
    real = budget_status("llm-real-gpu-daily").get("efficiency", {}).get("total")
    if real:  # the demo-trainer's run on the real node, its GPU reported 92 % busy
        held, used, unknown = (
            real[k] * 3600
            for k in ("heldAcceleratorHours", "usedAcceleratorHours", "unknownAcceleratorHours")
        )
        print(
            f"llm-real-gpu-daily (the real node's trainer): held {held:.0f} GPU-s, used"
            f" {used:.0f}, unknown {unknown:.0f} ({real.get('effectivePercent')} % effective)"
        )
    print(
        "  (GPU-seconds. vit sat at 3 % until reclaimed, detr keeps 2 of 4 GPUs busy, resnet"
        " ran at 87 %; unknown: before the first scrape, the last minute not yet measured,"
        " and any earlier run this month the operator did not measure)"
    )
