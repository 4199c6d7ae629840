"""IdleReclaimPolicy: find accelerators that sit idle or outlive their lease, and give them back."""

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, model_validator

from trainwarden.api.v1alpha1.efficiency import DEFAULT_UTILIZATION_QUERY
from trainwarden.api.v1alpha1.rightsizing import MAX_RECOMMENDED, OverProvisioned, Rightsizing
from trainwarden.api.v1alpha1.types import (
    DEFAULT_ACCELERATORS,
    APIModel,
    Condition,
    Duration,
    LabelKey,
    LabelSelector,
    Mode,
    Percent,
    ResourceName,
    Scope,
    Time,
    format_duration,
)

MAX_LISTED = 200
MAX_POINTS = 11_000
"""Steps of one window at most: what Prometheus answers per series in a range query
("exceeded maximum resolution of 11,000 points per timeseries"), kept as the bound on the
steps Prometheus walks for each pod at every evaluation (adapters/promql.py)."""


class IdleSignal(APIModel):
    """How idleness is measured: a per-pod utilization series and how low, for how long."""

    query: str = Field(default=DEFAULT_UTILIZATION_QUERY, min_length=1, max_length=4096)
    """query is a PromQL expression returning one series per accelerator with namespace and
    pod labels, in percent (0-100), e.g. DCGM_FI_DEV_GPU_UTIL or
    DCGM_FI_PROF_GR_ENGINE_ACTIVE * 100."""
    threshold: Percent = 5
    """threshold is the utilization (percent) below which an accelerator counts as idle."""
    window: Duration = timedelta(minutes=30)
    """window is how long every accelerator of a pod must stay below threshold, judged on
    the peak, before the pod is idle."""
    warmup: Duration = timedelta(minutes=10)
    """warmup after a pod starts is never judged (data loading, compilation)."""
    resolution: Duration = timedelta(minutes=1)
    """resolution is the step the window is judged at: each point is the peak of the raw samples
    within one step, and a step without a sample is a gap (unknown, never idle). Use at
    least twice the scrape interval; at most half the window."""
    scrape_interval: Duration | None = None
    """scrapeInterval is how often Prometheus scrapes the exporter (default: half the
    resolution). A step of a bare-selector query with fewer samples than resolution /
    scrapeInterval missed scrapes: it is a gap, never idle."""

    @property
    def min_samples(self) -> int:
        """Raw samples each step needs to count as covered at the scrape interval."""
        scrape = self.scrape_interval or self.resolution / 2
        return max(1, int(self.resolution / scrape))

    @model_validator(mode="after")
    def _resolution_fits_window(self) -> "IdleSignal":
        if self.scrape_interval is not None and self.scrape_interval > self.resolution:
            raise ValueError(
                f"scrapeInterval {format_duration(self.scrape_interval)} must be at most the "
                f"resolution {format_duration(self.resolution)}"
            )
        if self.resolution * 2 > self.window:
            raise ValueError(
                f"resolution {format_duration(self.resolution)} must be at most half the "
                f"window {format_duration(self.window)}: a window needs several points"
            )
        if self.resolution % timedelta(seconds=1):  # "0s" is no PromQL range; 1500ms is "1s"
            raise ValueError(
                f"resolution {format_duration(self.resolution)} must be whole seconds: "
                "each step's range is written in seconds, and a shorter one misses samples"
            )
        points = (self.window + 2 * self.resolution) // self.resolution
        if points > MAX_POINTS:
            raise ValueError(
                f"window {format_duration(self.window)} at resolution "
                f"{format_duration(self.resolution)} is {points} points; Prometheus answers "
                f"at most {MAX_POINTS:,}: use a coarser resolution"
            )
        return self


class Lease(APIModel):
    """A maximum lifetime for accelerator holders, e.g. interactive notebooks."""

    max_lifetime: Duration
    """maxLifetime after which a matching pod is reclaimed like an idle one."""
    selector: LabelSelector | None = None
    """selector restricts the lease to pods with these labels; all scoped pods otherwise."""


