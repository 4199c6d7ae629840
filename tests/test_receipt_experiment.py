"""The experiment ledger on a run's receipt (issue 28 item 4): what the top-level workload
declares in its annotations (a bare pod's own), recorded as its valid part with what was
dropped; a controller's pods' copies are neither read nor kept by the cache."""

import pytest

from test_receipt_controller import NS, Setup, finish, job_ran
from trainwarden.api.v1alpha1.names import CODE_VERSION, CONFIG_HASH, DATA_VERSION, PARAMS
from trainwarden.core import ledger
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import NamespaceBuilder, PodBuilder
from world import World


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
