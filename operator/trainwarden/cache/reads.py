"""What the policies of this instance read, kept current from their spec changes: the
cache keeps only that of the objects it holds (core/reads.py), and the runtime lists a
source again when it grows."""

from collections.abc import Callable, Mapping
from typing import Any

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.names import BUDGET_KIND, CHECKPOINT_KIND, IDLE_KIND, VOLUME_KIND
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicySpec
from trainwarden.cache.listeners import Listeners
from trainwarden.core.keep import Keep
from trainwarden.core.reads import CODE, Spec, reads

SPECS: Mapping[str, type[Spec]] = {
    BUDGET_KIND: TrainingBudgetSpec,
    IDLE_KIND: IdleReclaimPolicySpec,
    CHECKPOINT_KIND: CheckpointPolicySpec,
    VOLUME_KIND: VolumeReclaimPolicySpec,
}


class PolicyReads:
    """Each policy's reads by (kind, name); `keep` is their union with the code's."""

    def __init__(self) -> None:
        self._by_policy: dict[tuple[str, str], Keep] = {}
        self._keep = CODE
        self.listeners: Listeners[Callable[[Keep], None]] = Listeners("reads")
        """Told the new union after every change (it may have grown, shrunk or stayed)."""

    @property
    def keep(self) -> Keep:
        return self._keep

    def policy(self, kind: str, name: str, body: Mapping[str, Any] | None) -> None:
        """A policy of this instance, as its controller saw it (None: gone). An invalid
        spec reads nothing: the policy does nothing until it is fixed."""
        spec = parse_spec(SPECS[kind], (body or {}).get("spec") or {}) if body else None
        self.read(kind, name, None if spec is None or isinstance(spec, list) else reads(spec))

    def read(self, kind: str, name: str, keep: Keep | None) -> None:
        """What a policy reads, found already (None: it is gone, or reads nothing)."""
        if keep is None:
            self._by_policy.pop((kind, name), None)
        else:
            self._by_policy[(kind, name)] = keep
        found = CODE
        for each in self._by_policy.values():
            found |= each
        self._keep = found
        self.listeners.notify(lambda listener: listener(found))
