"""The joint choice of a pipelined collective's phases: every phase's (algorithm, protocol) chosen together for
the least time of the whole, as NCCL's tuner picks the configuration of least modelled time for the whole
collective (src/graph/tuning.cc); comm/phases.py `pipelined_phases` uses it, docs/formulas.md §1.5."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from armillary.comm.composed import cost_fields, select
from armillary.comm.cost_types import NOTHING, DimensionCost
from armillary.numerics import Array, is_array, logical_not

_BLOCKED = DimensionCost(np.inf, 0.0, 0, 0, 0.0)  # an option that does not apply at a point of a sweep
_JOINT_ELEMENTS = 1 << 20  # the joint choice's (caps, options, points) arrays: at most this many elements


def on_mask(top: Array, at_top: list[tuple[DimensionCost, ...]], below: list[tuple[DimensionCost, ...]]
             ) -> list[tuple[DimensionCost, ...]]:
    """A dimension's options: the top phase's where it is the group's top, the phases below elsewhere; over
    a sweep that mixes both, each option blocked (infinite) where it does not apply."""
    if not is_array(top):
        return at_top if top else below
    if not below or not at_top:  # the sweep's points all take one side
        return at_top or below
    width = max(len(o) for o in (*at_top, *below))

    def padded(option: tuple[DimensionCost, ...], applies: Array) -> tuple[DimensionCost, ...]:
        first = select(applies, option[0], _BLOCKED)
        return (first, *option[1:], *(NOTHING,) * (width - len(option)))

    return [padded(o, top) for o in at_top] + [padded(o, logical_not(top)) for o in below]


def _covers(f2: Array, b2: Array, f: Array, b: Array) -> bool:
    """Whether (f2, b2) is at most (f, b) at every point."""
    if is_array(f2, b2, f, b):
        return bool(np.all((f2 <= f) & (b2 <= b)))
    return bool(f2 <= f) and bool(b2 <= b)


def _totals(option: tuple[DimensionCost, ...]) -> tuple[Array, Array]:
    """An option's fixed cost F and transfer time B (its phases together; infinite where it cannot run)."""
    fixed, time = option[0].fixed, option[0].time
    for c in option[1:]:
        fixed, time = fixed + c.fixed, time + c.time
    if not (is_array(fixed) or is_array(time)):
        return float(fixed), (np.inf if time == np.inf else float(time) - float(fixed))
    with np.errstate(invalid="ignore"):
        transfer = np.asarray(time, float) - np.asarray(fixed, float)
    return np.asarray(fixed, float), np.where(np.isnan(transfer), np.inf, transfer)


def frontier(options: list[tuple[DimensionCost, ...]]) -> list[tuple[DimensionCost, ...]]:
    """The options less those an earlier one matches or beats on both F and B (at every point of a sweep):
    the joint choice takes the first of equals, so it never takes them."""
    kept: list[tuple[tuple[DimensionCost, ...], tuple[Array, Array]]] = []
    for option in options:
        f, b = _totals(option)
        if not any(_covers(f2, b2, f, b) for _, (f2, b2) in kept):
            kept.append((option, (f, b)))
    return [o for o, _ in kept]


def _stacked_fields(options: list[tuple[DimensionCost, ...]], shape: tuple[int, ...]) -> np.ndarray:
    """`Stack.fields` of the options: (5, phases, options, points), NOTHING padding the narrower options."""
    width = max(len(o) for o in options)
    fields = np.zeros((5, width, len(options), math.prod(shape)))
    shaped = fields.reshape((5, width, len(options), *shape))  # a view: each field written in one assignment
    for o, option in enumerate(options):
        for w, c in enumerate(option):
            for f, x in enumerate(cost_fields(c)):
                shaped[f, w, o] = x
    return fields


_BLOCKED_FIELDS = np.array([np.inf, 0.0, 0.0, 0.0, 0.0])[:, None, None]  # _BLOCKED's fields, stacked


