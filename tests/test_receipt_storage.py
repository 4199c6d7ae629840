"""What a receipt says of storage and checkpoints, through the receipt controller against
the fake API server: the claims its pods mounted, charged once each over the run, a
claim deleted during the run up to its deletion, a claim nothing is known of said
unknown; the checkpoint bytes the run left and those its policy freed."""

from datetime import timedelta

import pytest

from test_receipt_controller import HOUR, NS, Setup, finish, scanned
from trainwarden.core.pods import MAX_POD_CLAIMS, facts, mounted_claims
from trainwarden.core.reads import CODE
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder
from trainwarden.testing.cluster import PVCBuilder
from world import JSON, World

GIB = 2**30


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def claim(world: World, name: str, size: str, klass: str, *, deleted_ago: float | None) -> None:
    pvc = PVCBuilder(name, NS).size(size).storage_class(klass).bound().build()
    if deleted_ago is not None:  # held by pvc-protection while a pod mounts it
        at = rfc3339(world.now - timedelta(seconds=deleted_ago))
        pvc["metadata"].update(deletionTimestamp=at, finalizers=["kubernetes.io/pvc-protection"])
    world.put(pvc)


def job_mounting(world: World, *claims: str, hours: float = 2.0) -> JSON:
    """A Job whose two pods started `hours` ago, each mounting `claims` (a gang sharing them)."""
    world.advance(-hours * HOUR)
    job = world.put(JobBuilder("train", NS).gpus(1).build())
    for i in range(2):
        pod = PodBuilder(f"train-{i}", NS).gpus(1).owned_by(job)
        for n, c in enumerate(claims):
            pod = pod.claim(c, volume=f"v{n}", mount_path=f"/m{n}")
        world.put(pod.started(world.now).build())
    world.advance(hours * HOUR)
    return job


def done(world: World, job: JSON) -> None:
    """The Job and both its pods finished now."""
    world.fake.edit("v1", "Pod", NS, "train-1", {"status": {"phase": "Succeeded"}})
    finish(world, job)


def test_the_receipt_charges_each_mounted_claim_once_over_the_run(world: World) -> None:
    world.advance(-3 * HOUR)
    claim(world, "data", "10Gi", "fast", deleted_ago=None)  # older than the run
    world.advance(3 * HOUR)
    setup = Setup(world)
    job = job_mounting(world, "data", "scratch", "lost")
    world.advance(-HOUR)
    # made an hour into the run, its deletion asked half an hour later (pvc-protection
    # keeps it while the pods mount it): charged those 30 minutes
    claim(world, "scratch", "4Gi", "", deleted_ago=-1800)
    world.advance(HOUR)
    done(world, job)
    setup.process()
    (receipt,) = setup.receipts()
    storage = receipt["spec"]["storage"]
    assert storage["gibHours"] == pytest.approx(10 * 2 + 4 * 0.5, abs=1e-6)
    assert storage["byClass"] == [
        {"storageClass": "fast", "gibHours": pytest.approx(20.0)},
        {"storageClass": "", "gibHours": pytest.approx(2.0)},
    ]
    assert storage["claims"] == 2  # two pods mounting each: counted once
    assert (storage["unknownClaims"], storage["unknown"]) == (1, ["lost"])
    assert "not known" in storage["note"]
    (event,) = [e for e in world.fake.events if e.reason == "RunReceipt"]
    assert "; 22 GiB-hours of storage (2 claim(s), 1 unknown)" in event.message
    note = world.read("batch/v1", "Job", NS, "train")["metadata"]["annotations"]
    assert '"storageGiBHours":22.0' in note["trainwarden.dev/receipt"]


def test_a_claim_seen_gone_without_a_deletion_time_is_charged_until_then(world: World) -> None:
    """Its deletion unseen (the watch missed it), the cache's sight of it gone ends it."""
    world.advance(-HOUR)
    claim(world, "tmp", "8Gi", "fast", deleted_ago=None)
    world.advance(HOUR)
    setup = Setup(world)
    job = job_mounting(world, "tmp", hours=1.0)
    world.advance(-1800)
    world.fake.drop("v1", "PersistentVolumeClaim", NS, "tmp")
    world.sync()  # seen gone half an hour before the run ends
    world.advance(1800)
    done(world, job)
    setup.process()
    (receipt,) = setup.receipts()
    storage = receipt["spec"]["storage"]
    assert storage["gibHours"] == pytest.approx(8 * 0.5, abs=1e-6)
    assert (storage["claims"], storage["unknownClaims"]) == (1, 0)


def test_a_run_mounting_no_claim_has_no_storage(world: World) -> None:
    setup = Setup(world)
    done(world, job_mounting(world))
    setup.process()
    (receipt,) = setup.receipts()
    assert "storage" not in receipt["spec"]


def test_while_the_claims_watch_is_not_current_every_claim_is_unknown(world: World) -> None:
    setup = Setup(world)
    claim(world, "data", "1Gi", "", deleted_ago=None)
    done(world, job_mounting(world, "data"))
    world.cache.claims_watch.begin("persistentvolumeclaims", world.now, "watch failed")
    setup.process()
    (receipt,) = setup.receipts()
    storage = receipt["spec"]["storage"]
    assert "gibHours" not in storage
    assert storage["unknown"] == ["data"]
    assert storage["note"] == "the claims' watch was not current when the receipt was written"


def test_the_receipt_carries_the_bytes_left_and_freed_at_its_checkpoint_location(
    world: World,
) -> None:
    setup = Setup(world)
    setup.policies = [scanned(world, completed_ago=[600], as_of_ago=-30)]
    location = setup.policies[0]["status"]["locations"][0]
    location.update(bytesRetained=3 * GIB, bytesFreed=7 * GIB, kept=2)
    world.advance(-HOUR)
    job = world.put(JobBuilder("train", NS).gpus(1).checkpoint_path("ckpt:/runs").build())
    world.put(PodBuilder("train-0", NS).gpus(1).owned_by(job).started(world.now).build())
    world.advance(HOUR)
    finish(world, job)
    setup.process()
    (receipt,) = setup.receipts()
    checkpoints = receipt["spec"]["checkpoints"]
    assert (checkpoints["bytes"], checkpoints["bytesFreed"]) == (3 * GIB, 7 * GIB)


def test_a_pod_record_names_its_claims_bounded() -> None:
    many = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"c{i:02}"}} for i in range(40)
    ]
    spec = {"volumes": [*many, {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {}}}]}
    got = mounted_claims(spec, "p")
    assert len(got) == MAX_POD_CLAIMS
    assert got[-1] == ""
    pod = PodBuilder("p", NS).claim("data").claim("data", volume="again").build()
    assert facts(pod, CODE).claims == ("data",)
    eph = {"volumes": [{"name": "scratch", "ephemeral": {}}, {"name": "x", "emptyDir": {}}]}
    assert mounted_claims(eph, "train-0") == ("train-0-scratch",)
