"""The volume reclaim reconciler against the fake API server: an orphan reported, then
snapshotted and deleted after its grace period (Enforce), exactly what DryRun lists; a
claim changed since it was judged is not deleted; the record survives a restart and a gap
moves its clocks; the status stays well under 64 KiB."""

import json
from datetime import datetime, timedelta

import pytest

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.names import ORPHANED_SINCE, SOURCE_CLAIM_UID, VOLUME_POLICY
from trainwarden.api.v1alpha1.volumes import (
    MAX_NOTES,
    MAX_RECENT,
    MAX_TRACKED,
    NOTE_LENGTH,
    Deletion,
    TrackedClaim,
    VolumeReclaimPolicyStatus,
)
from trainwarden.controllers.links import Links
from trainwarden.core.orphans import RESOLUTION
from trainwarden.testing.builders import NamespaceBuilder, PodBuilder
from trainwarden.testing.cluster import PersistentVolumeBuilder, PVCBuilder
from trainwarden.testing.policies import CheckpointPolicyBuilder
from trainwarden.testing.volumes import VolumePolicyBuilder
from trainwarden.volumes.observe import SNAPSHOT_API, snapshot_name
from trainwarden.volumes.reconcile import Memory, reconcile
from world import JSON, Scanned, World, run

VRP = ("trainwarden.dev/v1alpha1", "VolumeReclaimPolicy")
CPP = ("trainwarden.dev/v1alpha1", "CheckpointPolicy")
PVC = ("v1", "PersistentVolumeClaim")
NS = "team-a"


class Policy:
    def __init__(self, world: World, builder: VolumePolicyBuilder) -> None:
        self.world = world
        self.body = world.put(builder.build())
        self.name = self.body["metadata"]["name"]
        self.memory = Memory()
        self.links = Links(checkpoint_scans=Scanned(self.checkpoints), checkpoint_specs=self)

    def checkpoints(self) -> list[JSON]:
        return [o for (v, k, _, _), o in self.world.fake.store.items() if (v, k) == CPP]

    def checkpoint_specs(self) -> list[tuple[str, CheckpointPolicySpec]]:
        return [
            (o["metadata"]["name"], CheckpointPolicySpec.model_validate(o["spec"]))
            for o in self.checkpoints()
        ]

    def evaluate(self) -> datetime:
        body = self.world.read(*VRP, None, self.name)
        due = run(
            reconcile(
                body, self.world.cache, self.world.fake, self.memory, self.world.now, self.links
            )
        )
        self.world.sync()
        return due  # type: ignore[no-any-return]

    def status(self) -> JSON:
        return dict(self.world.read(*VRP, None, self.name).get("status") or {})

    def restart(self) -> None:
        self.memory = Memory()


def policy(enforce: bool = True) -> VolumePolicyBuilder:
    b = VolumePolicyBuilder("orphans").namespaces(NS).unmounted_for("10m").grace("5m")
    return b.enforce() if enforce else b


def claim(world: World, name: str, *, pv: str | None = None, policy: str = "Delete") -> JSON:
    builder = PVCBuilder(name, NS).size("2Gi")
    if pv is not None:
        world.put(PersistentVolumeBuilder(pv).reclaim_policy(policy).claim(NS, name).build())
        builder = builder.volume(pv).bound()
    return world.put(builder.build())


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def step(world: World, p: Policy, seconds: float, times: int = 1) -> None:
    for _ in range(times):
        world.advance(seconds)
        p.evaluate()


def exists(world: World, name: str) -> bool:
    return world.fake.read(*PVC, NS, name) is not None


def test_an_orphan_is_reported_then_deleted_after_its_grace_and_the_rest_are_left_alone(
    world: World,
) -> None:
    claim(world, "orphan", pv="pv-orphan")
    claim(world, "mounted")
    world.put(PodBuilder("trainer", NS).claim("mounted").started(world.now).build())
    world.put(PVCBuilder("precious", NS).labels({"trainwarden.dev/protect": "true"}).build())
    claim(world, "retained", pv="pv-keep", policy="Retain")
    claim(world, "data-db-0")
    world.put(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]},
        }
    )
    world.put(
        CheckpointPolicyBuilder("ckpts").namespaces(NS).pvc("/c", labels={"ckpt": "yes"}).build()
    )
    world.put(PVCBuilder("ckpt", NS).labels({"ckpt": "yes"}).build())
    claim(world, "suspended-job-data")
    world.put(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "paused", "namespace": NS},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "volumes": [
                            {
                                "name": "d",
                                "persistentVolumeClaim": {"claimName": "suspended-job-data"},
                            }
                        ]
                    }
                },
            },
        }
    )
    p = Policy(world, policy())
    p.evaluate()
    step(world, p, 30, times=20)  # 10 minutes: matured, reported
    orphaned = world.read(*PVC, NS, "orphan")
    assert ORPHANED_SINCE in orphaned["metadata"]["annotations"]
    assert "Orphaned" in world.fake.reasons("PersistentVolumeClaim", "orphan")
    assert exists(world, "orphan")
    step(world, p, 30, times=10)  # the grace period
    assert not exists(world, "orphan")
    for kept in ("mounted", "precious", "retained", "data-db-0", "ckpt", "suspended-job-data"):
        assert exists(world, kept), kept
        assert "Deleted" not in world.fake.reasons("PersistentVolumeClaim", kept)
    status = p.status()
    assert status["claimsDeleted"] == 1
    assert status["bytesDeleted"] == 2 * 2**30
    states = {c["name"]: c["state"] for c in status["claims"]}
    assert "mounted" not in states
    assert {
        states[n] for n in ("precious", "retained", "data-db-0", "ckpt", "suspended-job-data")
    } == {"Exempt"}
    deletes = world.fake.writes_to("PersistentVolumeClaim", "orphan", "delete")
    assert deletes
    assert deletes[0].body["preconditions"]["resourceVersion"]


