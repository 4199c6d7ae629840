"""The checkpoint pruning controller: evaluates each CheckpointPolicy on its schedule, when
a training job that names a checkpoint directory starts or finishes, and while its
pruners run. Policies are evaluated concurrently: one large S3 prefix being pruned does
not hold up the others."""

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import ValidationError

from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.checkpoint_status import PrunedLocation
from trainwarden.api.v1alpha1.names import CHECKPOINT_KIND, CHECKPOINT_PATH
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.cache.cluster import CLAIMS, ClusterCache
from trainwarden.checkpoints.pruner import PrunerSettings
from trainwarden.checkpoints.reconcile import Environment, Memory, reconcile
from trainwarden.controllers.base import COALESCE, Clock, PolicyController, utcnow
from trainwarden.controllers.links import CheckpointScan
from trainwarden.core.locations import TrainingJob
from trainwarden.core.pods import PodFacts
from trainwarden.core.workloads import SUSPEND_FIELD, WorkloadFacts

KILL_SWITCH_KEY = "checkpointPruning"
KILL_SWITCH_READ = timedelta(seconds=10)
"""How long one read of the kill switch answers for every policy's Pruning condition: 50
policies evaluated every 30 s cost one GET every 10 s instead of 100 a minute. A pruner
about to start reads it afresh, so a switch set is never missed by a start."""


def training_jobs(cache: ClusterCache) -> list[TrainingJob]:
    """The training jobs that name a checkpoint directory, from the cache: every kind the
    operator can suspend (Job, JobSet, Kubeflow jobs, RayJob), finished once their own
    controller says so."""
    return [
        TrainingJob(
            w.namespace,
            w.name,
            w.uid,
            w.annotations,
            w.finished_at or (w.result[1] if w.result else None),
            w.api_version,
            w.kind,
        )
        for w in list(cache.workloads.values())
        if w.key in SUSPEND_FIELD and CHECKPOINT_PATH in w.annotations
    ]


def scans(body: JSON) -> tuple[CheckpointScan, ...]:
    """A CheckpointPolicy's status entries as other slices read them (receipts): typed,
    with its spec (None if invalid); an entry that is no PrunedLocation is left out."""
    name = str((body.get("metadata") or {}).get("name"))
    spec = parse_spec(CheckpointPolicySpec, body.get("spec") or {})
    valid = None if isinstance(spec, list) else spec
    found = []
    for entry in (body.get("status") or {}).get("locations") or []:
        if not isinstance(entry, dict):
            continue
        try:
            found.append(CheckpointScan(name, valid, PrunedLocation.model_validate(entry)))
        except ValidationError:
            continue
    return tuple(found)


def _same_writer(old: WorkloadFacts, new: WorkloadFacts) -> bool:
    """Nothing a policy reads of a training job changed: its finish, its annotations."""
    return (old.finished_at, old.result, old.annotations) == (
        new.finished_at,
        new.result,
        new.annotations,
    )


class CheckpointController(PolicyController[Memory]):
    kind = CHECKPOINT_KIND

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        settings: PrunerSettings | None,
        kill_switch: tuple[str, str] | None,
        *,
        instance: str | None = None,
        workers: int = 4,
        clock: Clock = utcnow,
    ) -> None:
        super().__init__(kube, cache, instance=instance, workers=workers, clock=clock)
        self.settings = settings
        self.kill_switch = kill_switch
        self._scans: dict[str, tuple[str | None, tuple[CheckpointScan, ...]]] = {}
        """Each policy's scans by the resourceVersion they were read from."""
        self._switch: tuple[datetime, str | None] | None = None
        """The kill switch's last verdict and when it was read."""
        self._switch_read = asyncio.Lock()

    def new_memory(self) -> Memory:
        return Memory()

    def pruner_uids(self) -> frozenset[str]:
        """The pruner Jobs this operator created, by the uids its policies recorded."""
        return frozenset(
            str(entry.get("prunerUid"))
            for body in self.policies.values()
            for entry in (body.get("status") or {}).get("locations") or []
            if isinstance(entry, dict) and entry.get("prunerUid")
        )

    def checkpoint_scans(self) -> list[CheckpointScan]:
        """The `checkpoint_scans` link: every policy's locations, by policy name, each
        policy's status read once per version of it."""
        kept: dict[str, tuple[str | None, tuple[CheckpointScan, ...]]] = {}
        for name in sorted(self.policies):
            body = self.policies[name]
            version = (body.get("metadata") or {}).get("resourceVersion")
            known = self._scans.get(name)
            kept[name] = (
                known if known and version and known[0] == version else (version, scans(body))
            )
        self._scans = kept
        return [scan for _, found in kept.values() for scan in found]

    def checkpoint_specs(self) -> list[tuple[str, CheckpointPolicySpec]]:
        """The `checkpoint_specs` link: every valid policy's spec, scanned yet or not
        (a VolumeReclaimPolicy never deletes a claim one of them selects)."""
        found = []
        for name in sorted(self.policies):
            spec = parse_spec(CheckpointPolicySpec, self.policies[name].get("spec") or {})
            if not isinstance(spec, list):
                found.append((name, spec))
        return found

    # --- cache events: a training job that names its checkpoints changed ----------------

    def pod_changed(self, old: PodFacts | None, new: PodFacts | None) -> None:
        """Pods do not change what a policy governs."""

    def namespace_changed(self, name: str) -> None:
        for policy in self.policies:
            self.queue.add(policy, COALESCE)

    def workload_changed(self, old: WorkloadFacts | None, new: WorkloadFacts | None) -> None:
        if not any(w is not None and CHECKPOINT_PATH in w.annotations for w in (old, new)):
            return
        if old is not None and new is not None and _same_writer(old, new):
            return
        for policy in self.policies:
            self.queue.add(policy, COALESCE)

    async def paused(self, *, fresh: bool = False) -> str | None:
        """The kill switch: a ConfigMap with checkpointPruning: paused stops every new pruner,
        without touching any policy. One read answers for every evaluation's Pruning
        condition for KILL_SWITCH_READ (a failed read answers for none); `fresh` reads it
        now, as a pruner about to start does (`confirm`)."""
        if self.kill_switch is None:
            return None
        async with self._switch_read:
            now, known = self.clock(), self._switch
            if fresh or known is None or not timedelta(0) <= now - known[0] < KILL_SWITCH_READ:
                self._switch = known = (now, await self._read_switch(*self.kill_switch))
            return known[1]

    async def confirm(self) -> str | None:
        """The kill switch read now, before a pruner starts: a switch set since the shared
        read stops it."""
        return await self.paused(fresh=True)

    async def _read_switch(self, namespace: str, name: str) -> str | None:
        found = await self.kube.get("v1", "ConfigMap", namespace, name)
        value = ((found or {}).get("data") or {}).get(KILL_SWITCH_KEY, "")
        if value.strip().lower() != "paused":
            return None
        return (
            f"checkpoint pruning is paused cluster-wide by ConfigMap {namespace}/{name} "
            f"({KILL_SWITCH_KEY}: paused): no pruner Job starts until it is removed"
        )

    def claims(self, namespace: str) -> Sequence[tuple[str, Mapping[str, str]]]:
        return [(c.name, c.labels) for c in self.cache.claims_in(namespace)]

    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        current = self.cache.claims_watch.current(CLAIMS)
        context = Environment(
            training_jobs(self.cache),
            self.settings,
            await self.paused(),
            self.claims if current else None,
            self.confirm,
        )
        return await reconcile(body, self.cache, self.kube, self.memory[name], now, context)
