"""The idle reconciler's writes against the fake API server and a fake utilization source:
warn, then reclaim; never on gaps; DryRun only says; forged marks and sliding
acknowledgements do not buy a pod more time."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainwarden.adapters.idle_window import IdleWindow
from trainwarden.adapters.prometheus import MetricsUnavailable
from trainwarden.controllers.status import STATUS_INTERVAL
from trainwarden.core.idleness import IdleState
from trainwarden.core.reclaim import Verdict
from trainwarden.idle.reconcile import Memory, acts_at, reconcile
from trainwarden.testing.builders import IdlePolicyBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from trainwarden.testing.windows import grid, summary
from world import JSON, World, run

IRP = ("trainwarden.dev/v1alpha1", "IdleReclaimPolicy")
NS = "team-a"
WINDOW, STEP, GRACE = timedelta(seconds=60), timedelta(seconds=10), timedelta(seconds=30)


class FakeUtilization:
    """Answers like Prometheus for the pods it was told about: `value` at every step, or
    nothing at the steps listed as missing."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], float] = {}
        self.missing: set[datetime] = set()
        self.queries = 0
        self.down = False

    async def idle_window(
        self,
        query: str,
        *,
        namespaces: Sequence[str],
        at: datetime,
        window: timedelta,
        resolution: timedelta,
        threshold: float,
        min_samples: int = 1,
    ) -> IdleWindow:
        self.queries += 1
        if self.down:
            raise MetricsUnavailable("prometheus: connection refused")
        steps = grid(at, window, resolution)
        present = [t for t in steps if t not in self.missing]
        pods = {
            key: summary([(t, value) for t in present], steps, threshold)[1]
            for key, value in self.values.items()
        }
        return IdleWindow(summary([], steps, threshold)[0], pods)


class Idle:
    def __init__(self, world: World, builder: IdlePolicyBuilder) -> None:
        self.world = world
        self.utilization = FakeUtilization()
        self.body = world.put(builder.build())
        self.memory = Memory()

    def evaluate(self) -> datetime:
        body = self.world.read(*IRP, None, self.body["metadata"]["name"])
        due = run(
            reconcile(
                body,
                self.world.cache,
                self.world.fake,
                self.utilization,
                self.memory,
                self.world.now,
                [],
            )
        )
        self.world.sync()
        return due  # type: ignore[no-any-return]

    def status(self) -> JSON:
        return dict(self.world.read(*IRP, None, self.body["metadata"]["name"]).get("status") or {})


def policy(**kwargs: object) -> IdlePolicyBuilder:
    builder = (
        IdlePolicyBuilder("idle")
        .namespaces(NS)
        .signal(window="60s", resolution="10s", threshold=5, warmup="1s")
        .grace("30s")
        .action("Suspend")
    )
    return builder.enforce() if kwargs.get("enforce", True) else builder


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    job = w.put(JobBuilder("train", NS).gpus(8).build())
    w.put(
        PodBuilder("train-0", NS).gpus(8).owned_by(job).started(w.now - timedelta(hours=1)).build()
    )
    return w


def test_an_idle_pod_is_warned_then_its_job_suspended_after_grace(world: World) -> None:
    idle = Idle(world, policy())
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    pod = world.read("v1", "Pod", NS, "train-0")
    assert pod["metadata"]["annotations"]["trainwarden.dev/idle-policy"] == "idle"
    assert "IdleAccelerators" in world.fake.reasons("Pod", "train-0")
    assert "IdleAccelerators" in world.fake.reasons("Job", "train")
    assert not world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend")
    assert idle.status()["podsIdle"] == 1
    world.advance(GRACE.total_seconds())
    idle.evaluate()
    job = world.read("batch/v1", "Job", NS, "train")
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["trainwarden.dev/reclaimed-by"] == "idle"
    assert idle.status()["actionsTaken"] == 1


def test_a_gap_is_never_idleness(world: World) -> None:
    idle = Idle(world, policy())
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.utilization.missing = set(grid(world.now, WINDOW, STEP)[2:3])
    idle.evaluate()
    assert "IdleAccelerators" not in world.fake.reasons()
    assert idle.status()["podsUnknown"] == 1


def test_dry_run_says_and_changes_nothing(world: World) -> None:
    idle = Idle(world, policy(enforce=False))
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    world.advance(GRACE.total_seconds())
    idle.evaluate()
    assert [w for w in world.fake.writes if w.kind in ("Pod", "Job")] == []
    pending = idle.status()["pendingActions"]
    assert any(line.startswith("would suspend Job/team-a/train") for line in pending)


