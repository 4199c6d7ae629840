"""PVC directories through pruner Jobs, against the fake API server standing in for the Job
controller: the Job a run starts, the report read back once from the Job's own pod, and
what is said of it (status entry, Event and annotation on the PVC); failures of one
location recorded there and cleared by the next run that succeeds."""

import json
from datetime import timedelta

import pytest

from test_checkpoint_reconcile import CKPT, NS, Checkpoints, policy
from trainwarden.api.v1alpha1.checkpoint_status import MAX_LOCATIONS
from trainwarden.api.v1alpha1.names import PRUNED, PRUNED_BY
from trainwarden.checkpoints.reconcile import POLL
from trainwarden.storage.pruning import Report
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import (
    JobBuilder,
    JobSetBuilder,
    NamespaceBuilder,
    PVCBuilder,
    PyTorchJobBuilder,
    RayJobBuilder,
)
from world import JSON, World

HOUR = timedelta(hours=1)
CHECKPOINT = "trainwarden.dev/checkpoint-path"


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    w.put(PVCBuilder("ckpt", NS).labels(CKPT).build())
    return w


def started(world: World) -> list[JSON]:
    """The pruner Jobs the operator created, oldest first, as stored now."""
    names = [w.name for w in world.fake.writes_to("Job", verb="create") if w.outcome == "changed"]
    return [world.read("batch/v1", "Job", NS, name) for name in names]


def summary(deleted: list[str], *, freed: int, dry_run: bool = False) -> str:
    report = Report("/checkpoints", dry_run, scanned=len(deleted) + 1, kept=1, deleted=deleted)
    report.bytes_freed, report.bytes_retained = freed, 500
    return json.dumps(report.summary())


def finish(world: World, job: JSON, message: str | None, *, failed: str | None = None) -> None:
    """What the Job controller and kubelet leave: the Job's condition, and (unless the pod
    never ran) its pod, with the pruner's termination message."""
    meta = job["metadata"]
    condition = {"type": "Failed" if failed else "Complete", "status": "True"}
    condition |= {"reason": failed, "message": "took too long"} if failed else {}
    condition["lastTransitionTime"] = rfc3339(world.now)
    status: JSON = {"conditions": [condition]}
    if not failed:
        status["completionTime"] = rfc3339(world.now)
    world.fake.edit("batch/v1", "Job", NS, meta["name"], {"status": status})
    if message is None:
        return
    template = job["spec"]["template"]["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-x",
            "namespace": NS,
            "labels": {"job-name": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": template["containers"], "volumes": template["volumes"]},
        "status": {
            "containerStatuses": [{"name": "pruner", "state": {"terminated": {"message": message}}}]
        },
    }
    world.fake.put(pod)


def test_a_finished_run_is_said_once_on_the_pvc_and_in_status(world: World) -> None:
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    (job,) = started(world)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enforce" in args
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "ckpt",
        "readOnly": False,
    }
    world.advance(POLL.total_seconds())
    finish(world, job, summary(["checkpoint-1", "checkpoint-2"], freed=2000))
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert entry["lastJob"] == job["metadata"]["name"]
    assert (entry["deleted"], entry["deletedNames"]) == (2, ["checkpoint-1", "checkpoint-2"])
    assert (entry["bytesFreed"], entry["bytesRetained"], entry["failed"]) == (2000, 500, False)
    assert entry["lastRun"] == rfc3339(world.now)
    status = checkpoints.status()
    assert (status["bytesFreed"], status["deleted"], status["kept"]) == (2000, 2, 1)
    pvc = world.read("v1", "PersistentVolumeClaim", NS, "ckpt")["metadata"]["annotations"]
    assert pvc[PRUNED_BY] == "CheckpointPolicy/hf"
    assert "deleted 2 checkpoint(s) in ckpt:/" in pvc[PRUNED]
    assert world.fake.reasons("PersistentVolumeClaim", "ckpt") == ["CheckpointsPruned"]
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    assert checkpoints.status()["bytesFreed"] == 2000, "a report is counted once"
    assert world.fake.reasons("PersistentVolumeClaim", "ckpt") == ["CheckpointsPruned"]
    assert len(started(world)) == 1, "the next run waits for the interval"
    world.advance(HOUR.total_seconds())
    checkpoints.evaluate()
    second = started(world)[1]["metadata"]["name"]
    assert second != job["metadata"]["name"]
    assert checkpoints.entry("PVC")["prunerUid"] == started(world)[1]["metadata"]["uid"]


