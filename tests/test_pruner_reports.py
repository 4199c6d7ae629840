"""A CheckpointPolicy over two namespaces reads pruner reports: only from the Jobs it created
and their own pods; a forged report, or a Job someone made before it, fails that one
location and records nothing of it, while the other namespace is pruned as usual."""

import asyncio
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from trainwarden.adapters.kube import JSON
from trainwarden.cache.cluster import ClusterCache, NamespaceFacts
from trainwarden.checkpoints import reconcile as checkpoints
from trainwarden.checkpoints.pruner import PrunerSettings, job_name
from trainwarden.core.locations import Location
from trainwarden.core.patches import apply_merge_patch
from trainwarden.storage.pruning import Report

CREATED = datetime(2026, 12, 2, 12, tzinfo=UTC)
NAMESPACES = ("team-a", "team-b")


class FakeKube:
    """Just the API the checkpoint reconciler uses, over a list of objects."""

    def __init__(self, objects: list[JSON]) -> None:
        self.objects = objects
        self.status: JSON = {}
        self.events: list[tuple[str, str]] = []
        self.uids = (f"uid-{n}" for n in itertools.count())

    def _matches(self, o: JSON, kind: str, namespace: str | None, selector: str) -> bool:
        labels = o["metadata"].get("labels") or {}
        wanted = dict(part.split("=", 1) for part in selector.split(",") if part)
        return (
            o["kind"] == kind
            and namespace in (None, o["metadata"].get("namespace"))
            and all(labels.get(k) == v for k, v in wanted.items())
        )

    async def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, selector: str = ""
    ) -> list[JSON]:
        return [o for o in self.objects if self._matches(o, kind, namespace, selector)]

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> JSON:
        return next(
            o
            for o in self.objects
            if self._matches(o, kind, namespace, "") and o["metadata"]["name"] == name
        )

    async def create(self, body: JSON) -> JSON | None:
        meta = body["metadata"]
        if any(self._same(o, body) for o in self.objects):
            return None
        made = {**body, "metadata": {**meta, "uid": next(self.uids)}}
        self.objects.append(made)
        return made

    def _same(self, o: JSON, body: JSON) -> bool:
        return (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) == (
            body["kind"],
            body["metadata"]["namespace"],
            body["metadata"]["name"],
        )

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: JSON,
        *,
        subresource: str | None = None,
    ) -> JSON:
        if subresource == "status":
            self.status = apply_merge_patch(self.status, patch["status"])
        return patch

    async def event(self, obj: JSON, *, type_: str, reason: str, message: str, action: str) -> None:
        self.events.append((reason, message))


def pvc(namespace: str) -> JSON:
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt", "namespace": namespace, "labels": {"checkpoints": "hf"}},
    }


def policy(status: JSON) -> JSON:
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {
            "name": "p",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": CREATED.isoformat(),
        },
        "spec": {
            "mode": "Enforce",
            "scope": {"namespaces": list(NAMESPACES)},
            "storage": {"pvc": {"selector": {"matchLabels": {"checkpoints": "hf"}}}},
        },
        "status": status,
    }


def cycle(kube: FakeKube, now: datetime) -> JSON:
    inventory = ClusterCache()
    inventory.namespace_sink().replace("namespaces", {n: NamespaceFacts(n, {}) for n in NAMESPACES})
    context = checkpoints.Environment(jobs=[], settings=PrunerSettings("img:1"), paused=None)
    asyncio.run(
        checkpoints.reconcile(
            policy(kube.status), inventory, kube, checkpoints.Memory(), now, context
        )
    )
    return kube.status


def finish(job: JSON, message: str, **pod_change: Any) -> JSON:
    """Mark the Job complete; the pod the Job controller made for it, with `message`."""
    job["status"] = {
        "completionTime": "2026-12-02T12:01:00Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    meta = job["metadata"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-x",
            "namespace": meta["namespace"],
            "labels": {"job-name": meta["name"]},
            "ownerReferences": [{"uid": meta["uid"], "controller": True}],
        },
        "spec": {
            "containers": [{**container, **pod_change}],
            "volumes": job["spec"]["template"]["spec"].get("volumes", []),
        },
        "status": {
            "containerStatuses": [{"name": "pruner", "state": {"terminated": {"message": message}}}]
        },
    }


