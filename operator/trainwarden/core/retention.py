"""Which checkpoints to keep and which to delete, each with the rule that decided it.

Protections come first and nothing overrides them: a checkpoint that is incomplete, younger
than `min_age`, pinned, named by a resume pointer, named best by the trainer itself (its
own state: Hugging Face's best_model_checkpoint, Lightning's best_model_path), or the
newest complete one is kept
("newest" twice over when step order and time order disagree, as when a run restarted
from scratch writes checkpoint-100 beside a stale checkpoint-3000: the highest step and
the most recently written are both protected, and the plan says so). Then
a checkpoint is kept if any keep rule selects it (keepLast, keepEvery, keepBest; the last
two only within `max_age`); when keepBest cannot rank (no checkpoint records its metric)
it keeps every checkpoint it would have judged, since any of them may be the best
(`KeepBestUnranked`, which `max_total_size` does not drop either). `max_total_size` then
drops rule-kept checkpoints, oldest first, until the total fits. Everything else is
deleted, oldest first, at most `max_deletions`.

Pure: the same inputs give the same plan, so a DryRun shows exactly what Enforce would do,
and planning the kept set again deletes nothing more.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from trainwarden.core.durations import human

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNRANKED = "keepBest cannot rank"
"""How the plan's note begins when keepBest holds what it cannot rank."""

