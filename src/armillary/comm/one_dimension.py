"""A group inside one network dimension (at every point of a sweep): every composition is that dimension's
own fastest algorithm (NCCL's flat ring is its ring; the pipelined phases are its other algorithms), so it is
costed directly, without composing (docs/formulas.md §1.5)."""

from __future__ import annotations

import numpy as np

from armillary.comm.composed import COMPOSITIONS, Composed
from armillary.comm.cost_types import ALGORITHMS, NOTHING, DimensionCost
from armillary.comm.phase_net import PhaseNet, phase_message
from armillary.numerics import Array, any_true, where
from armillary.plan.placement import Placement
from armillary.specs.communication import ALG_RING, FLAT_RING, PIPELINED, Collective
from armillary.specs.network import CollectiveLibrary

_NCCL = CollectiveLibrary.NCCL  # read once, as Collective's members are (specs/communication.py says why)
_FLAT_RING_INDEX, _PIPELINED_INDEX = COMPOSITIONS.index(FLAT_RING), COMPOSITIONS.index(PIPELINED)
_RING_INDEX = ALGORITHMS.index(ALG_RING)


def one_dimension_each(group: Placement) -> bool:
    """Whether the group spans at most one dimension (at every point of a sweep)."""
    spans = group.spans
    if len(spans) == 2 and type(spans[0]) is np.ndarray and type(spans[1]) is np.ndarray:  # a two-tier sweep: no
        # point spans both (the count below, in fewer passes; np.any, without its Python-level wrapper)
        return not np.count_nonzero((spans[0] > 1) & (spans[1] > 1))
    spanned: Array = 0
    for s in group.spans:  # (the sum in a loop: one configuration's path makes no generator; the same adds)
        spanned = spanned + (s > 1)
    return not any_true(spanned > 1)


def on_one_dimension(op: Collective, n: Array, net: PhaseNet) -> Composed:
    """A group inside one dimension: every composition is that dimension's own fastest algorithm (NCCL's flat
    ring is its ring; the pipelined phases are its other algorithms), so it is costed directly."""
    group = net.group
    nccl = net.system.collectives is _NCCL
    dims: list[DimensionCost] = []
    # the phases' times and, under NCCL, how many ran a ring: added in a loop as sum() adds them, from 0 (at most
    # one phase a point takes time, so no summation order can round differently)
    time: Array = 0
    flat: Array = 0 if nccl else False
    for i, s in enumerate(group.spans):
        # (a dimension the group spans at no point: NOTHING, as `phase` gives it, without its message)
        d = NOTHING if (not s > 1 if type(s) is float else type(s) is np.ndarray and not np.count_nonzero(s > 1)) else (
            net.phase(i, op, phase_message(op, n, group, i)))
        dims.append(d)
        time = time + d.time
        if nccl:
            flat = flat + (d.algorithm == _RING_INDEX)
    if type(flat) is int:  # a count for one configuration: what np.where gives, a 0-d int array (read-only, shared)
        return Composed(time, tuple(dims), _FLAT_RING_0D if flat else _PIPELINED_0D)
    return Composed(time, tuple(dims), where(flat, _FLAT_RING_INDEX, _PIPELINED_INDEX))


def _read_only(x: np.ndarray) -> np.ndarray:
    x.flags.writeable = False
    return x


_FLAT_RING_0D, _PIPELINED_0D = _read_only(np.array(_FLAT_RING_INDEX)), _read_only(np.array(_PIPELINED_INDEX))
