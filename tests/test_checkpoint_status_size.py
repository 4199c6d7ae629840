"""A CheckpointPolicy's status stays storable however many locations it governs: the
worst case the caps allow, built and measured as the API server would store it."""

import json
from datetime import UTC, datetime, timedelta

from trainwarden.api.v1alpha1.checkpoint_status import (
    MAX_COMPLETIONS,
    MAX_LOCATIONS,
    CheckpointPolicyStatus,
    PrunedLocation,
    TrainerResult,
)
from trainwarden.api.v1alpha1.types import Condition
from trainwarden.checkpoints.reconcile import STATUS_BUDGET, fitted

T = datetime(2026, 12, 1, tzinfo=UTC)
ETCD_LIMIT = 1536 * 1024
"""etcd's default --max-request-bytes: an object larger than this cannot be stored."""


def entry(i: int, *, path: int, name: int) -> PrunedLocation:
    """A location whose last run deleted 100 checkpoints of `name` characters."""
    return PrunedLocation(
        source="PVC",
        namespace=f"{i:03d}-" + "n" * 59,
        pvc=f"{i:03d}-" + "p" * (min(path, 253) - 4),
        path="/" + "d" * (path - 1),
        job_state="Running",
        last_run=T,
        last_job="trainwarden-prune-" + "j" * 45,
        pruner_uid="0" * 36,
        scanned=10**6,
        kept=10**6,
        deleted=100,
        deleted_names=[f"{k:03d}" + "c" * (name - 3) for k in range(100)],
        bytes_freed=2**62,
        bytes_retained=2**62,
        message="m" * 1000,
        failed=True,
        failed_runs=12,
        completions=[T - timedelta(minutes=k) for k in range(MAX_COMPLETIONS)],
        completions_as_of=T,
        result=TrainerResult(  # a metric and a checkpoint named as long as the others
            metric="m" * min(name, 128),
            final=-1.2345e-300,
            best=1.2345e300,
            step=2**62,
            source="s" * min(name, 128),
        ),
    )


def stored(entries: list[PrunedLocation]) -> int:
    conditions = [
        Condition(
            type=t, status="True", reason="R" * 64, message="x" * 1024, last_transition_time=T
        )
        for t in ("Ready", "Pruning", "LastRunSucceeded")
    ]
    status = CheckpointPolicyStatus(conditions=conditions, last_run=T, locations=entries)
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return len(json.dumps(dumped, separators=(",", ":")))  # as the API server stores it


def test_the_widest_status_the_caps_allow_can_be_stored() -> None:
    """Every location at the API's longest names and paths: over 12 MiB as the runs left it,
    under etcd's limit once the deleted names and messages are cut; nothing else is."""
    widest = [entry(i, path=1024, name=255) for i in range(MAX_LOCATIONS)]
    assert stored(widest) > 8 * ETCD_LIMIT
    kept = fitted(widest)
    assert stored(kept) < ETCD_LIMIT - 64 * 1024  # room for spec and metadata
    for before, after in zip(widest, kept, strict=True):
        assert after.model_dump(exclude={"deleted_names", "message"}) == before.model_dump(
            exclude={"deleted_names", "message"}
        )


def test_a_large_realistic_policy_keeps_some_deleted_names_within_the_budget() -> None:
    """500 PVCs with 40-character paths whose last runs each deleted 100 checkpoints."""
    many = [entry(i, path=40, name=30) for i in range(MAX_LOCATIONS)]
    kept = fitted(many)
    assert stored(kept) <= STATUS_BUDGET + 8 * 1024  # the conditions around the locations
    assert all(len(e.deleted_names) == 10 for e in kept)
    assert all(e.deleted == 100 for e in kept), "the count stays whole"


def test_a_status_within_the_budget_is_left_as_it_is() -> None:
    few = [entry(i, path=40, name=30) for i in range(20)]
    assert fitted(few) == few
