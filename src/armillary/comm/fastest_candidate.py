"""The fastest of a dimension's candidate (algorithm, protocol) costs, point by point over a sweep, as NCCL's
tuner takes the least modelled time (docs/formulas.md §1.3)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

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


class Candidates(NamedTuple):
    """A dimension's candidates (algorithm, protocol), stacked (comm/algorithms.py `_candidate_costs`): per candidate
    on a first axis, the time and the fixed cost; the bytes sent per algorithm (`sents[groups[j]]` are candidate
    j's); the labels; the group's ranks p; whether one configuration."""

    times: np.ndarray
    sents: list[Array]
    fixeds: np.ndarray
    labels: tuple[tuple[int, int], ...]
    p: Array
    scalar: bool
    groups: tuple[int, ...]


def fastest(times: list[Array] | np.ndarray, sents: list[Array], fixeds: list[Array] | np.ndarray,
            labels: Sequence[tuple[int, int]], p: Array, scalar: bool, groups: tuple[int, ...] | None = None
            ) -> DimensionCost:
    """The fastest candidate (algorithm, protocol), elementwise over a sweep; a group of one does nothing. The
    candidates as lists, one entry each, or stacked (`Candidates`: the times and fixed costs on a first axis,
    the bytes per group)."""
    if scalar:
        each = times if isinstance(times, list) else times.tolist()  # (plain floats: the same comparisons)
        k = each.index(min(each))  # the first of the least, as min over the indices by time picks it
        if not p > 1:
            return DimensionCost(0.0, 0.0, labels[k][0], labels[k][1])
        return DimensionCost(each[k], sents[k if groups is None else groups[k]], labels[k][0], labels[k][1],
                             fixeds[k] if isinstance(fixeds, list) else fixeds.item(k))
    stacked = times if isinstance(times, np.ndarray) else _stacked(times)  # only the times: choose broadcasts the rest
    # (the arrays' own methods, what np.argmin and np.choose call after their Python-level dispatch, which for
    # np.choose walks every choice, a row view each for `stacked`: a few us a call)
    k = stacked.argmin(axis=0)  # (the times hold every input's shape, so k has the common shape)
    active = p > 1 if type(p) is np.ndarray else np.asarray(p) > 1
    algorithm, protocol = _label_columns(labels if type(labels) is tuple else tuple(labels))
    if groups is not None:
        sents = [sents[g] for g in groups] if len(sents) > 1 else sents * len(groups)
    sent = sents[0]  # one array for every candidate (one algorithm's protocols), of k's shape: what choose gives
    # (copied: a new array, as choose makes)
    sent = sent.copy() if type(sent) is np.ndarray and sent.shape == k.shape and _all_is(sents, sent) else (
        k.choose(sents))  # (numbers or arrays: choose takes either)
    # over one axis, the chosen times (and fixed costs, stacked alike) as one fancy index: what choose gives
    points = np.arange(k.size) if k.ndim == 1 else None
    time = k.choose(stacked) if points is None else stacked[k, points]
    fixed = fixeds[k, points] if points is not None and type(fixeds) is np.ndarray and (
        fixeds.shape == stacked.shape) else k.choose(fixeds)
    if np.count_nonzero(active) != active.size:  # np.where(active, x, 0.0), set in place on these new arrays of
        # k's shape (which holds the mask's): the same bits
        inactive = ~active
        for x in (time, sent, fixed):
            if x.dtype != np.float64:
                break
        else:
            for x in (time, sent, fixed):
                np.copyto(x, 0.0, where=inactive)
            return DimensionCost(time, sent, algorithm.take(k), protocol.take(k), fixed)
        return DimensionCost(np.where(active, time, 0.0), np.where(active, sent, 0.0), algorithm.take(k),
                             protocol.take(k), np.where(active, fixed, 0.0))
    return DimensionCost(time, sent if sent.dtype == np.float64 else np.where(active, sent, 0.0), algorithm.take(k),
                         protocol.take(k), fixed)


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
