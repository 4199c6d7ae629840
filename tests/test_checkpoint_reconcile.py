"""The CheckpointPolicy reconciler and its controller against the fake API server: what a
policy may do (Ready, Pruning: kill switch, no pruner image), when it looks again, and
which cluster changes make the controller evaluate it. The stores' own runs are in
test_pvc_store.py, test_snapshot_store.py and test_s3_store.py, which use `Checkpoints`."""

import asyncio
from datetime import datetime, timedelta

import pytest

from trainwarden.adapters.kube import Conflict, Refused
from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
from trainwarden.cache.cluster import CLAIMS
from trainwarden.checkpoints.controller import CheckpointController, training_jobs
from trainwarden.checkpoints.pruner import PrunerSettings
from trainwarden.checkpoints.reconcile import POLL, Environment, Memory, reconcile
from trainwarden.controllers.links import CheckpointScan
from trainwarden.controllers.status import RESYNC
from trainwarden.core.reads import CODE
from trainwarden.core.workloads import workload_facts
from trainwarden.testing.base import ObjectBuilder
from trainwarden.testing.builders import (
    CheckpointPolicyBuilder,
    JobBuilder,
    NamespaceBuilder,
    PVCBuilder,
    VolumeSnapshotBuilder,
)
from world import JSON, World, run

CPP = ("trainwarden.dev/v1alpha1", "CheckpointPolicy")
NS = "team-a"
SETTINGS = PrunerSettings("trainwarden:test")
CKPT = {"checkpoints": "hf"}


class Checkpoints:
    """One CheckpointPolicy evaluated as its controller does: the training jobs from the
    cache, the pruner settings, the kill switch's verdict."""

    def __init__(
        self,
        world: World,
        manifest: CheckpointPolicyBuilder | JSON,
        *,
        settings: PrunerSettings | None = SETTINGS,
    ) -> None:
        if isinstance(manifest, CheckpointPolicyBuilder):
            manifest = manifest.build()
        self.world = world
        self.name = world.put(manifest)["metadata"]["name"]
        self.memory = Memory()
        self.settings = settings
        self.paused: str | None = None

    def evaluate(self) -> datetime:
        body = self.world.read(*CPP, None, self.name)
        context = Environment(training_jobs(self.world.cache), self.settings, self.paused)
        due: datetime = run(
            reconcile(body, self.world.cache, self.world.fake, self.memory, self.world.now, context)
        )
        self.world.sync()
        return due

    def status(self) -> JSON:
        return dict(self.world.read(*CPP, None, self.name).get("status") or {})

    def conditions(self) -> dict[str, JSON]:
        return {c["type"]: c for c in self.status().get("conditions") or []}

    def entry(self, source: str, pvc: str = "") -> JSON:
        """The one status entry of `source` (and `pvc`)."""
        found = [
            e
            for e in self.status().get("locations") or []
            if e["source"] == source and (not pvc or e["pvc"] == pvc)
        ]
        assert len(found) == 1, found
        return dict(found[0])


def policy(name: str = "hf") -> CheckpointPolicyBuilder:
    return CheckpointPolicyBuilder(name).namespaces(NS).enforce().keep_last(1)


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    w.put(PVCBuilder("ckpt", NS).labels(CKPT).build())
    return w


def pruner_jobs(world: World) -> list[JSON]:
    return [w.body for w in world.fake.writes_to("Job", verb="create") if w.outcome == "changed"]


