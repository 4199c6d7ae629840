"""Every Prometheus collector trainwarden exports, and the only functions that record them:
the operator's own health here, what governed work spent in `spend`."""

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram, Info

from trainwarden.api.v1alpha1.names import BUDGET_LABEL, IDLE_KIND, VOLUME_KIND
from trainwarden.metrics import series
from trainwarden.metrics.spend import (
    RECLAIMED_SECONDS,
    BudgetFigures,
    report_budget,
    report_checkpoints_pruned,
    report_efficiency,
    report_idle_hours,
    report_reclaimed_hours,
    report_run_receipt,
)

__all__ = [
    "RECLAIMED_SECONDS",
    "BudgetFigures",
    "report_budget",
    "report_checkpoints_pruned",
    "report_efficiency",
    "report_idle_hours",
    "report_reclaimed_hours",
    "report_run_receipt",
]

BUILD = Info("trainwarden_build", "Version of the running trainwarden operator.")

LEADER = Gauge(
    "trainwarden_leader",
    "1 while this replica holds the leader Lease and acts, 0 while it stands by.",
)
POLICY_READY = Gauge(
    "trainwarden_policy_ready",
    "1 when a policy's spec is valid and it is active, 0 when it is rejected.",
    ["kind", "name"],
)
POLICY_EVALUATED = Gauge(
    "trainwarden_policy_last_evaluated_timestamp_seconds",
    "When a policy was last evaluated without error (status is written only when it changes,"
    " or every 5 minutes for running totals: this is the liveness signal to alert on).",
    ["kind", "name"],
)
RECONCILE_SECONDS = Histogram(
    "trainwarden_reconcile_duration_seconds",
    "Time to reconcile one policy object.",
    ["kind"],
)
RECONCILE_ERRORS = Counter(
    "trainwarden_reconcile_errors_total",
    "Reconciliations that failed with an unexpected error.",
    ["kind"],
)


OVER_PROVISIONED = Gauge(
    "trainwarden_overprovisioned",
    "Workloads an idle policy reports as holding accelerators that did not work over its"
    " rightsizing window (what=workloads), and the accelerators they could give back"
    " (what=accelerators).",
    ["policy", "what"],
)
ADMISSION = Counter(
    "trainwarden_admission_requests_total",
    "Creations the admission webhook answered, by outcome: held, would-hold (DryRun),"
    " repeat (it repeats a finished run: warned), repeat-held (held by a budget's repeats:"
    " Hold), allowed, ignored (a kind or workload never held), unknown (its view of budgets not"
    " current: allowed), too-costly (more to read than any workload has: allowed),"
    " deadline (not decided in time: allowed), error (allowed), refused (a client"
    " certificate not named), refused-claim (a PersistentVolumeClaim refused by a budget"
    " whose storage is exhausted) and would-refuse-claim (DryRun: allowed, warned).",
    ["outcome"],
)
ADMISSION_FAILED_OPEN = ("error", "deadline", "unknown")
"""The outcomes where the webhook allowed a creation it could not decide."""
ADMISSION_SECONDS = Histogram(
    "trainwarden_admission_duration_seconds",
    "Time from a review's arrival to its answer (the API server gives up after the"
    " webhook's timeoutSeconds, 2 s by default).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 5.0),
)
KUEUE_CHECKS = Counter(
    "trainwarden_kueue_checks_total",
    "States trainwarden's budget AdmissionCheck set on Kueue Workloads (Ready, Pending,"
    " Rejected), counted when the state or its message changes.",
    ["state"],
)
LABEL_PROBLEMS = Counter(
    "trainwarden_budget_label_problems_total",
    f"Pods whose {BUDGET_LABEL} label named a budget that does not cover them.",
)
PROMETHEUS_QUERIES = Counter(
    "trainwarden_prometheus_queries_total",
    "Utilization queries sent to Prometheus, by result (ok or error).",
    ["result"],
)
PROMETHEUS_QUERY_SECONDS = Histogram(
    "trainwarden_prometheus_query_duration_seconds",
    "Time Prometheus took to answer one batched utilization query.",
)
INFORMER_EVENTS = Counter(
    "trainwarden_informer_events_total",
    "Watch events received per source (pods, jobs, namespaces, nodes, ...).",
    ["source"],
)
API_REQUESTS = Counter(
    "trainwarden_api_requests",
    "Requests sent to the API server by the official client (every call of the operator's,"
    " the informers' lists and watches, the leader Lease), by verb (get, list, watch,"
    " create, patch, update, delete, deletecollection), resource (the plural, with a"
    " subresource as pods/status; discovery for /api, /apis, /version) and code (the HTTP"
    " status, or error when none came). kopf's own watches are not counted.",
    ["verb", "resource", "code"],
)
INFORMER_RELISTS = Counter(
    "trainwarden_informer_relists_total",
    "Full relists after a watch expired (410 Gone).",
    ["source"],
)
INFORMER_ERRORS = Counter(
    "trainwarden_informer_errors_total",
    "Failed lists or watches, retried with backoff.",
    ["source"],
)
CACHE_CURRENT = Gauge(
    "trainwarden_cache_current",
    "1 while a source is listed and watched; 0 from a failed list or watch until it is "
    "listed again. No policy is evaluated while any source is 0.",
    ["source"],
)
CACHE_OBJECTS = Gauge(
    "trainwarden_cache_objects",
    "Objects held in the operator's cache, per source.",
    ["source"],
)
ACTIONS = Counter(
    "trainwarden_actions_total",
    "Actions decided by policies: result is done, dry-run, conflict (the object changed; "
    "re-evaluated) or blocked (a PodDisruptionBudget refused an eviction).",
    ["kind", "policy", "action", "result"],
)

