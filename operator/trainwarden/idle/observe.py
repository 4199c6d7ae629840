"""An IdleReclaimPolicy's observation: the accelerator holders it governs, their
utilization (one batched query), and each pod's observation and story so far, ready for
the core's verdict (idle/reconcile.py)."""

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime

from trainwarden.adapters.idle_window import IdleWindow
from trainwarden.adapters.prometheus import MetricsUnavailable, PodKey, Utilization
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.types import Scope
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import reclaim
from trainwarden.core.conditions import ConditionUpdate
from trainwarden.core.idleness import IdleState, Observation, Steps, judge
from trainwarden.core.pods import PodFacts
from trainwarden.core.scope import in_scope, selects
from trainwarden.idle.actions import Watched


def governed(
    spec: IdleReclaimPolicySpec, cache: ClusterCache, earlier: Sequence[Scope]
) -> list[tuple[PodFacts, float]]:
    """Running accelerator holders in scope and not governed by an earlier policy (a pod
    is governed by one policy only, the first by name)."""
    out = []
    for facts in cache.pods_now():
        pod = facts.snapshot
        accelerators = sum(pod.requests.get(r, 0.0) for r in spec.accelerators)
        if accelerators <= 0 or pod.start is None or pod.end is not None or facts.deleting:
            continue
        ns_labels = cache.namespace_labels(pod.namespace)
        if not in_scope(spec.scope, pod.namespace, ns_labels, pod.labels):
            continue
        if any(in_scope(other, pod.namespace, ns_labels, pod.labels) for other in earlier):
            continue
        out.append((facts, accelerators))
    return out


async def utilization(
    prometheus: Utilization | None,
    spec: IdleReclaimPolicySpec,
    now: datetime,
    pods: Sequence[tuple[PodFacts, float]],
) -> tuple[IdleWindow | None, ConditionUpdate]:
    """One batched query for every governed pod; None when nothing can be known."""
    if prometheus is None:
        message = "the operator runs without --prometheus-url: nothing is judged idle; leases apply"
        return None, ConditionUpdate(C.METRICS_AVAILABLE, "False", C.REASON_NOT_CONFIGURED, message)
    ok = ConditionUpdate(
        C.METRICS_AVAILABLE, "True", C.REASON_QUERY_SUCCEEDED, "the utilization query answered"
    )
    if not pods:
        return IdleWindow(Steps(0, now), {}), ok
    signal = spec.signal
    try:
        samples = await prometheus.idle_window(
            signal.query,
            namespaces=sorted({f.snapshot.namespace for f, _ in pods}),
            at=now,
            window=signal.window,
            resolution=signal.resolution,
            threshold=signal.threshold,
            min_samples=signal.min_samples,
        )
    except MetricsUnavailable as error:
        message = f"{error}; no pod is judged idle until it answers"
        return None, ConditionUpdate(
            C.METRICS_AVAILABLE, "False", C.REASON_PROMETHEUS_UNAVAILABLE, message
        )
    settled = now - signal.warmup - 2 * signal.resolution
    due = {
        (p.namespace, p.name)
        for p in (f.snapshot for f, _ in pods)
        if p.start is not None and p.start <= settled
    }
    missing = unmatched(samples.pods.keys(), due)
    if missing is not None:
        return samples, ConditionUpdate(
            C.METRICS_AVAILABLE, "False", C.REASON_NO_SERIES_FOR_PODS, missing
        )
    return samples, ok


def unmatched(samples: AbstractSet[PodKey], due: AbstractSet[PodKey]) -> str | None:
    """Why no series names any pod that should have one by now (None: some does, or no
    pod is past its warm-up). Partial coverage is ordinary (a pod just scheduled, one
    node's exporter restarting); none at all means the signal cannot see these pods."""
    if not due or any(key in samples for key in due):
        return None
    others = sorted(samples)
    found = (
        f"it returned series for {len(others)} other pods, e.g. "
        + ", ".join(f"{ns}/{pod}" for ns, pod in others[:3])
        if others
        else "it returned no series at all (is the exporter running and scraped?)"
    )
    return (
        f"the utilization query answered, but no series names any of the {len(due)} governed "
        f"accelerator pods past their warm-up; {found}. Each series must name the pod using "
        "the accelerator in namespace and pod (or exported_namespace and exported_pod) labels, "
        "as dcgm-exporter does with pod attribution on; nothing is judged idle until one does"
    )


def watched(
    spec: IdleReclaimPolicySpec,
    name: str,
    pods: list[tuple[PodFacts, float]],
    samples: IdleWindow | None,
    states: Mapping[str, IdleState],
    now: datetime,
) -> list[Watched]:
    """Each governed pod with its observation and where its story continues from."""
    signal, lease = spec.signal, spec.lease
    out = []
    for facts, accelerators in pods:
        pod = facts.snapshot
        assert pod.start is not None
        applies = lease is not None and (
            lease.selector is None or selects(lease.selector, pod.labels)
        )
        observation = Observation("Unknown")
        if samples is not None:
            coverage = samples.pods.get((pod.namespace, pod.name))
            observation = judge(
                coverage,
                samples.steps,
                now=now,
                window=signal.window,
                resolution=signal.resolution,
            )
        marks = reclaim.recorded(
            facts.annotations,
            name,
            now=now,
            started=pod.start,
            notify_only=spec.action == "NotifyOnly",
        )
        out.append(
            Watched(
                reclaim.PodView(
                    pod.uid, pod.namespace, pod.name, pod.start, accelerators, facts.group
                ),
                facts,
                lease.max_lifetime if lease is not None and applies else None,
                reclaim.previous_state(states.get(pod.uid), marks, enforce=spec.mode == "Enforce"),
                observation,
            )
        )
    return out
