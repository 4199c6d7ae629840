"""Over-provisioned accelerators: the verdict per accelerator against a brute-force
reference, and the policy's Event, status and silence through the reconciler."""

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from test_idle_reconcile import NS, Idle, policy
from trainwarden.adapters.prometheus import MetricsUnavailable
from trainwarden.core.rightsizing import GpuSeries, Holder, recommend
from trainwarden.idle.reconcile import reconcile
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder
from world import World, run

THRESHOLD, MIN = 5.0, 10


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Holder], list[GpuSeries]]:
    holders, series = [], []
    for w in range(draw(st.integers(0, 4))):
        pods = []
        for p in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 8))
            pod = f"w{w}-{p}"
            pods.append((pod, n))
            reporting = draw(st.integers(0, n + 1))  # missing series, or a stale extra one
            for g in range(reporting):
                peak = draw(st.sampled_from([0.0, 1.0, 4.9, 5.0, 60.0, 100.0]))
                samples = draw(st.sampled_from([MIN - 1, MIN, MIN + 50]))
                series.append(GpuSeries(NS, pod, f"GPU-{pod}-{g}", peak, samples))
        holders.append(Holder(f"w{w}", "Job", NS, f"w{w}", tuple(pods)))
    return holders, series


def reference(h: Holder, series: list[GpuSeries]) -> tuple[int, int] | None:
    """(busy, recommended per pod) if every accelerator held has a verdict."""
    busy_per_pod = []
    for pod, n in h.pods:
        mine = [s for s in series if s.pod == pod]
        if len(mine) != n:
            return None
        busy = [s for s in mine if s.peak >= THRESHOLD]
        idle = [s for s in mine if s.peak < THRESHOLD and s.samples >= MIN]
        if len(busy) + len(idle) != n:
            return None
        busy_per_pod.append(len(busy))
    total, held = sum(busy_per_pod), sum(n for _, n in h.pods)
    per_pod = max(busy_per_pod)
    if total == 0 or total == held or per_pod * len(h.pods) >= held:
        return None
    return total, per_pod


@given(workloads())
def test_a_recommendation_only_where_every_accelerator_has_a_verdict(
    case: tuple[list[Holder], list[GpuSeries]],
) -> None:
    holders, series = case
    got = {
        r.key: (r.busy, r.per_pod)
        for r in recommend(holders, series, threshold=THRESHOLD, min_samples=MIN)
    }
    want = {h.key: ref for h in holders if (ref := reference(h, series)) is not None}
    assert got == want


def test_the_message_names_what_to_request() -> None:
    series = [GpuSeries("vision", "vit-0", f"g{i}", 90.0 if i < 2 else 0.0, 100) for i in range(8)]
    [rec] = recommend(
        [Holder("k", "Job", "vision", "vit", (("vit-0", 8),))], series, threshold=5, min_samples=10
    )
    assert (
        rec.message(5, "2h") == "Job vision/vit holds 8 GPUs; 6 stayed below 5% for 2h — request 2"
    )


class FakePerGpu:
    def __init__(self) -> None:
        self.series: list[GpuSeries] = []
        self.down = False
        self.asked = 0

    async def per_gpu(
        self, query: str, *, namespaces: Any, window: timedelta, resolution: timedelta, at: datetime
    ) -> list[GpuSeries]:
        self.asked += 1
        if self.down:
            raise MetricsUnavailable("connection refused")
        return [s for s in self.series if s.namespace in namespaces]


class Rightsized(Idle):
    def __init__(self, world: World, per_gpu: FakePerGpu) -> None:
        super().__init__(world, policy().action("NotifyOnly").rightsizing(window="2h"))
        self.per_gpu = per_gpu

    def evaluate(self) -> datetime:
        body = self.world.read("trainwarden.dev/v1alpha1", "IdleReclaimPolicy", None, "idle")
        w = self.world
        due = run(
            reconcile(body, w.cache, w.fake, self.utilization, self.memory, w.now, [], self.per_gpu)
        )
        w.sync()
        return due  # type: ignore[no-any-return]


def test_an_over_provisioned_job_is_told_once_and_listed(world: World) -> None:
    job = world.put(JobBuilder("vit", NS).gpus(8).build())
    started = world.now - timedelta(hours=3)
    world.put(PodBuilder("vit-0", NS).gpus(8).owned_by(job).started(started).build())
    per_gpu = FakePerGpu()
    per_gpu.series = [
        GpuSeries(NS, "vit-0", f"g{i}", 80.0 if i < 2 else 1.0, 1440) for i in range(8)
    ]
    idle = Rightsized(world, per_gpu)
    idle.utilization.values[(NS, "vit-0")] = 80.0
    idle.evaluate()
    [entry] = idle.status()["overProvisioned"]
    assert (entry["kind"], entry["name"], entry["accelerators"], entry["idle"]) == (
        "Job",
        "vit",
        8,
        6,
    )
    assert entry["recommendedPerPod"] == 2
    [event] = world.fake.events_for("Job", "vit", NS)
    assert event.reason == "OverProvisioned"
    assert "6 stayed below 5% for 2h" in event.message
    assert world.fake.read("batch/v1", "Job", NS, "vit") == job  # never changed
    world.advance(600)
    idle.evaluate()
    assert per_gpu.asked == 2
    assert len(world.fake.events_for("Job", "vit", NS)) == 1


def test_an_accelerator_without_a_covered_window_silences_the_workload(world: World) -> None:
    job = world.put(JobBuilder("vit", NS).gpus(4).build())
    world.put(
        PodBuilder("vit-0", NS)
        .gpus(4)
        .owned_by(job)
        .started(world.now - timedelta(hours=3))
        .build()
    )
    per_gpu = FakePerGpu()
    per_gpu.series = [
        GpuSeries(NS, "vit-0", f"g{i}", 90.0 if i == 0 else 0.0, 1440) for i in range(3)
    ]
    per_gpu.series.append(GpuSeries(NS, "vit-0", "g3", 0.0, 30))  # a gap: unknown, not idle
    idle = Rightsized(world, per_gpu)
    idle.evaluate()
    assert idle.status()["overProvisioned"] == []
    assert world.fake.events_for("Job", "vit", NS) == []
    per_gpu.down = True
    world.advance(600)
    idle.evaluate()  # Prometheus down: nothing new is said, nothing breaks
    assert idle.status()["overProvisioned"] == []
