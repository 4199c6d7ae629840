"""`trainwarden report --runs`: the run ledger, most expensive run first.

Read from the RunReceipts alone (the operator did the accounting when each run ended), so
it needs only read access to that kind: cluster-wide, or one namespace's with namespace
RBAC (`-n`). Cost first, then accelerator-hours: runs without rates still rank by size.

`--where FIELD=VALUE` keeps the runs whose FIELD is VALUE, `--group-by FIELD` sums the
runs by FIELD: one of FIELDS, `param.<key>` (a declared parameter, core/ledger.py) or
`label.<key>` (an attribution label). A run without the field is in the group "".
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
FIELDS = {
    "namespace": "namespace",
    "outcome": "outcome",
    "config-hash": "configHash",
    "data-version": "dataVersion",
    "code-version": "codeVersion",
}
"""What --where and --group-by name, and the row's key of each."""
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
    "storageGiBHours",
    "storageUnknownClaims",
    "budgets",
    "partial",
    "receipt",
    "configHash",
    "dataVersion",
    "codeVersion",
    "metric",
    "final",
    "best",
)
GROUP_COLUMNS = (
    "group",
    "runs",
    "succeeded",
    "failed",
    "deleted",
    "cost",
    "held",
    "used",
    "storageGiBHours",
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
        "storageGiBHours": spec.storage.gib_hours if spec.storage else None,
        "storageUnknownClaims": spec.storage.unknown_claims if spec.storage else 0,
        "restarts": spec.pods.restarts,
        "suspensions": spec.interruptions.suspensions,
        "budgets": [c.budget for c in spec.charges],
        "labels": dict(spec.labels),
        "partial": spec.partial,
        "receipt": str((obj.get("metadata") or {}).get("name", "")),
        **_experiment(spec),
    }


def _experiment(spec: RunReceiptSpec) -> JSON:
    e = spec.experiment
    return {
        "configHash": e.config_hash if e else None,
        "dataVersion": e.data_version if e else None,
        "codeVersion": e.code_version if e else None,
        "params": dict(e.params) if e else {},
        "metric": spec.result.metric if spec.result else None,
        "final": spec.result.final if spec.result else None,
        "best": spec.result.best if spec.result else None,
    }


def field_of(name: str) -> str:
    """A --group-by field, checked (argparse says what is known otherwise)."""
    prefix, _, key = name.partition(".")
    if name in FIELDS or (prefix in ("param", "label") and key):
        return name
    known = ", ".join([*FIELDS, "param.<key>", "label.<key>"])
    raise argparse.ArgumentTypeError(f"unknown field {name!r}: one of {known}")


def condition(text: str) -> tuple[str, str]:
    """A --where FIELD=VALUE."""
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIELD=VALUE")
    return field_of(name.strip()), value.strip()


def value_of(row: Mapping[str, Any], name: str) -> str:
    """The row's value of a field ("" when the run did not declare it)."""
    if name.startswith("param."):
        return str(row["params"].get(name.removeprefix("param."), ""))
    if name.startswith("label."):
        return str(row["labels"].get(name.removeprefix("label."), ""))
    return str(row.get(FIELDS[name]) or "")


def where(rows: Iterable[JSON], conditions: Iterable[tuple[str, str]]) -> list[JSON]:
    """The rows matching every FIELD=VALUE."""
    wanted = list(conditions)
    return [r for r in rows if all(value_of(r, f) == v for f, v in wanted)]


def grouped(rows: Iterable[JSON], by: str) -> list[JSON]:
    """The rows summed by one field's value, most expensive group first."""
    groups: dict[str, JSON] = {}
    for r in rows:
        key = value_of(r, by)
        g = groups.setdefault(key, {"group": key, "by": by, "runs": 0, "cost": 0.0} | _zero())
        g["runs"] += 1
        g[r["outcome"].lower()] += 1
        for k in ("cost", "held", "used"):
            g[k] += r[k]
        g["storageGiBHours"] += r["storageGiBHours"] or 0.0
        g["receipts"].append(r["receipt"])
    for g in groups.values():
        g["receipts"] = sorted(g["receipts"])[:20]
    return sorted(groups.values(), key=lambda g: (-g["cost"], -g["held"], g["group"]))


def _zero() -> JSON:
    zero = {"succeeded": 0, "failed": 0, "deleted": 0, "held": 0.0, "used": 0.0}
    return zero | {"storageGiBHours": 0.0, "receipts": []}


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
    head.append("STORAGE GIB-H")
    declared = any(r["configHash"] or r["dataVersion"] for r in rows)
    head += ["DATA", "CONFIG"] if declared else []
    lines = [[*head, "LABELS"]]
    for r in rows:
        cells = [r["namespace"], r["workload"], r["outcome"], r["wall"], f"{r['cost']:.2f}"]
        cells += [f"{r[k]:.2f}" for k in ("held", "used", "idle", "unknown")]
        cells.append(_storage_cell(r))
        cells += [r["dataVersion"] or "", r["configHash"] or ""] if declared else []
        cells.append(" ".join(f"{k}={v}" for k, v in sorted(r["labels"].items())))
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]

    def aligned(line: list[str]) -> str:
        cells = [c.ljust(w) for c, w in zip(line, widths, strict=False)]
        return "  ".join([*cells, line[-1]]).rstrip()

    return "".join(aligned(line) + "\n" for line in lines)


def _storage_cell(r: Mapping[str, Any]) -> str:
    """A run's storage: "-" when it mounted no claim, "?" marks claims not known."""
    hours, unknown = r["storageGiBHours"], r["storageUnknownClaims"]
    text = "-" if hours is None and not unknown else f"{hours or 0.0:.2f}"
    return text + ("?" if unknown else "")


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


def group_table(groups: list[JSON]) -> str:
    if not groups:
        return "no run receipts\n"
    head = [groups[0]["by"].upper(), "RUNS", "SUCCEEDED", "FAILED", "DELETED", "COST", "HELD"]
    head += ["USED"]
    lines = [[*head, "STORAGE GIB-H"]]
    for g in groups:
        cells = [g["group"] or "(none)", *(str(g[k]) for k in ("runs", "succeeded", "failed"))]
        cells += [str(g["deleted"]), f"{g['cost']:.2f}", f"{g['held']:.2f}", f"{g['used']:.2f}"]
        lines.append([*cells, f"{g['storageGiBHours']:.2f}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "".join(
        "  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]) + "\n"
        for line in lines
    )


def _groups_csv(groups: list[JSON]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GROUP_COLUMNS)
    for g in groups:
        writer.writerow([_cell(g[c]) for c in GROUP_COLUMNS])
    return out.getvalue()


def main(api: Any, args: argparse.Namespace, *, now: datetime) -> int:
    rows = build(_items(api, args.namespace, args.request_timeout), now=now, since=args.since)
    rows = where(rows, args.where or ())
    if args.group_by:
        groups = grouped(rows, args.group_by)
        if args.output in output.FORMATS:
            sys.stdout.write(output.document(groups, args.output))
        else:
            sys.stdout.write(_groups_csv(groups) if args.output == "csv" else group_table(groups))
        return 0
    if args.output in output.FORMATS:
        sys.stdout.write(output.document(rows, args.output))
    elif args.output == "csv":
        sys.stdout.write(to_csv(rows))
    else:
        sys.stdout.write(table(rows))
    return 0
