"""Reading VolumeSnapshots as checkpoints."""

from datetime import UTC, datetime
from typing import Any

from trainwarden.storage.snapshots import read


def snapshot(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": "ckpt-500",
            "namespace": "team",
            "uid": "u1",
            "resourceVersion": "7",
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "annotations": {
                "trainwarden.dev/step": "500",
                "metric.trainwarden.dev/eval_loss": "0.31",
                "metric.trainwarden.dev/bad": "nan",
            },
        },
        "spec": {"source": {"persistentVolumeClaimName": "data"}, "volumeSnapshotClassName": "c"},
        "status": {
            "readyToUse": True,
            "creationTime": "2026-12-02T09:59:00Z",
            "restoreSize": "10Gi",
        },
    }
    for key, value in changes.items():
        obj[key] = {**obj[key], **value}
    return obj


def test_a_ready_snapshot_is_a_complete_checkpoint() -> None:
    found = read(snapshot(), deletion_policy="Retain", allow_delete=False)
    assert found is not None
    c = found.checkpoint
    assert (c.name, c.step, c.size, c.complete) == ("ckpt-500", 500, 10 * 2**30, True)
    assert c.created == datetime(2026, 12, 2, 9, 59, tzinfo=UTC)
    assert c.metrics == {"eval_loss": 0.31}
    assert (found.source_pvc, found.class_name, found.resource_version) == ("data", "c", "7")
    assert c.held is None


def test_not_ready_or_failed_snapshots_are_incomplete() -> None:
    for status in ({"readyToUse": False}, {"readyToUse": True, "error": {"message": "x"}}, {}):
        obj = snapshot()
        obj["status"] = status
        found = read(obj, deletion_policy="Retain", allow_delete=False)
        assert found is not None
        assert not found.checkpoint.complete


def test_a_class_that_destroys_the_snapshot_holds_it_unless_allowed() -> None:
    held = read(snapshot(), deletion_policy="Delete", allow_delete=False)
    assert held is not None
    assert held.checkpoint.held is not None
    assert "deletionPolicy Delete" in held.checkpoint.held
    unknown = read(snapshot(), deletion_policy=None, allow_delete=False)
    assert unknown is not None
    assert unknown.checkpoint.held is not None, "a class we could not read: keep"
    allowed = read(snapshot(), deletion_policy="Delete", allow_delete=True)
    assert allowed is not None
    assert allowed.checkpoint.held is None


def test_pins_resume_points_and_deletions_in_progress() -> None:
    marks = {"trainwarden.dev/pin": "true", "trainwarden.dev/resume-point": "true"}
    found = read(
        snapshot(metadata={"annotations": marks}), deletion_policy="Retain", allow_delete=False
    )
    assert found is not None
    assert (found.checkpoint.pinned, found.checkpoint.resume_point) == (True, True)
    assert found.checkpoint.step is None
    going = snapshot(metadata={"deletionTimestamp": "2026-12-02T11:00:00Z"})
    assert read(going, deletion_policy="Retain", allow_delete=False) is None
