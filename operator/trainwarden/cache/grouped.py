"""Records by uid, and grouped by a key each record names: the one index the cache keeps
for pods (by namespace), claims (by namespace) and receipts (by repeat key)."""

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Grouped(Generic[K, V]):
    """Both maps change together, so a group never names a uid the other map dropped,
    and an empty group is removed (the index stays as large as what it holds)."""

    def __init__(self, key: Callable[[V], K]) -> None:
        self.by_uid: dict[str, V] = {}
        self.by_key: dict[K, dict[str, V]] = {}
        self._key = key

    def put(self, uid: str, new: V | None) -> V | None:
        """Store `new` under `uid` (None removes it); returns what it replaced."""
        old = self.by_uid.pop(uid, None)
        if old is not None:
            key = self._key(old)
            group = self.by_key.get(key, {})
            group.pop(uid, None)
            if not group:
                self.by_key.pop(key, None)
        if new is not None:
            self.by_uid[uid] = new
            self.by_key.setdefault(self._key(new), {})[uid] = new
        return old