def test_dry_run_lists_exactly_what_enforce_does(world: World) -> None:
    """Two worlds, the same claims; the DryRun plan at each step is what Enforce deletes."""
    other = World()
    other.put(NamespaceBuilder(NS).build())
    for w in (world, other):
        for name in ("a", "b", "c"):
            claim(w, name)
        w.put(
            PVCBuilder("kept", NS)
            .annotations({"trainwarden.dev/keep-until": "2099-01-01T00:00:00Z"})
            .build()
        )
        w.put(PodBuilder("p", NS).claim("c").started(w.now).build())
    dry, enforce = Policy(world, policy(enforce=False)), Policy(other, policy())
    planned: set[str] = set()
    for _ in range(40):
        dry.evaluate()
        planned |= {c["name"] for c in dry.status().get("claims", []) if c.get("planned")}
        before = {n for n in ("a", "b", "c", "kept") if exists(other, n)}
        enforce.evaluate()
        deleted = before - {n for n in ("a", "b", "c", "kept") if exists(other, n)}
        assert (
            deleted == {c["name"] for c in dry.status().get("claims", []) if c.get("planned")}
            or not deleted
        )
        world.advance(30)
        other.advance(30)
    assert planned == {"a", "b"}
    assert not exists(other, "a")
    assert not exists(other, "b")
    assert exists(other, "c")
    assert exists(other, "kept")
    assert all(exists(world, n) for n in ("a", "b", "c", "kept"))  # DryRun deletes nothing
    assert not world.fake.writes_to("PersistentVolumeClaim", None, "patch")  # nor annotates


def test_a_claim_changed_since_it_was_judged_is_not_deleted_this_round(world: World) -> None:
    claim(world, "orphan")
    p = Policy(world, policy())
    p.evaluate()
    step(world, p, 30, times=29)
    world.advance(30)
    world.fake.on_next(
        "patch",
        "PersistentVolumeClaim",
        lambda fake: fake.edit(*PVC, NS, "orphan", {"metadata": {"labels": {"team": "x"}}}),
        name="orphan",
    )
    p.evaluate()
    assert exists(world, "orphan")
    assert any("changed since judged" in n for n in p.status().get("notes", []))
    step(world, p, 30)
    assert not exists(world, "orphan")  # judged again, unchanged since: deleted


def test_a_snapshot_is_taken_and_waited_for_before_deletion(world: World) -> None:
    c = claim(world, "orphan")
    p = Policy(world, policy().snapshot("csi-snap", timeout="5m"))
    p.evaluate()
    step(world, p, 30, times=30)
    name = snapshot_name("orphan", c["metadata"]["uid"])
    snap = world.read(SNAPSHOT_API, "VolumeSnapshot", NS, name)
    assert snap["metadata"]["labels"][SOURCE_CLAIM_UID] == c["metadata"]["uid"]
    assert snap["metadata"]["labels"][VOLUME_POLICY] == "orphans"
    step(world, p, 30, times=3)
    assert exists(world, "orphan")  # not ready yet
    world.fake.edit(SNAPSHOT_API, "VolumeSnapshot", NS, name, {"status": {"readyToUse": True}})
    step(world, p, 30)
    assert not exists(world, "orphan")


def test_a_snapshot_not_ready_in_time_stops_the_deletion(world: World) -> None:
    claim(world, "orphan")
    p = Policy(world, policy().snapshot("csi-snap", timeout="2m"))
    p.evaluate()
    step(world, p, 30, times=40)
    assert exists(world, "orphan")
    conditions = {c["type"]: c for c in p.status()["conditions"]}
    assert conditions["SnapshotsReady"]["status"] == "False"
    assert "NotDeleted" in world.fake.reasons("PersistentVolumeClaim", "orphan")


