"""The search's memo of composed collectives (`memoized`): a sweep of the same collective, choices, system and
distinct points is composed once within one search and reused, exactly (the same inputs bit for bit)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from armillary.comm.algorithms import DimensionCost
from armillary.comm.composed import Composed
from armillary.numerics import Array
from armillary.plan.placement import Placement
from armillary.specs.communication import Collective
from armillary.specs.system import System


def inputs_key(op: Collective, system: System, n: Array, group: Placement, bandwidths: tuple[Array | None, ...]
               ) -> tuple[object, ...]:
    """`memoized`'s key of a collective of one dimension per group: the inputs as they are, bit for bit."""
    key: list[object] = [op, "one dimension", id(system)]
    for v in (n, *group.spans, *bandwidths):  # (a loop: no generator)
        if v is None:
            key.append(None)
        elif type(v) is np.ndarray and v.dtype == np.float64:
            key.append((v.shape, v.tobytes()))
        else:
            key.append((np.shape(v), np.asarray(v, float).tobytes()))
    return tuple(key)


def remember(key: tuple[object, ...], system: System, composed: Composed, points: int) -> None:
    """Hold `composed` under `key` (its system kept alive), the oldest dropped past MEMO_POINTS points."""
    MEMO[key] = (system, composed, points)
    _MEMO_POINTS[0] += points
    while _MEMO_POINTS[0] > MEMO_POINTS:  # the oldest go
        _MEMO_POINTS[0] -= MEMO.pop(next(iter(MEMO)))[2]


def copied(c: Composed) -> Composed:
    """A composition whose arrays are copies (what `memoized` holds is never handed out)."""
    return Composed(_copy(c.time), tuple(DimensionCost(_copy(d.time), _copy(d.sent_bytes), _copy(d.algorithm),
                                                       _copy(d.protocol), _copy(d.fixed)) for d in c.dimensions),
                    _copy(c.composition))


def _copy(x: Array) -> Array:
    return x.copy() if isinstance(x, np.ndarray) else x


# Sweeps composed within `memoized`: (collective, algorithm, composition, system, distinct points) -> (the
# system, its composition on those points); the system is kept so that its id is not reused meanwhile. At
# most MEMO_POINTS distinct points in all (about 100 bytes each on two tiers: ~27 MB)
MEMO_POINTS = 2**18
MEMO: dict[tuple[object, ...], tuple[System, Composed, int]] = {}  # read by comm/compose.compose
_MEMO_POINTS = [0]
MEMO_TOKEN: ContextVar[Hashable | None] = ContextVar("compose_memo", default=None)  # the search within
_MEMO_OWNER: list[Hashable | None] = [None]


@contextmanager
def memoized(token: Hashable) -> Iterator[None]:
    """Within: a sweep of the same collective, choices, system (the same object) and distinct points is
    composed once and reused (exact: the same inputs bit for bit give the same result). For the blocks of one
    search (`token`, equal in every block and worker of it): what another token's search held is dropped."""
    if _MEMO_OWNER[0] != token:
        forget()
        _MEMO_OWNER[0] = token
    reset = MEMO_TOKEN.set(token)
    try:
        yield
    finally:
        MEMO_TOKEN.reset(reset)


def forget() -> None:
    """Drop what `memoized` holds (a search calls it when it ends)."""
    MEMO.clear()
    _MEMO_POINTS[0] = 0
    _MEMO_OWNER[0] = None