def test_an_invalid_spec_is_not_ready_said_once_and_prunes_nothing(world: World) -> None:
    """A spec the CRD schema cannot check (an unknown time zone) stops the policy, with why."""
    bad = policy().pvc(labels=CKPT).unchecked()
    bad["spec"]["schedule"] = {"cron": "0 3 * * *", "timeZone": "Mars/Olympus_Mons"}
    checkpoints = Checkpoints(world, bad)
    assert checkpoints.evaluate() == world.now + RESYNC
    ready = checkpoints.conditions()["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "Mars/Olympus_Mons" in ready["message"]
    assert pruner_jobs(world) == []
    world.advance(60)
    checkpoints.evaluate()
    assert world.fake.reasons("CheckpointPolicy", "hf") == ["InvalidSpec"], "said once"


def test_conditions_keep_their_transition_time_while_they_hold(world: World) -> None:
    """A condition that did not flip keeps its lastTransitionTime, and an evaluation that
    changes nothing writes nothing (the conditions were once rebuilt every time)."""
    checkpoints = Checkpoints(world, policy().snapshots(CKPT))
    checkpoints.evaluate()
    first = checkpoints.conditions()
    writes = len(world.fake.writes_to("CheckpointPolicy"))
    world.advance(60)
    checkpoints.evaluate()
    assert checkpoints.conditions() == first
    assert len(world.fake.writes_to("CheckpointPolicy")) == writes, "no request at all"
    checkpoints.paused = "paused"
    world.advance(60)
    checkpoints.evaluate()
    now = checkpoints.conditions()
    assert now["Ready"] == first["Ready"]
    assert now["Pruning"]["lastTransitionTime"] != first["Pruning"]["lastTransitionTime"]


def test_the_kill_switch_holds_every_run_until_lifted(world: World) -> None:
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.paused = "paused by ConfigMap trainwarden/switch"
    assert checkpoints.evaluate() == world.now + RESYNC, "looked at again, not in a tight loop"
    pruning = checkpoints.conditions()["Pruning"]
    assert (pruning["status"], pruning["reason"]) == ("False", "KillSwitch")
    assert pruning["message"] == checkpoints.paused
    assert pruner_jobs(world) == []
    assert checkpoints.entry("PVC")["prunerUid"] == ""
    checkpoints.paused = None
    world.advance(30)
    assert checkpoints.evaluate() == world.now + POLL, "a pruner started: polled"
    assert len(pruner_jobs(world)) == 1
    pruning = checkpoints.conditions()["Pruning"]
    assert (pruning["status"], pruning["reason"]) == ("True", "Active")
    assert checkpoints.entry("PVC")["prunerUid"]


def test_a_running_pruner_is_polled_and_never_started_twice(world: World) -> None:
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    world.advance(POLL.total_seconds())
    assert checkpoints.evaluate() == world.now + POLL
    assert len(world.fake.writes_to("Job", verb="create")) == 1
    entry = checkpoints.entry("PVC")
    assert (entry["failed"], entry.get("lastRun")) == (False, None)


def test_without_a_pruner_image_directories_are_left_and_the_condition_says_so(
    world: World,
) -> None:
    only_pvc = Checkpoints(world, policy("dirs").pvc(labels=CKPT), settings=None)
    assert only_pvc.evaluate() == world.now + RESYNC
    pruning = only_pvc.conditions()["Pruning"]
    assert (pruning["status"], pruning["reason"]) == ("False", "NoPrunerImage")
    assert "--pruner-image" in pruning["message"]
    assert pruner_jobs(world) == []
    both = Checkpoints(
        world, policy("both").pvc(labels=CKPT).snapshots({"app": "x"}), settings=None
    )
    both.evaluate()
    pruning = both.conditions()["Pruning"]
    assert (pruning["status"], pruning["reason"]) == ("True", "Active")
    assert "VolumeSnapshots (through the API)" in pruning["message"]
    assert "PVC directories are not pruned" in pruning["message"]
    assert pruner_jobs(world) == []


def test_a_location_that_is_no_longer_governed_leaves_status(world: World) -> None:
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    assert [e["pvc"] for e in checkpoints.status()["locations"]] == ["ckpt"]
    world.fake.edit("v1", "PersistentVolumeClaim", NS, "ckpt", {"metadata": {"labels": None}})
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    status = checkpoints.status()
    assert not status.get("locations"), status
    assert status["scanned"] == 0
    assert checkpoints.conditions()["LastRunSucceeded"]["message"].startswith("0 checkpoint")


def test_a_status_write_racing_a_spec_change_is_refused(world: World) -> None:
    """The status is written on the version read: an edit in between is a Conflict for the
    controller to re-evaluate, never overwritten."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))

    def edit(fake: object) -> None:
        world.fake.edit(*CPP, None, "hf", {"spec": {"maxDeletionsPerRun": 7}})

    world.fake.on_next("patch", "CheckpointPolicy", edit, subresource="status")
    with pytest.raises(Conflict, match="changed since it was read"):
        checkpoints.evaluate()
    assert checkpoints.status() == {}
    assert world.fake.writes_to("CheckpointPolicy")[-1].outcome == "Conflict"


# --- the controller ----------------------------------------------------------------------


def controller(world: World, kill_switch: tuple[str, str] | None = None) -> CheckpointController:
    made = CheckpointController(world.fake, world.cache, SETTINGS, kill_switch, clock=world.clock)
    world.cache.listeners.add(made)  # as runtime.wire does
    made.policy_event(None, world.read(*CPP, None, "hf"))
    made.queue.forget("hf")  # what follows is only what the changes under test ask for
    return made


def test_only_jobs_that_name_their_checkpoints_are_training_jobs(world: World) -> None:
    world.put(JobBuilder("named", NS).checkpoint_path("ckpt:/runs/a").resume_from("c-9").build())
    world.put(JobBuilder("plain", NS).build())
    world.put(
        ObjectBuilder("apps/v1", "Deployment", "serve", NS)
        .annotations({"trainwarden.dev/checkpoint-path": "ckpt:/serve"})
        .field("spec", {"template": {"spec": {"containers": []}}})
        .build()
    )
    (job,) = training_jobs(world.cache)
    assert (job.namespace, job.name, job.finished_at) == (NS, "named", None)
    assert job.annotations["trainwarden.dev/resume-from"] == "c-9"


def test_a_training_job_that_finishes_or_is_renamed_reevaluates_policies(world: World) -> None:
    world.put(policy().pvc(labels=CKPT).build())
    named = JobBuilder("train", NS).checkpoint_path("ckpt:/runs/a")
    running = workload_facts(world.put(named.build()), CODE)
    done = workload_facts(world.put(named.succeeded(world.now).build()), CODE)
    plain = workload_facts(world.put(JobBuilder("other", NS).build()), CODE)

    async def queued() -> list[int]:
        made = controller(world)
        lengths = []
        for old, new in [
            (plain, plain),  # names no checkpoints: nothing to do
            (running, running),  # an echo: nothing changed that matters
            (running, done),  # finished: afterCompletion may apply
            (None, running),  # a new writer
            (done, None),  # gone
        ]:
            made.workload_changed(old, new)
            lengths.append(len(made.queue))
            made.queue.forget("hf")
        made.pod_changed(None, None)
        lengths.append(len(made.queue))
        made.namespace_changed(NS)
        lengths.append(len(made.queue))
        return lengths

    assert asyncio.run(queued()) == [0, 0, 1, 1, 1, 0, 1]


def test_the_kill_switch_configmap_pauses_the_controllers_evaluations(world: World) -> None:
    world.put(policy().pvc(labels=CKPT).build())
    switch = ("trainwarden", "switch")

    async def verdicts() -> list[str | None]:
        said = [await controller(world).paused(), await controller(world, switch).paused()]
        world.put(ObjectBuilder("v1", "ConfigMap", "switch", "trainwarden").build())
        said.append(await controller(world, switch).paused())
        world.fake.edit("v1", "ConfigMap", "trainwarden", "switch", {"data": {"other": "x"}})
        said.append(await controller(world, switch).paused())
        world.fake.edit(
            "v1", "ConfigMap", "trainwarden", "switch", {"data": {"checkpointPruning": " Paused "}}
        )
        said.append(await controller(world, switch).paused())
        made = controller(world, switch)
        await made.evaluate("hf", world.read(*CPP, None, "hf"), world.now)
        return said

    said = asyncio.run(verdicts())
    assert said[:4] == [None, None, None, None]
    assert said[4] is not None
    assert "trainwarden/switch" in said[4]
    pruning = {c["type"]: c for c in world.read(*CPP, None, "hf")["status"]["conditions"]}
    assert pruning["Pruning"]["reason"] == "KillSwitch"
    assert pruner_jobs(world) == []


def test_a_snapshot_only_policy_is_due_again_within_the_resync(world: World) -> None:
    """Runs through the API finish at once: the next look is the resync, not a poll."""
    world.put(
        VolumeSnapshotBuilder("s1", NS)
        .labels(CKPT)
        .source("ckpt")
        .ready(world.now - timedelta(hours=1))
        .build()
    )
    checkpoints = Checkpoints(world, policy().snapshots(CKPT))
    assert checkpoints.evaluate() == world.now + RESYNC
    assert checkpoints.entry("VolumeSnapshots")["lastRun"]


def test_the_controller_names_the_pruners_it_created_by_uid(world: World) -> None:
    """What budgets exempt from suspension: the uids recorded in status, nothing else."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))

    async def seen() -> frozenset[str]:
        made = controller(world)  # as kopf reports the policy now
        return made.pruner_uids()

    assert asyncio.run(seen()) == frozenset()
    checkpoints.evaluate()
    (job,) = pruner_jobs(world)
    stored = world.read("batch/v1", "Job", job["metadata"]["namespace"], job["metadata"]["name"])
    assert asyncio.run(seen()) == {stored["metadata"]["uid"]}


def test_the_controller_publishes_each_location_typed_for_receipts(world: World) -> None:
    """The `checkpoint_scans` link: each status entry as a PrunedLocation with its policy's
    name and spec (receipts parse no raw status), read again for a new version only."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))

    async def published() -> tuple[list[CheckpointScan], list[CheckpointScan]]:
        made = controller(world)
        first = made.checkpoint_scans()
        return first, made.checkpoint_scans()

    assert asyncio.run(published())[0] == []
    checkpoints.evaluate()
    first, again = asyncio.run(published())
    entry = checkpoints.entry("PVC")
    [scan] = first
    assert scan.policy == "hf"
    assert scan.spec is not None
    assert scan.location == PrunedLocation.model_validate(entry)
    assert again[0] is scan, "the same version is not parsed again"


def test_a_pruner_the_api_server_refuses_fails_its_location_only(world: World) -> None:
    """An admission policy (the chart's confinement, a cluster's own) refusing one pruner
    Job fails that location, said in its entry; the policy's other locations still run."""
    world.put(PVCBuilder("other", NS).labels(CKPT).build())
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))

    def refuse(_: object) -> None:
        raise Refused("Job team-a/x: denied by the confinement policy")

    world.fake.on_next("create", "Job", refuse)
    checkpoints.evaluate()
    entries = {e["pvc"]: e for e in checkpoints.status()["locations"]}
    refused = [e for e in entries.values() if e["failed"]]
    assert len(refused) == 1
    assert refused[0]["message"].startswith("pruner refused: Job team-a/x: denied")
    assert len(pruner_jobs(world)) == 1, "the other location's pruner is started"


