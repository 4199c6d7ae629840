"""Efficiency end to end: Jobs on kwok GPU nodes, per-GPU values from the DCGM stand-in
through the real Prometheus, and the operator's budget and idle policy saying how much of
what was held did work, and which job asks for more GPUs than it uses.

One world per module: a 4-GPU Job with two busy GPUs and two idle ones, and a 2-GPU Job
whose series stop (a gap, unknown), under one budget and one idle policy with rightsizing.
"""

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    Cluster,
    Operator,
    budget,
    create_policy,
    delete_policies_of,
    events_for,
    forget_utilization,
    get_policy,
    gpu_job,
    idle_policy,
    publish_utilization,
    start_operator,
    wait_for,
)
from trainwarden.adapters.prometheus import Prometheus

INSTANCE = "efficiency"
RESOLUTION = "10s"  # twice the harness's 5 s scrape interval


@dataclass
class World:
    cluster: Cluster
    namespace: str
    pods: dict[str, str]
    started: float

    @property
    def budget(self) -> str:
        return f"{self.namespace}-tb"

    @property
    def policy(self) -> str:
        return f"{self.namespace}-idle"

    def efficiency(self) -> dict[str, Any]:
        status = get_policy(self.cluster, "trainingbudgets", self.budget).get("status", {})
        return dict(status.get("efficiency") or {})

    def team(self, value: str) -> dict[str, Any]:
        rows = self.efficiency().get("breakdown", {}).get("byLabel", {}).get("team", [])
        return next((r for r in rows if r["key"] == value), {})


def _running(cluster: Cluster, namespace: str, job: str) -> str:
    core = client.CoreV1Api(cluster.api)

    def found() -> str | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        return next((p.metadata.name for p in pods if p.status.phase == "Running"), None)

    return wait_for(found, timeout=60, what=f"the {job} pod running")


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    log: Path = tmp_path_factory.mktemp("efficiency") / "operator.log"
    running = start_operator(
        cluster.kubeconfig,
        log,
        prometheus_url=cluster.prometheus_url,
        args=(f"--instance={INSTANCE}",),
    )
    yield running
    running.stop()
    print(f"\noperator log: {log}")


@pytest.fixture(scope="module")
def world(cluster: Cluster, operator: Operator) -> Iterator[World]:
    namespace = f"eff-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(cluster.api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    batch = client.BatchV1Api(cluster.api)
    batch.create_namespaced_job(namespace, gpu_job("vit", 4, labels={"team": "vision"}))
    batch.create_namespaced_job(namespace, gpu_job("gappy", 2, labels={"team": "gaps"}))
    pods = {job: _running(cluster, namespace, job) for job in ("vit", "gappy")}
    publish_utilization(cluster, namespace, pods["vit"], 0, gpus=4, per_gpu=[90, 90, 0, 0])
    publish_utilization(cluster, namespace, pods["gappy"], 50, gpus=2)
    world = World(cluster, namespace, pods, time.time())
    tb = budget(world.budget, namespace, 1000).dry_run().instance(INSTANCE)
    tb.field("spec.efficiency", {"resolution": RESOLUTION})
    create_policy(cluster, "trainingbudgets", tb.build())
    irp = idle_policy(world.policy, namespace).action("NotifyOnly").instance(INSTANCE)
    create_policy(cluster, "idlereclaimpolicies", irp.rightsizing(window="1m").build())
    yield world
    delete_policies_of(cluster, namespace)
    client.CoreV1Api(cluster.api).delete_namespace(namespace)


def test_two_busy_gpus_of_four_are_half_the_held_time_used(world: World) -> None:
    """The busy half of vit's GPUs at 90 %: 45 % of its measured time did work."""

    def measured() -> dict[str, Any] | None:
        vision = world.team("vision")
        known = vision.get("usedAcceleratorHours", 0) + vision.get("idleAcceleratorHours", 0)
        return vision if known * 3600 >= 4 * 40 else None  # 40 s of all four GPUs

    vision = wait_for(measured, timeout=120, every=1, what="40 s of vit's GPUs measured")
    used, idle = vision["usedAcceleratorHours"], vision["idleAcceleratorHours"]
    unknown, held = vision["unknownAcceleratorHours"], vision["heldAcceleratorHours"]
    assert used / (used + idle) == pytest.approx(0.45, abs=0.03)
    assert held == pytest.approx(used + idle + unknown, abs=1e-5)
    total = world.efficiency()["total"]
    assert total["heldAcceleratorHours"] >= held
    print(
        f"\nvit: held {held * 3600:.0f} GPU-s, used {used * 3600:.0f}, idle {idle * 3600:.0f},"
        f" unknown {unknown * 3600:.0f}; effective {vision['effectivePercent']}%"
    )


