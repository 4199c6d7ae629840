"""The experiment ledger on a run's receipt (issue 28 item 4): what the top-level workload
declares in its annotations (a bare pod's own), recorded as its valid part with what was
dropped; a controller's pods' copies are neither read nor kept by the cache."""

import pytest

from test_admission import apply
from test_receipt_controller import NS, Setup, finish, job_ran
from trainwarden.api.v1alpha1.names import (
    CODE_VERSION,
    CONFIG_HASH,
    DATA_VERSION,
    PARAMS,
    REPEAT_OF,
)
from trainwarden.core import ledger
from trainwarden.core.admission import admit
from trainwarden.receipts import repeats
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder
from world import World, run


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def _annotate(world: World, kind: tuple[str, str], name: str, values: dict[str, str]) -> None:
    world.fake.edit(*kind, NS, name, {"metadata": {"annotations": values}})
    world.sync()


def test_a_job_s_receipt_records_what_it_declared_and_what_was_dropped(world: World) -> None:
    setup = Setup(world)
    job = job_ran(world)
    declared = {
        PARAMS: '{"lr": 0.0003, "batch": 64, "optimizer": "adamw", "nested": {"a": 1}}',
        DATA_VERSION: "imagenet-v3",
        CODE_VERSION: "abc123",
    }
    _annotate(world, ("batch/v1", "Job"), "train", declared)
    pod_copy = {PARAMS: "lr=1", DATA_VERSION: "other"}  # the template's: never read
    _annotate(world, ("v1", "Pod"), "train-0", pod_copy)
    finish(world, job)
    setup.process()
    (receipt,) = setup.receipts()
    params = {"batch": "64", "lr": "0.0003", "optimizer": "adamw"}
    assert receipt["spec"]["experiment"] == {
        "params": params,
        "dataVersion": "imagenet-v3",
        "codeVersion": "abc123",
        "configHash": ledger.config_hash(params, "imagenet-v3", "abc123"),
        "configHashSource": "Computed",
        "dropped": ["nested: no value (a string, number or boolean)"],
    }
    pod = world.cache.pods[next(iter(world.cache.pods))]
    assert PARAMS not in pod.annotations  # a controller's pod keeps no ledger copies


def test_a_bare_pod_s_receipt_records_its_own_declaration(world: World) -> None:
    setup = Setup(world)
    world.advance(-3600)
    pod = PodBuilder("solo", NS).gpus(1).started(world.now)
    pod = pod.annotations({DATA_VERSION: "v3", CONFIG_HASH: "run-17"})
    world.put(pod.build())
    world.advance(3600)
    at = rfc3339(world.now)
    terminated = {"exitCode": 0, "finishedAt": at}
    statuses = [{"name": "trainer", "restartCount": 0, "state": {"terminated": terminated}}]
    world.fake.edit(
        "v1", "Pod", NS, "solo", {"status": {"phase": "Succeeded", "containerStatuses": statuses}}
    )
    world.sync()
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["experiment"] == {
        "params": {},
        "dataVersion": "v3",
        "configHash": "run-17",
        "configHashSource": "Declared",
        "dropped": [],
    }


def test_a_run_that_declares_nothing_has_no_experiment(world: World) -> None:
    setup = Setup(world)
    finish(world, job_ran(world))
    setup.process()
    (receipt,) = setup.receipts()
    assert "experiment" not in receipt["spec"]


def _ledger_listed(world: World, setup: Setup) -> None:
    """What every replica's receipts informer delivers (replica.py): the receipts written."""
    records = {o["metadata"]["uid"]: ledger.earlier(o) for o in setup.receipts()}
    world.cache.receipt_sink().replace("runreceipts", records)


def test_new_work_the_webhook_marked_a_repeat_gets_an_event_naming_the_earlier_run(
    world: World,
) -> None:
    setup = Setup(world)
    declared = {PARAMS: "lr=0.1", DATA_VERSION: "v3"}
    job = job_ran(world)
    _annotate(world, ("batch/v1", "Job"), "train", declared)
    finish(world, job)
    setup.process()
    _ledger_listed(world, setup)
    (receipt,) = setup.receipts()
    key = ledger.repeat_key(NS, declared)
    assert key is not None
    earlier = world.cache.earlier_run(key)
    assert earlier is not None
    again = JobBuilder("again", NS).gpus(2).annotations(declared).build()
    verdict = admit(again, {}, [], world.now, earlier)
    world.put(apply(again, verdict.patch))
    forged = {**declared, REPEAT_OF: "job-made-up"}  # a mark the ledger does not confirm
    world.put(JobBuilder("forged", NS).gpus(2).annotations(forged).build())
    other = {PARAMS: "lr=0.1", DATA_VERSION: "v4", REPEAT_OF: receipt["metadata"]["name"]}
    world.put(JobBuilder("other", NS).gpus(2).annotations(other).build())
    assert len(setup.controller.repeats.said) == 3
    for uid in list(setup.controller.repeats.said):
        run(setup.controller.process(repeats.KEY + uid))
    (event,) = [e for e in world.fake.events if e.reason == "RepeatRun"]
    assert (event.kind, event.name, event.type) == ("Job", "again", "Warning")
    name = receipt["metadata"]["name"]
    assert event.message.startswith(
        f"Job {NS}/again repeats a finished run: RunReceipt {name} (Job/train, Succeeded, cost "
    )
    assert event.message.endswith(f"declared the same config hash {key[1]} and data version v3")