VOLUMES_RECLAIMED = Counter(
    "trainwarden_volumes_reclaimed_total",
    "PersistentVolumeClaims a VolumeReclaimPolicy deleted.",
    ["policy"],
)
VOLUMES_RECLAIMED_BYTES = Counter(
    "trainwarden_volumes_reclaimed_bytes_total",
    "Requested capacity of the PersistentVolumeClaims a VolumeReclaimPolicy deleted.",
    ["policy"],
)
VOLUMES_ORPHANED = Gauge(
    "trainwarden_volumes_orphaned",
    "Claims a VolumeReclaimPolicy records, by state (Unmounted, Orphaned, Exempt, ...).",
    ["policy", "state"],
)


IDLE_PODS = Gauge(
    "trainwarden_idle_pods",
    "Accelerator pods an idle policy watches (state Watched) and how many are in each state: "
    "IdleSuspected, Warned, Unknown (no or gappy utilization data), Exempt, KeptWarm (warned "
    "past the grace period, no pending pod wants what it holds: reclaimWhen UnderPressure).",
    ["policy", "state"],
)
IDLE_NODES = Gauge(
    "trainwarden_idle_nodes",
    "Accelerator nodes without accelerator pods for at least idleNodes.after.",
    ["policy"],
)
IDLE_METRICS_AVAILABLE = Gauge(
    "trainwarden_idle_metrics_available",
    "1 when an idle policy's utilization query last succeeded; 0 while nothing is judged idle.",
    ["policy"],
)
CLOCK_SKEW = Gauge(
    "trainwarden_clock_skew_seconds",
    "The API server's clock minus this process's, from the Date of its answers (the "
    "operator reckons in the server's time; beyond 5 s, check the node's time sync).",
)
CLOCK_SKEW_UNCERTAINTY = Gauge(
    "trainwarden_clock_skew_uncertainty_seconds",
    "How far trainwarden_clock_skew_seconds may be off (half the interval it lies in).",
)
RUN_RECEIPTS_REMOVED = Counter(
    "trainwarden_run_receipts_removed_total",
    "RunReceipts the ledger's bounds removed (past the TTL, or the oldest over the "
    "per-namespace cap).",
)
RUN_RECEIPTS_UNVERIFIED = Counter(
    "trainwarden_run_receipts_unverified_total",
    "RunReceipts this operator did not write (no valid seal) where it looked for its own: "
    "at a run's receipt name (where=name; the receipt went under its fallback name, or "
    "was not written) or labelled as its own in a sweep (where=ledger; never counted or "
    "removed, counted again at each sweep of the namespace).",
    ["where"],
)
RECEIPT_SEAL_READY = Gauge(
    "trainwarden_run_receipt_seal_ready",
    "1 while the key sealing RunReceipts is read; 0: no receipt is written or removed.",
)


def report_receipts_removed(count: int) -> None:
    RUN_RECEIPTS_REMOVED.inc(count)


def report_receipts_unverified(where: str, count: int) -> None:
    RUN_RECEIPTS_UNVERIFIED.labels(where=where).inc(count)


def report_receipt_seal(*, ready: bool) -> None:
    RECEIPT_SEAL_READY.set(1.0 if ready else 0.0)


def report_build(version: str, kinds: tuple[str, ...]) -> None:
    BUILD.info({"version": version})
    for kind in kinds:  # the error series exist (at 0) before the first error, for alerts
        RECONCILE_ERRORS.labels(kind=kind).inc(0)
    for outcome in ADMISSION_FAILED_OPEN:  # so do the webhook's (TrainwardenWebhookErrors)
        ADMISSION.labels(outcome).inc(0)


