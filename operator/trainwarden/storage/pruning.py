"""One pruning run over a checkpoint directory: scan, plan, and delete what the plan says,
each deletion re-checked against the disk right before it happens.

The same code runs in `trainwarden prune` on an engineer's disk and in the pruner Job on a
PVC, so what someone tries locally is what the operator will do.
"""

import json
import os
import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec, KeepBest
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core import retention
from trainwarden.core.quantity import parse_quantity
from trainwarden.storage import layouts

Remover = Callable[[retention.Checkpoint, retention.Rules, datetime], str | None]
"""Deletes one planned checkpoint after re-checking it; returns why not, or None."""

REPORT_LIMIT = 3500
"""Bytes of the JSON report (a container's termination message holds at most 4096)."""


def rules_for(spec: CheckpointPolicySpec, *, finished: bool, running: bool) -> retention.Rules:
    """The policy's rules for a directory whose job runs, finished, or is unknown.

    Once the job finished (and the policy has afterCompletion) the stricter rule replaces
    the history rules; while it runs its newest checkpoints are protected outright."""
    r = spec.retention
    size = int(parse_quantity(r.max_total_size)) if r.max_total_size else None
    if finished and spec.after_completion is not None:
        after = spec.after_completion
        return retention.Rules(
            keep_last=after.keep_last,
            keep_best=_best(after.keep_best),
            max_total_size=size,
            min_age=r.min_age,
        )
    return retention.Rules(
        keep_last=r.keep_last,
        keep_every_steps=r.keep_every.steps if r.keep_every else None,
        keep_every_interval=r.keep_every.interval if r.keep_every else None,
        keep_best=_best(r.keep_best),
        max_age=r.max_age,
        max_total_size=size,
        min_age=r.min_age,
        protect_keep_last=running,
    )


def _best(best: KeepBest | None) -> retention.Best | None:
    return retention.Best(best.metric, best.order, best.count) if best else None


@dataclass
class Report:
    """What a run found and did; `deleted` names what it deleted (would delete, in DryRun)."""

    root: str
    dry_run: bool
    scanned: int = 0
    kept: int = 0
    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    bytes_retained: int = 0
    skipped: list[str] = field(default_factory=list)
    """Deletions called off at the last moment, with why (a writer came back, say)."""
    notes: list[str] = field(default_factory=list)
    decisions: list[retention.Decision] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A compact JSON-able summary that fits a termination message: the name lists are
        cut to fit, and `deletedCount` still tells the whole number."""
        out: dict[str, Any] = {
            "root": self.root,
            "dryRun": self.dry_run,
            "scanned": self.scanned,
            "kept": self.kept,
            "deletedCount": len(self.deleted),
            "bytesFreed": self.bytes_freed,
            "bytesRetained": self.bytes_retained,
            "notes": self.notes[:5],
            "skipped": self.skipped[:5],
            "deleted": [],
        }
        budget = REPORT_LIMIT - len(_dumps(out))
        for name in self.deleted:
            budget -= len(name) + 4
            if budget < 0:
                break
            out["deleted"].append(name)
        return out


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def prune(
    root: Path,
    spec: CheckpointPolicySpec,
    *,
    dry_run: bool,
    finished: bool = False,
    running: bool = False,
    pins: Collection[str] = (),
    resume_from: Collection[str] = (),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    remover: Remover | None = None,
) -> Report:
    """Scan `root`, plan by the policy and delete (unless `dry_run`) what the plan says;
    `remover` carries out one deletion (by default `remove` on the directory itself)."""
    found = [
        replace(
            c,
            pinned=c.pinned or c.name in pins,
            resume_point=c.resume_point or c.name in resume_from,
        )
        for c in layouts.scan(root, spec.layout)
    ]
    rules = rules_for(spec, finished=finished, running=running)
    plan = retention.plan(found, rules, now=clock(), max_deletions=spec.max_deletions_per_run)
    report = Report(str(root), dry_run, scanned=len(found), notes=list(plan.notes))
    report.decisions = list(plan.decisions)
    freed = 0
    for decision in plan.delete:
        c = decision.checkpoint
        if dry_run:
            why_not = None
        elif remover is not None:
            why_not = remover(c, rules, clock())
        else:
            why_not = remove(root, c, spec, rules, clock())
        if why_not is not None:
            report.skipped.append(f"{c.name}: {why_not}")
            continue
        report.deleted.append(c.name)
        freed += c.size
    report.bytes_freed = freed
    report.kept = report.scanned - len(report.deleted)
    report.bytes_retained = sum(c.size for c in found) - freed
    return report


def remove(
    root: Path,
    planned: retention.Checkpoint,
    spec: CheckpointPolicySpec,
    rules: retention.Rules,
    now: datetime,
) -> str | None:
    """Delete one planned checkpoint unless the disk says otherwise; returns why not.

    A trainer may have written to it since the scan (a resumed run re-saving a step): it is
    deleted only if it is exactly what was planned, still complete and old enough. Nothing
    outside `root` is ever touched: the entry must be a real child of it, not a symlink.
    """
    current = layouts.entry(root, planned.name, spec.layout)
    if current is None:
        return "gone before it was deleted"
    if not current.complete:
        return "incomplete now (being written again)"
    if (current.created, current.size) != (planned.created, planned.size):
        return "changed since the scan"
    if current.pinned or current.resume_point:
        return "pinned or named by a resume pointer since the scan"
    if now - current.created < rules.min_age:
        return "younger than minAge"
    path = root / planned.name
    if path.is_symlink() or os.path.realpath(path.parent) != os.path.realpath(root):
        return "not a plain entry of the checkpoint directory"
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    return None


def load_spec(text: str) -> CheckpointPolicySpec:
    """A CheckpointPolicy manifest (as kept in a GitOps repo) or just its spec, YAML or
    JSON; raises ValueError with every problem, as the API server would list them."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"not YAML: {error}") from None
    if not isinstance(doc, dict):
        raise ValueError("expected a CheckpointPolicy or its spec, as a mapping")
    if doc.get("kind") not in (None, "CheckpointPolicy"):
        raise ValueError(f"expected a CheckpointPolicy, got a {doc.get('kind')}")
    parsed = parse_spec(CheckpointPolicySpec, doc.get("spec", doc))
    if isinstance(parsed, list):
        raise ValueError("; ".join(parsed))
    return parsed


def table(report: Report) -> str:
    """The plan as a person reads it: every checkpoint, oldest first, and why."""
    verb = "WOULD DELETE" if report.dry_run else "DELETED"
    gone = set(report.deleted)
    rows = [("DECISION", "RULE", "CHECKPOINT", "STEP", "SIZE", "WHY")]
    for d in report.decisions:
        c = d.checkpoint
        decision = verb if c.name in gone else ("KEEP" if d.keep else "SKIPPED")
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
    return "\n".join(lines) + "\n"


def human_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
