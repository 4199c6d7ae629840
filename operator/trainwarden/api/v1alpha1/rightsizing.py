"""Over-provisioned accelerators: what an IdleReclaimPolicy recommends, never enforces."""

from datetime import timedelta

from pydantic import Field

from trainwarden.api.v1alpha1.types import APIModel, Duration, Percent, Time

MAX_RECOMMENDED = 50


class Rightsizing(APIModel):
    """Judge each accelerator of a workload over a window: one that holds N while only
    k < N work gets a recommendation (an Event, a status entry, a metric, a report line).
    Nothing is changed: a running job keeps what it asked for."""

    window: Duration = Field(default=timedelta(hours=2), ge=timedelta(minutes=1))
    """window over which an accelerator must stay below threshold to count as not working
    (every accelerator of the workload must be covered end to end by samples)."""
    threshold: Percent | None = None
    """threshold (percent) below which an accelerator does no work; the signal's
    threshold by default."""
    min_idle: int = Field(default=1, ge=1, le=64)
    """minIdle is how many accelerators must be idle before a workload is reported."""


class OverProvisioned(APIModel):
    """A workload whose accelerators did not all work over the window."""

    kind: str
    """kind of the workload (Job, JobSet, PyTorchJob, Pod, ...)."""
    namespace: str
    """namespace of the workload."""
    name: str
    """name of the workload."""
    pods: int = 1
    """pods of the workload judged."""
    accelerators: int
    """accelerators the workload holds."""
    busy: int
    """busy accelerators: their peak reached the threshold within the window."""
    idle: int
    """idle accelerators: below the threshold for the whole window."""
    recommended_per_pod: int
    """recommendedPerPod: what each pod should request (the most any of them kept busy)."""
    since: Time
    """since when the workload has been reported."""
    message: str = Field(default="", max_length=512)
    """message for people."""
