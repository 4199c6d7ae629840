"""Releasing held work never overcommits what a raise left, on the real API server (issue 25).

The review's case: after a raise left about one GPU-hour, three held Jobs declaring 30,
40 and 20 minutes on one GPU (0.5, 0.667, 0.333 GPU-hours) all started within 120 ms,
because each evaluation counted what it started from zero and the started Jobs had used
nothing yet. Set up as e2e/test_admission.py does (this module's own operator serving the
chart's webhook, a budget spent by a real Job on a kwok GPU node, Jobs created held by
`kubectl create`): exactly the first and the third start, and the second stays held, its
budget's status saying why, however many evaluations the started Jobs' pods cause.
"""

import time
from typing import Any

from kubernetes import client

from harness import Cluster, get_budget, holds, wait_for
from test_admission import (  # the webhook fixture: this module gets its own operator
    Webhook,
    exhaust,
    job_in,
    kubectl_create,
    pods_of,
    raise_limit,
    webhook,  # noqa: F401
)

EXPECTED_DURATION = "trainwarden.dev/expected-duration"
HELD_BY = "trainwarden.dev/held-by"
DECLARED = (("first", 30), ("second", 40), ("third", 20))  # minutes on one GPU


def declaring(job: dict[str, Any], minutes: int) -> dict[str, Any]:
    job["metadata"].setdefault("annotations", {})[EXPECTED_DURATION] = f"{minutes}m"
    return job


def admission(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((get_budget(cluster, name).get("status") or {}).get("admission") or {})


def test_a_raise_with_room_for_two_of_three_held_jobs_starts_exactly_those(
    cluster: Cluster,
    webhook: Webhook,  # noqa: F811
    namespace: str,
) -> None:
    name = exhaust(cluster, namespace)
    batch = client.BatchV1Api(cluster.api)
    for job, minutes in DECLARED:
        printed = kubectl_create(cluster, declaring(job_in(namespace, job), minutes))
        assert "is held (spec.suspend)" in printed, printed
    wait_for(
        lambda: not pods_of(cluster, namespace, "job-name=spender"),
        timeout=60,
        what="the spent budget's Job suspended and its pods gone",
    )
    wait_for(lambda: admission(cluster, name).get("held") == 3, timeout=60, what="3 held")
    used = float(get_budget(cluster, name)["status"]["used"]["acceleratorHours"])

    raised = time.monotonic()
    raise_limit(cluster, name, round(used + 1.0, 6))  # one GPU-hour left: 0.5 + 0.333 fit

    def running(job: str) -> bool:
        return any(
            p.status.phase == "Running" for p in pods_of(cluster, namespace, f"job-name={job}")
        )

    wait_for(lambda: running("first") and running("third"), timeout=90, what="first and third")
    print(f"\nfirst and third running {time.monotonic() - raised:.1f}s after the raise")

    def second_held() -> bool:
        job = batch.read_namespaced_job("second", namespace)
        return job.spec.suspend is True and (job.metadata.annotations or {}).get(HELD_BY) == name

    holds(second_held, duration=20, what="the Job that does not fit still held")
    status = get_budget(cluster, name)["status"]
    released = [r["ref"]["name"] for r in status["admission"]["released"]]
    assert released == ["first", "third"], status["admission"]
    assert status["admission"]["held"] == 1
    why = [
        p
        for p in status.get("pendingActions", [])
        if p.startswith(f"holding Job/{namespace}/second")
    ]
    assert len(why) == 1, status.get("pendingActions")
    assert "its estimate needs more acceleratorHours" in why[0]
    assert "committed to work it started" in why[0]
    print(f"second held 20s after first and third started: {why[0]}")
