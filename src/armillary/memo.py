"""Values derived from a frozen spec, computed once per spec object (the scalar path's caches), and frozen
dataclasses that construct faster (`quick_init`)."""

from __future__ import annotations

import dataclasses
import weakref
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


class KeyedCache(Generic[K, V]):
    """Values of a pure function per owner object and key: the owner by identity (as `IdentityCache`, kept alive
    while its entries live, at most `owners` of them), the key by value (at most `per_owner` a owner, the oldest
    dropped). For one configuration's sub-results that recur across configurations (a sweep over strategies
    prices the same layer for every pipeline depth): the key must hold every other input, typed where an int
    and a float of one value would give results of different types (`typed`). A key holding an array (a
    sweep) does not hash: made each time."""

    def __init__(self, owners: int, per_owner: int) -> None:
        self._owners: IdentityCache[object, dict[Hashable, V]] = IdentityCache(owners)
        self._size = per_owner

    def get(self, owner: object, key: Hashable, make: Callable[[], V]) -> V:
        table: dict[Hashable, V] = self._owners.get(owner, _new_table)  # type: ignore[arg-type]
        try:
            found = table.get(key, _MISSING)
        except TypeError:  # an array among the inputs
            return make()
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        value = make()
        if len(table) >= self._size:
            table.pop(next(iter(table)), None)  # the oldest (None: another thread took it)
        table[key] = value
        return value


_MISSING = object()


def _new_table(_: object) -> dict[Hashable, object]:
    return {}


def typed(*values: object) -> tuple[object, ...]:
    """`values` and their types, a key under which 1 and 1.0 (whose results differ in type) stay apart."""
    return (*values, *map(type, values))


DERIVED_PER_OBJECT = 32  # values `derived` keeps on one object at most
# per live object (by id, with a weak reference to it): the values `derived` keeps for it
_DERIVED: dict[int, tuple[weakref.ref[object], dict[Hashable, object]]] = {}


def derived(owner: object, key: Hashable, make: Callable[[], V]) -> V:
    """`make()` once per (`owner`, `key`) while the frozen `owner` lives: its values are kept beside it (by
    identity, with a weak reference that drops them when it goes), so they must depend on its fields alone.
    An object's fields and __dict__ are untouched (`Cls(**obj.__dict__)` still copies it); a copy is another
    object. A key that does not hash (an array), or an object without weak references (a number), is made
    each time."""
    try:
        ident = id(owner)
        kept = _DERIVED.get(ident)
        if kept is None or kept[0]() is not owner:
            kept = _DERIVED[ident] = (weakref.ref(owner, lambda _: _DERIVED.pop(ident, None)), {})
        store = kept[1]
        if key in store:
            return store[key]  # type: ignore[return-value]
    except TypeError:  # an unhashable key, or an object without weak references: nothing kept
        return make()
    if len(store) >= DERIVED_PER_OBJECT:  # bounded: e.g. one strategy estimated for many workloads
        store.pop(next(iter(store)))  # the oldest
    value = store[key] = make()
    return value


T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """A frozen dataclass whose __init__ fills the instance's __dict__ directly instead of calling
    object.__setattr__ once per field, as the generated one does to get past the frozen __setattr__ (about
    0.8 us for three fields, against 0.27 us: the estimator builds some 170 such objects a call). Same
    signature and defaults, __post_init__ still called; the class stays frozen (its __setattr__ raises) and
    equal, hashed and copied as before. Classes with slots, init=False, keyword-only or default_factory
    fields keep their own __init__. Put it above @dataclass(frozen=True)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if ("__slots__" in cls.__dict__ or any(not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING
                                           for f in fields)):
        return cls
    defaults: dict[str, object] = {}
    params, lines = [], []
    for f in fields:
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            defaults[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        lines.append(f"    _instance_dict_[{f.name!r}] = {f.name}\n")
    post = "    self.__post_init__()\n" if hasattr(cls, "__post_init__") else ""
    source = (f"def __init__(self, {', '.join(params)}):\n    _instance_dict_ = self.__dict__\n"
              f"{''.join(lines)}{post}")
    exec(source, defaults)  # code made from the class's own field names, as dataclasses makes its __init__
    init: Callable[..., None] = defaults["__init__"]  # type: ignore[assignment]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init._quick = True  # type: ignore[attr-defined]  # `quick_replace` copies such instances directly
    setattr(cls, "__init__", init)  # noqa: B010 (mypy refuses assigning a method)
    return cls



# per class: the field names `quick_replace` may set directly, or None where it must call dataclasses.replace
_REPLACEABLE: dict[type, frozenset[str] | None] = {}


def quick_replace(obj: T, **changes: object) -> T:
    """`dataclasses.replace(obj, **changes)` for an instance of a `quick_init` class without `__post_init__`:
    a copy of its __dict__ with `changes` set, made without calling __init__ (about 1 us against 5 us for a
    23-field StepEstimate); the copy is equal to replace's, field for field. Other classes, or a name that is
    not one of the class's fields, go through `dataclasses.replace` (the same result, the same errors)."""
    cls = type(obj)
    if cls in _REPLACEABLE:
        names = _REPLACEABLE[cls]
    else:
        quick = getattr(cls.__init__, "_quick", False) and not hasattr(cls, "__post_init__")
        names = _REPLACEABLE[cls] = frozenset(f.name for f in dataclasses.fields(cls)) if quick else None  # type: ignore[arg-type]
    if names is None or not names.issuperset(changes):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    copy = object.__new__(cls)
    state = copy.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return copy