class Exemptions(APIModel):
    """Ways a workload may ask to be left alone, and how far the policy honours them."""

    allow_opt_out: bool = False
    """allowOptOut honours the annotation trainwarden.dev/exempt: "true" on a pod or owner."""
    max_keep_duration: Duration = timedelta(hours=24)
    """maxKeepDuration caps trainwarden.dev/keep-until acknowledgements: a later time is
    treated as now plus this duration."""
    priority_classes: list[str] = Field(default_factory=list, max_length=32)
    """priorityClasses whose pods are never reclaimed."""


class IdleNodes(APIModel):
    """Reporting (and optionally releasing) accelerator nodes with no accelerator pods."""

    after: Duration = timedelta(minutes=30)
    """after is how long a node must have no accelerator pods to count as idle."""
    node_selector: LabelSelector | None = None
    """nodeSelector restricts which accelerator nodes are considered; all nodes with
    allocatable accelerators otherwise."""
    cordon: bool = False
    """cordon marks idle nodes unschedulable so an autoscaler can remove them."""
    label: bool = False
    """label sets trainwarden.dev/idle-node: "true" on idle nodes."""


class Pressure(APIModel):
    """What counts as pending demand for reclaimWhen: UnderPressure."""

    min_pending: Duration = timedelta(minutes=2)
    """minPending is how long the scheduler must have found a pod unschedulable before it
    counts as demand: a pod not placed for a moment (the scheduler has not run, a node is
    starting) is no reason to end a team's warm run."""


class IdleReclaimPolicySpec(APIModel):
    """What counts as idle, and what happens to idle accelerator holders."""

    mode: Mode = "DryRun"
    """mode Enforce acts; DryRun (the default) only reports what it would do."""
    scope: Scope
    """scope picks the pods this policy watches."""
    accelerators: list[ResourceName] = Field(
        default=list(DEFAULT_ACCELERATORS), min_length=1, max_length=16
    )
    """accelerators lists the extended resources that make a pod an accelerator holder."""
    signal: IdleSignal = IdleSignal()
    """signal is the utilization measurement."""
    lease: Lease | None = None
    """lease optionally bounds the lifetime of accelerator holders."""
    action: Literal["Suspend", "Delete", "ScaleDown", "NotifyOnly"] = "NotifyOnly"
    """action on an idle pod after the grace period: Suspend its top-level workload, Delete
    (evict) the pod, ScaleDown its Deployment/StatefulSet to zero, or NotifyOnly."""
    reclaim_when: Literal["Always", "UnderPressure"] = "Always"
    """reclaimWhen Always reclaims an idle workload once its grace period is over;
    UnderPressure only while a pod that requests an accelerator the workload holds has been
    unschedulable for pressure.minPending and would fit in what the reclaim frees (an idle
    accelerator nobody else wants costs the same whether it is reclaimed or not). Until
    then the workload stays warned, kept warm."""
    pressure: Pressure = Pressure()
    """pressure says what counts as pending demand under reclaimWhen: UnderPressure."""
    grace_period: Duration = timedelta(minutes=15)
    """gracePeriod between the warning and the action; recovery cancels the warning."""
    exemptions: Exemptions = Exemptions()
    """exemptions the policy honours."""
    idle_nodes: IdleNodes | None = None
    """idleNodes optionally reports and releases nodes without accelerator pods."""
    max_actions_per_minute: int = Field(default=5, ge=1, le=1000)
    """maxActionsPerMinute caps the blast radius of one policy: reclaims beyond it wait
    for the next minute."""
    estimate_horizon: Duration = timedelta(hours=1)
    """estimateHorizon bounds the estimate of accelerator time a reclaim frees: the
    accelerators times the time until the workload's expected end (its Job deadline or
    lease end), at most this long."""
    rightsizing: Rightsizing | None = None
    """rightsizing, when set, reports workloads that hold more accelerators than work
    (docs/efficiency.md); it never changes them."""
    node_labels: list[LabelKey] = Field(default=["nvidia.com/gpu.product"], max_length=8)
    """nodeLabels are node labels (e.g. the GPU model) reported with idle pods."""