def _counted_gets(world: World) -> list[str]:
    """The kinds the code under test GETs, in order."""
    kinds: list[str] = []
    get = world.fake.get

    async def counted(api_version: str, kind: str, namespace: str | None, name: str) -> JSON | None:
        kinds.append(kind)
        return await get(api_version, kind, namespace, name)

    world.fake.get = counted  # type: ignore[method-assign]
    return kinds


def test_at_rest_claims_come_from_the_cache_and_one_kill_switch_read_serves_10_seconds(
    world: World,
) -> None:
    """Evaluated every 30 s, a policy once LISTed the claims of each namespace it covers
    and GOT the kill switch every time: 50 policies made 300 requests a minute at rest.
    Now the claims come from the cache while its watch is current (the selector's keys
    kept on claims: core/reads.py), and one read of the switch answers for 10 s."""
    world.put(policy().pvc(labels=CKPT).build())
    world.put(policy("other").pvc(labels={"tier": "scratch"}).build())
    world.put(PVCBuilder("scratch", NS).labels({"tier": "scratch"}).build())
    switch = ("trainwarden", "switch")
    world.put(ObjectBuilder("v1", "ConfigMap", "switch", "trainwarden").build())
    gets = _counted_gets(world)

    async def at_rest() -> None:
        made = controller(world, switch)
        made.policy_event(None, world.read(*CPP, None, "other"))
        for _ in range(20):  # 10 minutes: each policy every 30 s, in the same instant
            for name in ("hf", "other"):
                await made.evaluate(name, world.read(*CPP, None, name), world.now)
            world.sync()
            world.advance(30)

    asyncio.run(at_rest())
    claim_lists = [ns for kind, ns in world.fake.lists if kind == "PersistentVolumeClaim"]
    assert claim_lists == [], "claims listed from the API"
    starts = len(pruner_jobs(world))
    assert starts == 2, "each policy started its pruner (they never finish here)"
    assert gets.count("ConfigMap") == 20 + starts, "one read per 30 s, and one per start"
    targeted = {e["pvc"] for name in ("hf", "other") for e in _locations(world, name)}
    assert targeted == {"ckpt", "scratch"}, "each policy found its claim in the cache"


