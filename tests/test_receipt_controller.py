"""The receipt controller against the fake API server: one receipt per run (AlreadyExists
after a restart), what it records on the workload, what survives the workload, what
Prometheus failing leaves unknown, and the ledger's bounds removing only its own."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeprometheus import FakeBusy
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.receipt import AcceleratorHours, RunReceiptSpec
from trainwarden.api.v1alpha1.types import ObjectReference
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.controllers.links import Links
from trainwarden.receipts.controller import METRICS_TRIES, SWEEP_KEY, ReceiptController
from trainwarden.receipts.identity import Keyring, Stored, removals
from trainwarden.receipts.ledger import SWEEP_GAP, Bounds, Identity, Oldest, load_keyring
from trainwarden.receipts.reconcile import ReceiptSettings
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import (
    BudgetBuilder,
    DeploymentBuilder,
    JobBuilder,
    NamespaceBuilder,
    PodBuilder,
)
from trainwarden.testing.policies import CheckpointPolicyBuilder
from world import JSON, Scanned, World, run

NS = "team-a"
RR = ("trainwarden.dev/v1alpha1", "RunReceipt")
HOUR = 3600.0


def busy_pod(busy: float = 0.5, *, down: bool = False) -> FakeBusy:
    """Prometheus: train-0's two accelerators each `busy` (0-1) at every step, or down."""
    fake = FakeBusy({(NS, "train-0"): (2 * busy, 2)})
    fake.down = down
    return fake


class Setup:
    def __init__(
        self,
        world: World,
        busy: FakeBusy | None = None,
        instance: str | None = None,
        cap: int = 500,
    ) -> None:
        self.world, self.cap = world, cap
        self.policies: list[JSON] = []
        self.index = BudgetIndex(world.cache, lambda _: None, world.clock)
        world.cache.listeners.add(self.index)
        budget = BudgetBuilder("team-a").namespaces(NS).accelerator_hours(100).accelerator_rate(3.0)
        world.put(budget.build())  # the cache keeps the labels it attributes by
        spec = TrainingBudgetSpec.model_validate(budget.build()["spec"])
        self.index.set_budget("team-a", spec)
        self.controller = self.start(busy, instance)

    def start(self, busy: FakeBusy | None, instance: str | None = None) -> ReceiptController:
        """A (new) process: nothing remembered, rebuilt from what the cache holds."""
        w = self.world
        settings = ReceiptSettings(per_namespace=self.cap, resolution=timedelta(seconds=60))
        c = ReceiptController(
            w.fake,
            w.cache,
            self.index,
            busy,
            settings,
            instance=instance,
            links=Links(checkpoint_scans=Scanned(lambda: self.policies)),
            clock=w.clock,
        )
        w.cache.listeners.add(c.index)  # after the budget index, as runtime.wire does
        c.index.rebuild()
        return c

    def process(self) -> None:
        for uid in list(self.controller.closing):
            run(self.controller.process(uid))

    def receipts(self) -> list[JSON]:
        return [o for k, o in self.world.fake.store.items() if k[:2] == RR]


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def ago(world: World, seconds: float) -> datetime:
    return world.now - timedelta(seconds=seconds)


def job_ran(
    world: World,
    name: str = "train",
    gpus: int = 2,
    *,
    hours: float = 2.0,
    checkpoints: str | None = None,
    **labels: str,
) -> JSON:
    """A Job whose one pod started when it was created, `hours` ago, and runs still;
    `checkpoints` is where it says it writes them ("<pvc>:<path>")."""
    world.advance(-hours * HOUR)
    job = JobBuilder(name, NS).gpus(gpus).labels(labels)
    job = world.put((job.checkpoint_path(checkpoints) if checkpoints else job).build())
    pod = PodBuilder(f"{name}-0", NS).gpus(gpus).owned_by(job).labels(labels)
    world.put(pod.started(world.now).build())
    world.advance(hours * HOUR)
    return job


