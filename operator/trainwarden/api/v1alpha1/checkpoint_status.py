"""A CheckpointPolicy's status: every location it governs and its last pruning run, and
the bounds of what a status holds."""

from typing import Literal

from pydantic import Field

from trainwarden.api.v1alpha1.types import (
    LATEST,
    APIModel,
    Condition,
    Time,
)

MAX_LOCATIONS = 500
"""Locations a policy's status lists at most."""
MAX_COMPLETIONS = 32
"""Completion times a location's status keeps (the newest)."""
MAX_POSIX_SECONDS = int(LATEST.timestamp())
"""The latest time a pruner's report may name (POSIX seconds): the latest a status holds.
It was 2**40 (the year 36812), which no datetime holds: the operator's fromtimestamp of a
report's time raised ValueError past the year 9999."""


class TrainerResult(APIModel):
    """What the trainer's own state says the run achieved, read by a scan of the location:
    one metric's value at the newest complete checkpoint that records it, and its best
    (storage/results.py)."""

    metric: str = Field(max_length=128)
    """metric is the name read: keepBest's metric (as the trainer resolves it), else the
    trainer's own (Hugging Face: eval_loss if logged, else loss; Lightning: the monitored
    one)."""
    final: float = Field(allow_inf_nan=False)
    """final is its value at the newest complete checkpoint that records it."""
    best: float | None = Field(default=None, allow_inf_nan=False)
    """best is its value at the checkpoint the trainer calls its best (Hugging Face's
    best_model_checkpoint, Lightning's best_model_path), else the best by keepBest's order
    among those scanned; absent when neither is known."""
    step: int | None = Field(default=None, ge=0)
    """step of the checkpoint `final` was read from."""
    source: str = Field(max_length=128)
    """source names the layout and the checkpoint read ("HuggingFace checkpoint-500"; at
    most 128 characters, a longer name cut)."""


class PrunedLocation(APIModel):
    """One checkpoint directory the policy governs, and its last pruning run."""

    source: Literal["PVC", "VolumeSnapshots", "S3"] = "PVC"
    """source: a directory on the PVC, the PVC's VolumeSnapshots, or an S3 prefix."""
    namespace: str = ""
    """namespace of the PVC (empty for S3)."""
    pvc: str = ""
    """pvc holding the checkpoints, or whose snapshots they are (empty for S3)."""
    path: str = ""
    """path of the checkpoint directory inside the volume, or the s3://bucket/prefix/."""
    job_state: Literal["Running", "Finished", "Unknown"] = "Unknown"
    """jobState of the training jobs that write here: Finished applies afterCompletion,
    Running protects their newest checkpoints."""
    last_run: Time | None = None
    """lastRun is when the last pruner Job for this directory finished."""
    last_job: str | None = None
    """lastJob names the last pruner Job whose result is recorded here."""
    pruner_uid: str = Field(default="", max_length=64)
    """prunerUid is the uid of the last pruner Job the operator created here: only that
    Job's report is read (never one of a Job someone else made with its name or labels)."""
    scanned: int = Field(default=0, ge=0)
    """scanned checkpoints in the last run."""
    kept: int = Field(default=0, ge=0)
    """kept checkpoints in the last run."""
    deleted: int = Field(default=0, ge=0)
    """deleted checkpoints in the last run (would delete, in DryRun)."""
    deleted_names: list[str] = Field(default_factory=list, max_length=100)
    """deletedNames: the checkpoints the last run deleted (would delete, in DryRun)."""
    bytes_freed: int = Field(default=0, ge=0)
    """bytesFreed in this directory since the policy began."""
    bytes_retained: int = Field(default=0, ge=0)
    """bytesRetained by the checkpoints kept after the last run."""
    message: str = ""
    """message: notes of the last run, or why it failed."""
    failed: bool = False
    """failed: the last run failed, whole or in part (a checkpoint it could not judge or
    delete; the message says why); LastRunSucceeded stays False until a run succeeds."""
    failed_runs: int = Field(default=0, ge=0)
    """failedRuns: runs in a row that failed (whole or in part); the next is tried 30 s
    after the last, doubling with each, at most an hour (or at the schedule if sooner)."""
    completions: list[Time] = Field(default_factory=list, max_length=MAX_COMPLETIONS)
    """completions: when the newest complete checkpoints the runs in this directory or
    prefix saw were written (at most 32, newest first, deleted ones and DryRun runs
    included); run receipts estimate the compute a failure or suspension lost from them."""
    completions_as_of: Time | None = None
    """completionsAsOf: when the newest scan behind completions looked; a checkpoint
    written since is not in it yet."""
    result: TrainerResult | None = None
    """result: what the trainer's own state said, as of the newest scan that read one
    (completionsAsOf); run receipts of the jobs writing here record it."""

    @property
    def where(self) -> str:
        """How a person names the location: namespace/pvc, or the s3:// URL."""
        return self.path if self.source == "S3" else f"{self.namespace}/{self.pvc}"


class CheckpointPolicyStatus(APIModel):
    """What the last runs found and did."""

    observed_generation: int = 0
    """observedGeneration is the generation of the spec this status reflects."""
    conditions: list[Condition] = Field(default_factory=list)
    """conditions: Ready (the spec is valid), Pruning (it can act: False while the kill
    switch is on or no pruner image is configured) and LastRunSucceeded."""
    last_run: Time | None = None
    """lastRun is when the policy last ran."""
    scanned: int = 0
    """scanned checkpoints in the last run of every location."""
    kept: int = 0
    """kept checkpoints in the last run of every location."""
    deleted: int = 0
    """deleted checkpoints in the last run of every location (would delete, in DryRun)."""
    bytes_freed: int = 0
    """bytesFreed in total since the policy was created."""
    bytes_retained: int = 0
    """bytesRetained by kept checkpoints after the last runs."""
    locations: list[PrunedLocation] = Field(default_factory=list, max_length=MAX_LOCATIONS)
    """locations: every checkpoint directory the policy governs."""
