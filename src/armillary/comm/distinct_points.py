"""A sweep's inputs flattened to its distinct points on one axis (comm/compose.py composes those, then puts
the results back in the sweep's shape, bit for bit)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from armillary.comm.composed import Composed
from armillary.comm.cost_types import DimensionCost
from armillary.memo import quick_init
from armillary.numerics import Array, is_array
from armillary.plan.placement import Placement


@quick_init  # one a collective of a sweep (memo.quick_init)
@dataclass(frozen=True)
class Flattened:
    """A sweep's inputs (message, spans, swept bandwidths) at its distinct points, on one axis: every formula
    is elementwise, so composing the distinct points and indexing the results back gives each point what it
    gets composed in place, bit for bit; numpy's per-call cost grows with an array's dimensions (a search
    block has one per varying axis) and the joint choice's work with its points, not with the block's."""

    n_bytes: np.ndarray
    group: Placement
    bandwidths: tuple[Array | None, ...]
    shape: tuple[int, ...]
    inverse: np.ndarray | None  # per point of the sweep (C order), its distinct point; None: all distinct
    key: tuple[object, ...]  # the distinct points' bytes and which bandwidths are swept

    @staticmethod
    def of(n_bytes: Array, group: Placement, bandwidths: tuple[Array | None, ...]) -> Flattened | None:
        """None for one configuration."""
        swept = [b for b in bandwidths if b is not None]
        values = (n_bytes, *group.spans, *swept)
        if not is_array(*values):
            return None
        shape = np.broadcast(*values).shape  # (np.broadcast_shapes' result, without its Python-level work)
        columns = np.empty((len(values), math.prod(shape)))
        shaped = columns.reshape((len(values), *shape))  # a view: each input written in one assignment
        for i, v in enumerate(values):
            shaped[i] = v
        distinct, inverse = distinct_columns(columns)
        rows = iter(distinct)
        n, spans = next(rows), tuple(next(rows) for _ in group.spans)
        return Flattened(n, Placement(spans), tuple(None if b is None else next(rows) for b in bandwidths), shape,
                          None if inverse is None else inverse.reshape(-1),
                          (distinct.shape, tuple(b is None for b in bandwidths), distinct.tobytes()))

    def put(self, x: Array, copy: bool = False) -> Array:
        """A result on the distinct points, back at the sweep's points in its shape (numbers stay numbers; with
        `copy`, never a view of `x`)."""
        if not isinstance(x, np.ndarray) or x.ndim == 0:
            return x
        if self.inverse is None:
            return x.reshape(self.shape).copy() if copy else x.reshape(self.shape)
        return x[self.inverse].reshape(self.shape)

    def back(self, c: Composed, copy: bool = False) -> Composed:
        put = self.put
        dims = tuple(DimensionCost(put(d.time, copy), put(d.sent_bytes, copy), put(d.algorithm, copy),
                                   put(d.protocol, copy), put(d.fixed, copy)) for d in c.dimensions)
        return Composed(put(c.time, copy), dims, put(c.composition, copy))


def distinct_columns(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The distinct columns (points) of `columns`, equal when bit for bit equal (so -0.0 is not 0.0), and per
    column its distinct one (None where all are distinct)."""
    keys = columns.view(np.int64)
    order = np.lexsort(keys)
    ordered = keys[:, order]
    first = np.empty(len(order), dtype=bool)
    first[0] = True
    (ordered[:, 1:] != ordered[:, :-1]).any(axis=0, out=first[1:])  # (the array's method: np.any's dispatch skipped)
    if np.count_nonzero(first) == first.size:
        return columns, None
    inverse = np.empty(len(order), dtype=np.intp)
    inverse[order] = first.cumsum() - 1  # (the array's method: np.cumsum's dispatch skipped)
    return columns[:, order[first]], inverse
