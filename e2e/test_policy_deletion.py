"""Deleting a budget leaves nothing stuck, on the real API server (issue 26).

Set up as e2e/test_admission.py does (this module's own operator serving the chart's
webhook, a budget spent by a real Job on a kwok GPU node): the spending Job is suspended,
a Job and a bare pod created after are held (spec.suspend, the scheduling gate), and a Job
its owner suspended carries the budget's label. Deleting the budget resumes the first,
starts the next two, and leaves the owner's Job exactly as it was.
"""

import time

from kubernetes import client

from harness import Cluster, simulated, wait_for
from test_admission import (  # the webhook fixture: this module gets its own operator
    GATE,
    Webhook,
    exhaust,
    job_in,
    kubectl_create,
    pods_of,
    reasons,
    webhook,  # noqa: F401
)
from trainwarden.testing.builders import PodBuilder

SUSPENDED_BY = "trainwarden.dev/suspended-by"
HELD_BY = "trainwarden.dev/held-by"


def running(cluster: Cluster, namespace: str, selector: str) -> bool:
    return any(p.status.phase == "Running" for p in pods_of(cluster, namespace, selector))


def test_deleting_a_budget_resumes_and_starts_its_work_and_nothing_else(
    cluster: Cluster,
    webhook: Webhook,  # noqa: F811
    namespace: str,
) -> None:
    name = exhaust(cluster, namespace)
    batch, core = client.BatchV1Api(cluster.api), client.CoreV1Api(cluster.api)
    wait_for(
        lambda: batch.read_namespaced_job("spender", namespace).spec.suspend,
        timeout=60,
        what="the spending Job suspended",
    )
    assert batch.read_namespaced_job("spender", namespace).metadata.labels[SUSPENDED_BY] == name
    printed = kubectl_create(cluster, job_in(namespace, "next"))
    assert "is held (spec.suspend)" in printed, printed
    solo = simulated(PodBuilder("solo"), 1).build()
    solo["metadata"]["namespace"] = namespace
    kubectl_create(cluster, solo)
    assert [g.name for g in core.read_namespaced_pod("solo", namespace).spec.scheduling_gates] == [
        GATE
    ]
    owners = job_in(namespace, "owners")
    owners["spec"]["suspend"] = True
    owners["metadata"]["labels"] = {SUSPENDED_BY: name}
    kubectl_create(cluster, owners)

    client.CustomObjectsApi(cluster.api).delete_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", name
    )
    deleted = time.monotonic()
    for selector, what in (("job-name=spender", "resumed"), ("job-name=next", "started")):
        wait_for(
            lambda selector=selector: running(cluster, namespace, selector),
            timeout=90,
            what=f"the {what} Job's pod running",
        )
    wait_for(
        lambda: core.read_namespaced_pod("solo", namespace).status.phase == "Running",
        timeout=60,
        what="the ungated pod running",
    )
    print(f"\nall released {time.monotonic() - deleted:.1f}s after the budget's deletion")
    spender = batch.read_namespaced_job("spender", namespace)
    assert SUSPENDED_BY not in (spender.metadata.labels or {})
    assert "ResumedByBudget" in reasons(cluster, namespace, "spender")
    assert HELD_BY not in (batch.read_namespaced_job("next", namespace).metadata.annotations or {})
    assert "ReleasedByBudget" in reasons(cluster, namespace, "next")
    assert not core.read_namespaced_pod("solo", namespace).spec.scheduling_gates
    untouched = batch.read_namespaced_job("owners", namespace)
    assert untouched.spec.suspend is True, "never resume what the operator did not suspend"
    assert untouched.metadata.labels[SUSPENDED_BY] == name
    assert not reasons(cluster, namespace, "owners") & {"ResumedByBudget", "ReleasedByBudget"}