class IdlePod(APIModel):
    """A pod the policy currently considers idle, suspected or warned."""

    namespace: str
    """namespace of the pod."""
    name: str
    """name of the pod."""
    state: Literal["IdleSuspected", "Warned", "Unknown", "Exempt"]
    """state in the idle state machine; Unknown means missing utilization data, Exempt an
    idle pod the policy leaves alone."""
    since: Time
    """since when the pod has been in this state (for Warned: idle since)."""
    accelerators: float = 0
    """accelerators the pod holds."""
    message: str = ""
    """message says why, e.g. the exemption or the warning's deadline."""


class IdleNode(APIModel):
    """An accelerator node with no accelerator pods."""

    name: str
    """name of the node."""
    since: Time
    """since when it has had no accelerator pods."""


class Acknowledgement(APIModel):
    """A trainwarden.dev/keep-until value the policy has seen on a pod, and since when: the
    policy's cap (maxKeepDuration) runs from then, whatever the pod says later."""

    uid: str
    """uid of the pod."""
    value: str = Field(max_length=64)
    """value of the annotation as first seen."""
    first_seen: Time
    """firstSeen is when the policy first saw this value."""


class IdleReclaimPolicyStatus(APIModel):
    """What the policy sees and what it reclaimed."""

    observed_generation: int = 0
    """observedGeneration is the generation of the spec this status reflects."""
    conditions: list[Condition] = Field(default_factory=list)
    """conditions: Ready, MetricsAvailable."""
    pods_watched: int = 0
    """podsWatched is the number of accelerator pods in scope."""
    pods_idle: int = 0
    """podsIdle is the number of pods currently idle-suspected or warned."""
    pods_unknown: int = 0
    """podsUnknown is the number of pods whose utilization is unknown (no or gappy data)."""
    pods_exempt: int = 0
    """podsExempt is the number of idle pods left alone by an exemption."""
    idle_pods: list[IdlePod] = Field(default_factory=list, max_length=MAX_LISTED)
    """idlePods lists pods idle-suspected, warned, exempt or with unknown utilization
    (at most 200; the counts above are complete)."""
    idle_nodes: list[IdleNode] = Field(default_factory=list, max_length=MAX_LISTED)
    """idleNodes lists accelerator nodes with no accelerator pods for at least
    idleNodes.after."""
    pending_actions: list[str] = Field(default_factory=list, max_length=MAX_LISTED)
    """pendingActions says what DryRun would do, and what Enforce skipped or deferred."""
    recent_actions: list[Time] = Field(default_factory=list, max_length=1000)
    """recentActions are the times of reclaims in the last minute (the per-minute cap)."""
    actions_taken: int = 0
    """actionsTaken counts reclaim actions since the policy was created."""
    accelerator_hours_reclaimed: float = 0
    """acceleratorHoursReclaimed estimates the accelerator time freed by actions (see
    estimateHorizon)."""
    idle_accelerator_hours: dict[str, float] = Field(default_factory=dict)
    """idleAcceleratorHours is the accelerator time watched pods were observed idle
    (suspected, warned or exempt), by namespace, since the policy was created."""
    acknowledgements: list[Acknowledgement] = Field(default_factory=list, max_length=MAX_LISTED)
    """acknowledgements are the keep-until annotations in force and when each was first
    seen (at most 200: a pod beyond that is not kept)."""
    over_provisioned: list[OverProvisioned] = Field(
        default_factory=list, max_length=MAX_RECOMMENDED
    )
    """overProvisioned lists workloads holding accelerators that did not work over
    rightsizing.window, most excess first (at most 50)."""
    last_evaluated: Time | None = None
    """lastEvaluated is when utilization was last evaluated."""


class IdleReclaimPolicy(APIModel):
    """IdleReclaimPolicy warns about, then reclaims, accelerators that sit idle or outlive
    their lease."""

    api_version: Literal["trainwarden.dev/v1alpha1"] = "trainwarden.dev/v1alpha1"
    """apiVersion of the object."""
    kind: Literal["IdleReclaimPolicy"] = "IdleReclaimPolicy"
    """kind of the object."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """metadata is the standard object metadata."""
    spec: IdleReclaimPolicySpec
    """spec is the desired policy."""
    status: IdleReclaimPolicyStatus = Field(default_factory=IdleReclaimPolicyStatus)
    """status is the observed state."""