@dataclass(frozen=True)
class Stack:
    """A dimension's options over a sweep, stacked: `fields[f, w, o]` is field f (time, bytes sent, algorithm,
    protocol, fixed) of phase w of option o at each point (flat), and F and B their totals (`_totals`)."""

    fields: np.ndarray  # (5, phases, options, points)
    fixed: np.ndarray  # (options, points)
    transfer: np.ndarray
    shape: tuple[int, ...]  # the sweep's shape

    @staticmethod
    def of(options: list[tuple[DimensionCost, ...]], shape: tuple[int, ...]) -> Stack:
        return Stack.totalled(_stacked_fields(options, shape), shape)

    @staticmethod
    def totalled(fields: np.ndarray, shape: tuple[int, ...]) -> Stack:
        """The stack with its totals, summed phase by phase as `_totals` sums them."""
        fixed, time = fields[4, 0], fields[0, 0]
        for w in range(1, fields.shape[1]):
            fixed, time = fixed + fields[4, w], time + fields[0, w]
        with np.errstate(invalid="ignore"):
            transfer = time - fixed
        transfer[np.isnan(transfer)] = np.inf
        return Stack(fields, fixed, transfer, shape)

    @staticmethod
    def on_mask(top: Array, at_top: list[tuple[DimensionCost, ...]], below: list[tuple[DimensionCost, ...]],
                shape: tuple[int, ...]) -> Stack:
        """`on_mask`, stacked: the first phase of each option blocked where its side does not apply."""
        if not is_array(top) or not below or not at_top:
            return Stack.of(on_mask(top, at_top, below), shape)
        shape = np.broadcast_shapes(shape, np.shape(top))
        fields = _stacked_fields(at_top + below, shape)  # (totalled once, after the blocking below)
        applies = np.concatenate((np.broadcast_to(top, shape).reshape(1, -1),
                                  np.broadcast_to(logical_not(top), shape).reshape(1, -1)))
        side = np.repeat(applies, [len(at_top), len(below)], axis=0)  # (options, points)
        fields[:, 0] = np.where(side, fields[:, 0], _BLOCKED_FIELDS)
        return Stack.totalled(fields, shape)

    def frontier(self) -> Stack:
        """`frontier`, stacked: an option is dropped where an earlier one is at most its F and B at every
        point (being at most is transitive, so an earlier dropped one is itself beaten by an earlier kept)."""
        if self.fixed.shape[0] == 1:
            return self
        f, b = self.fixed, self.transfer
        # [earlier, later] (np.all and np.any as their ufuncs' reductions: ndarray.all and .any go through numpy's
        # Python-level wrapper)
        covers = np.logical_and.reduce((f[:, None] <= f[None]) & (b[:, None] <= b[None]), axis=2)
        kept = ~np.logical_or.reduce(covers & _earlier(len(f)), axis=0)
        if np.count_nonzero(kept) == kept.size:
            return self
        return Stack(self.fields[:, :, kept], f[kept], b[kept], self.shape)

    def gather(self, j: np.ndarray) -> tuple[DimensionCost, ...]:
        """Point by point, option j's phases."""
        points = np.arange(j.size)
        chosen = self.fields[:, :, j.reshape(-1), points].reshape((*self.fields.shape[:2], *self.shape))
        return tuple(DimensionCost(chosen[0, w], chosen[1, w], chosen[2, w].astype(int), chosen[3, w].astype(int),
                                   chosen[4, w]) for w in range(chosen.shape[1]))


@functools.lru_cache(maxsize=64)
def _earlier(count: int) -> np.ndarray:
    """[i, j]: whether option i comes before option j (np.triu of ones above the diagonal), read-only."""
    mask = np.triu(np.ones((count, count), dtype=bool), 1)
    mask.flags.writeable = False
    return mask


