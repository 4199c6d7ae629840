"""TrainingBudget end to end: real Jobs on kwok GPU nodes spend a small budget in real time."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from harness import Cluster, Operator, create_budget, get_budget, gpu_job, wait_for

GPU = "nvidia.com/gpu"


def job(
    name: str, gpus: int, *, suspend: bool = False, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return gpu_job(
        name, gpus, labels={"team": "vision", "project": "vit", **(labels or {})}, suspend=suspend
    )


# Warn at half the budget and suspend the newest first.
LADDER: dict[str, Any] = {
    "thresholds": {"warn": 50, "enforce": 100},
    "enforcement": {"gracePeriod": "0s", "order": ["Newest"]},
}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def running_pods(cluster: Cluster, namespace: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(cluster.api).list_namespaced_pod(namespace).items
    return [
        p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    ]


def crossing(pods: list[client.V1Pod], limit_hours: float) -> datetime:
    """When the budget was exactly spent, from the pods' own start times (1 s resolution)."""
    starts = sorted(
        (p.status.start_time, int(p.spec.containers[0].resources.requests[GPU])) for p in pods
    )
    spent, rate, t = 0.0, 0, starts[0][0]
    for start, gpus in starts:
        spent += rate * (start - t).total_seconds()
        t, rate = start, rate + gpus
    remaining = limit_hours * 3600 - spent
    return t + timedelta(seconds=remaining / rate)


@pytest.mark.parametrize("run", [1, 2, 3])
def test_budget_warns_suspends_and_resumes(
    cluster: Cluster, operator: Operator, namespace: str, run: int
) -> None:
    batch = client.BatchV1Api(cluster.api)
    custom = client.CustomObjectsApi(cluster.api)
    name = f"{namespace}-tb"
    limit = 0.01  # 36 GPU-seconds: two 2-GPU jobs spend it in 9 s
    # The user suspended this one themselves: the budget must never resume it.
    batch.create_namespaced_job(namespace, job("user-paused", 1, suspend=True))
    for n in ("train-a", "train-b"):
        batch.create_namespaced_job(namespace, job(n, 2))
    # Labelled for a Kueue queue in a namespace Kueue does not manage: the label is no shield;
    # the budget gives Kueue 60 s to make its Workload, then suspends the Job itself.
    batch.create_namespaced_job(
        namespace, job("queued", 1, labels={"kueue.x-k8s.io/queue-name": "team-queue"})
    )
    pods = wait_for(
        lambda: (p := running_pods(cluster, namespace)) and len(p) == 3 and p,
        timeout=60,
        what="the three training pods running",
    )
    create_budget(cluster, name, namespace, limit, **LADDER)
    exact_crossing = crossing(pods, limit)

    warning = wait_for(
        lambda: (
            (c := condition(get_budget(cluster, name), "Warning")) and c["status"] == "True" and c
        ),
        timeout=60,
        what="the Warning condition",
    )
    assert warning["reason"] == "ThresholdReached"

    def suspended() -> dict[str, datetime] | None:
        seen = {}
        for n in ("train-a", "train-b"):
            obj = batch.read_namespaced_job(n, namespace)
            if not obj.spec.suspend:
                return None
            seen[n] = datetime.now(UTC)
        return seen

    suspended_at = wait_for(suspended, timeout=60, every=0.05, what="both Jobs suspended")
    reaction = (max(suspended_at.values()) - exact_crossing).total_seconds()
    spent = exact_crossing.isoformat()
    print(f"\nrun {run}: budget spent at {spent}; Jobs suspended {reaction:+.2f}s later")
    # Pod start times have 1 s resolution, so the computed crossing is itself +-1 s.
    assert reaction < 3.0, f"suspended {reaction:.2f}s after the budget was spent (target 2 s)"

    for n in ("train-a", "train-b"):
        obj = batch.read_namespaced_job(n, namespace)
        assert obj.metadata.labels["trainwarden.dev/suspended-by"] == name
        assert "exhausted" in obj.metadata.annotations["trainwarden.dev/suspend-reason"]
    core = client.CoreV1Api(cluster.api)
    wait_for(
        lambda: (
            not core.list_namespaced_pod(
                namespace, label_selector="job-name in (train-a,train-b)"
            ).items
        ),
        timeout=60,
        what="the Job controller to delete the pods (accelerators released)",
    )
    wait_for(
        lambda: (c := condition(get_budget(cluster, name), "Exhausted")) and c["status"] == "True",
        timeout=30,
        what="the Exhausted condition",
    )
    status = get_budget(cluster, name)["status"]
    exhausted = next(c for c in status["conditions"] if c["type"] == "Exhausted")
    assert {s["ref"]["name"] for s in status["suspended"]} == {"train-a", "train-b"}
    # The pods' end times have one-second resolution: usage that stopped at the limit can
    # read up to a second of each of the 5 accelerators below it once they are in. The
    # budget then stays Exhausted for what it keeps suspended (KeepsSuspended), as it does
    # here on some runs (0.009986 of 0.01 h seen).
    slack = 5 / 3600
    used = status["used"]["acceleratorHours"]
    assert used >= limit - slack, status["used"]
    assert exhausted["status"] == "True", "kept for what it suspended"
    assert exhausted["reason"] == ("LimitReached" if used >= limit else "KeepsSuspended")
    assert set(status["remaining"]) == {"acceleratorHours"}, "only limited dimensions"
    assert 0.0 <= status["remaining"]["acceleratorHours"] <= slack, status["remaining"]
    assert batch.read_namespaced_job("user-paused", namespace).spec.suspend is True
    queued = batch.read_namespaced_job("queued", namespace)
    waiting = any(
        line.startswith(f"skipped Pod/{namespace}/queued-")
        and line.endswith("labelled for Kueue, which has no Workload of it yet")
        for line in status["pendingActions"]
    )
    by_budget = (queued.metadata.labels or {}).get("trainwarden.dev/suspended-by") == name
    assert waiting or (queued.spec.suspend and by_budget), status["pendingActions"]

    events = client.CoreV1Api(cluster.api).list_namespaced_event(namespace).items
    reasons = {(e.involved_object.name, e.reason) for e in events}
    assert ("train-a", "SuspendedByBudget") in reasons

    # Raising the limit resumes what the budget suspended, and only that.
    custom.patch_cluster_custom_object(
        "trainwarden.dev",
        "v1alpha1",
        "trainingbudgets",
        name,
        {"spec": {"limits": {"acceleratorHours": 100}}},
    )
    wait_for(
        lambda: all(
            not batch.read_namespaced_job(n, namespace).spec.suspend for n in ("train-a", "train-b")
        ),
        timeout=60,
        what="both Jobs resumed",
    )
    resumed = batch.read_namespaced_job("train-a", namespace)
    assert "trainwarden.dev/suspended-by" not in (resumed.metadata.labels or {})
    wait_for(lambda: len(running_pods(cluster, namespace)) == 3, timeout=60, what="pods back")
    assert batch.read_namespaced_job("user-paused", namespace).spec.suspend is True
    custom.delete_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", name)