def finish(world: World, job: JSON, phase: str = "Succeeded") -> None:
    """Its pod ends now with `phase`, then the Job controller says so on the Job."""
    at = rfc3339(world.now)
    terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": at}
    statuses = [{"name": "trainer", "restartCount": 1, "state": {"terminated": terminated}}]
    pod = {"status": {"phase": phase, "containerStatuses": statuses}}
    world.fake.edit("v1", "Pod", NS, f"{job['metadata']['name']}-0", pod)
    condition = {"type": "Complete" if phase == "Succeeded" else "Failed", "status": "True"}
    done = {"status": {"conditions": [{**condition, "lastTransitionTime": at}]}}
    world.fake.edit("batch/v1", "Job", NS, job["metadata"]["name"], done)
    world.sync()


def test_a_finished_job_gets_one_receipt_its_event_and_annotation(world: World) -> None:
    busy = busy_pod(0.5)
    setup = Setup(world, busy)
    job = job_ran(world, team="vision", experiment="lr-3e4")
    world.advance(10)
    finish(world, job)
    setup.process()
    (receipt,) = setup.receipts()
    spec = receipt["spec"]
    assert spec["partial"] is False  # watched from its start
    assert receipt["metadata"]["namespace"] == NS
    assert receipt["metadata"]["name"].startswith("job-train-")
    assert receipt["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "trainwarden"
    assert receipt["metadata"]["labels"]["team"] == "vision"
    assert spec["outcome"] == "Succeeded"
    assert spec["labels"] == {
        "team": "vision",
        "experiment": "lr-3e4",
    }
    held = spec["acceleratorHours"]["held"]
    assert held == pytest.approx(2 * (2 + 10 / HOUR))
    assert spec["acceleratorHours"]["used"] == pytest.approx(held / 2, rel=0.02)
    assert spec["cost"] == pytest.approx(3.0 * held)
    assert spec["charges"] == [{"budget": "team-a", "cost": spec["cost"]}]
    assert len(busy.queries) == 1
    assert 'pod=~"train-0"' in busy.queries[0][0]
    (event,) = [e for e in world.fake.events if e.reason == "RunReceipt"]
    assert (event.kind, event.name) == ("Job", "train")
    assert event.message.startswith("Run finished Succeeded in 2h10s: 4.0 accelerator-hours held")
    note = world.read("batch/v1", "Job", NS, "train")["metadata"]["annotations"]
    assert '"outcome":"Succeeded"' in note["trainwarden.dev/receipt"]
    # Later events of the finished Job (its pods still there) start nothing new.
    world.advance(60)
    world.sync()
    setup.process()
    assert len(setup.receipts()) == 1
    assert len(world.fake.events) == 1


def test_after_a_restart_the_same_run_is_not_written_twice(world: World) -> None:
    setup = Setup(world)
    finish(world, job_ran(world))
    setup.process()
    setup.controller = setup.start(None)  # the operator restarted; the Job is still there
    setup.process()
    creates = [w for w in world.fake.writes if w.kind == "RunReceipt" and w.verb == "create"]
    assert [w.outcome for w in creates] == ["changed", "AlreadyExists"]
    assert len([e for e in world.fake.events if e.reason == "RunReceipt"]) == 1
    assert setup.controller.index.runs == {}


def test_a_deleted_job_s_receipt_outlives_it(world: World) -> None:
    setup = Setup(world)
    job = job_ran(world, hours=1)
    world.fake.drop("batch/v1", "Job", NS, "train")
    world.fake.drop("v1", "Pod", NS, "train-0")
    world.sync()
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["outcome"] == "Deleted"
    assert receipt["spec"]["workload"]["uid"] == job["metadata"]["uid"]
    assert receipt["spec"]["acceleratorHours"]["held"] == pytest.approx(2.0)
    assert receipt["spec"]["acceleratorHours"]["unknown"] == pytest.approx(2.0)
    assert "no Prometheus" in receipt["spec"]["measurement"]
    assert not [e for e in world.fake.events if e.reason == "RunReceipt"]  # nothing to post on


def test_prometheus_down_is_retried_then_written_as_unknown(world: World) -> None:
    busy = busy_pod(down=True)
    setup = Setup(world, busy)
    finish(world, job_ran(world), phase="Failed")
    for _ in range(METRICS_TRIES):
        assert not setup.receipts()
        setup.process()
    (receipt,) = setup.receipts()
    spec = receipt["spec"]
    assert len(busy.queries) == METRICS_TRIES
    assert spec["outcome"] == "Failed"
    assert spec["pods"]["failed"] == 1
    assert spec["pods"]["failedAcceleratorHours"] == pytest.approx(spec["acceleratorHours"]["held"])
    assert spec["acceleratorHours"]["unknown"] == spec["acceleratorHours"]["held"]
    assert spec["measurement"].startswith("Prometheus did not answer")


def test_only_runs_a_budget_charges_that_held_accelerators_get_receipts(world: World) -> None:
    setup = Setup(world)
    cpu = world.put(JobBuilder("etl", NS).cpu("4").build())
    world.put(PodBuilder("etl-0", NS).cpu("4").owned_by(cpu).started(ago(world, 60)).build())
    web = world.put(DeploymentBuilder("web", NS).gpus(1).build())
    world.put(PodBuilder("web-0", NS).gpus(1).owned_by(web).started(ago(world, 60)).build())
    world.put(NamespaceBuilder("elsewhere").build())
    other = world.put(JobBuilder("other", "elsewhere").gpus(1).build())
    world.put(
        PodBuilder("other-0", "elsewhere").gpus(1).owned_by(other).started(ago(world, 60)).build()
    )
    assert setup.controller.index.runs == {}


def test_suspensions_are_counted_as_they_happen(world: World) -> None:
    setup = Setup(world)
    job = job_ran(world)
    stored = world.read("batch/v1", "Job", NS, "train")
    stored["spec"]["suspend"] = True
    stored["metadata"].setdefault("labels", {})["trainwarden.dev/suspended-by"] = "team-a"
    world.put(stored)
    (tracked,) = setup.controller.index.runs.values()
    assert (len(tracked.suspensions), tracked.budget_suspensions, tracked.idle_reclaims) == (
        1,
        1,
        0,
    )
    finish(world, job)
    setup.process()
    assert setup.receipts()[0]["spec"]["interruptions"] == {
        "suspensions": 1,
        "budgetSuspensions": 1,
        "idleReclaims": 0,
    }


def receipt_object(world: World, name: str, labels: dict[str, str], age: timedelta) -> None:
    """A receipt anyone could have created (no seal), `age` old."""
    meta: JSON = {"name": name, "namespace": NS, "labels": labels}
    meta["creationTimestamp"] = rfc3339(world.now - age)
    world.fake.put({"apiVersion": RR[0], "kind": RR[1], "metadata": meta, "spec": {}})


def sealed_receipt(world: World, name: str, age: timedelta, instance: str | None) -> None:
    """A receipt the operator `instance` wrote `age` ago, of a run that finished then."""
    ring = run(load_keyring(world.fake, *ReceiptSettings().seal))
    assert isinstance(ring, Keyring)
    at = world.now - age
    spec = RunReceiptSpec(
        workload=ObjectReference(
            api_version="batch/v1", kind="Job", namespace=NS, name=name, uid=f"uid-{name}"
        ),
        outcome="Succeeded",
        started_at=at,
        finished_at=at,
        wall_seconds=0.0,
        wall_time="0s",
        accelerator_hours=AcceleratorHours(held=1.0, unknown=1.0),
    )
    body = Identity(instance, ring).manifest(name, spec)
    body["metadata"]["creationTimestamp"] = rfc3339(at)
    world.fake.put(body)


def test_the_ledger_removes_only_its_own_receipts_past_the_ttl_or_over_the_cap(
    world: World,
) -> None:
    setup = Setup(world, instance="receipts", cap=3)
    mine = {"app.kubernetes.io/managed-by": "trainwarden", "trainwarden.dev/instance": "receipts"}
    sealed_receipt(world, "expired", timedelta(days=91), "receipts")
    for day in (3, 2, 1):
        sealed_receipt(world, f"young-{day}", timedelta(days=day), "receipts")
    receipt_object(world, "someone-elses", {}, timedelta(days=1000))
    receipt_object(world, "labelled-as-mine", mine, timedelta(days=1000))
    sealed_receipt(world, "default-instance", timedelta(days=1000), None)
    finish(world, job_ran(world))
    setup.process()
    names = sorted(o["metadata"]["name"] for o in setup.receipts())
    written = [n for n in names if n.startswith("job-train-")]
    # The TTL took the expired one, the cap of 3 the oldest young one; the others' stay,
    # and so does one labelled as this instance's that it did not write.
    kept = ["default-instance", "labelled-as-mine", "someone-elses", "young-2", "young-1"]
    assert names == sorted([*kept, *written])
    deletes = [w for w in world.fake.writes if w.verb == "delete"]
    assert [w.name for w in deletes] == ["expired", "young-3"]
    assert all(set(w.body["preconditions"]) == {"uid", "resourceVersion"} for w in deletes)


def ledger_lists(world: World) -> int:
    return sum(1 for kind, _ in world.fake.lists if kind == "RunReceipt")


def test_below_the_cap_a_receipt_costs_no_list_of_the_ledger(world: World) -> None:
    """The first write in a namespace learns its count (one LIST); the next ones add to it."""
    setup = Setup(world)
    for i in range(12):
        finish(world, job_ran(world, f"train-{i}"))
    setup.process()
    assert len(setup.receipts()) == 12
    assert ledger_lists(world) == 1


def requests(world: World) -> int:
    fake = world.fake
    return fake.gets + len(fake.lists) + len(fake.writes) + len(fake.events)


def deleted_run(world: World, name: str) -> None:
    """A Job that held accelerators, deleted with its pod (the churn case: no workload
    left to record the receipt on)."""
    job_ran(world, name)
    world.fake.drop("batch/v1", "Job", NS, name)
    world.fake.drop("v1", "Pod", NS, f"{name}-0")
    world.sync()


def test_at_the_cap_a_finished_run_costs_two_requests_and_the_cap_holds(world: World) -> None:
    """Past the cap a write removes the receipt of the run that finished first, by one
    DELETE of the order the last sweep left and the writes since: its POST and that
    DELETE, however slowly runs finish, and never a receipt over the cap. (Before, each
    write past the cap LISTed the namespace once SWEEP_GAP had passed: three requests.)"""
    setup = Setup(world, cap=3)
    for day in (3, 2, 1):
        sealed_receipt(world, f"old-{day}", timedelta(days=day), None)
    deleted_run(world, "first")
    setup.process()  # learns the namespace: the seal's Secret and one LIST
    assert len(setup.receipts()) == 3
    costs = []
    for i in range(5):
        world.advance(SWEEP_GAP.total_seconds())
        deleted_run(world, f"train-{i}")
        before = requests(world)
        setup.process()
        costs.append(requests(world) - before)
        assert len(setup.receipts()) == 3, "the cap was passed"
    assert costs == [2] * 5
    assert ledger_lists(world) == 1
    names = sorted(o["metadata"]["name"] for o in setup.receipts())
    assert [n.split("-")[1] for n in names] == ["train", "train", "train"]
    assert {n.split("-")[2] for n in names} == {"2", "3", "4"}, "the first finished go first"


def test_a_receipt_changed_since_read_leaves_the_cap_to_the_sweep(world: World) -> None:
    """A receipt changed since the ledger read it (its DELETE refused): order and count
    are no longer known, and the cap is passed by the receipts of less than SWEEP_GAP at
    most, then restored by one LIST."""
    setup = Setup(world, cap=3)
    for i in range(3):
        deleted_run(world, f"train-{i}")
    setup.process()
    (first,) = [o for o in setup.receipts() if o["metadata"]["name"].startswith("job-train-0")]
    world.fake.edit(*RR, NS, first["metadata"]["name"], {"metadata": {"labels": {"x": "y"}}})
    for i in range(3, 10):
        deleted_run(world, f"train-{i}")
    setup.process()
    assert len(setup.receipts()) == 10
    assert ledger_lists(world) == 1
    world.advance(SWEEP_GAP.total_seconds())
    run(setup.controller.process(SWEEP_KEY + NS))
    assert len(setup.receipts()) == 3
    assert ledger_lists(world) == 2


def test_a_run_that_finished_before_the_budget_was_known_still_gets_its_receipt(
    world: World,
) -> None:
    """After a restart kopf may report the budgets after the cache synced."""
    setup = Setup(world)
    finish(world, job_ran(world))
    setup.index.forget_budget("team-a")
    setup.controller = setup.start(None)
    assert setup.controller.index.runs == {}
    budget = BudgetBuilder("team-a").namespaces(NS).accelerator_hours(100)
    setup.index.set_budget("team-a", TrainingBudgetSpec.model_validate(budget.build()["spec"]))
    run(setup.controller.process("rescan"))  # what budgets_changed queues, once
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["outcome"] == "Succeeded"
    assert receipt["spec"]["partial"] is True  # watched from the restart, not the start


HF = CheckpointPolicyBuilder("hf").namespaces(NS).pvc("/runs").build()["spec"]
"""A CheckpointPolicy governing NS's checkpoint directories at /runs."""


def scanned(world: World, completed_ago: list[float], as_of_ago: float) -> JSON:
    """A CheckpointPolicy whose runs in ckpt:/runs saw checkpoints completed so many
    seconds ago, the last of them `as_of_ago` seconds ago."""
    entry = {
        "source": "PVC",
        "namespace": NS,
        "pvc": "ckpt",
        "path": "/runs",
        "kept": len(completed_ago),
        "completions": [rfc3339(ago(world, a)) for a in completed_ago],
        "completionsAsOf": rfc3339(ago(world, as_of_ago)),
    }
    return {"metadata": {"name": "hf"}, "spec": HF, "status": {"locations": [entry]}}


def test_a_failed_run_s_receipt_waits_for_a_scan_and_counts_from_the_last_checkpoint(
    world: World,
) -> None:
    """The last scan (10 min before the failure) saw checkpoints 20 and 40 minutes old; the
    receipt waits for the next one, which saw one written 5 minutes before the failure:
    5 minutes of 2 GPUs lost, not 20."""
    setup = Setup(world)
    setup.policies = [scanned(world, [1200, 2400], as_of_ago=600)]
    finish(world, job_ran(world, checkpoints="ckpt:/runs"), phase="Failed")
    setup.process()
    assert not setup.receipts(), "waits for a scan after the failure"
    world.advance(30)
    setup.policies = [scanned(world, [330, 1230, 2430], as_of_ago=5)]
    setup.process()
    (receipt,) = setup.receipts()
    waste = receipt["spec"]["failureWaste"]
    (loss,) = waste["losses"]
    assert (loss["reason"], loss["seconds"], loss["accelerators"]) == ("Failed", 300, 2)
    assert loss["upperBound"] is False
    assert waste["acceleratorHours"] == pytest.approx(600 / 3600, abs=1e-6)
    assert receipt["spec"]["checkpoints"]["policy"] == "hf"
    (event,) = [e for e in world.fake.events if e.reason == "RunReceipt"]
    assert "0.2 lost since the last checkpoint" in event.message


def test_without_a_scan_in_time_the_loss_is_written_as_an_upper_bound(world: World) -> None:
    setup = Setup(world)
    setup.policies = [scanned(world, [1200, 2400], as_of_ago=600)]
    finish(world, job_ran(world, checkpoints="ckpt:/runs"), phase="Failed")
    setup.process()
    assert not setup.receipts()
    world.advance(ReceiptSettings().checkpoint_wait.total_seconds())
    setup.process()
    (receipt,) = setup.receipts()
    waste = receipt["spec"]["failureWaste"]
    (loss,) = waste["losses"]
    assert (loss["seconds"], loss["upperBound"]) == (1200, True)
    assert "1 at most: no scan of the location since" in waste["note"]


def test_a_deleted_job_s_receipt_keeps_the_checkpoint_history_seen_when_it_closed(
    world: World,
) -> None:
    """Deleting the Job takes its annotated location out of the policy's status: the
    receipt uses what the status said when the run closed."""
    setup = Setup(world)
    setup.policies = [scanned(world, [60, 1800], as_of_ago=0)]
    job_ran(world, checkpoints="ckpt:/runs")
    stored = world.read("batch/v1", "Job", NS, "train")
    stored["spec"]["suspend"] = True
    world.put(stored)  # suspended now, with a checkpoint a minute old
    world.advance(5)
    setup.policies = [scanned(world, [65, 1805], as_of_ago=0)]
    world.fake.drop("batch/v1", "Job", NS, "train")
    world.fake.drop("v1", "Pod", NS, "train-0")
    world.sync()
    setup.policies = []
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["outcome"] == "Deleted"
    (loss,) = receipt["spec"]["failureWaste"]["losses"]
    assert (loss["reason"], loss["seconds"], loss["upperBound"]) == ("Suspended", 60, False)
    assert receipt["spec"]["checkpoints"]["policy"] == "hf"


def test_a_run_in_a_namespace_being_deleted_is_dropped_quietly(world: World) -> None:
    """Nothing new may be made in a namespace being deleted (its ledger goes with it): the
    run is dropped, once, not retried as if the operator lacked a permission."""
    setup = Setup(world)
    finish(world, job_ran(world))
    world.put(NamespaceBuilder(NS).deleting(world.now).finalizers("kubernetes").build())
    setup.process()
    assert not setup.receipts()
    creates = [w for w in world.fake.writes if w.kind == "RunReceipt" and w.verb == "create"]
    assert [w.outcome for w in creates] == ["Gone"]
    assert setup.controller.index.runs == {}
    assert setup.controller.closing == {}


def test_a_malformed_policy_status_costs_the_run_its_waste_estimate_not_its_receipt(
    world: World,
) -> None:
    """Status is anyone's to edit who may patch it: an entry that does not read as a
    location (or is not even an object) is passed over, as runs close and as receipts
    are written."""
    setup = Setup(world)
    bad = {"source": "PVC", "namespace": NS, "pvc": "ckpt", "path": "/runs", "completions": "x"}
    policy = {"metadata": {"name": "hf"}, "spec": HF, "status": {"locations": ["junk", bad]}}
    setup.policies = [policy]
    finish(world, job_ran(world, checkpoints="ckpt:/runs"), phase="Failed")
    setup.process()
    (receipt,) = setup.receipts()
    assert "no CheckpointPolicy scans ckpt:/runs" in receipt["spec"]["failureWaste"]["note"]


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["wrote", "swept", "failed", "keep", "wait"]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=0, max_value=8),
    ),
    max_size=40,
)


