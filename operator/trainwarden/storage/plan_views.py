"""How a pruning run reads to a person (`table`) and to a script (`document`): every
checkpoint, oldest first, with its step, completeness, metrics, the rule that decided it
and the verdict; every note, skip and failure (the termination message's summary keeps
only what fits 4 KiB; this keeps everything)."""

from typing import Any

from trainwarden.core.retention import Decision
from trainwarden.storage.pruning import Report, human_size


def verdict(d: Decision, gone: set[str], dry_run: bool) -> str:
    """KEEP, WOULD DELETE (DryRun), DELETED, or SKIPPED (planned, called off)."""
    if d.keep:
        return "KEEP"
    if d.checkpoint.name in gone:
        return "WOULD DELETE" if dry_run else "DELETED"
    return "SKIPPED"


def document(report: Report) -> dict[str, Any]:
    """The whole plan as JSON-able data (`trainwarden prune -o json`)."""
    gone = set(report.deleted)
    checkpoints = []
    for d in report.decisions:
        c = d.checkpoint
        checkpoints.append(
            {
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
                "verdict": verdict(d, gone, report.dry_run),
                "reason": d.reason,
            }
        )
    return {
        **report.summary(),
        "deleted": list(report.deleted),
        "deletedCount": len(report.deleted),
        "notes": list(report.notes),
        "skipped": list(report.skipped),
        "failures": list(report.failures),
        "checkpoints": checkpoints,
    }


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
