"""VolumeSnapshot histories pruned through the API, against the fake API server: exactly
the snapshots planned are deleted (on the uid and resourceVersion read), a snapshot that
changed or went meanwhile is skipped and said, a class that would destroy the physical
snapshot holds it unless allowed, jobs' pins and resume points protect, DryRun deletes
nothing."""

from datetime import timedelta

import pytest

from test_checkpoint_reconcile import CKPT, NS, Checkpoints, policy
from trainwarden.testing.builders import (
    JobBuilder,
    NamespaceBuilder,
    PVCBuilder,
    VolumeSnapshotBuilder,
    VolumeSnapshotClassBuilder,
)
from world import World

SNAP = "snapshot.storage.k8s.io/v1"
GI = 2**30
HOUR = timedelta(hours=1)
NAMES = ["s100", "s200", "s300", "s400"]
PINNED = {"metadata": {"annotations": {"trainwarden.dev/pin": "true"}}}


def snapshot(world: World, name: str, *, hours_ago: int, cls: str = "retain") -> None:
    step = int(name[1:])
    world.put(
        VolumeSnapshotBuilder(name, NS)
        .labels(CKPT)
        .source("ckpt")
        .snapshot_class(cls)
        .step(step)
        .ready(world.now - hours_ago * HOUR)
        .build()
    )


@pytest.fixture
def world() -> World:
    """Four ready snapshots of one PVC, an hour apart, whose class keeps the physical ones."""
    w = World()
    w.put(NamespaceBuilder(NS).build())
    w.put(PVCBuilder("ckpt", NS).build())
    w.put(VolumeSnapshotClassBuilder("retain").deletion_policy("Retain").build())
    for age, name in zip((5, 4, 3, 2), NAMES, strict=True):
        snapshot(w, name, hours_ago=age)
    return w


def remaining(world: World) -> list[str]:
    return sorted(key[3] for key in world.fake.store if key[1] == "VolumeSnapshot")


def test_enforce_deletes_exactly_the_snapshots_read_and_says_so(world: World) -> None:
    world.put(VolumeSnapshotBuilder("other", NS).source("ckpt").ready(world.now - 9 * HOUR).build())
    read = {n: world.read(SNAP, "VolumeSnapshot", NS, n)["metadata"] for n in NAMES}
    checkpoints = Checkpoints(world, policy().snapshots(CKPT))
    checkpoints.evaluate()
    assert remaining(world) == ["other", "s400"]
    deletes = world.fake.writes_to("VolumeSnapshot", verb="delete")
    assert [(w.name, w.body["preconditions"]) for w in deletes] == [
        (n, {"uid": read[n]["uid"], "resourceVersion": read[n]["resourceVersion"]})
        for n in NAMES[:3]
    ]
    assert [world.fake.reasons("VolumeSnapshot", n) for n in NAMES[:3]] == [
        ["CheckpointSnapshotDeleted"]
    ] * 3
    (said,) = world.fake.events_for("PersistentVolumeClaim", "ckpt", NS)
    assert said.reason == "SnapshotsPruned"
    assert "deleted 3 VolumeSnapshot(s) of ckpt (3.0 GiB): s100, s200, s300; 1 kept" in (
        said.message
    )
    entry = checkpoints.entry("VolumeSnapshots")
    assert (entry["pvc"], entry["scanned"], entry["kept"], entry["deleted"]) == ("ckpt", 4, 1, 3)
    assert entry["deletedNames"] == NAMES[:3]
    assert (entry["bytesFreed"], entry["bytesRetained"]) == (3 * GI, GI)
    assert checkpoints.status()["bytesFreed"] == 3 * GI
    assert world.fake.writes_to("PersistentVolumeClaim") == [], "no annotation on the PVC"


def test_the_next_run_waits_for_the_interval(world: World) -> None:
    checkpoints = Checkpoints(world, policy().snapshots(CKPT))
    checkpoints.evaluate()
    snapshot(world, "s500", hours_ago=1)
    world.advance(60)
    checkpoints.evaluate()
    assert remaining(world) == ["s400", "s500"]
    world.advance(HOUR.total_seconds())
    checkpoints.evaluate()
    assert remaining(world) == ["s500"]
    assert checkpoints.status()["bytesFreed"] == 4 * GI, "each run's bytes added once"


def test_dry_run_deletes_nothing_and_says_what_it_would(world: World) -> None:
    checkpoints = Checkpoints(world, policy().dry_run().snapshots(CKPT))
    checkpoints.evaluate()
    assert remaining(world) == NAMES
    assert world.fake.writes_to("VolumeSnapshot") == []
    assert world.fake.reasons() == ["SnapshotsWouldBePruned"]
    assert "would delete 3 VolumeSnapshot(s)" in world.fake.events[0].message
    entry = checkpoints.entry("VolumeSnapshots")
    assert (entry["deleted"], entry["deletedNames"], entry["bytesFreed"]) == (3, NAMES[:3], 0)
    assert checkpoints.status()["bytesFreed"] == 0


