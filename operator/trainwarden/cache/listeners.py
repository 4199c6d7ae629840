"""The one way the operator's parts are told of a change: an ordered list of listeners.

The cache tells of pods, workloads and namespaces (`ClusterCache.listeners`) and of
Kueue's objects (`KueueIndex.listeners`); the budget controller of budgets' events and
of their specs (`BudgetController.listeners`, `.spec_listeners`); every policy controller
of its policies' specs (`PolicyController.spec_hooks`); the policies' reads of what the
cache must keep (`PolicyReads.listeners`). Each is a `Listeners`: told in the order the
listeners were added, which the composition root (runtime.py `wire`) fixes and explains,
since a later listener may read what an earlier one indexed. A listener that raises is
logged and the others are still told: one part's bug does not leave every part after it
blind (before, the exception left the informer's callback, and the rest of the list and
of a relist were never told).
"""

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from trainwarden import logs

log = logs.get(__name__)
L = TypeVar("L")


class Listeners(Generic[L]):
    """Listeners of one kind of change, told in the order they were added."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._listeners: list[L] = []

    def add(self, *listeners: L) -> None:
        self._listeners.extend(listeners)

    def __iter__(self) -> Iterator[L]:
        """In order; a copy: a listener added while they are told is told next time."""
        return iter(list(self._listeners))

    def notify(self, tell: Callable[[L], None]) -> None:
        """`tell(listener)` for each, in order; one raising does not stop the others."""
        for listener in self:
            try:
                tell(listener)
            except Exception:
                log.exception("listener failed", topic=self.topic, listener=_name(listener))


def _name(listener: object) -> str:
    """A function's or bound method's qualified name, else the listener's class."""
    return str(getattr(listener, "__qualname__", type(listener).__qualname__))
