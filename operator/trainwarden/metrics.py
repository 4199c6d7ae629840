"""Every Prometheus collector trainwarden exports, and the only functions that record them."""

import contextlib

from prometheus_client import Counter, Gauge, Histogram, Info

BUILD = Info("trainwarden_build", "Version of the running trainwarden operator.")

POLICY_READY = Gauge(
    "trainwarden_policy_ready",
    "1 when a policy's spec is valid and it is active, 0 when it is rejected.",
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


def report_build(version: str) -> None:
    BUILD.info({"version": version})


def report_policy_ready(kind: str, name: str, ready: bool) -> None:
    POLICY_READY.labels(kind=kind, name=name).set(1 if ready else 0)


def forget_policy(kind: str, name: str) -> None:
    """A deleted policy must not leave a stale series behind."""
    with contextlib.suppress(KeyError):
        POLICY_READY.remove(kind, name)


def report_reconcile(kind: str, seconds: float, *, failed: bool) -> None:
    RECONCILE_SECONDS.labels(kind=kind).observe(seconds)
    if failed:
        RECONCILE_ERRORS.labels(kind=kind).inc()
