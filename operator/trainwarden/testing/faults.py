"""Fault injection for fakes: the next matching call fails, or something happens just
before it (another actor's change between the code's read and its write).

Retries, Conflict handling and partial failures are where reconcilers go wrong; a fake
that can only succeed never shows it.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Rule:
    verb: str
    kind: str
    name: str | None
    subresource: str | None
    times: int
    action: Callable[[], object]

    def matches(self, verb: str, kind: str, name: str | None, subresource: str | None) -> bool:
        return (
            (self.verb, self.kind) == (verb, kind)
            and self.name in (None, name)
            and self.subresource in (None, subresource)
        )


class Faults:
    """Rules keyed by verb and kind (optionally one object's name, one subresource), each
    used `times` times."""

    def __init__(self) -> None:
        self._hooks: list[_Rule] = []
        self._failures: list[_Rule] = []

    def fail_next(
        self,
        verb: str,
        kind: str,
        error: Exception | type[Exception],
        *,
        times: int = 1,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """The next `times` matching calls raise `error` (a class is instantiated with a
        message saying it was injected)."""
        failure = error if isinstance(error, Exception) else error(f"injected: {verb} {kind}")

        def fail() -> None:
            raise failure

        self._failures.append(_Rule(verb, kind, name, subresource, times, fail))

    def on_next(
        self,
        verb: str,
        kind: str,
        callback: Callable[[], object],
        *,
        times: int = 1,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """Run `callback()` just before the next `times` matching calls."""
        self._hooks.append(_Rule(verb, kind, name, subresource, times, callback))

    def intercept(self, verb: str, kind: str, name: str | None, subresource: str | None) -> None:
        """Called first by every call of the fake: callbacks run first (so the call sees
        their change), then an injected failure raises."""
        for queue in (self._hooks, self._failures):
            for rule in [r for r in queue if r.matches(verb, kind, name, subresource)]:
                rule.times -= 1
                if rule.times <= 0:
                    queue.remove(rule)
                rule.action()