def test_dry_run_reports_and_changes_nothing(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    batch = client.BatchV1Api(cluster.api)
    custom = client.CustomObjectsApi(cluster.api)
    name = f"{namespace}-dry"
    batch.create_namespaced_job(namespace, job("train", 4))
    batch.create_namespaced_job(
        namespace, job("mislabelled", 1, labels={"trainwarden.dev/budget": "no-such-budget"})
    )
    wait_for(
        lambda: len(running_pods(cluster, namespace)) == 2, timeout=60, what="the pods running"
    )
    create_budget(cluster, name, namespace, 0.001, mode="DryRun", **LADDER)
    status = wait_for(
        lambda: (
            (s := get_budget(cluster, name).get("status", {})) and s.get("pendingActions") and s
        ),
        timeout=60,
        what="the DryRun budget to report what it would do",
    )
    print("\n" + json.dumps(status["pendingActions"]))
    assert any(f"would suspend Job/{namespace}/train" in line for line in status["pendingActions"])
    assert condition(get_budget(cluster, name), "Exhausted")["status"] == "True"
    obj = batch.read_namespaced_job("train", namespace)
    assert not obj.spec.suspend
    assert "trainwarden.dev/suspended-by" not in (obj.metadata.labels or {})
    assert running_pods(cluster, namespace)

    # A label naming a budget that does not exist is reported; the pod is charged by scope.
    core = client.CoreV1Api(cluster.api)
    event = wait_for(
        lambda: next(
            (e for e in core.list_namespaced_event(namespace).items if e.reason == "UnknownBudget"),
            None,
        ),
        timeout=30,
        what="an UnknownBudget event on the mislabelled pod",
    )
    assert event.involved_object.name.startswith("mislabelled-")
    assert "no such budget" in event.message
    pending = get_budget(cluster, name)["status"]["pendingActions"]
    assert any("/mislabelled " in line for line in pending), pending  # charged by scope
    custom.delete_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", name)


def test_deleting_budgets_mid_flight_does_not_stop_the_others(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """Budgets come and go while evaluations await the API; the controller must carry on."""
    custom = client.CustomObjectsApi(cluster.api)
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, job("train", 1))
    wait_for(lambda: running_pods(cluster, namespace), timeout=60, what="the pod running")
    keeper = f"{namespace}-keeper"
    create_budget(cluster, keeper, namespace, 100, mode="DryRun", **LADDER)
    for i in range(5):
        name = f"{namespace}-churn-{i}"
        create_budget(cluster, name, namespace, 100, mode="DryRun", **LADDER)
        custom.delete_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", name)
    # A pod event wakes the controller; the surviving budget must be evaluated after the
    # churn. Its status showing the new pod's burn proves that: "lastEvaluated later than
    # the test's clock" did not, for the stamp is the server's time as the operator
    # estimates it from one-second Date headers (clock.py), which may read a second behind
    # ours, and the next write of an unchanged burn is a minute away (budget/record.py).
    client.BatchV1Api(cluster.api).create_namespaced_job(namespace, job("poke", 1))

    def burn() -> object:
        status = get_budget(cluster, keeper).get("status", {})
        return status.get("burnRatePerHour", {}).get("acceleratorHours")

    wait_for(
        lambda: burn() == 2,  # the train and poke pods, 1 GPU each
        timeout=60,
        what="the surviving budget evaluated with the pod created after the churn",
    )
    assert operator.process.poll() is None
    errors = [line for line in operator.log_lines() if '"level": "error"' in line]
    assert not errors, errors[:3]
