"""Kueue's objects as the operator keeps them: Workloads (small records, by uid and by the
job they were made for) and the AdmissionChecks trainwarden is the controller of.

Fed by informers (adapters/informer.py) only while Kueue's CRDs are served; empty
otherwise, so a cluster without Kueue sees the operator as before. Listeners are told
which Workload changed, and when the checks did.
"""

from dataclasses import dataclass
from typing import Any, Protocol

from trainwarden.cache.listeners import Listeners
from trainwarden.core.keep import NAME, SHORT, bounded, cut, integer
from trainwarden.core.kueue import KueueWorkload
from trainwarden.core.shapes import mapping, mappings

MESSAGE = 256
"""The Active condition's message is compared whole with trainwarden's one sentence: a
longer one is another's, kept as a mark (core/keep.py), and rewritten."""


@dataclass(frozen=True, slots=True)
class AdmissionCheckFacts:
    name: str
    controller: str
    generation: int
    conditions: tuple[dict[str, Any], ...]
    """Only its Active condition (what trainwarden sets), each field bounded."""


def _active(conditions: object) -> tuple[dict[str, Any], ...]:
    for c in mappings(conditions):
        if c.get("type") == "Active":
            return (
                {
                    "type": "Active",
                    "status": bounded(c.get("status"), SHORT),
                    "message": bounded(c.get("message"), MESSAGE),
                    "observedGeneration": integer(c.get("observedGeneration")),
                    "lastTransitionTime": cut(c.get("lastTransitionTime"), SHORT),
                },
            )
    return ()


def admission_check(obj: dict[str, Any]) -> AdmissionCheckFacts:
    """The record of an AdmissionCheck: whose it is, and its Active condition."""
    meta, spec, status = (mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    return AdmissionCheckFacts(
        bounded(meta.get("name") or "", NAME),
        bounded(spec.get("controllerName") or "", NAME),
        integer(meta.get("generation")),
        _active(status.get("conditions")),
    )


class KueueListener(Protocol):
    """What Kueue's admission check hears of Kueue's objects."""

    def workload_changed(self, old: KueueWorkload | None, new: KueueWorkload | None) -> None: ...

    def checks_changed(self) -> None: ...


class KueueIndex:
    """Workloads by uid and by owner uid; AdmissionChecks by uid."""

    def __init__(self) -> None:
        self.workloads: dict[str, KueueWorkload] = {}
        self._by_owner: dict[str, str] = {}
        self.checks: dict[str, AdmissionCheckFacts] = {}
        self.listeners: Listeners[KueueListener] = Listeners("kueue")

    def workload_of(self, owner_uid: str) -> KueueWorkload | None:
        """The Workload Kueue made for a job (a Job, a JobSet...), if the cache has it."""
        uid = self._by_owner.get(owner_uid)
        return self.workloads.get(uid) if uid else None

    def set_workload(self, uid: str, new: KueueWorkload | None) -> None:
        old = self.workloads.pop(uid, None)
        if old is not None and old.owner_uid and self._by_owner.get(old.owner_uid) == uid:
            del self._by_owner[old.owner_uid]
        if new is not None:
            self.workloads[uid] = new
            if new.owner_uid:
                self._by_owner[new.owner_uid] = uid
        self.listeners.notify(lambda listener: listener.workload_changed(old, new))

    def set_check(self, uid: str, new: AdmissionCheckFacts | None) -> None:
        if new is None:
            self.checks.pop(uid, None)
        else:
            self.checks[uid] = new
        self.listeners.notify(lambda listener: listener.checks_changed())

    def ours(self, controller: str) -> frozenset[str]:
        """The names of the AdmissionChecks whose controller is `controller`."""
        return frozenset(c.name for c in self.checks.values() if c.controller == controller)

    def clear(self) -> None:
        """Kueue was uninstalled: nothing of it is left."""
        for uid in list(self.workloads):
            self.set_workload(uid, None)
        for uid in list(self.checks):
            self.set_check(uid, None)