def test_a_forged_future_warning_does_not_postpone_the_reclaim(world: World) -> None:
    world.fake.edit(
        "v1",
        "Pod",
        NS,
        "train-0",
        {
            "metadata": {
                "annotations": {
                    "trainwarden.dev/idle-policy": "idle",
                    "trainwarden.dev/idle-since": "2026-01-01T00:00:00+00:00",
                    "trainwarden.dev/idle-warned-at": "2099-01-01T00:00:00+00:00",
                }
            }
        },
    )
    world.sync()
    idle = Idle(world, policy())
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    pod = world.read("v1", "Pod", NS, "train-0")
    assert pod["metadata"]["annotations"]["trainwarden.dev/idle-warned-at"].startswith("2026-12-01")
    world.advance(GRACE.total_seconds())
    idle.evaluate()
    assert world.read("batch/v1", "Job", NS, "train")["spec"]["suspend"] is True


def test_a_capped_keep_until_expires_across_evaluations_and_restarts(world: World) -> None:
    world.fake.edit(
        "v1",
        "Pod",
        NS,
        "train-0",
        {"metadata": {"annotations": {"trainwarden.dev/keep-until": "2026-12-30T00:00:00Z"}}},
    )
    world.sync()
    idle = Idle(world, policy().allow_opt_out(max_keep="60s"))
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    assert idle.status()["podsExempt"] == 1
    world.advance(30)
    idle.memory = Memory()  # a restart: the first sighting is in status
    idle.evaluate()
    assert idle.status()["podsExempt"] == 1
    world.advance(31)
    idle.evaluate()
    assert idle.status()["podsExempt"] == 0, "the cap ran out: 60 s from the first sighting"
    assert "IdleAccelerators" in world.fake.reasons("Pod", "train-0")


def test_lists_that_become_empty_are_removed_from_status(world: World) -> None:
    """The stale-status bug, for idle policies: once the pod is busy again, the pod listed as
    idle and the action DryRun would take must go from status, not linger."""
    idle = Idle(world, policy(enforce=False))
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    assert idle.status()["idlePods"]
    assert idle.status()["pendingActions"]
    idle.utilization.values[(NS, "train-0")] = 80.0
    world.advance(STEP.total_seconds())
    idle.evaluate()
    assert idle.status()["pendingActions"][0].startswith("would withdraw"), "said once"
    world.advance(STEP.total_seconds())
    idle.evaluate()
    status = idle.status()
    assert not status.get("idlePods"), status
    assert not status.get("pendingActions"), status
    assert status["podsIdle"] == 0


def test_a_mangled_status_field_costs_only_itself(world: World) -> None:
    """A field written by hand (or an older version) is ignored and rewritten; the
    counters kept beside it survive."""
    idle = Idle(world, policy())
    idle.evaluate()
    world.fake.edit(
        *IRP, None, "idle", {"status": {"recentActions": "yesterday", "actionsTaken": 7}}
    )
    world.advance(10)
    idle.evaluate()
    status = idle.status()
    assert status["actionsTaken"] == 7
    assert status.get("recentActions", []) == [], status.get("recentActions")


def test_an_evaluation_that_only_moves_the_clock_writes_at_most_every_interval(
    world: World,
) -> None:
    """A busy cluster's idle policy is evaluated every 30 s; writing status each time would
    be a request and a watch event per policy per evaluation for nothing a reader needs."""
    idle = Idle(world, policy())
    idle.utilization.values[(NS, "train-0")] = 80.0
    idle.evaluate()
    writes = len(world.fake.writes_to("IdleReclaimPolicy"))
    first = idle.status()["lastEvaluated"]
    world.advance(STATUS_INTERVAL.total_seconds() - 1)
    idle.evaluate()
    assert len(world.fake.writes_to("IdleReclaimPolicy")) == writes
    assert idle.status()["lastEvaluated"] == first
    world.advance(1)
    idle.evaluate()
    assert len(world.fake.writes_to("IdleReclaimPolicy")) == writes + 1
    assert idle.status()["lastEvaluated"] != first
    idle.utilization.values[(NS, "train-0")] = 1.0
    world.advance(STEP.total_seconds())
    idle.evaluate()
    assert idle.status()["podsIdle"] == 1, "what a reader acts on is written at once"


def test_prometheus_down_reclaims_nothing_and_its_return_is_seen_within_a_scrape_interval(
    world: World,
) -> None:
    """What `make faults` checks (Prometheus down): a warned pod whose grace ended during the
    outage was not reclaimed (right), but the policy asked again only at the next resync,
    30 s later, so MetricsAvailable stayed False for up to 30 s after Prometheus was back."""
    idle = Idle(world, policy())
    idle.utilization.values[(NS, "train-0")] = 1.0
    idle.evaluate()
    assert (
        "trainwarden.dev/idle-warned-at"
        in world.read("v1", "Pod", NS, "train-0")["metadata"]["annotations"]
    )
    idle.utilization.down = True
    world.advance(GRACE.total_seconds() + 1)
    due = idle.evaluate()
    assert not world.read("batch/v1", "Job", NS, "train")["spec"].get("suspend"), "no data"
    metrics = {c["type"]: c for c in idle.status()["conditions"]}["MetricsAvailable"]
    assert (metrics["status"], metrics["reason"]) == ("False", "PrometheusUnavailable")
    assert due <= world.now + timedelta(seconds=5), "asks again within a scrape interval"
    idle.utilization.down = False
    world.now = due
    idle.evaluate()
    metrics = {c["type"]: c for c in idle.status()["conditions"]}["MetricsAvailable"]
    assert metrics["status"] == "True"