def test_each_run_adds_what_its_scan_saw_to_the_location_s_completion_history(
    world: World,
) -> None:
    """Two pruner runs: the complete checkpoints each saw join the status entry's history
    (run receipts read it), never later than the scan, and `completionsAsOf` is the scan,
    bounded by when the Job finished (a report is the tenant's to tamper with)."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    (job,) = started(world)
    world.advance(POLL.total_seconds())
    first = Report("/checkpoints", False, scanned=2, kept=2)
    first.scanned_at = world.now - timedelta(seconds=20)
    first.completed = [world.now - timedelta(minutes=m) for m in (10, 30)]
    finish(world, job, json.dumps(first.summary()))
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert entry["completionsAsOf"] == rfc3339(first.scanned_at)
    assert entry["completions"] == [rfc3339(t) for t in first.completed]
    world.advance(HOUR.total_seconds())
    checkpoints.evaluate()
    second_job = started(world)[1]
    world.advance(POLL.total_seconds())
    second = Report("/checkpoints", False, scanned=2, kept=2)
    second.scanned_at = world.now + timedelta(days=1)  # a forged time: the Job's end wins
    second.completed = [world.now - timedelta(minutes=5), first.completed[0]]
    finish(world, second_job, json.dumps(second.summary()))
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert entry["completionsAsOf"] == rfc3339(world.now)
    assert entry["completions"] == [rfc3339(t) for t in [second.completed[0], *first.completed]]


def test_dry_run_mounts_read_only_and_says_what_it_would_delete(world: World) -> None:
    checkpoints = Checkpoints(
        world, policy().dry_run().pvc(labels=CKPT, from_workload_annotation=False)
    )
    checkpoints.evaluate()
    (job,) = started(world)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "--dry-run" in container["args"]
    assert container["volumeMounts"][0]["readOnly"] is True
    finish(world, job, summary(["checkpoint-1"], freed=1000, dry_run=True))
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert (entry["deleted"], entry["deletedNames"], entry["bytesFreed"]) == (
        1,
        ["checkpoint-1"],
        0,
    )
    assert checkpoints.status()["bytesFreed"] == 0
    assert world.fake.reasons("PersistentVolumeClaim", "ckpt") == ["CheckpointsWouldBePruned"]
    assert world.fake.writes_to("PersistentVolumeClaim") == [], "no annotation in DryRun"


def test_a_failed_run_is_recorded_and_cleared_by_the_next_that_succeeds(world: World) -> None:
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    finish(world, started(world)[0], None, failed="DeadlineExceeded")
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert entry["failed"] is True
    assert "failed: DeadlineExceeded: took too long" in entry["message"]
    assert (entry["bytesFreed"], entry["deleted"]) == (0, 0)
    last = checkpoints.conditions()["LastRunSucceeded"]
    assert (last["status"], last["reason"]) == ("False", "PrunerFailed")
    assert world.fake.reasons("PersistentVolumeClaim", "ckpt") == ["PruneFailed"]
    assert world.fake.writes_to("PersistentVolumeClaim") == []
    world.advance(HOUR.total_seconds())
    checkpoints.evaluate()
    second = started(world)[1]
    finish(world, second, summary([], freed=0))
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert (entry["failed"], entry["message"], entry["lastJob"]) == (
        False,
        "",
        second["metadata"]["name"],
    )
    last = checkpoints.conditions()["LastRunSucceeded"]
    assert (last["status"], last["reason"]) == ("True", "Succeeded")
    assert world.fake.reasons("PersistentVolumeClaim", "ckpt") == ["PruneFailed"], (
        "a run that deleted nothing says nothing on the PVC"
    )


def test_directories_named_by_jobs_carry_their_state_and_bad_names_are_said_once(
    world: World,
) -> None:
    world.put(NamespaceBuilder("team-b").build())
    world.put(JobBuilder("writer", NS).checkpoint_path("ckpt:/runs/a").resume_from("c-9").build())
    world.put(
        JobBuilder("done", NS).checkpoint_path("ckpt:/runs/b").succeeded(world.now - HOUR).build()
    )
    world.put(JobBuilder("typo", NS).checkpoint_path("ckpt/runs/c").build())
    world.put(JobBuilder("elsewhere", "team-b").checkpoint_path("ckpt:/runs/d").build())
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT).after_completion(delay="1m"))
    checkpoints.evaluate()
    paths = {e["path"]: e["jobState"] for e in checkpoints.status()["locations"]}
    assert paths == {"/": "Unknown", "/runs/a": "Running", "/runs/b": "Finished"}
    args = {
        a[1]: a
        for a in (j["spec"]["template"]["spec"]["containers"][0]["args"] for j in started(world))
    }
    assert "--running" in args["/checkpoints/runs/a"]
    assert args["/checkpoints/runs/a"][-2:] == ["--resume-from", "c-9"]
    assert "--finished" in args["/checkpoints/runs/b"]
    (warning,) = world.fake.events_for("Job", "typo", NS)
    assert (warning.type, warning.reason) == ("Warning", "AnnotationIgnored")
    assert '"<pvc>:<path>"' in warning.message
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    assert len(world.fake.events_for("Job", "typo", NS)) == 1, "said once while it lasts"
    world.fake.edit(
        "batch/v1", "Job", NS, "typo", {"metadata": {"annotations": {CHECKPOINT: "ckpt:/c"}}}
    )
    world.sync()
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    world.fake.edit(
        "batch/v1", "Job", NS, "typo", {"metadata": {"annotations": {CHECKPOINT: "ckpt/runs/c"}}}
    )
    world.sync()
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    assert len(world.fake.events_for("Job", "typo", NS)) == 2, "said again once it recurs"


def test_jobs_annotations_are_ignored_when_the_policy_does_not_heed_them(world: World) -> None:
    world.put(JobBuilder("typo", NS).checkpoint_path("ckpt/runs/c").build())
    world.put(JobBuilder("writer", NS).checkpoint_path("ckpt:/runs/a").build())
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT, from_workload_annotation=False))
    checkpoints.evaluate()
    assert [e["path"] for e in checkpoints.status()["locations"]] == ["/"]
    assert world.fake.events == []


def test_a_pvc_gone_before_its_run_is_read_still_gets_the_run_recorded(world: World) -> None:
    """Nothing is said on a PVC that no longer exists; the run still counts."""
    world.put(JobBuilder("writer", NS).checkpoint_path("scratch:/runs").build())
    checkpoints = Checkpoints(world, policy().pvc())
    checkpoints.evaluate()
    (job,) = started(world)
    finish(world, job, summary(["checkpoint-1"], freed=100))
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC", "scratch")
    assert (entry["deleted"], entry["bytesFreed"]) == (1, 100)
    assert world.fake.events == []
    assert world.fake.writes_to("PersistentVolumeClaim") == []


def test_a_pvc_deleted_as_its_run_is_recorded_does_not_stop_the_other_locations(
    world: World,
) -> None:
    """The PVC goes between the read and the annotation: the run is recorded without it,
    and the pruner another location started in the same evaluation stays known (a Gone
    out of the evaluation lost its uid, and the next evaluation refused its own Job as
    "not adopted")."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    (first,) = started(world)
    finish(world, first, summary(["checkpoint-1"], freed=100))
    world.put(PVCBuilder("aaa", NS).labels(CKPT).build())
    world.fake.on_next(
        "patch",
        "PersistentVolumeClaim",
        lambda fake: fake.drop("v1", "PersistentVolumeClaim", NS, "ckpt"),
        name="ckpt",
    )
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    gone = checkpoints.entry("PVC", "ckpt")
    assert (gone["deleted"], gone["bytesFreed"], gone["failed"]) == (1, 100, False)
    assert checkpoints.entry("PVC", "aaa")["prunerUid"] == started(world)[1]["metadata"]["uid"]
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    assert [e["pvc"] for e in checkpoints.status()["locations"]] == ["aaa"]
    assert checkpoints.entry("PVC", "aaa")["failed"] is False
    assert checkpoints.status()["bytesFreed"] == 100


