"""Values derived from a frozen spec, computed once per spec object (the scalar path's caches)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    """`make(spec)` once per spec object, keyed by identity: a frozen spec holding lists or dicts does not hash,
    and hashing a whole spec on every call would cost what the cache saves. The spec is kept beside its value,
    so its id is not reused while the entry lives; past `size` entries the oldest goes."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: dict[int, tuple[K, V]] = {}

    def get(self, spec: K, make: Callable[[K], V]) -> V:
        found = self._entries.get(id(spec))
        if found is not None and found[0] is spec:
            return found[1]
        value = make(spec)
        if id(spec) not in self._entries and len(self._entries) >= self._size:
            self._entries.pop(next(iter(self._entries)))
        self._entries[id(spec)] = (spec, value)
        return value
