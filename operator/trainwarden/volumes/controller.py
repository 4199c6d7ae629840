"""The volume reclaim controller: evaluates each VolumeReclaimPolicy when it is due.

Pod events do not wake it: a record ages by the clock, and each evaluation says when it
next matters (a claim maturing, a grace period ending, a snapshot's deadline); RESYNC
bounds the time between two observations of the mounts.
"""

from datetime import datetime

from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1.names import VOLUME_KIND
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.base import Clock, PolicyController, utcnow
from trainwarden.controllers.links import Links
from trainwarden.volumes.reconcile import Memory, reconcile


class VolumeController(PolicyController[Memory]):
    kind = VOLUME_KIND

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        *,
        instance: str | None = None,
        workers: int = 1,
        clock: Clock = utcnow,
        links: Links | None = None,
    ) -> None:
        super().__init__(kube, cache, instance=instance, workers=workers, clock=clock)
        self.links = links or Links()
        """The CheckpointPolicies' locations (checkpoints slice), which it never deletes."""

    def new_memory(self) -> Memory:
        return Memory()

    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        return await reconcile(body, self.cache, self.kube, self.memory[name], now, self.links)
