"""`make faults` (FAULTS_ARGS="--runs 10 --areas suspend,resume"): run the areas, print
the table. Exit 1 when any scenario lost, doubled or took a wrong action."""

import argparse
import json
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from faults import (
    api_faults,
    budget_kills,
    clock_skew,
    failover,
    idle_kills,
    kit,
    outage,
    prometheus_faults,
    pvc_faults,
    s3_faults,
    s3_kills,
    status_kills,
    upgrade,
)
from faults.table import Row, render

AREAS: dict[str, Callable[[kit.Context], Row]] = {
    "suspend": lambda ctx: budget_kills.run_area(ctx, "suspend"),
    "resume": lambda ctx: budget_kills.run_area(ctx, "resume"),
    "status": status_kills.run_area,
    "idle": idle_kills.run_area,
    "failover": failover.run_area,
    "prometheus": prometheus_faults.run_area,
    "outage": outage.run_area,
    "s3": s3_faults.run_area,
    "s3-kills": s3_kills.run_area,
    "pvc": pvc_faults.run_area,
    "api": api_faults.run_area,
    "skew": clock_skew.run_area,
    "upgrade": upgrade.run_area,
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    top.add_argument("--runs", type=int, default=50, help="kills (or faults) per area")
    top.add_argument("--areas", default=",".join(AREAS), help="comma-separated, in order")
    top.add_argument("--per-kill", type=int, default=3, help="instances in flight per kill")
    top.add_argument(
        "--failpoint-share",
        type=float,
        default=0.5,
        help="share of kills made by failpoints between decision and write (the rest at "
        "random moments)",
    )
    top.add_argument("--outage-seconds", type=float, default=600, help="operator down (area 4)")
    top.add_argument(
        "--api-outage-seconds", type=float, default=120, help="API server down (area api)"
    )
    top.add_argument("--seed", type=int, default=None, help="repeat a run's random choices")
    top.add_argument("--logs", type=Path, default=None, help="operator logs (default: .cluster/)")
    top.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    top.add_argument(
        "--instance",
        help="run the operators with --instance and label the policies for it, so several "
        "suite processes (one area each) can share a cluster",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    areas = [a.strip() for a in args.areas.split(",") if a.strip()]
    unknown = [a for a in areas if a not in AREAS]
    if unknown:
        print(f"unknown areas {unknown}; known: {', '.join(AREAS)}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    logs = args.logs or kit.harness.CLUSTER_DIR / "faults" / stamp
    ctx = kit.Context(
        kit.connect(),
        random.Random(seed),
        args.runs,
        args.per_kill,
        args.failpoint_share,
        logs,
        args.outage_seconds,
        lambda line: print(line, flush=True),
        args.instance,
        args.api_outage_seconds,
    )
    print(f"faults: seed {seed}, areas {', '.join(areas)}, logs in {logs}", flush=True)
    rows = []
    for area in areas:
        began = time.monotonic()
        try:
            row = AREAS[area](ctx)
        except Exception as error:  # one area failing must not lose the others' figures
            traceback.print_exc()
            row = Row(f"{area}: the scenario itself failed", notes=[repr(error)])
            row.lost = 1
        kit.stop_every_operator()
        row.notes.append(f"took {time.monotonic() - began:.0f} s")
        rows.append(row)
        print(render([row]), flush=True)
    print(f"\nfaults: seed {seed}, {len(areas)} areas\n")
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps({"seed": seed, "rows": [asdict(r) for r in rows]}))
    return 0 if all(r.clean for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