def report_clock_skew(offset: float, uncertainty: float) -> None:
    CLOCK_SKEW.set(offset)
    CLOCK_SKEW_UNCERTAINTY.set(uncertainty)


def report_leader(*, is_leader: bool) -> None:
    LEADER.set(1 if is_leader else 0)


def report_policy_ready(kind: str, name: str, ready: bool) -> None:
    POLICY_READY.labels(kind=kind, name=name).set(1 if ready else 0)


def forget_policy(kind: str, name: str) -> None:
    """A deleted policy must not leave a stale series behind."""
    series.forget(kind, name, {(POLICY_READY, (kind, name)), (POLICY_EVALUATED, (kind, name))})


def report_reconcile(kind: str, seconds: float, *, failed: bool) -> None:
    RECONCILE_SECONDS.labels(kind=kind).observe(seconds)
    if failed:
        RECONCILE_ERRORS.labels(kind=kind).inc()


def report_evaluated(kind: str, name: str) -> None:
    POLICY_EVALUATED.labels(kind=kind, name=name).set_to_current_time()


def report_action(kind: str, policy: str, action: str, result: str) -> None:
    ACTIONS.labels(kind=kind, policy=policy, action=action, result=result).inc()


def report_volume_reclaimed(policy: str, size: int) -> None:
    VOLUMES_RECLAIMED.labels(policy=policy).inc()
    VOLUMES_RECLAIMED_BYTES.labels(policy=policy).inc(size)


def report_volumes(policy: str, states: Mapping[str, int]) -> None:
    """Every state's count (0 too); the series go with the policy (`forget_policy`)."""
    seen = series.of(VOLUME_KIND, policy)
    for state in ("Unmounted", "Orphaned", "Exempt", "Snapshotting", "SnapshotFailed", "Deleting"):
        VOLUMES_ORPHANED.labels(policy, state).set(states.get(state, 0))
        seen.add((VOLUMES_ORPHANED, (policy, state)))
    VOLUMES_RECLAIMED.labels(policy).inc(0)  # the series exist before the first deletion
    VOLUMES_RECLAIMED_BYTES.labels(policy).inc(0)
    seen |= {(VOLUMES_RECLAIMED, (policy,)), (VOLUMES_RECLAIMED_BYTES, (policy,))}


def report_admission(outcome: str, seconds: float) -> None:
    ADMISSION.labels(outcome).inc()
    ADMISSION_SECONDS.observe(seconds)


def report_kueue_check(state: str) -> None:
    KUEUE_CHECKS.labels(state).inc()


def report_label_problem() -> None:
    LABEL_PROBLEMS.inc()


def report_prometheus_query(*, ok: bool, seconds: float) -> None:
    PROMETHEUS_QUERIES.labels(result="ok" if ok else "error").inc()
    PROMETHEUS_QUERY_SECONDS.observe(seconds)


def report_idle(policy: str, states: Mapping[str, int], idle_nodes: int) -> None:
    seen = series.of(IDLE_KIND, policy)
    for state, count in states.items():
        IDLE_PODS.labels(policy, state).set(count)
        seen.add((IDLE_PODS, (policy, state)))
    IDLE_NODES.labels(policy).set(idle_nodes)
    RECLAIMED_SECONDS.labels(policy).inc(0)  # the series exists before the first reclaim
    seen |= {(IDLE_NODES, (policy,)), (RECLAIMED_SECONDS, (policy,))}


def report_over_provisioned(policy: str, workloads: int, excess: int) -> None:
    OVER_PROVISIONED.labels(policy, "workloads").set(workloads)
    OVER_PROVISIONED.labels(policy, "accelerators").set(excess)
    series.of(IDLE_KIND, policy).update(
        {(OVER_PROVISIONED, (policy, "workloads")), (OVER_PROVISIONED, (policy, "accelerators"))}
    )


def report_idle_metrics_available(policy: str, *, ok: bool) -> None:
    IDLE_METRICS_AVAILABLE.labels(policy).set(1 if ok else 0)
    series.of(IDLE_KIND, policy).add((IDLE_METRICS_AVAILABLE, (policy,)))


def report_informer_event(source: str) -> None:
    INFORMER_EVENTS.labels(source).inc()


def report_api_request(verb: str, resource: str, code: str) -> None:
    API_REQUESTS.labels(verb, resource, code).inc()


def report_informer_relist(source: str) -> None:
    INFORMER_RELISTS.labels(source).inc()


def report_informer_error(source: str) -> None:
    INFORMER_ERRORS.labels(source).inc()


def report_cache_current(source: str, *, current: bool) -> None:
    CACHE_CURRENT.labels(source).set(1 if current else 0)


def report_cache_size(source: str, objects: int) -> None:
    CACHE_OBJECTS.labels(source).set(objects)
