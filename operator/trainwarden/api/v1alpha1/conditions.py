"""Condition types and reasons written by trainwarden, in one documented place."""

from typing import Final

READY: Final = "Ready"
"""Ready is True when the spec is valid and the policy is being evaluated."""
WARNING: Final = "Warning"
"""Warning is True when a budget crossed its warn threshold."""
EXHAUSTED: Final = "Exhausted"
"""Exhausted is True when a budget crossed its enforce threshold."""
STORAGE_WARNING: Final = "StorageWarning"
"""StorageWarning is True when a storage limit (or the cost limit) crossed its warn
threshold."""
STORAGE_EXHAUSTED: Final = "StorageExhausted"
"""StorageExhausted is True when a storage limit (or the cost limit) crossed its enforce
threshold: new PersistentVolumeClaims in scope are refused (Enforce); nothing is suspended
or deleted for it."""
METRICS_AVAILABLE: Final = "MetricsAvailable"
"""MetricsAvailable is True when the idle policy's utilization query last succeeded; while
it is False nothing is judged idle (missing data is not idleness)."""

REASON_ACCEPTED: Final = "Accepted"
"""The spec parsed and passed every check; the policy is active."""
REASON_INVALID_SPEC: Final = "InvalidSpec"
"""The spec failed a check the schema could not express; the policy does nothing."""
REASON_CLUSTER_VIEW_INTERRUPTED: Final = "ClusterViewInterrupted"
"""The operator's watch of pods, workloads, namespaces or nodes failed and they have not
been listed again; the policy is not evaluated and takes no action until they are."""
REASON_QUERY_SUCCEEDED: Final = "QuerySucceeded"
"""Prometheus answered the utilization query."""
REASON_PROMETHEUS_UNAVAILABLE: Final = "PrometheusUnavailable"
"""Prometheus could not be reached or did not answer; no pod is judged idle."""
REASON_NO_SERIES_FOR_PODS: Final = "NoSeriesForGovernedPods"
"""Prometheus answered, but no series names any governed pod running past its warm-up
(the exporter is missing, or its series do not carry the consumer's namespace and pod)."""
REASON_NOT_CONFIGURED: Final = "PrometheusNotConfigured"
"""The operator runs without --prometheus-url; only leases are enforced."""
TRACKING: Final = "Tracking"
"""Tracking is False when a VolumeReclaimPolicy has more unmounted claims than its record
holds: those beyond it are not aged, so never deleted."""
SNAPSHOTS_READY: Final = "SnapshotsReady"
"""SnapshotsReady is False when a claim's VolumeSnapshot did not become ready within the
policy's snapshot.timeout (or went away): that claim is not deleted."""