def test_claims_are_listed_from_the_api_while_the_cache_s_claim_watch_is_interrupted(
    world: World,
) -> None:
    world.put(policy().pvc(labels=CKPT).build())
    world.cache.claims_watch.begin(CLAIMS, world.now, "watch failed")

    async def evaluate() -> None:
        await controller(world).evaluate("hf", world.read(*CPP, None, "hf"), world.now)

    asyncio.run(evaluate())
    assert [ns for kind, ns in world.fake.lists if kind == "PersistentVolumeClaim"] == [NS]
    assert {e["pvc"] for e in _locations(world, "hf")} == {"ckpt"}


def test_a_kill_switch_set_a_moment_ago_stops_the_next_pruner_start(world: World) -> None:
    """The shared read of the switch may be up to 10 s old: good enough for a condition,
    not for starting a pruner, which reads it afresh."""
    world.put(policy().pvc(labels=CKPT).build())
    switch = ("trainwarden", "switch")

    async def evaluate() -> tuple[list[bool], int]:
        made = controller(world, switch)
        said = [await made.paused() is not None]  # read: not paused
        world.put(
            ObjectBuilder("v1", "ConfigMap", "switch", "trainwarden")
            .field("data", {"checkpointPruning": "paused"})
            .build()
        )
        world.advance(4.9)
        said.append(await made.paused() is not None)  # the shared read still answers
        await made.evaluate("hf", world.read(*CPP, None, "hf"), world.now)
        said.append(await made.paused() is not None)  # the fresh read is shared now
        return said, len(pruner_jobs(world))

    said, started = asyncio.run(evaluate())
    assert said == [False, False, True]
    assert started == 0, "a pruner started past the kill switch"
    pruning = {c["type"]: c for c in world.read(*CPP, None, "hf")["status"]["conditions"]}
    assert (pruning["Pruning"]["status"], pruning["Pruning"]["reason"]) == ("False", "KillSwitch")