@settings(max_examples=1000)
@given(STEPS, st.integers(min_value=0, max_value=5))
def test_the_ledger_s_count_asks_for_a_sweep_exactly_when_the_cap_may_be_passed(
    steps: list[tuple[str, str, int]], cap: int
) -> None:
    """Bounds, against a model: a namespace whose count is unknown or past the cap is due
    for a sweep, never sooner than now nor later than SWEEP_GAP after its last one; a
    known count within the cap asks for none; namespaces gone are forgotten."""
    bounds, now = Bounds(), datetime(2026, 12, 1, tzinfo=UTC)
    known: dict[str, int] = {}
    last: dict[str, datetime] = {}
    for step, ns, n in steps:
        if step == "wrote":
            bounds.wrote(ns)
            if ns in known:
                known[ns] += 1
        elif step in ("swept", "failed"):
            bounds.swept(ns, n if step == "swept" else None, now)
            last[ns] = now
            if step == "failed":
                known.pop(ns, None)
            else:
                known[ns] = n
        elif step == "keep":
            kept = {"a", "b", "c"} - {ns}
            bounds.keep_only(kept)
            known.pop(ns, None)
            last.pop(ns, None)
            assert ns not in bounds.kept
            assert ns not in bounds.swept_at
        else:
            now += timedelta(seconds=n * 10)
        for each in ("a", "b", "c"):
            due = bounds.due(each, cap, now)
            if each in known and known[each] <= cap:
                assert due is None
            else:
                assert due is not None
                assert now <= due <= max(now, last.get(each, now) + SWEEP_GAP)


