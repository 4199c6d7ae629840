"""What a tenant who may create RunReceipts in their namespace can write (any name,
labels, annotations, spec) never makes the operator lose a run's receipt, believe a
forged figure, or remove a receipt it cannot prove it wrote; and a run claims a
checkpoint location's history only where the policy scanning it governs the run."""

import json
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from test_receipt_controller import NS, RR, Setup, finish, job_ran, receipt_object
from trainwarden.receipts.identity import Keyring, fallback_name
from trainwarden.receipts.ledger import load_keyring
from trainwarden.receipts.reconcile import ReceiptSettings
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.builders import NamespaceBuilder
from trainwarden.testing.policies import CheckpointPolicyBuilder
from world import JSON, World, run

OURS = {"app.kubernetes.io/managed-by": "trainwarden"}


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def forged_spec(world: World, job: JSON, held: float) -> JSON:
    """A spec that reads as a receipt of `job` (the CRD's schema admits it)."""
    meta = job["metadata"]
    at = rfc3339(world.now)
    return {
        "workload": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "namespace": NS,
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "outcome": "Succeeded",
        "startedAt": at,
        "finishedAt": at,
        "wallSeconds": 1.0,
        "wallTime": "1s",
        "acceleratorHours": {"held": held, "used": held, "idle": 0.0, "unknown": 0.0},
        "cost": 0.0,
    }


def squat(world: World, name: str, spec: JSON, labels: dict[str, str] | None = None) -> None:
    meta = {"name": name, "namespace": NS, "labels": labels or {}}
    world.fake.put({"apiVersion": RR[0], "kind": RR[1], "metadata": meta, "spec": spec})


def genuine(setup: Setup, uid: str) -> list[JSON]:
    """The run's receipts the operator wrote (its creates that succeeded)."""
    written = {
        w.name
        for w in setup.world.fake.writes
        if w.kind == "RunReceipt" and w.verb == "create" and w.outcome == "changed"
    }
    return [
        r
        for r in setup.receipts()
        if r["metadata"]["name"] in written and r["spec"]["workload"]["uid"] == uid
    ]


def unverified(where: str) -> float:
    found = REGISTRY.get_sample_value("trainwarden_run_receipts_unverified_total", {"where": where})
    return found or 0.0


def test_a_squatted_name_gets_the_receipt_written_elsewhere_and_no_forged_figure(
    world: World,
) -> None:
    """The review's probe: a tenant created the run's predictable receipt name first, with
    the operator's labels and a forged 0.01 accelerator-hours; the run held 80."""
    setup = Setup(world)
    job = job_ran(world, gpus=8, hours=10)
    uid = job["metadata"]["uid"]
    taken = f"job-train-{uid.replace('-', '')[:8]}"  # as docs/receipts.md names it
    squat(
        world, taken, forged_spec(world, job, 0.01), {**OURS, "trainwarden.dev/workload-uid": uid}
    )
    before = unverified("name")
    finish(world, job)
    setup.process()
    (written,) = genuine(setup, uid)
    assert written["metadata"]["name"] != taken
    assert written["spec"]["acceleratorHours"]["held"] == pytest.approx(80.0, rel=1e-3)
    assert world.read(*RR, NS, taken)["spec"]["acceleratorHours"]["held"] == 0.01  # untouched
    note = json.loads(
        world.read("batch/v1", "Job", NS, "train")["metadata"]["annotations"][
            "trainwarden.dev/receipt"
        ]
    )
    assert note["receipt"] == written["metadata"]["name"]
    assert note["held"] == pytest.approx(80.0, rel=1e-3)
    (warning,) = [e for e in world.fake.events if e.reason == "ReceiptNameTaken"]
    assert warning.type == "Warning"
    assert written["metadata"]["name"] in warning.message
    assert unverified("name") == before + 1
    # Restarted (the Job and its pod are still there): still exactly one genuine receipt.
    setup.controller = setup.start(None)
    setup.process()
    assert [r["metadata"]["name"] for r in genuine(setup, uid)] == [written["metadata"]["name"]]
    assert len([e for e in world.fake.events if e.reason == "RunReceipt"]) == 1


def test_a_forged_receipt_at_the_name_is_never_copied_onto_the_workload(world: World) -> None:
    """The annotation is rewritten from a stored receipt only if the operator wrote it:
    a restart finding a forgery where the run's receipt was (deleted and re-created by
    the tenant) writes the run's own figures, never the forgery's."""
    setup = Setup(world)
    job = job_ran(world, gpus=8, hours=10)
    uid = job["metadata"]["uid"]
    finish(world, job)
    setup.process()
    (first,) = genuine(setup, uid)
    name = first["metadata"]["name"]
    world.fake.drop(*RR, NS, name)
    squat(world, name, forged_spec(world, job, 0.01), dict(first["metadata"]["labels"]))
    stored = world.read("batch/v1", "Job", NS, "train")
    del stored["metadata"]["annotations"]["trainwarden.dev/receipt"]  # the annotation lost
    world.put(stored)
    setup.controller = setup.start(None)
    setup.process()
    note = world.read("batch/v1", "Job", NS, "train")["metadata"]["annotations"]
    held = json.loads(note["trainwarden.dev/receipt"])["held"]
    assert held == pytest.approx(80.0, rel=1e-3)
    (again,) = [r for r in genuine(setup, uid) if r["metadata"]["name"] != name]
    assert again["spec"]["acceleratorHours"]["held"] == pytest.approx(80.0, rel=1e-3)