def test_a_kill_switch_lifted_a_moment_ago_lets_the_next_pruner_start(world: World) -> None:
    """Lifting the switch does not wait out the shared read: the start reads it afresh."""
    world.put(policy().pvc(labels=CKPT).build())
    switch = ("trainwarden", "switch")
    world.put(
        ObjectBuilder("v1", "ConfigMap", "switch", "trainwarden")
        .field("data", {"checkpointPruning": "paused"})
        .build()
    )

    async def evaluate() -> bool:
        made = controller(world, switch)
        paused = await made.paused() is not None
        world.fake.drop("v1", "ConfigMap", "trainwarden", "switch")
        world.advance(4.9)
        await made.evaluate("hf", world.read(*CPP, None, "hf"), world.now)
        return paused

    assert asyncio.run(evaluate()), "the shared read saw the switch"
    assert len(pruner_jobs(world)) == 1, "the pruner waited out the shared read"
    pruning = {c["type"]: c for c in world.read(*CPP, None, "hf")["status"]["conditions"]}
    assert (pruning["Pruning"]["status"], pruning["Pruning"]["reason"]) == ("True", "Active")


def _locations(world: World, name: str) -> list[JSON]:
    return list((world.read(*CPP, None, name).get("status") or {}).get("locations") or [])


def test_each_policy_s_memory_takes_the_controller_s_status_interval(world: World) -> None:
    """`--status-interval` reaches every policy: the controller sets it on the memory it
    makes (controllers/base.py), which its clock-only writes read."""
    world.put(policy().pvc(labels=CKPT).build())

    async def made() -> timedelta:
        made = CheckpointController(world.fake, world.cache, SETTINGS, None, clock=world.clock)
        made.status_interval = timedelta(seconds=45)
        made.policy_event(None, world.read(*CPP, None, "hf"))
        return made.memory["hf"].status_interval

    assert asyncio.run(made()) == timedelta(seconds=45)