def test_a_pruner_killed_or_partial_is_run_again_30_seconds_later_not_at_the_next_hour(
    world: World,
) -> None:
    """A pruner whose pod was killed (the Job failed, no report), then one that could not
    delete a checkpoint completely: each fails the directory, and the next pruner Job
    starts 30 s (then 60 s) after it, not at the next hourly run."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    finish(world, started(world)[0], None, failed="BackoffLimitExceeded")
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    assert checkpoints.entry("PVC")["failedRuns"] == 1
    world.advance(29 - POLL.total_seconds())
    checkpoints.evaluate()
    assert len(started(world)) == 1, "not before the retry is due"
    world.advance(1)
    checkpoints.evaluate()
    assert len(started(world)) == 2, "30 s after the killed one"
    report = Report("/checkpoints", False, scanned=3, kept=2, deleted=["checkpoint-1"])
    report.failures = ["checkpoint-2: partly deleted, the rest left as .trainwarden-deleting-…"]
    report.bytes_freed = 100
    finish(world, started(world)[1], json.dumps(report.summary()))
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    entry = checkpoints.entry("PVC")
    assert (entry["failed"], entry["failedRuns"], entry["bytesFreed"]) == (True, 2, 100)
    assert entry["message"].startswith("partial run: 1 checkpoint(s)")
    assert checkpoints.conditions()["LastRunSucceeded"]["status"] == "False"
    world.advance(59 - POLL.total_seconds())
    checkpoints.evaluate()
    assert len(started(world)) == 2
    world.advance(1)
    checkpoints.evaluate()
    assert len(started(world)) == 3, "60 s after the second failure in a row"


class Killed(Exception):
    """The process died here (nothing in the reconciler catches it)."""


def test_killed_between_starting_a_pruner_and_recording_it_adopts_that_run_at_once(
    world: World,
) -> None:
    """Found by `make faults` (area pvc's reasoning on a SIGKILL): the operator created
    the run's pruner Job (its name derives from the scheduled time) and died before the
    status write recorded the Job's uid. The restarted operator scheduled the same run,
    met its own Job by name, refused it as "not adopted" and waited for the Job's TTL (an
    hour after it finished) to start again: neither that run's report nor a retry for an
    hour. A Job of that name carrying this policy's and this location's labels, created
    by the pruner template, with no uid on record, is now adopted once and read."""
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    world.fake.fail_next("patch", "CheckpointPolicy", Killed("SIGKILL"), subresource="status")
    with pytest.raises(Killed):
        checkpoints.evaluate()
    world.sync()
    (job,) = started(world)
    assert "prunerUid" not in (checkpoints.status().get("locations") or [{}])[0]
    restarted = Checkpoints.__new__(Checkpoints)
    restarted.__dict__ |= checkpoints.__dict__ | {"memory": type(checkpoints.memory)()}
    restarted.evaluate()
    assert restarted.entry("PVC")["prunerUid"] == job["metadata"]["uid"]
    assert not restarted.entry("PVC").get("failed")
    finish(world, job, summary(["checkpoint-1"], freed=100))
    world.advance(POLL.total_seconds())
    restarted.evaluate()
    entry = restarted.entry("PVC")
    assert (entry["deleted"], entry["bytesFreed"], entry["failed"]) == (1, 100, False)
    assert len(started(world)) == 1, "the run was not started twice"


def test_locations_past_the_cap_are_not_governed_and_the_policy_says_so(world: World) -> None:
    """A status records at most MAX_LOCATIONS: a location beyond it would lose its record
    and its pruner Job would never be read back. It is left alone, said once."""
    for i in range(MAX_LOCATIONS):  # the fixture's "ckpt" makes one more
        world.put(PVCBuilder(f"ckpt-{i:03d}", NS).labels(CKPT).build())
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT))
    checkpoints.evaluate()
    assert len(started(world)) == MAX_LOCATIONS
    assert len(checkpoints.status()["locations"]) == MAX_LOCATIONS
    last_run = checkpoints.conditions()["LastRunSucceeded"]
    assert (last_run["status"], last_run["reason"]) == ("False", "TooManyLocations")
    assert "1 checkpoint location(s) beyond the first 500 are not governed" in last_run["message"]
    world.advance(POLL.total_seconds())
    checkpoints.evaluate()
    assert world.fake.reasons("CheckpointPolicy", "hf") == ["TooManyLocations"]  # once
    assert len(started(world)) == MAX_LOCATIONS


def test_every_training_kind_names_its_directory_and_carries_its_state(world: World) -> None:
    """A PyTorchJob that runs protects its directory's newest checkpoints; a JobSet its
    controller says Completed gets the afterCompletion rule; a RayJob's malformed
    annotation is said on the RayJob itself."""
    torch = PyTorchJobBuilder("torch", NS).replica("Master")
    world.put(torch.annotations({CHECKPOINT: "ckpt:/runs/torch"}).build())
    completed = {"type": "Completed", "status": "True", "lastTransitionTime": rfc3339(world.now)}
    jobset = JobSetBuilder("set", NS).replicated_job("w").annotations({CHECKPOINT: "ckpt:/set"})
    world.put(jobset.field("status", {"conditions": [completed]}).build())
    world.put(RayJobBuilder("ray", NS).annotations({CHECKPOINT: "ckpt/runs/ray"}).build())
    checkpoints = Checkpoints(world, policy().pvc(labels=CKPT).after_completion(delay="1m"))
    checkpoints.evaluate()
    paths = {e["path"]: e["jobState"] for e in checkpoints.status()["locations"]}
    assert paths == {"/": "Unknown", "/runs/torch": "Running", "/set": "Unknown"}
    world.advance(60)
    checkpoints.evaluate()
    paths = {e["path"]: e["jobState"] for e in checkpoints.status()["locations"]}
    assert paths == {"/": "Unknown", "/runs/torch": "Running", "/set": "Finished"}
    (warning,) = world.fake.events_for("RayJob", "ray", NS)
    assert (warning.type, warning.reason) == ("Warning", "AnnotationIgnored")