def test_a_class_that_destroys_the_physical_snapshot_holds_it_unless_allowed() -> None:
    """Delete, or a class that cannot be read (treated as Delete): kept and said why."""
    world = World()
    world.put(NamespaceBuilder(NS).build())
    world.put(VolumeSnapshotClassBuilder("precious").build())
    for age, name in zip((5, 4, 3), NAMES, strict=False):
        snapshot(world, name, hours_ago=age, cls="precious" if age > 3 else "missing")
    held = Checkpoints(world, policy("held").snapshots(CKPT))
    held.evaluate()
    assert remaining(world) == NAMES[:3]
    message = held.entry("VolumeSnapshots")["message"]
    assert "its class precious has deletionPolicy Delete" in message
    assert "its class missing has deletionPolicy unknown" in message
    class_reads = [w for w in world.fake.writes if w.kind == "VolumeSnapshotClass"]
    assert class_reads == [], "classes are only read"
    allowed = Checkpoints(world, policy("allowed").snapshots(CKPT, allow_delete=True))
    allowed.evaluate()
    assert remaining(world) == ["s300"]


def test_a_snapshot_changed_or_gone_since_it_was_read_is_skipped_the_rest_deleted(
    world: World,
) -> None:
    """Pinned by a user after the read: the deletion is refused, never carried out."""
    world.fake.on_next(
        "delete",
        "VolumeSnapshot",
        lambda fake: fake.edit(SNAP, "VolumeSnapshot", NS, "s100", PINNED),
        name="s100",
    )
    world.fake.on_next(
        "delete",
        "VolumeSnapshot",
        lambda fake: fake.drop(SNAP, "VolumeSnapshot", NS, "s200"),
        name="s200",
    )
    checkpoints = Checkpoints(world, policy().snapshots(CKPT))
    checkpoints.evaluate()
    assert remaining(world) == ["s100", "s400"]
    outcomes = [(w.name, w.outcome) for w in world.fake.writes_to("VolumeSnapshot")]
    assert outcomes == [("s100", "Conflict"), ("s200", "Gone"), ("s300", "changed")]
    entry = checkpoints.entry("VolumeSnapshots")
    assert (entry["failed"], entry["deleted"], entry["deletedNames"]) == (False, 1, ["s300"])
    assert (entry["kept"], entry["bytesFreed"]) == (3, GI)
    assert "skipped s100: changed since it was read" in entry["message"]
    assert "skipped s200: already gone" in entry["message"]


def test_snapshots_without_a_source_pvc_are_one_history_said_on_the_snapshots_only() -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    for age, name in ((3, "old"), (2, "new")):
        world.put(
            VolumeSnapshotBuilder(name, NS)
            .labels(CKPT)
            .field("spec.source", {"volumeSnapshotContentName": f"content-{name}"})
            .ready(world.now - age * HOUR)
            .build()
        )
    checkpoints = Checkpoints(world, policy().snapshots(CKPT, allow_delete=True))
    checkpoints.evaluate()
    assert remaining(world) == ["new"]
    assert checkpoints.entry("VolumeSnapshots")["pvc"] == "(no source PVC)"
    assert [(e.kind, e.reason) for e in world.fake.events] == [
        ("VolumeSnapshot", "CheckpointSnapshotDeleted")
    ]
    assert not [w for w in world.fake.writes if w.kind == "PersistentVolumeClaim"]


def test_pins_and_resume_points_of_every_job_writing_to_the_pvc_protect(world: World) -> None:
    """Two directories on one PVC: its snapshots hold both, so both jobs' marks count, and
    one job still running makes the history's writers run."""
    world.put(
        JobBuilder("a", NS)
        .checkpoint_path("ckpt:/runs/a")
        .annotations({"trainwarden.dev/checkpoint-pin": "s100"})
        .build()
    )
    world.put(
        JobBuilder("b", NS)
        .checkpoint_path("ckpt:/runs/b")
        .resume_from("s200")
        .succeeded(world.now - HOUR)
        .build()
    )
    checkpoints = Checkpoints(world, policy().snapshots(CKPT).after_completion(delay="1m"))
    checkpoints.evaluate()
    assert remaining(world) == ["s100", "s200", "s400"]
    entry = checkpoints.entry("VolumeSnapshots")
    assert (entry["jobState"], entry["deletedNames"]) == ("Running", ["s300"])