def test_the_record_survives_a_restart_and_a_gap_moves_its_clocks(world: World) -> None:
    claim(world, "orphan")
    p = Policy(world, policy())
    p.evaluate()
    step(world, p, 30, times=10)  # 5 of the 10 minutes observed
    since = p.status()["claims"][0]["unmountedSince"]
    p.restart()
    step(world, p, 20)  # back within the resolution of the last heartbeat write
    assert p.status()["claims"][0]["unmountedSince"] == since  # kept across the restart
    p.restart()
    world.advance(3600)  # an hour down: a mount may have come and gone unseen
    p.evaluate()
    moved = datetime.fromisoformat(p.status()["claims"][0]["unmountedSince"])
    assert moved > datetime.fromisoformat(since) + timedelta(minutes=59)
    step(world, p, 30, times=15)  # not yet 10m observed + 5m grace after the gap... almost
    assert exists(world, "orphan")
    step(world, p, 30, times=20)
    assert not exists(world, "orphan")


def test_a_gap_in_process_longer_than_the_resolution_also_moves_the_clocks(world: World) -> None:
    claim(world, "orphan")
    p = Policy(world, policy())
    p.evaluate()
    world.advance(RESOLUTION.total_seconds() * 30)  # a stalled loop: 30 minutes unobserved
    p.evaluate()
    assert exists(world, "orphan")
    assert p.status()["claims"][0]["state"] == "Unmounted"


def test_a_mount_restarts_the_clock_and_a_pending_pod_counts(world: World) -> None:
    claim(world, "orphan")
    p = Policy(world, policy())
    p.evaluate()
    step(world, p, 30, times=25)  # reported, in its grace period
    world.put(PodBuilder("late", NS).claim("orphan").pending().build())
    step(world, p, 30)
    assert p.status().get("claims", []) == []
    world.fake.drop("v1", "Pod", NS, "late")
    world.sync()
    step(world, p, 30, times=25)
    assert exists(world, "orphan")


def test_worst_case_status_stays_well_under_64_kib() -> None:
    t = datetime(2026, 1, 1).astimezone()
    long_ns, long_name = "n" * 63, "c" * 253
    status = VolumeReclaimPolicyStatus(
        claims=[
            TrackedClaim(
                namespace=long_ns, name=long_name, uid="u" * 36, unmounted_since=t,
                state="SnapshotFailed", reported_at=t, snapshot_at=t, keep_until="k" * 64,
                keep_seen=t, planned="SnapshotThenDelete", bytes=2**62,
            )
            for _ in range(MAX_TRACKED)
        ],
        notes=["x" * NOTE_LENGTH] * MAX_NOTES,
        recent_actions=[Deletion(at=t, bytes=2**62) for _ in range(MAX_RECENT)],
    )  # fmt: skip
    size = len(json.dumps(status.model_dump(mode="json", by_alias=True, exclude_none=True)))
    print("worst-case status bytes", size)
    assert size < 48 * 1024, size


def test_switched_to_enforce_the_dry_run_plan_is_done_after_a_grace_period_of_its_own(
    world: World,
) -> None:
    claim(world, "orphan")
    p = Policy(world, policy(enforce=False))
    p.evaluate()
    step(world, p, 30, times=40)
    assert [c["planned"] for c in p.status()["claims"]] == ["Delete"]
    world.fake.edit(*VRP, None, "orphans", {"spec": {"mode": "Enforce"}})
    step(world, p, 30, times=9)  # a new Orphaned Event, then the grace period
    assert exists(world, "orphan")
    assert world.fake.reasons("PersistentVolumeClaim", "orphan").count("Orphaned") == 2
    step(world, p, 30, times=2)
    assert not exists(world, "orphan")


def test_a_pod_that_mounts_the_claim_after_it_was_judged_stops_its_deletion(world: World) -> None:
    """The cache is checked again right before the DELETE: a pod seen between the
    judgement (the claim read) and the action keeps the claim."""
    claim(world, "orphan")
    p = Policy(world, policy())
    p.evaluate()
    step(world, p, 30, times=29)
    late = PodBuilder("late", NS).claim("orphan").pending().build()
    world.fake.on_next("get", "PersistentVolumeClaim", lambda _: world.put(late), name="orphan")
    step(world, p, 30)
    assert exists(world, "orphan")
    assert any("mounted again" in n for n in p.status().get("notes", []))
    assert not world.fake.writes_to("PersistentVolumeClaim", "orphan", "delete")