def test_receipts_forged_with_the_operator_s_labels_never_cost_a_genuine_one(
    world: World,
) -> None:
    """The review's probe: three fake receipts labelled as the operator's made the cap of
    3 remove a genuine one. Nothing it cannot prove it wrote counts or is removed."""
    setup = Setup(world, cap=3)
    first = job_ran(world, "first", hours=1)
    finish(world, first)
    setup.process()
    world.advance(60)
    for i in range(3):
        receipt_object(world, f"fake-{i}", OURS, timedelta(seconds=0))
    receipt_object(world, "fake-ancient", OURS, timedelta(days=400))  # past any TTL
    second = job_ran(world, "second", hours=1)
    finish(world, second)
    setup.process()
    assert genuine(setup, first["metadata"]["uid"]), "the genuine receipt was removed"
    assert genuine(setup, second["metadata"]["uid"])
    names = {r["metadata"]["name"] for r in setup.receipts()}
    assert {"fake-0", "fake-1", "fake-2", "fake-ancient"} <= names
    assert [w.name for w in world.fake.writes if w.verb == "delete"] == []


def s3_policy(world: World, *, owner: str, scope: tuple[str, ...]) -> JSON:
    """A CheckpointPolicy scanning s3://ckpts/team-b/ with `owner`'s credentials, whose
    runs there saw checkpoints 20 and 40 minutes old, the last scan just now."""
    spec = (
        CheckpointPolicyBuilder("team-b-ckpt")
        .namespaces(*scope)
        .s3("https://s3.example", "ckpts", secret=(owner, "creds"), prefix="team-b")
        .build()["spec"]
    )
    entry: dict[str, Any] = {
        "source": "S3",
        "path": "s3://ckpts/team-b/",
        "kept": 2,
        "bytesRetained": 4096,
        "completions": [rfc3339(world.now - timedelta(seconds=a)) for a in (1200, 2400)],
        "completionsAsOf": rfc3339(world.now + timedelta(seconds=5)),
    }
    return {"metadata": {"name": "team-b-ckpt"}, "spec": spec, "status": {"locations": [entry]}}


@pytest.mark.parametrize("scope", [(NS, "team-b"), ("team-b",)])
def test_a_job_naming_another_team_s_s3_prefix_gets_neither_its_history_nor_its_waste(
    world: World, scope: tuple[str, ...]
) -> None:
    """The review's probe: a Job in team-a naming team-b's prefix got team-b's checkpoint
    history and failure waste on its receipt. The prefix belongs to the namespace of the
    credentials the policy scans it with (as the pruning itself says): not this run's."""
    setup = Setup(world)
    job = job_ran(world, checkpoints="s3://ckpts/team-b/")
    setup.policies = [s3_policy(world, owner="team-b", scope=scope)]
    finish(world, job, phase="Failed")
    setup.process()
    (receipt,) = setup.receipts()
    spec = receipt["spec"]
    assert spec["checkpoints"] == {"location": "s3://ckpts/team-b/", "policy": ""}
    waste = spec["failureWaste"]
    assert "acceleratorHours" not in waste
    assert waste.get("losses", []) == []
    assert f"not governed for namespace {NS}" in waste["note"]


def test_a_team_s_own_s3_prefix_gives_its_runs_the_history(world: World) -> None:
    setup = Setup(world)
    job = job_ran(world, checkpoints="s3://ckpts/team-b/")
    setup.policies = [s3_policy(world, owner=NS, scope=(NS,))]
    finish(world, job, phase="Failed")
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["checkpoints"]["policy"] == "team-b-ckpt"
    (loss,) = receipt["spec"]["failureWaste"]["losses"]
    assert loss["seconds"] == 1200


def test_a_pvc_location_of_a_policy_that_no_longer_governs_the_namespace_is_not_claimed(
    world: World,
) -> None:
    """A status entry left from before the policy's scope changed names a PVC in the run's
    namespace: the policy does not govern the run, its history is not the run's."""
    setup = Setup(world)
    spec = CheckpointPolicyBuilder("hf").namespaces("elsewhere").pvc("/runs").build()["spec"]
    entry = {
        "source": "PVC",
        "namespace": NS,
        "pvc": "ckpt",
        "path": "/runs",
        "kept": 1,
        "completions": [rfc3339(world.now - timedelta(seconds=600))],
        "completionsAsOf": rfc3339(world.now + timedelta(seconds=5)),
    }
    setup.policies = [{"metadata": {"name": "hf"}, "spec": spec, "status": {"locations": [entry]}}]
    finish(world, job_ran(world, checkpoints="ckpt:/runs"), phase="Failed")
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["spec"]["checkpoints"]["policy"] == ""
    assert f"not governed for namespace {NS}" in receipt["spec"]["failureWaste"]["note"]


def test_with_both_its_names_taken_the_run_is_dropped_and_said(world: World) -> None:
    """Only the key's holder, or a tenant who deleted the run's receipt and took the
    fallback name it freed, can take both: nothing forged is believed, the run is not
    retried for ever, and the workload says why."""
    setup = Setup(world)
    job = job_ran(world, gpus=8, hours=10)
    uid = job["metadata"]["uid"]
    ring = run(load_keyring(world.fake, *ReceiptSettings().seal))
    assert isinstance(ring, Keyring)
    fallback = fallback_name(ring.current, kind="Job", name="train", namespace=NS, uid=uid)
    for name in (f"job-train-{uid.replace('-', '')[:8]}", fallback):
        squat(world, name, forged_spec(world, job, 0.01), dict(OURS))
    finish(world, job)
    setup.process()
    assert genuine(setup, uid) == []
    (warning,) = [e for e in world.fake.events if e.reason == "ReceiptNotWritten"]
    assert warning.type == "Warning"
    assert fallback in warning.message
    assert "trainwarden.dev/receipt" not in (
        world.read("batch/v1", "Job", NS, "train")["metadata"].get("annotations") or {}
    )
    assert setup.controller.closing == {}, "dropped, not retried for ever"
