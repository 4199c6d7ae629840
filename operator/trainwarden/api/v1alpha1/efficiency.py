"""How much of what a budget paid for did work: its efficiency signal and status."""

from datetime import timedelta

from pydantic import Field, model_validator

from trainwarden.api.v1alpha1.types import APIModel, Duration, Time, format_duration

DEFAULT_UTILIZATION_QUERY = "DCGM_FI_DEV_GPU_UTIL"


class EfficiencySignal(APIModel):
    """What an accelerator did: a per-accelerator utilization series in Prometheus."""

    query: str = Field(default=DEFAULT_UTILIZATION_QUERY, min_length=1, max_length=4096)
    """query is a PromQL expression returning one series per accelerator with namespace and
    pod labels, in percent (0-100): DCGM_FI_DEV_GPU_UTIL (the default; busy means a kernel
    ran), or DCGM_FI_PROF_SM_ACTIVE * 100 where the exporter has profiling metrics (how
    much of the chip the kernels kept busy, a stricter measure)."""
    resolution: Duration = timedelta(minutes=1)
    """resolution is the step the series is integrated at: each step counts with its mean;
    a step without samples is unknown. Use at least twice the scrape interval."""

    @model_validator(mode="after")
    def _resolution_is_sane(self) -> "EfficiencySignal":
        if not timedelta(seconds=10) <= self.resolution <= timedelta(hours=1):
            raise ValueError(
                f"resolution {format_duration(self.resolution)} must be between 10s and 1h"
            )
        return self


class EfficiencyShare(APIModel):
    """Accelerator-hours of one key (a namespace, a label value or an outcome): held is
    used + idle + unknown."""

    key: str
    """key is the namespace, label value or outcome."""
    held_accelerator_hours: float = 0
    """heldAcceleratorHours charged to the key (its usage)."""
    used_accelerator_hours: float = 0
    """usedAcceleratorHours: held time multiplied by utilization, where it was measured."""
    idle_accelerator_hours: float = 0
    """idleAcceleratorHours: measured held time that did no work."""
    unknown_accelerator_hours: float = 0
    """unknownAcceleratorHours: held time without a measurement (gaps in the series, an
    accelerator that never reported, the operator down): never counted as used or idle."""
    effective_percent: float | None = None
    """effectivePercent is used over held."""


class EfficiencyBreakdown(APIModel):
    """Efficiency by the same keys as the usage breakdown."""

    by_namespace: list[EfficiencyShare] = Field(default_factory=list)
    """byNamespace per namespace."""
    by_label: dict[str, list[EfficiencyShare]] = Field(default_factory=dict)
    """byLabel per value of each attribution label."""
    by_outcome: list[EfficiencyShare] = Field(default_factory=list)
    """byOutcome of succeeded, failed and running pods."""


class EfficiencyStatus(APIModel):
    """How much of the accelerator time charged this period did work."""

    query: str = ""
    """query the series were read with."""
    measured_until: Time | None = None
    """measuredUntil: the series were integrated up to then."""
    total: EfficiencyShare = EfficiencyShare(key="total")
    """total over the budget."""
    unknown_percent: float | None = None
    """unknownPercent of held accelerator-hours without a measurement."""
    breakdown: EfficiencyBreakdown = EfficiencyBreakdown()
    """breakdown by namespace, attribution label and outcome."""
    message: str | None = Field(default=None, max_length=512)
    """message says why nothing or not everything could be measured."""
