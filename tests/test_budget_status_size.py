"""A budget's status stays under 64 KiB however many pods pass through: the worst case the
caps allow, built and measured as the API server would store it."""

import json
from datetime import UTC, datetime, timedelta

from trainwarden.api.v1alpha1.budget_status import (
    MAX_PENDING,
    MAX_RELEASED,
    MAX_STORAGE_KEYS,
    MAX_SUSPENDED,
    AdmissionStatus,
    PeriodSummary,
    ReleasedWorkload,
    StorageAdmission,
    StorageBucket,
    StorageStatus,
    SuspendedWorkload,
    TrainingBudgetStatus,
)
from trainwarden.api.v1alpha1.types import Condition, ObjectReference
from trainwarden.budget.ledger import BUCKETS, CAP, Bucket, Ledger
from trainwarden.budget.status import breakdown_model, ledger_model, usage_model
from trainwarden.core.accounting import Usage
from trainwarden.core.tally import Share, Tally

T = datetime(2026, 12, 1, tzinfo=UTC)
STORAGE_CONDITIONS = ("StorageWarning", "StorageExhausted")


def widest_tally(labels: int, name: int, resources: int) -> Tally:
    """Every breakdown full, every key `name` characters long."""
    keys = [f"{i:02d}-" + "x" * (name - 3) for i in range(CAP)]
    shares = {k: Share(123456.123456, 987654.654321) for k in keys}
    used = {f"example.com/accelerator-{i}": 1234.567891 for i in range(resources)}
    return Tally(
        Usage(used, 1e6, 1e7, 1e8),
        shares,
        {f"label-{i}.example.com/" + "k" * 40: dict(shares) for i in range(labels)},
        {k: Share(1.0, 1.0) for k in ("Running", "Succeeded", "Failed")},
    )


def widest_storage(name: int) -> StorageStatus:
    """Every storage class shown, `name` characters each; a Rolling window's every bucket."""
    classes = [f"{i:02d}-" + "c" * (name - 3) for i in range(MAX_STORAGE_KEYS)]
    return StorageStatus(
        observed_at=T,
        used_gib_hours=123456789.123456,
        requested_gib=123456789.123456,
        claims=123456,
        cost=123456789.123456,
        by_class=dict.fromkeys(classes, 123456789.123456),
        buckets=[
            StorageBucket(start=T, used_gib_hours=123456789.123456) for _ in range(BUCKETS + 1)
        ],
    )


def worst_case(name: int, resources: int, *, storage: bool = False) -> int:
    """The JSON size of a status with every cap full, every name `name` long, and usage of
    `resources` accelerator resources; `storage`: a budget that accounts storage too."""
    tally = widest_tally(labels=8, name=name, resources=resources)
    usage = usage_model(tally.total)
    ledger = Ledger(
        T.timestamp(),
        closed=tally,
        buckets=tuple(Bucket(T.timestamp() + i, tally.total) for i in range(BUCKETS + 1)),
    )
    ref = ObjectReference(
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        namespace="n" * min(name, 63),
        name="j" * name,
        uid="u" * 36,
    )
    status = TrainingBudgetStatus(
        observed_generation=12345,
        conditions=[
            Condition(
                type=t,
                status="True",
                reason="LimitReached",
                message="m" * 200,
                last_transition_time=T,
                observed_generation=1,
            )
            for t in ("Ready", "Warning", "Exhausted", *STORAGE_CONDITIONS[: 2 * storage])
        ],
        period_start=T,
        period_end=T + timedelta(days=31),
        used=usage,
        remaining={f"acceleratorHours[example.com/accelerator-{i}]": 1.5 for i in range(resources)},
        percent=1234.567,
        most_constrained="acceleratorHours[example.com/accelerator-0]",
        burn_rate_per_hour=usage,
        projected_exhaustion=T,
        breakdown=breakdown_model(tally),
        suspended=[SuspendedWorkload(ref=ref, suspended_at=T, generation=1, period_start=T)]
        * MAX_SUSPENDED,
        admission=AdmissionStatus(
            holding=True,
            hold_until=T,
            held=123456,
            released=[ReleasedWorkload(ref=ref, estimate=usage, released_at=T)] * MAX_RELEASED,
            observed_generation=12345,
        ),
        pending_actions=["p" * 256] * MAX_PENDING,
        history=[PeriodSummary(start=T, end=T, usage=usage, percent=100.0)] * 24,
        ledger=ledger_model(ledger, tally.total),
        storage=widest_storage(name) if storage else None,
        storage_admission=StorageAdmission(
            refusing=True, refuse_until=T, message="m" * 256, observed_generation=12345
        )
        if storage
        else None,
        last_evaluated=T,
    )
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return len(json.dumps(dumped, separators=(",", ":")))  # as the API server stores it


def test_a_status_with_every_cap_full_stays_under_64_kib() -> None:
    """8 attribution labels, names of 32 characters (namespaces, label values, Jobs), two
    accelerator resources, every list at its cap — whatever the number of pods."""
    size = worst_case(name=32, resources=2)
    print(f"\nTrainingBudget status, every cap full, 32-character names: {size} bytes")
    assert size < 64 * 1024


def test_storage_adds_at_most_a_few_kib_with_every_cap_full() -> None:
    """A budget that accounts storage (docs/storage.md): 16 classes and "(other)", a Rolling
    window's 33 buckets, two more conditions, the refusal it publishes."""
    size = worst_case(name=32, resources=2, storage=True)
    print(f"\nTrainingBudget status with storage, every cap full, 32-character names: {size}")
    assert size - worst_case(name=32, resources=2) < 5 * 1024
    assert size < 72 * 1024


def test_even_the_longest_names_stay_far_below_the_etcd_request_limit() -> None:
    """Every name at Kubernetes' maximum (63 for labels, 253 for objects), 16 resources,
    storage accounted."""
    size = worst_case(name=253, resources=16, storage=True)
    print(f"\nTrainingBudget status, every cap full, maximal names: {size} bytes")
    assert size < 256 * 1024
