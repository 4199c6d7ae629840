"""Typed links between slices: what one policy slice publishes for another to read.

No slice imports another (import-linter's independence contract). Where one needs what
another knows, it reads a link of this registry: a reader protocol with one method,
returning kernel types. The publishing slice implements the protocol; runtime.py `wire`
sets it on the one `Links` every controller was given. A link nobody published (a test
with one controller, a slice not running) reads as nothing.

| link | published by | read by |
|---|---|---|
| `budget_views` | budget/controller.py (each budget as its status says) | kueue/controller.py |
| `pruner_jobs` | checkpoints/controller.py (the pruner Jobs' uids) | budget/controller.py |
| `checkpoint_scans` | checkpoints/controller.py (each location's status) | receipts/, volumes/ |
| `checkpoint_specs` | checkpoints/controller.py (each valid policy's spec) | volumes/ |
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
from trainwarden.core.admission import BudgetView


@dataclass(frozen=True, slots=True)
class CheckpointScan:
    """One location a CheckpointPolicy of this instance scans, as its status last said."""

    policy: str
    spec: CheckpointPolicySpec | None
    """The policy's spec; None when it is invalid (the policy governs no one)."""
    location: PrunedLocation


class BudgetViews(Protocol):
    def budget_views(self) -> Sequence[BudgetView]:
        """Every budget of this instance as its status says."""
        ...


class PrunerJobs(Protocol):
    def pruner_uids(self) -> frozenset[str]:
        """The uids of the operator's own pruner Jobs, which no budget suspends."""
        ...


class CheckpointScans(Protocol):
    def checkpoint_scans(self) -> Sequence[CheckpointScan]:
        """Every location the CheckpointPolicies of this instance scan, by policy name."""
        ...


class CheckpointSpecs(Protocol):
    def checkpoint_specs(self) -> Sequence[tuple[str, CheckpointPolicySpec]]:
        """Every valid CheckpointPolicy of this instance by name, scanned yet or not."""
        ...


class _Unpublished:
    """What a link reads before (or without) its slice publishing it: nothing."""

    def budget_views(self) -> Sequence[BudgetView]:
        return ()

    def pruner_uids(self) -> frozenset[str]:
        return frozenset()

    def checkpoint_scans(self) -> Sequence[CheckpointScan]:
        return ()

    def checkpoint_specs(self) -> Sequence[tuple[str, CheckpointPolicySpec]]:
        return ()


UNPUBLISHED = _Unpublished()


@dataclass
class Links:
    """The registry: one reader per link."""

    budget_views: BudgetViews = UNPUBLISHED
    pruner_jobs: PrunerJobs = UNPUBLISHED
    checkpoint_scans: CheckpointScans = UNPUBLISHED
    checkpoint_specs: CheckpointSpecs = UNPUBLISHED
