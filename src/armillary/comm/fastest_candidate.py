"""The fastest of a dimension's candidate (algorithm, protocol) costs, point by point over a sweep, as NCCL's
tuner takes the least modelled time (docs/formulas.md §1.3)."""

from __future__ import annotations

import functools

import numpy as np

from armillary.comm.cost_types import DimensionCost
from armillary.numerics import Array


def faster_cost(a: DimensionCost, b: DimensionCost) -> DimensionCost:
    """Elementwise the faster of two costs (`a` where strictly faster)."""
    take = np.asarray(a.time) < np.asarray(b.time)
    if take.ndim == 0:
        return a if take else b
    return DimensionCost(*(np.where(take, x, y) for x, y in zip(
        (a.time, a.sent_bytes, a.algorithm, a.protocol, a.fixed),
        (b.time, b.sent_bytes, b.algorithm, b.protocol, b.fixed), strict=True)))


def fastest(times: list[Array], sents: list[Array], fixeds: list[Array], labels: list[tuple[int, int]],
             p: Array, scalar: bool) -> DimensionCost:
    """The fastest candidate (algorithm, protocol), elementwise over a sweep; a group of one does nothing."""
    if scalar:
        k = times.index(min(times))  # the first of the least, as min over the indices by time picks it
        if not p > 1:
            return DimensionCost(0.0, 0.0, labels[k][0], labels[k][1])
        return DimensionCost(times[k], sents[k], labels[k][0], labels[k][1], fixeds[k])
    stacked = _stacked(times)  # only the times: choose broadcasts the bytes and latencies
    # (the arrays' own methods, what np.argmin and np.choose call after their Python-level dispatch, which for
    # np.choose walks every choice, a row view each for `stacked`: a few us a call)
    k = stacked.argmin(axis=0)  # (the times hold every input's shape, so k has the common shape)
    active = np.asarray(p) > 1
    algorithm, protocol = _label_columns(tuple(labels))
    sent = sents[0]  # one array for every candidate (one algorithm's protocols), of k's shape: what choose gives
    if not (type(sent) is np.ndarray and sent.shape == k.shape and _all_is(sents, sent)):
        sent = k.choose(sents)  # (numbers or arrays: choose takes either)
    fixed = k.choose(fixeds)
    return DimensionCost(np.where(active, k.choose(stacked), 0.0), np.where(active, sent, 0.0),
                         algorithm.take(k), protocol.take(k), np.where(active, fixed, 0.0))


def _all_is(values: list[Array], first: Array) -> bool:
    """Whether every value is `first` itself (a loop: no generator)."""
    for v in values:  # noqa: SIM110 (a loop, not all(generator): called for every fastest candidate)
        if v is not first:
            return False
    return True


def _stacked(times: list[Array]) -> np.ndarray:
    """The candidates' times on a new first axis, broadcast to their common shape: np.array where they are arrays
    of one shape already (the same copy as np.stack of np.broadcast_arrays, at a fifth of its call cost)."""
    first = times[0]
    if type(first) is np.ndarray:
        shape = first.shape
        for t in times:
            if type(t) is not np.ndarray or t.shape != shape or t.dtype != first.dtype:
                break
        else:
            return np.array(times)
    return np.stack(np.broadcast_arrays(*times))


@functools.lru_cache(maxsize=256)
def _label_columns(labels: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
    """The algorithm and the protocol labels of `fastest`'s candidates, each an array (read-only: shared) that
    `take` indexes by the candidate (as the table's columns, a copy of each: one fancy index, not two axes)."""
    table = np.array(labels)
    columns = table[:, 0].copy(), table[:, 1].copy()
    for c in columns:
        c.flags.writeable = False
    return columns
