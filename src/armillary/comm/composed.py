"""What composing a collective over the network's dimensions gives (`Composed`), and the scalar-or-array
helpers that put one dimension's phase costs together (comm/compose.py; docs/formulas.md §1.3, §1.5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armillary.comm.algorithms import NOTHING, PROTOCOLS, DimensionCost
from armillary.memo import quick_init
from armillary.numerics import Array, any_true, is_array
from armillary.specs.communication import Composition

COMPOSITIONS = (Composition.FLAT_RING, Composition.PIPELINED, Composition.SEQUENTIAL)
SMALLEST_BASE = min(proto.base_latency_s for proto in PROTOCOLS)  # the least fixed cost of a collective call


@quick_init  # one or more a collective (memo.quick_init)
@dataclass(frozen=True)
class Composed:
    """A collective composed over the dimensions: its time, each dimension's phases and the composition."""

    time: Array
    dimensions: tuple[DimensionCost, ...]  # per dimension: its phases' time, bytes and choice
    composition: Array  # index into COMPOSITIONS


def when(mask: Array, cost: Callable[[], DimensionCost]) -> DimensionCost:
    """A phase only where it is needed: not computed at all for a single configuration that skips it."""
    if not any_true(mask):
        return NOTHING
    return cost()


def select(mask: Array, a: DimensionCost, b: DimensionCost) -> DimensionCost:
    """Point by point, `a` where `mask` holds, else `b`."""
    if not is_array(mask):
        return a if mask else b
    return DimensionCost(np.where(mask, a.time, b.time), np.where(mask, a.sent_bytes, b.sent_bytes),
                         np.where(mask, a.algorithm, b.algorithm), np.where(mask, a.protocol, b.protocol),
                         np.where(mask, a.fixed, b.fixed))  # (field by field, as cost_fields orders them)


def cost_fields(c: DimensionCost) -> tuple[Array, ...]:
    """A phase's fields, in DimensionCost's order."""
    return c.time, c.sent_bytes, c.algorithm, c.protocol, c.fixed


def scaled(c: DimensionCost, k: Array) -> DimensionCost:
    """A phase run k times (k is 0 or 1 at each point: the phase, or NOTHING)."""
    if not is_array(k):
        return c if k else NOTHING
    return DimensionCost(c.time * k, c.sent_bytes * k, c.algorithm, c.protocol, c.fixed * k)


def summed_phases(stages: list[DimensionCost]) -> DimensionCost:
    """The phases of one dimension together, named by the last that runs (the top phase is first, and idle
    below the top)."""
    named = stages[0]
    for s in stages[1:]:
        named = select(np.asarray(s.time) > 0 if is_array(s.time) else s.time > 0, s, named)
    return DimensionCost(sum(s.time for s in stages), sum(s.sent_bytes for s in stages), named.algorithm,
                         named.protocol, sum(s.fixed for s in stages))


def shared_base(stages: list[DimensionCost]) -> Array:
    """What composing phases into one collective saves: each phase's cost includes a protocol's fixed cost
    per collective call, which the whole collective pays once (docs/formulas.md §1.3). The saving is the
    smallest fixed cost per extra phase, independent of the protocols chosen, so that time stays
    non-decreasing in size."""
    if not any(is_array(st.time) for st in stages):  # one configuration
        return max(sum(1 for st in stages if st.time > 0) - 1, 0) * SMALLEST_BASE
    active = sum(np.where(np.asarray(st.time) > 0, 1.0, 0.0) for st in stages)
    return np.maximum(active - 1, 0.0) * SMALLEST_BASE
