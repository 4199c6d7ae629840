"""The idle reclaim controller: evaluates each IdleReclaimPolicy when it is due.

Pod events do not wake it: utilization arrives continuously, so each evaluation says when
it next matters (a warm-up ending, a suspicion maturing, a grace period running out).
That keeps Prometheus at one query per policy per evaluation however busy the pods are.
"""

from datetime import datetime

from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import PerGpu, Utilization
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.names import IDLE_KIND
from trainwarden.api.v1alpha1.types import Scope
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.base import Clock, PolicyController, utcnow
from trainwarden.core.nodes import reported_idle
from trainwarden.idle.nodes import let_go
from trainwarden.idle.reconcile import Memory, reconcile


class IdleController(PolicyController[Memory]):
    kind = IDLE_KIND

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        prometheus: Utilization | None,
        *,
        instance: str | None = None,
        workers: int = 2,
        clock: Clock = utcnow,
        per_gpu: PerGpu | None = None,
    ) -> None:
        super().__init__(kube, cache, instance=instance, workers=workers, clock=clock)
        self.prometheus = prometheus
        self.per_gpu = per_gpu
        """Each accelerator's window, for rightsizing (Prometheus)."""
        self.scopes: dict[str, Scope] = {}

    def new_memory(self) -> Memory:
        return Memory()

    def spec_changed(self, name: str, body: JSON | None) -> None:
        spec = parse_spec(IdleReclaimPolicySpec, (body or {}).get("spec") or {})
        if body is None or isinstance(spec, list):
            self.scopes.pop(name, None)
        else:
            self.scopes[name] = spec.scope
        for other in self.policies:  # the pods a policy governs depend on those before it
            if other > name:
                self.queue.add(other)

    async def release(self, name: str, body: JSON, now: datetime) -> bool:
        """A deleted policy's cordons lifted and idle-node labels removed (idle/nodes.py
        `let_go`); a policy of the same name created since keeps them."""
        if name in self.policies:
            return True
        kept = {n for other in self.policies.values() for n in reported_idle(other)}
        deferred = await let_go(self.kube, self.cache, name, reported_idle(body), kept)
        return not deferred

    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        earlier = [scope for other, scope in sorted(self.scopes.items()) if other < name]
        return await reconcile(
            body,
            self.cache,
            self.kube,
            self.prometheus,
            self.memory[name],
            now,
            earlier,
            self.per_gpu,
        )
