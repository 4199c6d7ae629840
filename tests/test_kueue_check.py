"""The Kueue AdmissionCheck controller against the fake API server: it marks its own
AdmissionChecks Active, writes only its own entry of a Workload's admissionChecks by
server-side apply (conditional on the version decided), keeps the transition time while
the state holds, says so in Events and a metric, and never lets two Workloads spend the
same room."""

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from prometheus_client import REGISTRY

from trainwarden.adapters.kube import Unreachable
from trainwarden.api.v1alpha1.names import CHECK_CONTROLLER
from trainwarden.cache.cluster import Interruption
from trainwarden.controllers.links import Links
from trainwarden.core.admission import BudgetView, budget_view
from trainwarden.kueue.controller import CHECKS, KueueController
from trainwarden.testing.builders import (
    AdmissionCheckBuilder,
    BudgetBuilder,
    JobBuilder,
    NamespaceBuilder,
    WorkloadBuilder,
)
from world import JSON, T0, World

NS = "team-a"
KUEUE = "kueue.x-k8s.io/v1beta2"


def budget(limit: float, *, used: float = 0.0, dry_run: bool = False) -> JSON:
    """A budget body as its status says after an evaluation of its current spec."""
    builder = BudgetBuilder("b").namespaces(NS).accelerator_hours(limit)
    body = (builder.dry_run() if dry_run else builder.enforce()).build()
    body["metadata"]["generation"] = 1
    exhausted = used >= limit
    body["status"] = {
        "observedGeneration": 1,
        "remaining": {"acceleratorHours": max(0.0, limit - used)},
        "percent": 100.0 * used / limit if limit else 100.0,
        "mostConstrained": "acceleratorHours",
        "periodEnd": "2026-12-02T00:00:00Z",
        "conditions": [
            {
                "type": "Exhausted",
                "status": "True" if exhausted else "False",
                "reason": "LimitReached" if exhausted else "WithinLimit",
                "message": "",
                "lastTransitionTime": "2026-12-01T11:00:00Z",
            }
        ],
    }
    return body


class Scene:
    def __init__(self, world: World) -> None:
        self.world = world
        self.budgets: list[JSON] = []
        self.controller = KueueController(
            world.fake,
            world.cache,
            Links(budget_views=self),
            controller=CHECK_CONTROLLER,
            clock=world.clock,
        )
        world.cache.kueue.listeners.add(self.controller)  # as runtime.wire does

    def budget_views(self) -> list[BudgetView]:
        return [v for b in self.budgets if (v := budget_view(b)) is not None]

    def workload(self, name: str, gpus: int, seconds: int | None = None, **kw: Any) -> JSON:
        job = self.world.put(JobBuilder(name, NS).gpus(gpus).queue("lq").build())
        wl = WorkloadBuilder(f"job-{name}", NS).for_job(job).reserved("cq", self.world.now)
        wl = wl.check("budget", "Pending", self.world.now - timedelta(minutes=1))
        wl = wl.check("provisioning", "Ready", self.world.now)
        if seconds is not None:
            wl = wl.max_execution(seconds)
        return self.world.put(wl.build())

    def check(self, name: str, check: str = "budget") -> JSON:
        wl = self.world.read(KUEUE, "Workload", NS, f"job-{name}")
        return next(c for c in wl["status"]["admissionChecks"] if c["name"] == check)

    async def process(self, *names: str) -> None:
        self.world.sync()
        uids = [
            self.world.read(KUEUE, "Workload", NS, f"job-{n}")["metadata"]["uid"] for n in names
        ]
        await self.controller.process([CHECKS, *uids])
        self.world.sync()


def scene(test: Callable[[Scene], Awaitable[None]]) -> Callable[[], None]:
    """Run an async test in a world with our AdmissionCheck and the team's namespace."""

    def run() -> None:
        async def body() -> None:
            world = World()
            world.put(NamespaceBuilder(NS).build())
            world.put(AdmissionCheckBuilder("budget").build())
            world.put(AdmissionCheckBuilder("provisioning").controller("kueue.x-k8s.io/p").build())
            await test(Scene(world))

        asyncio.run(body())

    run.__name__ = test.__name__
    return run


def checks_total(state: str) -> float:
    return REGISTRY.get_sample_value("trainwarden_kueue_checks_total", {"state": state}) or 0.0


@scene
async def test_our_admission_check_is_marked_active_and_no_other(s: Scene) -> None:
    s.world.sync()
    await s.controller.process([CHECKS])
    ours = s.world.read(KUEUE, "AdmissionCheck", None, "budget")
    [active] = ours["status"]["conditions"]
    assert (active["type"], active["status"]) == ("Active", "True")
    assert not s.world.read(KUEUE, "AdmissionCheck", None, "provisioning").get("status")
    [write] = s.world.fake.writes_to("AdmissionCheck", "budget", "apply")
    assert write.subresource == "status"
    s.world.sync()
    await s.controller.process([CHECKS])
    assert len(s.world.fake.writes_to("AdmissionCheck", verb="apply")) == 1, "once"


