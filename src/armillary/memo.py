"""Values derived from a frozen spec, computed once per spec object (the scalar path's caches)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
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


def derived(owner: object, key: Hashable, make: Callable[[], V]) -> V:
    """`make()` once per (`owner`, `key`), kept on the frozen `owner` itself, as functools.cached_property
    keeps its value (in the instance's __dict__, past a frozen dataclass's __setattr__): it lives and dies with
    the object, whose fields it must depend on alone. A key that does not hash (an array) is made each time."""
    try:
        store: dict[Hashable, object] = owner.__dict__.setdefault("_derived", {})
        if key in store:
            return store[key]  # type: ignore[return-value]
    except (TypeError, AttributeError):  # an unhashable key, or an object without a __dict__: nothing kept
        return make()
    value = store[key] = make()
    return value