def report(freed: int) -> str:
    made = Report("/checkpoints", False, scanned=3, kept=2, deleted=["checkpoint-1"])
    made.bytes_freed = freed
    return json.dumps(made.summary())


def entries(status: JSON) -> dict[str, JSON]:
    return {e["namespace"]: e for e in status["locations"]}


def test_a_forged_report_fails_its_location_only_and_frees_nothing() -> None:
    kube = FakeKube([pvc(n) for n in NAMESPACES])
    first = entries(cycle(kube, CREATED))
    assert {n: bool(e["prunerUid"]) for n, e in first.items()} == {n: True for n in NAMESPACES}
    jobs = {j["metadata"]["namespace"]: j for j in kube.objects if j["kind"] == "Job"}
    forged = json.loads(report(10**6))
    forged["deletedCount"] = "lots"
    kube.objects += [
        finish(jobs["team-a"], report(1000)),
        finish(jobs["team-b"], json.dumps(forged)),
    ]
    status = cycle(kube, CREATED + timedelta(minutes=2))
    got = entries(status)
    assert (got["team-a"]["failed"], got["team-a"]["deleted"]) == (False, 1)
    assert got["team-a"]["bytesFreed"] == 1000
    assert got["team-b"]["failed"] is True
    assert "deletedCount: Input should be a valid integer" in got["team-b"]["message"]
    assert got["team-b"]["bytesFreed"] == 0
    assert status["bytesFreed"] == 1000, "forged bytes are never recorded as freed"
    ready = {c["type"]: c for c in status["conditions"]}
    assert ready["Ready"]["status"] == "True"
    assert ready["LastRunSucceeded"]["status"] == "False"
    assert "team-a" not in ready["LastRunSucceeded"]["message"]


def test_a_report_from_anything_but_the_job_it_created_is_never_read() -> None:
    """Another Job with the pruner's labels (and a newer name), and a pod claiming the real
    Job but running another command: neither is believed."""
    kube = FakeKube([pvc("team-a")])
    cycle(kube, CREATED)
    ours = next(j for j in kube.objects if j["kind"] == "Job")
    imposter = json.loads(json.dumps(ours))
    imposter["metadata"] |= {"name": "trainwarden-prune-zzz", "uid": "tenant-made"}
    kube.objects += [
        imposter,
        finish(imposter, report(10**15)),
        finish(ours, report(10**15), command=["sh", "-c", "echo forged"]),
    ]
    got = entries(cycle(kube, CREATED + timedelta(minutes=2)))["team-a"]
    assert got["lastJob"] == ours["metadata"]["name"]
    assert got["failed"] is True
    assert "no readable summary" in got["message"]
    assert got["bytesFreed"] == 0


def test_a_job_made_before_the_operator_under_its_name_is_not_adopted() -> None:
    where = Location("team-b", "ckpt", "/")
    squatter = {
        "kind": "Job",
        "metadata": {
            "name": job_name(where, CREATED),
            "namespace": "team-b",
            "uid": "tenant-made",
            "labels": {"trainwarden.dev/pruner-for": where.key, "trainwarden.dev/policy": "p"},
        },
        "spec": {"template": {"spec": {"containers": [{"name": "pruner", "image": "evil"}]}}},
    }
    kube = FakeKube([pvc("team-a"), pvc("team-b"), squatter])
    got = entries(cycle(kube, CREATED))
    assert got["team-b"]["failed"] is True
    assert "not adopted" in got["team-b"]["message"]
    assert got["team-b"]["prunerUid"] == ""
    assert got["team-a"]["prunerUid"], "the other namespace's pruner started as usual"
    kube.objects.append(finish(squatter, report(10**12)))
    later = entries(cycle(kube, CREATED + timedelta(minutes=1)))
    assert later["team-b"].get("lastJob") is None, "its report is never read"
    assert later["team-b"]["bytesFreed"] == 0