def fastest_together(choices: list[list[tuple[DimensionCost, ...]]], chunks: Array
                      ) -> list[tuple[DimensionCost, ...]]:
    """Per dimension, the option (its phases) of least pipelined time sum_i (F_i + B_i / k) + (1 - 1/k)
    max_i B_i, exactly [derived]: for a cap C on the slowest dimension's transfer each dimension takes its
    least F + B / k among the options with B <= C, and the least of sum + (1 - 1/k) C over the caps C = each
    option's B is the optimum (at the optimum's own max the bound is its time; every bound is at least the
    time of the options it took). A faster resource lowers every option's F and B, so it never raises the
    optimum."""
    totals = [[_totals(o) for o in options] for options in choices]
    if not (is_array(chunks) or any(is_array(f) or is_array(b) for row in totals for f, b in row)):
        return _fastest_together_scalar(choices, totals, float(chunks))
    shape = np.broadcast_shapes(np.shape(chunks), *(np.shape(x) for row in totals for fb in row for x in fb))
    stacks = [Stack.of(options, shape) for options in choices]
    return [st.gather(j) for st, j in zip(stacks, joint(stacks, np.broadcast_to(chunks, shape)), strict=True)]


def joint(stacks: list[Stack], chunks: np.ndarray) -> list[np.ndarray]:
    """`fastest_together` over a sweep: per dimension, the index of its option at each point. The caps are
    tried many at once (one (caps, options, points) array per dimension), in the order of the loop over
    them: a cap replaces the best only where strictly better, so the first of equal totals wins."""
    k = np.asarray(chunks, dtype=float).reshape(-1)
    size = k.size
    caps = np.concatenate([st.transfer for st in stacks])  # every option's B, in the order the caps are tried
    weighed = [st.fixed + st.transfer / k for st in stacks]
    widest = max(st.fixed.shape[0] for st in stacks)
    step = max(1, _JOINT_ELEMENTS // (widest * size))  # caps at once: bounded memory for long sweeps
    best, pick = np.full(size, np.inf), [np.zeros(size, dtype=np.intp) for _ in stacks]
    points = np.arange(size)
    with np.errstate(invalid="ignore"):
        for first in range(0, len(caps), step):
            cap = caps[first:first + step]  # (caps, points)
            total = np.where(np.isfinite(cap), cap - cap / k, np.inf)
            taken = []
            for g, st in zip(weighed, stacks, strict=True):
                allowed = np.where(st.transfer[None] <= cap[:, None], g[None], np.inf)  # (caps, options, points)
                j = allowed.argmin(axis=1)  # (the arrays' own methods: np.argmin's and np.min's dispatch skipped)
                # the least is the value at its argmin (a NaN where the argmin is the first NaN: NaN both ways)
                total = total + allowed.min(axis=1)
                taken.append(j)
            total[np.isnan(total)] = np.inf  # never better, as in a comparison
            c = total.argmin(axis=0)  # the first cap of the least total
            least = total[c, points]
            better = least < best
            best = np.where(better, least, best)
            pick = [np.where(better, j[c, points], p) for j, p in zip(taken, pick, strict=True)]
    return [p.reshape(chunks.shape) for p in pick]


def _fastest_together_scalar(choices: list[list[tuple[DimensionCost, ...]]],
                             totals: list[list[tuple[Array, Array]]], k: float) -> list[tuple[DimensionCost, ...]]:
    """`fastest_together` for one configuration, in the same order (the same choice in a tie)."""
    rows = [[(float(f) + float(b) / k, float(b), j) for j, (f, b) in enumerate(row)] for row in totals]
    best, pick = np.inf, [0] * len(choices)
    for cap in dict.fromkeys(float(b) for row in totals for _, b in row):
        if cap == np.inf:
            continue
        total, taken = cap - cap / k, []
        for row in rows:
            least = min(((g, j) for g, b, j in row if b <= cap), default=None)
            if least is None:
                break
            total += least[0]
            taken.append(least[1])
        else:
            if total < best:
                best, pick = total, taken
    return [options[j] for options, j in zip(choices, pick, strict=True)]
