"""How a pruning run reads to a person (`table`) and to a script (`document`): every
checkpoint, oldest first, with its step, completeness, metrics, the rule that decided it
and the verdict; every note, skip and failure (the termination message's summary keeps
only what fits 4 KiB; this keeps everything)."""

import json
from collections.abc import Iterator
from typing import Any, TextIO

import yaml

from trainwarden.core.retention import Decision
from trainwarden.storage.pruning import Report, human_size


def verdict(d: Decision, gone: set[str], dry_run: bool) -> str:
    """KEEP, WOULD DELETE (DryRun), DELETED, or SKIPPED (planned, called off)."""
    if d.keep:
        return "KEEP"
    if d.checkpoint.name in gone:
        return "WOULD DELETE" if dry_run else "DELETED"
    return "SKIPPED"


def _row(d: Decision, gone: set[str], dry_run: bool) -> dict[str, Any]:
    c = d.checkpoint
    return {
        "name": c.name,
        "step": c.step,
        "complete": c.complete,
        "written": c.created.isoformat(),
        "size": c.size,
        "metrics": dict(c.metrics),
        "pinned": c.pinned,
        "resumePoint": c.resume_point,
        "trainerBest": c.trainer_best,
        "rule": d.rule,
        "verdict": verdict(d, gone, dry_run),
        "reason": d.reason,
    }


def write_document(report: Report, out: TextIO, output: str = "json") -> None:
    """The whole plan as JSON or YAML (`trainwarden prune -o json|yaml`), one checkpoint
    at a time, written as it goes: 100,000 checkpoints cost no second copy of the plan in
    memory."""
    head = {
        **report.summary(),
        "deleted": list(report.deleted),
        "deletedCount": len(report.deleted),
        "notes": list(report.notes),
        "skipped": list(report.skipped),
        "failures": list(report.failures),
    }
    gone = set(report.deleted)
    rows = (_row(d, gone, report.dry_run) for d in report.decisions)
    if output == "yaml":
        _write_yaml(head, rows, out)
        return
    out.write("{\n")
    for key, value in head.items():
        out.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
    out.write('  "checkpoints": [')
    for i, row in enumerate(rows):
        out.write(",\n    " if i else "\n    ")
        out.write(json.dumps(row))
    out.write("\n  ]\n}\n")


def _write_yaml(head: dict[str, Any], rows: Iterator[dict[str, Any]], out: TextIO) -> None:
    """Block YAML, a key or a checkpoint per dump (libyaml's emitter where installed)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

    def dump(value: object) -> str:
        return yaml.dump(value, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100)

    for key, value in head.items():
        out.write(dump({key: value}))
    first = next(rows, None)
    if first is None:
        out.write("checkpoints: []\n")
        return
    out.write("checkpoints:\n")
    out.write(dump([first]))
    for row in rows:
        out.write(dump([row]))


def table(report: Report) -> str:
    """The plan as a person reads it: every checkpoint, oldest first, and why."""
    gone = set(report.deleted)
    rows = [("DECISION", "RULE", "CHECKPOINT", "STEP", "SIZE", "WHY")]
    for d in report.decisions:
        c = d.checkpoint
        decision = verdict(d, gone, report.dry_run)
        step = "" if c.step is None else str(c.step)
        rows.append((decision, d.rule, c.name, step, human_size(c.size), d.reason))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)), row[5]])
        for row in rows
    ]
    what = "would free" if report.dry_run else "freed"
    lines.append(
        f"\n{report.root}: {report.scanned} checkpoints, {report.kept} kept, "
        f"{len(report.deleted)} {'to delete' if report.dry_run else 'deleted'}; "
        f"{what} {human_size(report.bytes_freed)}, {human_size(report.bytes_retained)} retained"
    )
    lines += [f"note: {n}" for n in report.notes]
    lines += [f"skipped: {s}" for s in report.skipped]
    lines += [f"failed: {f}" for f in report.failures]
    if report.error is not None:
        lines.append(f"the run failed: {report.error}")
    return "\n".join(lines) + "\n"
