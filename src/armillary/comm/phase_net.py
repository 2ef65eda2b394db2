"""One phase of a composed collective: `op` on one network dimension of a group that spans several
(docs/formulas.md §1.5), with what every composition builds on: each phase's message (`phase_message`),
the per-dimension costs of a phase, of its options and of a ring through it (`PhaseNet`), a pinned
algorithm where it runs (`pinnable`), the all-to-all incast (`incast`) and the faster of two
compositions (`faster`). comm/compose.py puts the phases together."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from armillary.comm.algorithms import dimension_cost, dimension_options, ring_rows
from armillary.comm.composed import Composed, scaled, select
from armillary.comm.cost_types import NOTHING, PROTOCOLS, DimensionCost, Rows
from armillary.comm.fabrics import all_to_all_slowdown
from armillary.memo import quick_init
from armillary.numerics import Array, any_true, is_array, where
from armillary.plan.placement import Placement
from armillary.specs.communication import ALG_AUTO, ALL_TO_ALL, BROADCAST, REDUCE, Algorithm, Collective
from armillary.specs.system import System


@quick_init  # one a collective (memo.quick_init)
@dataclass(frozen=True)
class PhaseNet:
    """What a phase needs: the system, the group, the pinned algorithm and swept bandwidths."""

    system: System
    group: Placement
    algorithm: Algorithm
    bandwidths: tuple[Array | None, ...]

    # (each made once per composition, kept in the instance's __dict__ as functools.cached_property keeps it,
    # without its lock: Python 3.11's takes one on every first read, ~2 us)
    @property
    def outermost(self) -> Array:
        """The group's outermost spanned dimension (`Placement.outermost`), once per composition."""
        kept = self.__dict__
        if "_outermost" not in kept:
            kept["_outermost"] = self.group.outermost
        return kept["_outermost"]  # type: ignore[no-any-return]

    @property
    def size(self) -> Array:
        """The group's ranks (`Placement.size`), once per composition."""
        kept = self.__dict__
        if "_size" not in kept:
            kept["_size"] = self.group.size
        return kept["_size"]  # type: ignore[no-any-return]

    @property
    def tops(self) -> tuple[Array, ...]:
        """Per dimension, whether it is the outermost the group spans, once per composition."""
        kept = self.__dict__
        if "_tops" not in kept:
            outermost = self.outermost
            kept["_tops"] = tuple(outermost == i for i in range(len(self.group.spans)))
        return kept["_tops"]  # type: ignore[no-any-return]

    def top(self, i: int) -> Array:
        """Whether dimension i is the outermost the group spans."""
        return self.tops[i]

    def phase(self, i: int, op: Collective, n: Array, p: Array | None = None,
              exclude: tuple[Algorithm, ...] = (), algorithm: Algorithm | None = None,
              latency_scale: Array = 1.0) -> DimensionCost:
        """`op` on dimension i over p ranks (default: the group's span there), with the dimension's fastest
        algorithm (or the collective's pinned one where it runs, or `algorithm`, which must run); infinite
        where it cannot run."""
        dim, span = self.system.network[i], self.group.spans[i]
        ranks = span if p is None else p
        if not any_true(span > 1):  # no point of the sweep spans this dimension
            return NOTHING
        if algorithm is not None and not pinnable(algorithm, op, dim):
            return blocked(span)  # a phase that must run this algorithm cannot run here
        pinned = algorithm or self.algorithm
        if pinned is not ALG_AUTO and not pinnable(pinned, op, dim, exclude):  # (auto is never pinnable)
            pinned = ALG_AUTO
        try:
            cost = dimension_cost(op, n, ranks, dim, self.system.device.hbm.rate, pinned, self.bandwidths[i], exclude,
                                  latency_scale)
        except ValueError:
            return blocked(span)
        if p is None:
            return cost
        return scaled(cost, where(span > 1, 1.0, 0.0))  # a ring over all ranks only where the group spans i

    def options(self, i: int, op: Collective, n: Array, exclude: tuple[Algorithm, ...] = ()
                ) -> tuple[DimensionCost, ...]:
        """What `phase` chooses from: `op` on dimension i over the group's span there under each (algorithm,
        protocol) that can run (the collective's pinned algorithm where it runs); one infinite cost where
        none can."""
        dim, span = self.system.network[i], self.group.spans[i]
        if not any_true(span > 1):
            return (NOTHING,)
        pinned = self.algorithm if pinnable(self.algorithm, op, dim, exclude) else ALG_AUTO
        try:
            return dimension_options(op, n, span, dim, self.system.device.hbm.rate, pinned, self.bandwidths[i],
                                     exclude)
        except ValueError:
            return (blocked(span),)

    def ring(self, i: int, op: Collective, n: Array, latency_scale: Array) -> tuple[DimensionCost, ...]:
        """Dimension i's part of a ring over the whole group carrying n bytes, under each protocol (`ring_rows`,
        one by one)."""
        return self.ring_rows(i, op, n, latency_scale).costs(not is_array(n, self.group.spans[i], self.size,
                                                                           latency_scale))

    def ring_rows(self, i: int, op: Collective, n: Array, latency_scale: Array) -> Rows:
        """Dimension i's part of a ring over the whole group carrying n bytes, under each protocol, stacked
        (`Rows`); nothing where the group does not span i, infinite where no ring runs there. Below the group's
        top, the dimension's size curve is not read: the ring's ramp is the top dimension's ring curve, fitted on
        a ring sweep across that dimension (comm/calibration.fit_ring_after_tree), while an inner curve comes
        from a sweep inside the inner dimension (NVLink: its >= 2 MiB messages ran NVLS)."""
        dim, span = self.system.network[i], self.group.spans[i]
        several = span > 1  # (one mask for the tests below)
        if not any_true(several):
            return _nothing_rows(n, span)
        try:
            rows = ring_rows(op, n, self.size, dim, self.system.device.hbm.rate, self.bandwidths[i], latency_scale,
                             curve=self.top(i))
        except ValueError:
            return _blocked_rows(n, span)
        if not is_array(several):
            return rows  # (spanned: one configuration's scale is 1, and x * 1.0 is x)
        if type(span) is np.ndarray and type(several) is np.ndarray and _rows_of_shape(rows, span.shape) and (
                np.count_nonzero(several) == several.size):
            return rows  # spanned at every point, costs of its shape: x * 1.0 is x (IEEE 754), so as they are
        spanned = where(several, 1.0, 0.0)  # (one mask for every protocol: `scaled` of each)
        sent = rows.sent[0]
        sents = (sent * spanned,) * len(rows.sent) if all(x is sent for x in rows.sent) else tuple(
            x * spanned for x in rows.sent)
        return Rows(rows.time * spanned, sents, rows.fixed * spanned, rows.algorithm, rows.protocol)


