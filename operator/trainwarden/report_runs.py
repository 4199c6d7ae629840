"""`trainwarden report --runs`: the run ledger, most expensive run first.

Read from the RunReceipts alone (the operator did the accounting when each run ended), so
it needs only read access to that kind: cluster-wide, or one namespace's with namespace
RBAC (`-n`). Cost first, then accelerator-hours: runs without rates still rank by size.
"""

import argparse
import csv
import io
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from trainwarden import output
from trainwarden.api.v1alpha1.receipt import RunReceiptSpec
from trainwarden.api.v1alpha1.types import GROUP, VERSION

JSON = dict[str, Any]
PLURAL = "runreceipts"
PAGE = 500
COLUMNS = (
    "namespace",
    "workload",
    "outcome",
    "finishedAt",
    "wall",
    "cost",
    "held",
    "used",
    "idle",
    "unknown",
    "effectivePercent",
    "failedPods",
    "failedAcceleratorHours",
    "lostAcceleratorHours",
    "budgets",
    "partial",
    "receipt",
)


def _row(obj: Mapping[str, Any], spec: RunReceiptSpec) -> JSON:
    a = spec.accelerator_hours
    waste = spec.failure_waste
    return {
        "namespace": spec.workload.namespace,
        "workload": f"{spec.workload.kind}/{spec.workload.name}",
        "outcome": spec.outcome,
        "startedAt": spec.started_at.isoformat(),
        "finishedAt": spec.finished_at.isoformat(),
        "wall": spec.wall_time,
        "wallSeconds": spec.wall_seconds,
        "cost": spec.cost,
        "held": a.held,
        "used": a.used,
        "idle": a.idle,
        "unknown": a.unknown,
        "effectivePercent": a.effective_percent,
        "failedPods": spec.pods.failed,
        "failedAcceleratorHours": spec.pods.failed_accelerator_hours,
        "lostAcceleratorHours": waste.accelerator_hours if waste else None,
        "restarts": spec.pods.restarts,
        "suspensions": spec.interruptions.suspensions,
        "budgets": [c.budget for c in spec.charges],
        "labels": dict(spec.labels),
        "partial": spec.partial,
        "receipt": str((obj.get("metadata") or {}).get("name", "")),
    }


def build(
    items: Iterable[Mapping[str, Any]], *, now: datetime, since: timedelta | None
) -> list[JSON]:
    """The ledger's rows, most expensive first; a receipt it cannot read is left out."""
    rows = []
    for obj in items:
        try:
            spec = RunReceiptSpec.model_validate(obj.get("spec") or {})
        except ValidationError:
            continue
        if since is not None and spec.finished_at < now - since:
            continue
        rows.append(_row(obj, spec))
    return sorted(rows, key=lambda r: (-r["cost"], -r["held"], r["namespace"], r["receipt"]))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def to_csv(rows: list[JSON]) -> str:
    """One line per run; every attribution label key seen becomes a column."""
    keys = sorted({k for r in rows for k in r["labels"]})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*COLUMNS, *keys])
    for r in rows:
        writer.writerow([_cell(r[c]) for c in COLUMNS] + [r["labels"].get(k, "") for k in keys])
    return out.getvalue()


def table(rows: list[JSON]) -> str:
    if not rows:
        return "no run receipts\n"
    head = ["NAMESPACE", "WORKLOAD", "OUTCOME", "WALL", "COST", "HELD", "USED", "IDLE", "UNKNOWN"]
    lines = [[*head, "LABELS"]]
    for r in rows:
        cells = [r["namespace"], r["workload"], r["outcome"], r["wall"], f"{r['cost']:.2f}"]
        cells += [f"{r[k]:.2f}" for k in ("held", "used", "idle", "unknown")]
        cells.append(" ".join(f"{k}={v}" for k, v in sorted(r["labels"].items())))
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]

    def aligned(line: list[str]) -> str:
        cells = [c.ljust(w) for c, w in zip(line, widths, strict=False)]
        return "  ".join([*cells, line[-1]]).rstrip()

    return "".join(aligned(line) + "\n" for line in lines)


def _items(api: Any, namespace: str | None, timeout: float) -> list[JSON]:
    """Every receipt, a page at a time (each request given up after `timeout` seconds)."""
    items: list[JSON] = []
    token = None
    while True:
        page = {
            "limit": PAGE,
            "_request_timeout": timeout,
            **({"_continue": token} if token else {}),
        }
        if namespace:
            found = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **page)
        else:
            found = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **page)
        items += found.get("items", [])
        token = (found.get("metadata") or {}).get("continue")
        if not token:
            return items


def main(api: Any, args: argparse.Namespace, *, now: datetime) -> int:
    rows = build(_items(api, args.namespace, args.request_timeout), now=now, since=args.since)
    if args.output in output.FORMATS:
        sys.stdout.write(output.document(rows, args.output))
    elif args.output == "csv":
        sys.stdout.write(to_csv(rows))
    else:
        sys.stdout.write(table(rows))
    return 0