ORDERS = st.lists(
    st.tuples(
        st.sampled_from(["known", "wrote", "unknown", "first", "keep"]),
        st.sampled_from(["a", "b"]),
        st.lists(st.integers(min_value=0, max_value=50), max_size=6),
    ),
    max_size=30,
)


@settings(max_examples=1000)
@given(ORDERS, st.integers(min_value=0, max_value=12))
def test_the_ledger_s_order_removes_what_the_sweep_would_and_stays_bounded(
    steps: list[tuple[str, str, list[int]]], limit: int
) -> None:
    """Oldest, against a model: what it gives to remove is what `removals` would take for
    the cap (the runs that finished first), a namespace whose order is unknown gives
    nothing, and it never holds more than its limit."""
    oldest, model = Oldest(limit), dict[str, list[Stored]]()
    t0 = datetime(2026, 12, 1, tzinfo=UTC)

    def stored(ns: str, minute: int, i: int) -> Stored:
        at = t0 + timedelta(minutes=minute)
        return Stored(ns, f"r-{minute}-{i}-{len(steps)}", "u", "1", at, f"w-{minute}-{i}", at)

    for n, (step, ns, minutes) in enumerate(steps):
        made = [stored(ns, m, n * 10 + i) for i, m in enumerate(minutes)]
        if step == "known":
            oldest.known(ns, made)
            if sum(len(v) for k, v in model.items() if k != ns) + len(made) <= limit:
                model[ns] = list(made)
            else:
                model.pop(ns, None)
        elif step == "wrote":
            oldest.wrote(ns, made[0] if made else None)
            if ns in model and made and sum(len(v) for v in model.values()) < limit:
                model[ns].append(made[0])
            else:
                model.pop(ns, None)
        elif step == "unknown":
            oldest.forget(ns)
            model.pop(ns, None)
        elif step == "first":
            got = oldest.first(ns, len(minutes))
            if ns not in model or len(model[ns]) < len(minutes):
                assert got is None
                continue
            cap = len(model[ns]) - len(minutes)
            want = removals(model[ns], now=t0, ttl=timedelta(days=365), cap=cap)
            assert got is not None
            assert [s.name for s in got] == [s.name for s in want]
            model[ns] = [s for s in model[ns] if s not in want]
        elif step == "keep":
            oldest.keep_only({"a", "b"} - {ns})
            model.pop(ns, None)
        assert oldest.size == sum(len(v) for v in model.values()) <= max(limit, 0)
        assert set(oldest.order) == set(model)