Rule = Literal[
    "Incomplete",
    "TooYoung",
    "Pinned",
    "ResumePoint",
    "TrainerBest",
    "Held",
    "Newest",
    "NewestWritten",
    "RunningJob",
    "KeepBestUnranked",
    "KeepLast",
    "KeepEvery",
    "KeepBest",
    "DeletionCap",
    "MaxAge",
    "MaxTotalSize",
    "NotSelected",
]
PROTECTIONS: tuple[Rule, ...] = (
    "Incomplete",
    "TooYoung",
    "Pinned",
    "ResumePoint",
    "TrainerBest",
    "Held",
    "Newest",
    "NewestWritten",
    "RunningJob",
)
_NOT_DROPPED: tuple[Rule, ...] = (*PROTECTIONS, "KeepBestUnranked")
"""What maxTotalSize never drops."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint wherever it lives: a directory or file, a snapshot, an object prefix."""

    name: str
    """Identity within its location (unique there)."""
    created: datetime
    """When it was last written: for a directory, its newest file."""
    size: int
    step: int | None = None
    complete: bool = True
    """False while it may still be being written (no completeness marker yet)."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    pinned: bool = False
    resume_point: bool = False
    """A resume pointer (DeepSpeed's `latest`, Lightning's `last.ckpt`, the job's
    annotation) names it: a restarted job would load it."""
    resume_by: str | None = None
    """Which pointer names it, when the storage knows ("DeepSpeed's latest names it")."""
    trainer_best: str | None = None
    """Why the trainer itself calls it best, from its own state ("Hugging Face's
    best_model_checkpoint"): deleting it breaks `load_best_model_at_end`,
    `ckpt_path="best"`."""
    held: str | None = None
    """Why it must be kept whatever the rules, when the storage knows a reason (a snapshot
    whose class destroys the physical snapshot on deletion)."""


@dataclass(frozen=True)
class Best:
    metric: str
    order: Literal["Min", "Max"] = "Min"
    count: int = 1


@dataclass(frozen=True)
class Rules:
    keep_last: int = 3
    keep_every_steps: int | None = None
    keep_every_interval: timedelta | None = None
    keep_best: Best | None = None
    max_age: timedelta | None = None
    """keepEvery and keepBest keep nothing older than this (keepLast still does)."""
    max_total_size: int | None = None
    min_age: timedelta = timedelta(minutes=10)
    protect_keep_last: bool = False
    """While the owning job runs its newest checkpoints are protected, not just kept: the
    trainer's own checkpoint manager may be reading or rotating them."""


@dataclass(frozen=True)
class Decision:
    checkpoint: Checkpoint
    keep: bool
    rule: Rule
    reason: str


@dataclass(frozen=True)
class Plan:
    decisions: tuple[Decision, ...]
    notes: tuple[str, ...] = ()
    """What a person should know: a rule that cannot be met, a metric nobody records."""

    @property
    def delete(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.keep)

    @property
    def keep(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.keep)

    @property
    def bytes_freed(self) -> int:
        return sum(d.checkpoint.size for d in self.delete)

    @property
    def bytes_retained(self) -> int:
        return sum(d.checkpoint.size for d in self.keep)


def order_key(c: Checkpoint) -> tuple[int, datetime, str]:
    """Oldest first: by step when it is known, then by time (a layout without steps)."""
    return (c.step if c.step is not None else -1, c.created, c.name)


def written_key(c: Checkpoint) -> tuple[datetime, int, datetime, str]:
    """Oldest first by when it was written, whatever its step."""
    return (c.created, *order_key(c))


def _newest_first(checkpoints: Iterable[Checkpoint]) -> list[Checkpoint]:
    return sorted(checkpoints, key=order_key, reverse=True)


def protection(
    c: Checkpoint,
    *,
    newest: Checkpoint | None,
    now: datetime,
    min_age: timedelta,
    latest: Checkpoint | None = None,
) -> tuple[Rule, str] | None:
    """The protection that keeps `c` whatever the rules: `newest` has the highest step,
    `latest` was written last (they differ when a run restarted beside an older one)."""
    if not c.complete:
        return "Incomplete", "incomplete: it may still be being written"
    if now - c.created < min_age:
        return "TooYoung", f"younger than minAge ({human(min_age)})"
    if c.pinned:
        return "Pinned", "pinned by a user"
    if c.resume_point:
        return "ResumePoint", c.resume_by or "a resume pointer names it"
    if c.trainer_best:
        return "TrainerBest", f"the trainer's own best: {c.trainer_best}"
    if c.held:
        return "Held", c.held
    if newest is not None and c.name == newest.name:
        return "Newest", "the newest complete checkpoint"
    if latest is not None and c.name == latest.name:
        return "NewestWritten", "the most recently written complete checkpoint"
    return None


def _selected(
    complete: Sequence[Checkpoint], rules: Rules, now: datetime
) -> tuple[dict[str, tuple[Rule, str]], list[str]]:
    """What the keep rules select among complete checkpoints (newest first)."""
    chosen: dict[str, tuple[Rule, str]] = {}
    notes: list[str] = []
    for c in complete[: rules.keep_last]:
        chosen.setdefault(c.name, ("KeepLast", f"among the newest {rules.keep_last}"))

    def fresh(c: Checkpoint) -> bool:
        return rules.max_age is None or now - c.created <= rules.max_age

    if rules.keep_every_steps:
        every = rules.keep_every_steps
        for c in complete:
            if c.step is not None and c.step % every == 0 and fresh(c):
                chosen.setdefault(c.name, ("KeepEvery", f"step {c.step} is a multiple of {every}"))
    if rules.keep_every_interval:
        interval = rules.keep_every_interval
        first: dict[int, Checkpoint] = {}
        for c in sorted(complete, key=lambda c: (c.created, c.name)):
            first.setdefault((c.created - EPOCH) // interval, c)
        for c in first.values():
            if fresh(c):
                why = f"the oldest of its {human(interval)} interval"
                chosen.setdefault(c.name, ("KeepEvery", why))
    if rules.keep_best:
        best = rules.keep_best
        scored = [c for c in complete if best.metric in c.metrics]
        if complete and not scored:
            held = [c for c in complete if fresh(c)]
            notes.append(
                f"{UNRANKED}: no checkpoint records the metric {best.metric!r}; "
                f"the {len(held)} it would judge are kept until one does"
            )
            for c in held:
                why = f"{UNRANKED}: no checkpoint records {best.metric!r}"
                chosen[c.name] = ("KeepBestUnranked", why)  # a hold maxTotalSize keeps
        sign = 1 if best.order == "Min" else -1
        ranked = sorted(scored, key=lambda c: (sign * c.metrics[best.metric], *order_key(c)))
        for rank, c in enumerate(ranked[: best.count], start=1):
            if fresh(c):
                why = f"{best.metric}={c.metrics[best.metric]:g} ranks {rank} ({best.order})"
                chosen.setdefault(c.name, ("KeepBest", why))
    return chosen, notes


def _restarted(newest: Checkpoint, latest: Checkpoint) -> bool:
    """Whether the checkpoint written last has a lower step than the highest: a run
    restarted beside an older one. One without a step (Lightning's `last.ckpt` copy, a
    layout without steps) says nothing of a restart."""
    return latest.step is not None and newest.step is not None and latest.step < newest.step


def plan(
    checkpoints: Iterable[Checkpoint],
    rules: Rules,
    *,
    now: datetime,
    max_deletions: int | None = None,
) -> Plan:
    """Decide every checkpoint; decisions come oldest first."""
    everything = _newest_first(checkpoints)
    names = [c.name for c in everything]
    if len(set(names)) != len(names):
        raise ValueError("checkpoint names must be unique within a location")
    complete = [c for c in everything if c.complete]
    newest = complete[0] if complete else None
    by_time = sorted(complete, key=written_key, reverse=True)
    latest = by_time[0] if by_time else None
    chosen, notes = _selected(complete, rules, now)
    if newest is not None and latest is not None and _restarted(newest, latest):
        notes.insert(
            0,
            f"step order and time order disagree: {latest.name} was written last, "
            f"{newest.name} has the highest step (a run restarted beside an older one?); "
            "both are kept",
        )
    running: set[str] = set()
    if rules.protect_keep_last:  # a running job's newest, by step and by time
        running = {c.name for c in (*complete[: rules.keep_last], *by_time[: rules.keep_last])}

    expired = (
        f"older than maxAge ({human(rules.max_age)}) and no rule keeps it" if rules.max_age else ""
    )
    decided: dict[str, Decision] = {}
    for c in everything:
        guard = protection(c, newest=newest, latest=latest, now=now, min_age=rules.min_age)
        if guard is None and c.name in running:
            guard = ("RunningJob", f"among the newest {rules.keep_last} of a running job")
        if guard is not None:
            decided[c.name] = Decision(c, True, guard[0], guard[1])
        elif c.name in chosen:
            rule, why = chosen[c.name]
            decided[c.name] = Decision(c, True, rule, why)
        elif rules.max_age is not None and now - c.created > rules.max_age:
            decided[c.name] = Decision(c, False, "MaxAge", expired)
        else:
            decided[c.name] = Decision(c, False, "NotSelected", "no rule keeps it")

    if rules.max_total_size is not None:
        notes.extend(_fit(decided, everything, rules.max_total_size))

    oldest_first = [decided[c.name] for c in reversed(everything)]
    if max_deletions is not None:
        oldest_first = _capped(oldest_first, max_deletions, notes)
    return Plan(tuple(oldest_first), tuple(notes))


def _capped(oldest_first: list[Decision], max_deletions: int, notes: list[str]) -> list[Decision]:
    """At most `max_deletions` deletions a run: the newest over the cap are kept for a later
    run (noted)."""
    doomed = [d for d in oldest_first if not d.keep]
    if len(doomed) <= max_deletions:
        return oldest_first
    notes.append(
        f"{len(doomed) - max_deletions} deletion(s) over the cap of {max_deletions} "
        "per run are left for a later run"
    )
    spared = {d.checkpoint.name for d in doomed[max_deletions:]}
    return [
        Decision(d.checkpoint, True, "DeletionCap", f"over the cap of {max_deletions}")
        if d.checkpoint.name in spared
        else d
        for d in oldest_first
    ]


def _fit(decided: dict[str, Decision], everything: list[Checkpoint], limit: int) -> list[str]:
    """Drop rule-kept checkpoints, oldest first, until the kept total fits `limit`."""
    total = sum(d.checkpoint.size for d in decided.values() if d.keep)
    for c in reversed(everything):
        if total <= limit:
            return []
        d = decided[c.name]
        if d.keep and d.rule not in _NOT_DROPPED:
            why = f"kept by {d.rule}, but the kept total exceeds maxTotalSize ({limit} bytes)"
            decided[c.name] = Decision(c, False, "MaxTotalSize", why)
            total -= c.size
    if total <= limit:
        return []
    return [f"maxTotalSize cannot be met: {total} bytes are protected (limit {limit})"]