def test_series_that_stop_are_unknown_never_idle(world: World) -> None:
    """gappy's series stop: the time after is unknown, not idle and not used."""
    core = client.CoreV1Api(world.cluster.api)
    began = core.read_namespaced_pod(world.pods["gappy"], world.namespace).status.start_time
    forget_utilization(world.cluster, world.namespace, world.pods["gappy"])
    stopped = datetime.now(UTC)

    def measured_past_the_stop() -> dict[str, Any] | None:
        until = world.efficiency().get("measuredUntil")
        late = until and datetime.fromisoformat(until) >= stopped + timedelta(seconds=40)
        return world.team("gaps") if late else None

    gaps = wait_for(measured_past_the_stop, timeout=150, every=1, what="40 s past the stop")
    until = datetime.fromisoformat(world.efficiency()["measuredUntil"])
    known = (gaps["usedAcceleratorHours"] + gaps["idleAcceleratorHours"]) * 3600
    ran = (stopped - began).total_seconds()
    silent = (until - stopped).total_seconds()
    assert known <= 2 * (ran + 10), f"{known:.0f} GPU-s measured of {2 * ran:.0f} before the stop"
    assert gaps["unknownAcceleratorHours"] * 3600 >= 2 * (silent - 10)
    assert gaps["usedAcceleratorHours"] == pytest.approx(gaps["idleAcceleratorHours"], rel=0.1)
    print(
        f"\ngappy: {known:.0f} GPU-s measured in {ran:.0f} s before its series stopped,"
        f" {gaps['unknownAcceleratorHours'] * 3600:.0f} GPU-s unknown after ({silent:.0f} s)"
    )


def test_an_over_provisioned_job_gets_a_recommendation_and_nothing_else(world: World) -> None:
    job_before = client.BatchV1Api(world.cluster.api).read_namespaced_job("vit", world.namespace)

    def told() -> Any:
        found = [e for e in events_for(world.cluster, world.namespace, "vit")]
        return next((e for e in found if e.reason == "OverProvisioned"), None)

    event = wait_for(told, timeout=150, every=1, what="the OverProvisioned Event on Job vit")
    elapsed = time.time() - world.started
    assert event.involved_object.kind == "Job"
    assert "holds 4 GPUs; 2 stayed below 5% for 1m" in event.message
    assert event.message.endswith("request 2")
    status = get_policy(world.cluster, "idlereclaimpolicies", world.policy)["status"]
    [entry] = [e for e in status["overProvisioned"] if e["name"] == "vit"]
    assert (entry["busy"], entry["idle"], entry["recommendedPerPod"]) == (2, 2, 2)
    assert all(e["name"] != "gappy" for e in status["overProvisioned"])  # 50 % on both
    job_after = client.BatchV1Api(world.cluster.api).read_namespaced_job("vit", world.namespace)
    assert job_after.spec.template == job_before.spec.template
    assert not job_after.spec.suspend
    print(f"\nrecommendation {elapsed:.0f} s after the jobs started: {event.message}")


def test_the_adapter_reads_per_gpu_windows_from_real_prometheus(world: World) -> None:
    prometheus = Prometheus(world.cluster.prometheus_url)
    now = datetime.now(UTC)
    series = asyncio.run(
        prometheus.per_gpu(
            "DCGM_FI_DEV_GPU_UTIL",
            namespaces=[world.namespace],
            window=timedelta(seconds=30),
            resolution=timedelta(seconds=10),
            at=now,
        )
    )
    vit = sorted(s.peak for s in series if s.pod == world.pods["vit"])
    assert vit == [0.0, 0.0, 90.0, 90.0]
    assert all(s.samples >= 5 for s in series if s.pod == world.pods["vit"])