def test_without_the_snapshot_api_nothing_is_deleted_and_status_says_why(world: World) -> None:
    claim(world, "orphan")
    world.fake.unserve(SNAPSHOT_API, "VolumeSnapshot")
    p = Policy(world, policy().snapshot("csi-snap"))
    p.evaluate()
    step(world, p, 30, times=40)
    assert exists(world, "orphan")
    assert any("not created" in n for n in p.status().get("notes", []))


def paused_job(name: str, claim_name: str) -> JSON:
    """A suspended Job whose pod template names `claim_name` (it mounts it on resume)."""
    volume = {"name": "d", "persistentVolumeClaim": {"claimName": claim_name}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"suspend": True, "template": {"spec": {"volumes": [volume]}}},
    }


def requests(world: World) -> int:
    """GETs and LISTs the fake API server has answered so far."""
    return world.fake.gets + len(world.fake.lists)


def test_at_rest_a_claim_left_alone_is_judged_from_the_api_once_every_recheck(
    world: World,
) -> None:
    """A matured claim left alone (protected) and an orphan in its grace period: the
    evaluations every RESYNC between two RECHECKs read nothing from the API; each RECHECK
    reads the claims, their volumes and the namespace's workloads once."""
    world.put(PVCBuilder("precious", NS).labels({"trainwarden.dev/protect": "true"}).build())
    claim(world, "orphan", pv="pv-orphan")
    p = Policy(world, VolumePolicyBuilder("orphans").namespaces(NS).unmounted_for("10m"))
    p.evaluate()
    step(world, p, 30, times=21)  # matured and judged: reported (DryRun), left alone
    states = {c["name"]: c["state"] for c in p.status()["claims"]}
    assert states == {"precious": "Exempt", "orphan": "Orphaned"}
    before = requests(world)
    step(world, p, 30, times=8)  # 4 minutes at rest: 8 evaluations
    assert requests(world) - before == 0
    before = requests(world)
    step(world, p, 30, times=10)  # the next 5 minutes (one RECHECK): each judged again once
    once = requests(world) - before
    assert 0 < once <= 2 * (2 + 16)  # a claim and its volume, 16 kinds of workload listed
    before = requests(world)
    step(world, p, 30, times=10)
    assert requests(world) - before == once


def test_a_claim_is_judged_afresh_before_it_is_deleted(world: World) -> None:
    """A suspended Job created during the orphan's grace period names it: the judgement at
    the grace period's end reads the workloads again and leaves the claim alone."""
    claim(world, "orphan", pv="pv-orphan")
    p = Policy(world, policy().grace("2m"))
    p.evaluate()
    step(world, p, 30, times=21)  # matured, reported: the grace period (2m) runs
    assert "Orphaned" in world.fake.reasons("PersistentVolumeClaim", "orphan")
    world.put(paused_job("paused", "orphan"))
    step(world, p, 30, times=6)  # past the grace period, within one RECHECK of the report
    assert exists(world, "orphan")
    assert "Deleted" not in world.fake.reasons("PersistentVolumeClaim", "orphan")
    states = {c["name"]: c["state"] for c in p.status()["claims"]}
    assert states == {"orphan": "Exempt"}


def test_a_standing_verdict_ends_with_the_grace_period_not_a_recheck_later(world: World) -> None:
    """An orphan whose grace period (2m) ends before its verdict would be judged again
    anyway (RECHECK, 5m) is deleted when the grace period ends."""
    claim(world, "orphan", pv="pv-orphan")
    p = Policy(world, policy().grace("2m"))
    p.evaluate()
    step(world, p, 30, times=21)  # matured, reported
    assert exists(world, "orphan")
    step(world, p, 30, times=5)  # 2.5 minutes
    assert not exists(world, "orphan")


def test_claims_left_alone_that_fill_the_record_make_room_for_an_orphan(world: World) -> None:
    """MAX_TRACKED protected claims fill the record first; an orphan created after them is
    still aged, reported and deleted (one protected claim gives it its place), and every
    protected claim is left alone throughout."""
    for i in range(MAX_TRACKED):
        world.put(
            PVCBuilder(f"keep-{i:02d}", NS).labels({"trainwarden.dev/protect": "true"}).build()
        )
    world.advance(1)
    claim(world, "orphan", pv="pv-orphan")
    p = Policy(world, policy())
    p.evaluate()
    assert p.status()["claimsUntracked"] == 1
    step(world, p, 30, times=21)  # the protected ones matured and judged: the orphan gets a place
    tracked = {c["name"] for c in p.status()["claims"]}
    assert "orphan" in tracked
    assert len(tracked) == MAX_TRACKED
    step(world, p, 30, times=40)  # its 10 minutes, then the 5 minutes' grace
    assert not exists(world, "orphan")
    assert all(exists(world, f"keep-{i:02d}") for i in range(MAX_TRACKED))
    assert p.status()["claimsDeleted"] == 1
