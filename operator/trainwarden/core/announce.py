"""What a policy has said, so that news that would repeat every evaluation (a DryRun
"would suspend", a bad annotation, a held workload, a recommendation) is said once.

Each thing is said under a key (usually the object's uid and what is said of it) and a
condition (what was said: a recommended size, the label that was wrong). It is said
again only when it comes back after a break or with another condition.

Memory is bounded by what is current, not by what was ever said: the caller tells which
keys still hold at the end of each evaluation (`keep_only`), or forgets a key when its
object goes (`forget`). No LRU: an LRU cap would say again whatever it evicts while it
still holds, every evaluation once the cap is reached; the keys still holding are already
bounded by the objects the policy governs in the cache.
"""

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

SAID: Hashable = True
"""The condition of a key that is either said or not (most of them)."""


@dataclass
class Announcements:
    """The keys said, each with the condition it was said under."""

    _said: dict[str, Hashable] = field(default_factory=dict)

    def said(self, key: str, condition: Hashable = SAID) -> bool:
        """Whether `key` was said under `condition` and has held since."""
        return key in self._said and self._said[key] == condition

    def note(self, key: str, condition: Hashable = SAID) -> None:
        """`key` has just been said under `condition`."""
        self._said[key] = condition

    def first(self, key: str, condition: Hashable = SAID) -> bool:
        """True (and noted) when `key` is to be said now: not said under `condition`
        since it last began to hold. The caller says it when this is True."""
        if self.said(key, condition):
            return False
        self.note(key, condition)
        return True

    def keep_only(self, keys: Iterable[str]) -> None:
        """The end of an evaluation: forget every key not in `keys` (what still holds), so
        it is said again if it comes back."""
        current = set(keys)
        self._said = {k: c for k, c in self._said.items() if k in current}

    def forget(self, key: str) -> None:
        """The key's object is gone, or the key no longer holds."""
        self._said.pop(key, None)

    def __len__(self) -> int:
        return len(self._said)

    def __contains__(self, key: object) -> bool:
        return key in self._said
