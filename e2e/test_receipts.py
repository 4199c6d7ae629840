"""A receipt for every run, end to end: a 2-GPU Job runs on kwok with its utilization
published through the real Prometheus, finishes; its RunReceipt appears in its namespace
with held and used accelerator-hours matching what ran, the Event and the annotation are
on the Job, the receipt outlives the Job, and `trainwarden report --runs` lists it.

The operator runs with an instance of its own (the budget is labelled for it), so that
other operators on the shared cluster neither charge nor receipt this test's Job.
"""

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    ROOT,
    Cluster,
    Operator,
    budget,
    create_policy,
    events_for,
    publish_utilization,
    simulated,
    start_operator,
    wait_for,
)
from trainwarden.testing.builders import JobBuilder
from trainwarden.testing.cluster import PersistentVolumeBuilder, PVCBuilder

GROUP, VERSION, PLURAL = "trainwarden.dev", "v1alpha1", "runreceipts"
RUNS_FOR = 60
"""Seconds the Job's pod runs on kwok."""
GPUS = 2
UTILIZATION = 50


@pytest.fixture
def receipts_operator(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> Iterator[tuple[Operator, str]]:
    instance = f"receipts-{namespace}"
    running = start_operator(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        prometheus_url=cluster.prometheus_url,
        args=(f"--instance={instance}", "--receipt-resolution=10s"),
    )
    yield running, instance
    running.stop()


def _receipts(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    found = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    items: list[dict[str, Any]] = found["items"]
    return items


def test_a_finished_job_leaves_a_receipt_that_outlives_it(
    cluster: Cluster, namespace: str, receipts_operator: tuple[Operator, str]
) -> None:
    _, instance = receipts_operator
    spec = budget(f"{namespace}-b", namespace, 100).instance(instance).accelerator_rate(2.0)
    create_policy(cluster, "trainingbudgets", spec.build())
    labels = {"team": "vision", "experiment": "lr-3e4"}
    job = simulated(JobBuilder("train", namespace), GPUS).backoff_limit(0)
    job.labels(labels).pod_labels(labels).completes_after(f"{RUNS_FOR}s")
    batch, core = client.BatchV1Api(cluster.api), client.CoreV1Api(cluster.api)
    batch.create_namespaced_job(namespace, job.build())

    def running_pod() -> str | None:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        started = [p for p in pods if p.status.start_time is not None]
        return started[0].metadata.name if started else None

    pod = wait_for(running_pod, timeout=60, what="the Job's pod to start")
    publish_utilization(cluster, namespace, pod, UTILIZATION, gpus=GPUS)

    (receipt,) = wait_for(
        lambda: _receipts(cluster, namespace), timeout=RUNS_FOR + 90, what="the RunReceipt"
    )
    got = receipt["spec"]
    print(json.dumps(got, indent=2))
    assert got["outcome"] == "Succeeded"
    assert got["workload"]["kind"] == "Job"
    assert got["workload"]["name"] == "train"
    assert got["labels"] == labels
    hours = got["acceleratorHours"]
    expected = GPUS * RUNS_FOR / 3600
    assert hours["held"] == pytest.approx(expected, rel=0.15)
    # Utilization is published a moment after the pod starts, and Prometheus scrapes every
    # 5 s: most of the run is measured, and what is measured is half busy.
    measured = hours["used"] + hours["idle"]
    assert measured >= 0.7 * hours["held"]
    assert hours["used"] / measured == pytest.approx(UTILIZATION / 100, abs=0.05)
    assert got["cost"] == pytest.approx(2.0 * hours["held"], rel=1e-3)
    assert got["charges"][0]["budget"] == f"{namespace}-b"

    # The Event and the annotation follow the receipt's create (a few API calls later).
    (event,) = wait_for(
        lambda: [e for e in events_for(cluster, namespace, "train") if e.reason == "RunReceipt"],
        timeout=10,
        what="the RunReceipt Event",
    )
    assert event.message.startswith("Run finished Succeeded in ")
    note = wait_for(
        lambda: (batch.read_namespaced_job("train", namespace).metadata.annotations or {}).get(
            "trainwarden.dev/receipt"
        ),
        timeout=10,
        what="the receipt annotation on the Job",
    )
    assert json.loads(note)["receipt"] == receipt["metadata"]["name"]
    printed = cluster.kubectl("get", "rcpt", "-n", namespace)
    assert "Succeeded" in printed
    assert "train" in printed

    batch.delete_namespaced_job("train", namespace, propagation_policy="Background")
    wait_for(
        lambda: not batch.list_namespaced_job(namespace).items, timeout=30, what="the Job gone"
    )
    assert [r["metadata"]["uid"] for r in _receipts(cluster, namespace)] == [
        receipt["metadata"]["uid"]
    ]

    report = subprocess.run(
        [str(ROOT / ".venv/bin/trainwarden"), "report", "--runs", "-n", namespace, "-o", "json"],
        env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (row,) = json.loads(report.stdout)
    assert (row["workload"], row["outcome"], row["labels"]) == ("Job/train", "Succeeded", labels)
    assert row["held"] == hours["held"]
    assert row["cost"] == got["cost"]


MOUNTS_FOR = 40
"""Seconds the pod mounting claims runs."""
HOLD = "test.trainwarden.dev/hold"
"""A finalizer of the test's: the deleted claim's deletionTimestamp stays readable."""


def bound_claim(cluster: Cluster, namespace: str, name: str, gib: int) -> None:
    """A claim bound to a PersistentVolume reserved for it (the scheduler places no pod on
    an unbound claim): the PV controller binds them."""
    core = client.CoreV1Api(cluster.api)
    pv = PersistentVolumeBuilder(f"{namespace}-{name}").size(f"{gib}Gi")  # Retain
    pv = pv.host_path(f"/tmp/{namespace}-{name}").claim(namespace, name)
    core.create_persistent_volume(pv.build())
    pvc = (
        PVCBuilder(name, namespace).size(f"{gib}Gi").storage_class("").volume(f"{namespace}-{name}")
    )
    core.create_namespaced_persistent_volume_claim(namespace, pvc.build())


def _at(stamp: Any) -> float:
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    return datetime.fromisoformat(str(stamp)).timestamp()


def test_a_receipt_charges_the_claims_its_pod_mounted_by_the_api_server_s_timestamps(
    cluster: Cluster, namespace: str, receipts_operator: tuple[Operator, str]
) -> None:
    """issue 28 item 3: a pod mounting two claims, one deleted while it runs (pvc-protection
    keeps it to the pod's end; its charge stops at its deletionTimestamp). The receipt's
    storage equals request x overlap from the API server's own timestamps (pod start, Job
    completion, deletion), within 1 GiB-second a claim."""
    _, instance = receipts_operator
    spec = budget(f"{namespace}-b", namespace, 100).instance(instance).accelerator_rate(2.0)
    create_policy(cluster, "trainingbudgets", spec.build())
    core, batch = client.CoreV1Api(cluster.api), client.BatchV1Api(cluster.api)
    bound_claim(cluster, namespace, "data", 2)
    bound_claim(cluster, namespace, "scratch", 1)
    core.patch_namespaced_persistent_volume_claim(
        "scratch", namespace, {"metadata": {"finalizers": ["kubernetes.io/pvc-protection", HOLD]}}
    )
    job = simulated(JobBuilder("mounts", namespace), 1).backoff_limit(0)
    job = job.claim("data").claim("scratch", volume="scratch", mount_path="/scratch")
    batch.create_namespaced_job(namespace, job.completes_after(f"{MOUNTS_FOR}s").build())

    def started() -> Any:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=mounts").items
        return next((p for p in pods if p.status.start_time is not None), None)

    pod = wait_for(started, timeout=90, what="the pod mounting the claims to start")
    time.sleep(10)  # an interval of the run, not a wait for a condition: deleted mid-run
    core.delete_namespaced_persistent_volume_claim("scratch", namespace)
    scratch = core.read_namespaced_persistent_volume_claim("scratch", namespace).metadata
    data = core.read_namespaced_persistent_volume_claim("data", namespace).metadata
    (receipt,) = wait_for(
        lambda: _receipts(cluster, namespace), timeout=MOUNTS_FOR + 90, what="the RunReceipt"
    )
    got = receipt["spec"]
    print(json.dumps(got["storage"], indent=2))
    begin = pod.status.start_time.timestamp()
    assert _at(got["startedAt"]) == begin
    completed = batch.read_namespaced_job("mounts", namespace).status.completion_time
    assert abs(_at(got["finishedAt"]) - completed.timestamp()) <= 1
    end = _at(got["finishedAt"])
    deletion = scratch.deletion_timestamp.timestamp()
    assert data.creation_timestamp.timestamp() <= begin < deletion < end
    seconds = 2 * (end - begin) + 1 * (deletion - begin)
    storage = got["storage"]
    print(f"{storage['gibHours'] * 3600:.4f} GiB-s charged, {seconds:.4f} by the timestamps")
    assert storage["gibHours"] * 3600 == pytest.approx(seconds, abs=2.0)  # 1 GiB-s a claim
    assert storage["claims"] == 2
    assert storage["byClass"] == [{"storageClass": "", "gibHours": storage["gibHours"]}]
    assert "unknownClaims" not in storage or storage["unknownClaims"] == 0
    core.patch_namespaced_persistent_volume_claim(
        "scratch", namespace, {"metadata": {"finalizers": None}}
    )
    for name in ("data", "scratch"):  # Retain: not the PV controller's to delete
        core.delete_persistent_volume(f"{namespace}-{name}")


def test_past_the_cap_each_receipt_removes_the_oldest_at_once(
    cluster: Cluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    """With a cap of 2, three Jobs finishing 10 s apart: the third receipt's write removes
    the first run's receipt by a DELETE of what the ledger knows (the first sweep's answer
    and the POSTs' since, with the real server's uid, resourceVersion and timestamps),
    so the namespace never holds three (before, a sweep once a minute restored the cap:
    three for most of a minute)."""
    instance = f"capped-{namespace}"
    running = start_operator(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        args=(f"--instance={instance}", "--receipts-per-namespace=2"),
    )
    try:
        spec = budget(f"{namespace}-b", namespace, 100).instance(instance)
        create_policy(cluster, "trainingbudgets", spec.build())
        batch = client.BatchV1Api(cluster.api)
        for i in range(3):
            job = simulated(JobBuilder(f"run-{i}", namespace), 1).backoff_limit(0)
            batch.create_namespaced_job(namespace, job.completes_after(f"{10 + 10 * i}s").build())
        seen: list[int] = []

        def all_written() -> bool:
            seen.append(len(_receipts(cluster, namespace)))
            jobs = batch.list_namespaced_job(namespace).items
            noted = [j for j in jobs if "trainwarden.dev/receipt" in (j.metadata.annotations or {})]
            return len(noted) == 3

        wait_for(all_written, timeout=150, every=0.3, what="three receipts written")
        left = sorted(r["spec"]["workload"]["name"] for r in _receipts(cluster, namespace))
        assert left == ["run-1", "run-2"], "the run that finished first goes first"
        assert max(seen) <= 2, f"the cap of 2 was passed: {seen}"
        log = (tmp_path / "operator.log").read_text()
        assert "run receipts removed" in log
    finally:
        running.stop()