@scene
async def test_exhausted_budget_holds_then_a_raised_limit_lets_it_through(s: Scene) -> None:
    s.budgets = [budget(1.0, used=1.0)]
    s.workload("train", 2, seconds=1800)
    before = checks_total("Pending")
    await s.process("train")
    held = s.check("train")
    assert held["state"] == "Pending"
    assert "TrainingBudget b is exhausted" in held["message"]
    assert "1 accelerator-hours" in held["message"], "the estimate: 2 GPUs for 30 min"
    assert held["lastTransitionTime"] == "2026-12-01T11:59:00Z", "Pending before: kept"
    assert s.check("train", "provisioning")["state"] == "Ready", "another check's entry stays"
    assert "HeldByBudget" in s.world.fake.reasons("Workload", "job-train")
    assert checks_total("Pending") == before + 1
    [write] = s.world.fake.writes_to("Workload", "job-train", "apply")
    assert write.body["metadata"]["resourceVersion"], "conditional on the version decided"
    assert [c["name"] for c in write.body["status"]["admissionChecks"]] == ["budget"]

    await s.process("train")
    assert len(s.world.fake.writes_to("Workload", "job-train", "apply")) == 1, "no change"

    s.budgets = [budget(10.0, used=1.0)]
    s.world.advance(30)
    await s.process("train")
    ready = s.check("train")
    assert ready["state"] == "Ready"
    assert "TrainingBudget b can pay for it" in ready["message"]
    assert ready["lastTransitionTime"] == "2026-12-01T12:00:30Z"
    assert "BudgetCheckReady" in s.world.fake.reasons("Workload", "job-train")


@scene
async def test_an_estimate_over_the_limit_is_rejected(s: Scene) -> None:
    s.budgets = [budget(1.0)]
    s.workload("huge", 8, seconds=3600)
    await s.process("huge")
    rejected = s.check("huge")
    assert rejected["state"] == "Rejected"
    assert "8 accelerator-hours" in rejected["message"]
    assert "RejectedByBudget" in s.world.fake.reasons("Workload", "job-huge")


@scene
async def test_two_workloads_never_spend_the_same_room(s: Scene) -> None:
    s.budgets = [budget(10.0, used=4.0)]  # 6 left: room for one 4-hour estimate
    s.workload("first", 4, seconds=3600)
    s.workload("second", 4, seconds=3600)
    await s.process("first", "second")
    states = {n: s.check(n)["state"] for n in ("first", "second")}
    assert sorted(states.values()) == ["Pending", "Ready"], states
    waiting = next(n for n, st in states.items() if st == "Pending")
    assert "forecast for workloads it admitted" in s.check(waiting)["message"]
    await s.process(waiting)  # the cache now shows the other Ready: still promised
    assert s.check(waiting)["state"] == "Pending"


@scene
async def test_dry_run_budgets_never_hold(s: Scene) -> None:
    s.budgets = [budget(1.0, used=1.0, dry_run=True)]
    s.workload("train", 1, seconds=600)
    await s.process("train")
    assert s.check("train")["state"] == "Ready"
    assert "DryRun: TrainingBudget b would say Pending" in s.check("train")["message"]
    assert "WouldHoldByBudget" in s.world.fake.reasons("Workload", "job-train")


@scene
async def test_a_workload_kueue_changed_meanwhile_is_decided_again_later(s: Scene) -> None:
    s.budgets = [budget(10.0)]
    s.workload("train", 1, seconds=600)
    s.world.sync()
    s.world.fake.edit(KUEUE, "Workload", NS, "job-train", {"metadata": {"labels": {"x": "y"}}})
    uid = s.world.read(KUEUE, "Workload", NS, "job-train")["metadata"]["uid"]
    await s.controller.process([uid])  # the cache still has the older version
    [write] = s.world.fake.writes_to("Workload", "job-train", "apply")
    assert write.outcome == "Conflict"
    assert s.check("train")["state"] == "Pending"
    await s.process("train")
    assert s.check("train")["state"] == "Ready"


@scene
async def test_nothing_is_decided_on_a_stale_view(s: Scene) -> None:
    s.budgets = [budget(10.0)]
    s.workload("train", 1, seconds=600)
    s.world.sync()
    s.world.cache.interruptions.begin("kueue-workloads", T0, "watch failed")
    assert isinstance(s.world.cache.interruptions.oldest(), Interruption)
    uid = s.world.read(KUEUE, "Workload", NS, "job-train")["metadata"]["uid"]
    await s.controller.process([uid])
    assert not s.world.fake.writes_to("Workload", verb="apply")


@scene
async def test_the_jobs_declared_duration_makes_the_estimate(s: Scene) -> None:
    s.budgets = [budget(1.0)]
    job = JobBuilder("annotated", NS).gpus(1).queue("lq")
    job = job.annotations({"trainwarden.dev/expected-duration": "3h"})
    created = s.world.put(job.build())
    wl = WorkloadBuilder("job-annotated", NS).for_job(created).reserved("cq", s.world.now)
    s.world.put(wl.check("budget", "Pending").build())
    await s.process("annotated")
    assert s.check("annotated")["state"] == "Rejected"
    assert "for 3h (trainwarden.dev/expected-duration)" in s.check("annotated")["message"]


@scene
async def test_a_workload_the_api_server_does_not_answer_for_backs_off_alone(s: Scene) -> None:
    """Each failed decision of a Workload counts toward its own backoff (1 s, doubling:
    controllers/queue.py), not another's; its first decision reached resets it."""
    s.budgets = [budget(10.0)]
    s.workload("train", 1, seconds=600)
    s.workload("other", 1, seconds=600)
    s.world.fake.fail_next("apply", "Workload", Unreachable("refused"), times=2, name="job-train")
    await s.process("train", "other")
    await s.process("train")
    train, other = (s.world.read(KUEUE, "Workload", NS, f"job-{n}") for n in ("train", "other"))
    queue = s.controller.queue
    assert queue.failures(train["metadata"]["uid"]) == 2
    assert queue.failures(other["metadata"]["uid"]) == 0
    assert s.check("other")["state"] == "Ready"
    await s.process("train")
    assert s.check("train")["state"] == "Ready"
    assert queue.failures(train["metadata"]["uid"]) == 0
