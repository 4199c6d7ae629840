"""trainwarden as Kueue's budget AdmissionCheck, and enforcement through Kueue, against the
real API server and the real Kueue (v0.17.0, e2e/cluster/README.md "Kueue"):

- a ClusterQueue with trainwarden's AdmissionCheck holds a Workload Pending (Job suspended,
  no pods) while the budget covering it is exhausted; a raised limit turns the check
  Ready, Kueue admits it and its pod runs;
- a Workload whose declared time times its requests exceeds the budget's limit is
  Rejected, with its estimate in the message;
- an exhausted budget deactivates the Workload of a running Kueue-managed Job (Kueue
  suspends the Job), and reactivates it when the limit is raised; a Workload someone
  else deactivated stays deactivated.

The operator runs as instance `kueue-check` and answers for the AdmissionChecks whose
controllerName is `trainwarden.dev/budget-kueue-check`; every budget here carries that
instance's label, so no other operator on the cluster acts on them, nor this one on theirs.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from harness import (
    Cluster,
    Operator,
    budget,
    events_for,
    get_budget,
    gpu_job,
    holds,
    start_operator,
    wait_for,
)
from test_kueue_harness import (
    GROUP,
    QUEUE_LABEL,
    VERSION,
    Kueue,
    cluster_queue_active,
    condition,
    is_true,
    job_suspended,
    labelled_namespace,
    quota,
    running_pods,
)

INSTANCE = "kueue-check"
CONTROLLER = f"trainwarden.dev/budget-{INSTANCE}"
MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    running = start_operator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        args=(f"--instance={INSTANCE}",),
    )
    yield running
    running.stop()


@pytest.fixture
def kueue(cluster: Cluster) -> Iterator[Kueue]:
    objects = Kueue(cluster)
    yield objects
    objects.delete_created()


@pytest.fixture
def ns(cluster: Cluster) -> Iterator[str]:
    """A namespace Kueue manages; the budgets named after it go with it."""
    yield from labelled_namespace(cluster, "tw-kc")


def create_budget(cluster: Cluster, name: str, namespace: str, hours: float) -> None:
    body = budget(name, namespace, hours).instance(INSTANCE).build()
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", body
    )


def set_limit(cluster: Cluster, name: str, hours: float) -> None:
    client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", name,
        {"spec": {"limits": {"acceleratorHours": hours}}},
    )  # fmt: skip


def exhausted(cluster: Cluster, name: str) -> bool:
    found = condition(get_budget(cluster, name), "Exhausted")
    return found is not None and found["status"] == "True"


def queues(kueue: Kueue, ns: str, *, check: bool) -> tuple[str, str]:
    """A flavor, a ClusterQueue for this namespace (with our AdmissionCheck, or none) and
    its LocalQueue; returns (ClusterQueue, LocalQueue) once the ClusterQueue is Active."""
    flavor, cq, lq = f"{ns}-gpu", ns, "team-queue"
    spec = quota(ns, flavor)
    if check:
        kueue.create("admissionchecks", f"{ns}-budget", {"controllerName": CONTROLLER})
        spec |= {"admissionChecksStrategy": {"admissionChecks": [{"name": f"{ns}-budget"}]}}
    kueue.create("resourceflavors", flavor, {"nodeLabels": {"type": "kwok"}})
    kueue.create("clusterqueues", cq, spec)
    kueue.local_queue(ns, lq, cq)
    # With a check, the queue is Active only once trainwarden marked the check Active.
    wait_for(cluster_queue_active(kueue, cq), timeout=60, what=f"ClusterQueue {cq} Active")
    return cq, lq


def kueue_job(
    cluster: Cluster, ns: str, name: str, queue: str, labels: dict[str, str] | None = None
) -> client.V1Job:
    manifest = gpu_job(name, 1)
    manifest["metadata"]["labels"] = {QUEUE_LABEL: queue, **(labels or {})}
    job: client.V1Job = client.BatchV1Api(cluster.api).create_namespaced_job(ns, manifest)
    return job


def workload_name(kueue: Kueue, ns: str, job: client.V1Job) -> str:
    found = wait_for(lambda: kueue.workload_of(ns, job), timeout=30, what="the Job's Workload")
    return str(found["metadata"]["name"])


def our_check(kueue: Kueue, ns: str, workload: str) -> Obj | None:
    for entry in (kueue.workload(ns, workload).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == f"{ns}-budget":
            return dict(entry)
    return None


def spend(cluster: Cluster, ns: str, name: str) -> None:
    """A plain GPU Job (not Kueue's: no queue label) whose pod spends the budget."""
    client.BatchV1Api(cluster.api).create_namespaced_job(ns, gpu_job(name, 1))
    wait_for(lambda: running_pods(cluster, ns, name), timeout=60, what=f"{name}'s pod Running")


def test_an_exhausted_budget_holds_the_workload_pending_until_the_limit_is_raised(
    cluster: Cluster, operator: Operator, kueue: Kueue, ns: str
) -> None:
    _, lq = queues(kueue, ns, check=True)
    check = kueue.get("admissionchecks", f"{ns}-budget")
    assert is_true(check, "Active"), check.get("status")

    tb = f"{ns}-tb"
    spend(cluster, ns, "spender")
    create_budget(cluster, tb, ns, 0.0005)  # 1.8 GPU-seconds
    wait_for(lambda: exhausted(cluster, tb), timeout=60, what="the budget Exhausted")

    job = kueue_job(cluster, ns, "train", lq)
    name = workload_name(kueue, ns, job)
    pending = wait_for(
        lambda: (c := our_check(kueue, ns, name)) and c.get("message") and c,
        timeout=60,
        what="our check's message on the Workload",
    )
    assert pending["state"] == "Pending", pending
    assert f"TrainingBudget {tb} is exhausted" in pending["message"], pending
    wl = kueue.workload(ns, name)
    assert is_true(wl, "QuotaReserved"), "Pending keeps the quota reserved"
    holds(
        lambda: (
            job_suspended(cluster, ns, "train")
            and not running_pods(cluster, ns, "train")
            and not is_true(kueue.workload(ns, name), "Admitted")
        ),
        duration=5,
        what="Job suspended, no pods, not admitted while the budget is exhausted",
    )

    set_limit(cluster, tb, 100)
    ready = wait_for(
        lambda: (c := our_check(kueue, ns, name)) and c["state"] == "Ready" and c,
        timeout=60,
        what="our check Ready once the limit is raised",
    )
    assert f"TrainingBudget {tb} can pay for it" in ready["message"], ready
    wait_for(lambda: is_true(kueue.workload(ns, name), "Admitted"), timeout=30, what="Admitted")
    wait_for(lambda: running_pods(cluster, ns, "train"), timeout=60, what="the pod Running")
    reasons = {e.reason for e in events_for(cluster, ns, name)}
    assert {"HeldByBudget", "BudgetCheckReady"} <= reasons, reasons


def test_a_workload_whose_estimate_exceeds_the_limit_is_rejected(
    cluster: Cluster, operator: Operator, kueue: Kueue, ns: str
) -> None:
    _, lq = queues(kueue, ns, check=True)
    tb = f"{ns}-tb"
    create_budget(cluster, tb, ns, 0.01)  # 36 GPU-seconds a day
    wait_for(lambda: get_budget(cluster, tb).get("status", {}).get("remaining"), what="status")

    job = kueue_job(cluster, ns, "huge", lq, labels={MAX_EXEC: "3600"})  # 1 GPU for 1 h
    name = workload_name(kueue, ns, job)
    assert kueue.workload(ns, name)["spec"].get("maximumExecutionTimeSeconds") == 3600
    # Kueue deactivates a Workload whose check is Rejected, at once; its Job never starts.
    wl = wait_for(
        lambda: (w := kueue.workload(ns, name))["spec"].get("active") is False and w,
        timeout=60,
        what="Kueue deactivates the rejected Workload",
    )
    evicted = condition(wl, "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "DeactivatedDueToAdmissionCheck", evicted
    # Kueue resets the check to Pending when it evicts ("Previously: Rejected"): our
    # message lasts in the Event on the Workload (and the operator's log).
    entry = our_check(kueue, ns, name)
    assert entry is not None
    assert "Previously: Rejected" in entry["message"], entry
    event = wait_for(
        lambda: next(
            (e for e in events_for(cluster, ns, name) if e.reason == "RejectedByBudget"), None
        ),
        timeout=30,
        what="the RejectedByBudget Event",
    )
    assert "1 accelerator-hours" in event.message, event.message
    assert f"TrainingBudget {tb}'s whole limit of 0.01" in event.message, event.message
    holds(
        lambda: kueue.workload(ns, name)["spec"].get("active") is False,
        duration=3,
        what="the rejected Workload stays deactivated (trainwarden never reactivates it)",
    )
    assert job_suspended(cluster, ns, "huge")
    assert not running_pods(cluster, ns, "huge")


def test_an_exhausted_budget_deactivates_a_running_kueue_workload_and_reactivates_it(
    cluster: Cluster, operator: Operator, kueue: Kueue, ns: str
) -> None:
    _, lq = queues(kueue, ns, check=False)
    train = kueue_job(cluster, ns, "train", lq)
    theirs = kueue_job(cluster, ns, "theirs", lq)
    for each in ("train", "theirs"):
        wait_for(lambda j=each: running_pods(cluster, ns, j), timeout=60, what=f"{each} running")
    train_wl, their_wl = workload_name(kueue, ns, train), workload_name(kueue, ns, theirs)
    # Someone else deactivates "theirs": never ours to reactivate.
    kueue.api.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads", their_wl, {"spec": {"active": False}}
    )
    wait_for(lambda: job_suspended(cluster, ns, "theirs"), timeout=30, what="theirs suspended")

    tb = f"{ns}-tb"
    create_budget(cluster, tb, ns, 0.002)  # 7.2 GPU-seconds: spent by "train" at once
    deactivated = wait_for(
        lambda: (wl := kueue.workload(ns, train_wl))["spec"].get("active") is False and wl,
        timeout=60,
        what="the budget deactivates train's Workload",
    )
    assert deactivated["metadata"]["labels"]["trainwarden.dev/suspended-by"] == tb
    assert "exhausted" in deactivated["metadata"]["annotations"]["trainwarden.dev/suspend-reason"]
    wait_for(lambda: job_suspended(cluster, ns, "train"), timeout=30, what="Kueue suspends it")
    wait_for(lambda: not running_pods(cluster, ns, "train"), timeout=60, what="its pod gone")
    suspended = client.BatchV1Api(cluster.api).read_namespaced_job("train", ns)
    assert suspended.metadata.labels["trainwarden.dev/suspended-by"] == tb
    status = wait_for(
        lambda: (s := get_budget(cluster, tb)["status"]).get("suspended") and s,
        timeout=30,
        what="the suspension in the budget's status",
    )
    assert [s["ref"]["name"] for s in status["suspended"]] == ["train"]
    assert "DeactivatedByBudget" in {e.reason for e in events_for(cluster, ns, train_wl)}

    set_limit(cluster, tb, 100)
    wait_for(
        lambda: kueue.workload(ns, train_wl)["spec"].get("active") is True,
        timeout=60,
        what="the budget reactivates train's Workload",
    )
    wait_for(lambda: running_pods(cluster, ns, "train"), timeout=60, what="train running again")
    labels = kueue.workload(ns, train_wl)["metadata"].get("labels") or {}
    assert "trainwarden.dev/suspended-by" not in labels
    holds(
        lambda: kueue.workload(ns, their_wl)["spec"].get("active") is False,
        duration=5,
        what="the Workload someone else deactivated stays deactivated",
    )
    assert job_suspended(cluster, ns, "theirs")