def _rows_of_shape(rows: Rows, shape: tuple[int, ...]) -> bool:
    """Whether every protocol's time, bytes and fixed cost is an array of `shape`."""
    if rows.time.shape[1:] != shape or rows.fixed.shape[1:] != shape:
        return False
    for x in rows.sent:  # noqa: SIM110 (a loop: no generator)
        if type(x) is not np.ndarray or x.shape != shape:
            return False
    return True


def _axes_of(*values: Array) -> int:
    return max(np.ndim(v) for v in values)


def _nothing_rows(n: Array, span: Array) -> Rows:
    """NOTHING under every protocol, stacked (rows that broadcast against the sweep's)."""
    count = len(PROTOCOLS)
    zeros = np.zeros((count,) + (1,) * _axes_of(n, span))
    return Rows(zeros, (0.0,) * count, zeros, (0,) * count, (0,) * count)


def _blocked_rows(n: Array, span: Array) -> Rows:
    """`blocked(span)` under every protocol, stacked."""
    count, axes = len(PROTOCOLS), _axes_of(n, span)
    time = np.asarray(blocked(span).time, dtype=float)
    time = np.broadcast_to(time.reshape((1,) * (axes - time.ndim) + time.shape), (count,) + (1,) * (axes - time.ndim)
                           + time.shape)
    return Rows(time, (0.0,) * count, np.zeros((count,) + (1,) * axes), (0,) * count, (0,) * count)


def blocked(span: Array) -> DimensionCost:
    """A phase that cannot run: infinite where the group spans the dimension."""
    return DimensionCost(where(span > 1, np.inf, 0.0), 0.0, 0, 0, 0.0)



def incast(net: PhaseNet, i: int) -> PhaseNet:
    """The phases with dimension i's bandwidth divided by the all-to-all incast there
    (comm/fabrics.all_to_all_slowdown), before each phase picks its protocol (so a larger message is never
    faster)."""
    slowdown = all_to_all_slowdown(net.system, net.group.spans, i)
    if not is_array(slowdown) and slowdown == 1.0:
        return net
    own = net.bandwidths[i]
    rate = (net.system.network[i].bandwidth if own is None else own) / slowdown
    return replace(net, bandwidths=tuple(rate if k == i else b for k, b in enumerate(net.bandwidths)))


def phase_message(op: Collective, n: Array, group: Placement, i: int) -> Array:
    """The message of dimension i's phase: n / inner_i for all-reduce, reduce-scatter and all-gather (each
    block below has reduced or will gather its share), n for broadcast and reduce, and for all-to-all the
    bytes to the ranks that differ on dimension i or above, n inner_(i+1) / p, of which the phase sends
    (s_i - 1) / s_i."""
    if op in (BROADCAST, REDUCE):
        return n
    if op is ALL_TO_ALL:
        return n * group.inner(i + 1) / group.size
    if i == 0 and (type(n) is float or (type(n) is np.ndarray and n.dtype == np.float64)):
        return n  # no dimension below the first: n / 1.0 is n (IEEE 754), the same bits without the pass
    return n / group.inner(i)


def faster(a: Composed, b: Composed) -> Composed:
    """Point by point, the faster of two compositions."""
    if not (is_array(a.time) or is_array(b.time)):
        return a if a.time <= b.time else b
    take_a = np.asarray(a.time) <= np.asarray(b.time)
    return Composed(np.where(take_a, a.time, b.time),
                    tuple(select(take_a, x, y) for x, y in zip(a.dimensions, b.dimensions, strict=True)),
                    np.where(take_a, a.composition, b.composition))



def pinnable(algorithm: Algorithm, op: Collective, dim: object, exclude: tuple[Algorithm, ...] = ()) -> bool:
    """A pinned algorithm applies where it can run; elsewhere the dimension chooses for itself."""
    if algorithm is ALG_AUTO or algorithm in exclude:
        return False
    try:
        dimension_cost(op, 1.0, 2.0, dim, 1.0, algorithm)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True