def test_series_that_name_no_governed_pod_say_so_instead_of_staying_silent(
    world: World,
) -> None:
    """dcgm-exporter scraped so that its series name the exporter, not the consumer (or
    not scraped at all): every pod read Unknown, nothing was ever idle, and MetricsAvailable
    said True. It says False now, naming what the query found instead; nothing is acted on."""
    idle = Idle(world, policy())
    idle.utilization.values[("gpu-operator", "nvidia-dcgm-exporter-x7k2p")] = 1.0
    idle.evaluate()
    metrics = {c["type"]: c for c in idle.status()["conditions"]}["MetricsAvailable"]
    assert (metrics["status"], metrics["reason"]) == ("False", "NoSeriesForGovernedPods")
    assert "gpu-operator/nvidia-dcgm-exporter-x7k2p" in metrics["message"]
    assert idle.status()["podsUnknown"] == 1
    world.advance(GRACE.total_seconds() + 1)
    idle.evaluate()
    assert world.fake.reasons("IdleReclaimPolicy") == ["NoSeriesForGovernedPods"], "once"
    assert [w for w in world.fake.writes if w.kind in ("Pod", "Job")] == []
    idle.utilization.values.clear()
    world.advance(STEP.total_seconds())
    idle.evaluate()
    metrics = {c["type"]: c for c in idle.status()["conditions"]}["MetricsAvailable"]
    assert "no series at all" in metrics["message"]
    idle.utilization.values[(NS, "train-0")] = 50.0
    world.advance(STEP.total_seconds())
    idle.evaluate()
    metrics = {c["type"]: c for c in idle.status()["conditions"]}["MetricsAvailable"]
    assert (metrics["status"], metrics["reason"]) == ("True", "QuerySucceeded")


def test_a_pod_still_warming_up_without_series_is_no_alarm() -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    world.put(PodBuilder("fresh-0", NS).gpus(1).started(world.now - timedelta(seconds=5)).build())
    idle = Idle(world, policy().signal(window="60s", resolution="10s", threshold=5, warmup="60s"))
    idle.evaluate()
    metrics = {c["type"]: c for c in idle.status()["conditions"]}["MetricsAvailable"]
    assert metrics["status"] == "True", metrics


def test_pods_warming_up_share_one_timer_per_step_not_one_evaluation_each() -> None:
    """20 pods whose warm-ups end a second and a half apart: the policy is evaluated at
    most once per step (10 s) for them, not once per pod."""
    world = World()
    world.put(NamespaceBuilder(NS).build())
    start = world.now
    for i in range(20):
        job = world.put(JobBuilder(f"train-{i}", NS).gpus(1).build())
        pod = PodBuilder(f"train-{i}-0", NS).gpus(1).owned_by(job)
        world.put(pod.started(start + timedelta(seconds=1.5 * i)).build())
    builder = policy().signal(window="60s", resolution="10s", threshold=5, warmup="40s")
    idle = Idle(world, builder)
    for i in range(20):
        idle.utilization.values[(NS, f"train-{i}-0")] = 50.0
    world.advance(30)
    evaluations, end = 0, world.now + timedelta(seconds=60)
    while world.now < end:
        due = idle.evaluate()
        evaluations += 1
        world.advance((due - world.now).total_seconds())
    assert evaluations <= 7, evaluations  # 60 s of 10 s steps, and the first


def test_an_idle_policy_may_act_at_a_warning_or_a_reclaim_not_at_a_warm_up_end() -> None:
    """What puts an idle policy in the work queue's priority lane (LastWrite.acts_at): a
    suspicion maturing into a warning, a grace period running out; a warm-up ending is a
    routine re-evaluation."""
    t = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def judged(state: str, due_minutes: int) -> tuple[Any, Verdict]:
        at = t + timedelta(minutes=due_minutes)
        return None, Verdict(IdleState(state, t), None, due=at)  # type: ignore[arg-type]

    assert acts_at([judged("WarmingUp", 1)]) is None
    warned = [judged("WarmingUp", 1), judged("Warned", 9), judged("IdleSuspected", 5)]
    assert acts_at(warned) == t + timedelta(minutes=5)
    assert acts_at([judged("Active", 2), judged("Warned", 9)]) == t + timedelta(minutes=9)
