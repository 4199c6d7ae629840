"""A small world for reconciler tests: the fake API server, the operator's cache fed from
it (as the informers would), and a clock the test moves."""

import asyncio
import io
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from fakekube import FakeKube
from trainwarden.api.v1alpha1 import API_VERSION as TW
from trainwarden.cache.cluster import CLAIMS, ClusterCache, namespace_facts
from trainwarden.cache.kueue import admission_check
from trainwarden.cache.reads import SPECS, PolicyReads
from trainwarden.checkpoints.controller import scans
from trainwarden.controllers.links import CheckpointScan
from trainwarden.core.claims import claim_facts
from trainwarden.core.keep import Keep
from trainwarden.core.kueue import API_VERSION as KUEUE
from trainwarden.core.kueue import kueue_workload
from trainwarden.core.nodes import node_facts
from trainwarden.core.pods import facts
from trainwarden.core.workloads import KINDS, workload_facts

JSON = dict[str, Any]
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WORKLOAD_KEYS = {k.key for k in KINDS}


class World:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now
        self.fake = FakeKube(now=lambda: self.now)
        self.cache = ClusterCache()
        self._pods = self.cache.pod_sink()
        self._workloads = self.cache.workload_sink()
        self._namespaces = self.cache.namespace_sink()
        self._nodes = self.cache.node_sink()
        self._kueue = self.cache.kueue_workload_sink()
        self._checks = self.cache.admission_check_sink()
        self._claims = self.cache.claim_sink()
        self.cache.clock = self.clock

    def clock(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def put(self, obj: JSON) -> JSON:
        """Store an object as another actor would, and let the cache see it."""
        stored = self.fake.put(obj)
        self.sync()
        return stored

    def keep(self) -> Keep:
        """What the policies stored in the fake read (of every instance): as the
        runtime's cache keeps it."""
        reads = PolicyReads()
        for (api_version, kind, _, name), obj in self.fake.store.items():
            if api_version == TW and kind in SPECS:
                reads.policy(kind, name, obj)
        return reads.keep

    def sync(self) -> None:
        """What the informers would deliver: the cache becomes the fake's contents, as
        projected for the policies stored in it."""
        pods, workloads, namespaces, nodes, kueue, checks, claims = {}, {}, {}, {}, {}, {}, {}
        keep = self.keep()
        for (api_version, kind, _, _), obj in self.fake.store.items():
            uid = obj["metadata"]["uid"]
            if (api_version, kind) == ("v1", "Pod"):
                pods[uid] = facts(obj, keep)
            elif (api_version, kind) in WORKLOAD_KEYS:
                workloads[uid] = workload_facts(obj, keep)
            elif (api_version, kind) == ("v1", "Namespace"):
                namespaces[uid] = namespace_facts(obj, keep)
            elif (api_version, kind) == ("v1", "Node"):
                nodes[uid] = node_facts(obj, keep)
            elif (api_version, kind) == (KUEUE, "Workload"):
                kueue[uid] = kueue_workload(obj, keep)
            elif (api_version, kind) == (KUEUE, "AdmissionCheck"):
                checks[uid] = admission_check(obj)
            elif (api_version, kind) == ("v1", "PersistentVolumeClaim"):
                claims[uid] = claim_facts(obj, keep)
        self._namespaces.replace("namespaces", namespaces)
        self._nodes.replace("nodes", nodes)
        self._workloads.replace("jobs", workloads)
        self._pods.replace("pods", pods)
        self._kueue.replace("kueue-workloads", kueue)
        self._checks.replace("kueue-admissionchecks", checks)
        self._claims.replace(CLAIMS, claims)

    def read(self, api_version: str, kind: str, namespace: str | None, name: str) -> JSON:
        found = self.fake.read(api_version, kind, namespace, name)
        assert found is not None, f"{kind} {namespace}/{name} does not exist"
        return found


class Body(io.BytesIO):
    """A list response's body as urllib3 gives it to the informer: read in pieces
    (`read(amt)`, at most `piece` bytes each), or whole (`data`)."""

    def __init__(self, data: bytes, piece: int | None = None) -> None:
        super().__init__(data)
        self.piece = piece

    def read(self, amt: int | None = -1) -> bytes:
        if self.piece is not None and amt is not None and amt > 0:
            amt = min(amt, self.piece)
        return super().read(amt)

    @property
    def data(self) -> bytes:
        return self.getvalue()

    def release_conn(self) -> None:
        self.close()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


class Scanned:
    """The `checkpoint_scans` link over these CheckpointPolicy bodies, as the checkpoint
    controller publishes it (runtime.wire)."""

    def __init__(self, bodies: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self.bodies = bodies

    def checkpoint_scans(self) -> list[CheckpointScan]:
        ordered = sorted(self.bodies(), key=lambda b: str(b["metadata"]["name"]))
        return [scan for body in ordered for scan in scans(body)]
