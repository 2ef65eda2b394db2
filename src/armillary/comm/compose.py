"""Collectives over groups that span several network dimensions (docs/formulas.md §1.5).

A group spans `s_i` positions on dimension i; `inner_i` = s_0 ... s_(i-1) of its ranks share one block
of the dimensions below i, and the outermost dimension with s_i > 1 is the group's top. Three ways to put
the dimensions together:

- flat ring (NCCL Ring): one ring through all p ranks, its channels spread over the rails. Of the ring's
  edges, a share f_i runs on dimension i: f_i = (s_i - 1) / (s_i inner_i) below the top and 1 / inner_top
  at the top (the edges that leave a block of the dimensions below). Each dimension carries the ring's
  traffic times f_i; the slowest dimension paces the ring, whose steps wait for the slowest hop.
- phases (ASTRA-sim's hierarchical collectives; NCCL's Tree family): all-reduce = reduce-scatter up the
  dimensions on messages n / inner_i, all-reduce at the top, all-gather down; reduce-scatter and
  all-gather one phase per dimension on n / inner_i; broadcast and reduce on n per dimension; all-to-all
  sends to the ranks that differ on dimension i over dimension i, all dimensions at once.
  - sequential: the phases one after another: the sum of their times.
  - pipelined: the message is cut into chunks that flow through the phases, so after the pipeline fills
    the slowest dimension sets the pace: T = sum of latencies + max_i B_i + (sum_i B_i - max_i B_i) / k,
    with B_i the bandwidth time of dimension i (its all-reduce phase carries both directions) and
    k = n / chunk chunks (ASTRA-sim 2.0, Won et al. 2023, §IV; Rashidi et al. 2020, Themis).

NCCL offers the flat ring and the pipelined phases whose top phase is a tree, NVLS or CollNet (NCCL has no
ring that reduces per dimension); the hierarchical library offers the pipelined phases with any algorithm.

Beside this entry, a module per part: one phase on one dimension and what every composition builds on
(phase_net.py), the flat ring (flat_ring.py), the phases sequential or pipelined (phases.py), a group inside
one dimension (one_dimension.py), the result and phase helpers (composed.py), a sweep's distinct points
(distinct_points.py), the pipelined phases' joint choice (joint_choice.py) and a search's memo of
collectives (compose_memo.py).
"""

from __future__ import annotations

import math

import numpy as np

from armillary.comm.candidates import scatter_is_gather
from armillary.comm.compose_memo import MEMO, MEMO_TOKEN, copied, inputs_key, remember
from armillary.comm.compose_memo import forget as forget  # public here too (search/run.py)
from armillary.comm.compose_memo import memoized as memoized
from armillary.comm.composed import COMPOSITIONS, Composed
from armillary.comm.cost_types import DimensionCost
from armillary.comm.distinct_points import Flattened
from armillary.comm.flat_ring import flat_ring
from armillary.comm.one_dimension import on_one_dimension, one_dimension_each
from armillary.comm.phase_net import PhaseNet, faster, pinnable
from armillary.comm.phases import never_faster_pipelined, phases
from armillary.numerics import Array, is_array
from armillary.plan.placement import Placement
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_RING,
    ALL_GATHER,
    ANY_COMPOSITION,
    FLAT_RING,
    PIPELINED,
    REDUCE_SCATTER,
    Algorithm,
    Collective,
    Composition,
)
from armillary.specs.network import CollectiveLibrary
from armillary.specs.system import System

_HIERARCHICAL = CollectiveLibrary.HIERARCHICAL  # read once, as Collective's members are (specs/communication.py)


def offered(system: System, algorithm: Algorithm) -> tuple[Composition, ...]:
    """The compositions the system's library runs; a pinned ring is NCCL's flat ring."""
    if system.collectives is _HIERARCHICAL:
        return (PIPELINED,)
    if algorithm is ALG_RING:
        return (FLAT_RING,)
    return (FLAT_RING, PIPELINED) if algorithm is ALG_AUTO else (PIPELINED,)


def compose(op: Collective, n_bytes: Array, group: Placement, system: System, algorithm: Algorithm,
            bandwidths: tuple[Array | None, ...] | None, composition: Composition) -> Composed:
    """The fastest of the offered compositions (or the pinned one) of `op` over `group`."""
    if len(group.spans) != len(system.network):
        raise ValueError(f"group spans {len(group.spans)} dimensions, the system has {len(system.network)}")
    bandwidths = bandwidths or (None,) * len(system.network)
    if algorithm is not ALG_AUTO and not is_array(group.size):  # checked before a sweep of sizes is flattened
        spanned = [d for d, s in zip(system.network, group.spans, strict=True) if float(s) > 1]
        if spanned and not any(pinnable(algorithm, op, d) for d in spanned):
            raise ValueError(f"algorithm {algorithm.value!r} cannot run {op.value} on "
                             f"{' or '.join(d.name for d in spanned)}; they offer "
                             f"{sorted({a.value for d in spanned for a in d.algorithms})}")
    if composition is ANY_COMPOSITION and algorithm is ALG_AUTO and one_dimension_each(group):
        # cheap as it comes (not flattened); within `memoized`, once per collective, system and inputs
        key = None if MEMO_TOKEN.get() is None else inputs_key(_memo_op(op, system), system, n_bytes, group,
                                                                 bandwidths)
        held = None if key is None else MEMO.get(key)
        if held is not None and held[0] is system:
            return copied(held[1])
        composed = on_one_dimension(op, n_bytes, PhaseNet(system, group, algorithm, bandwidths))
        if key is None:
            return composed
        remember(key, system, composed, math.prod(np.shape(composed.time)))
        return copied(composed)
    flat = Flattened.of(n_bytes, group, bandwidths)
    if flat is None:
        return _compose(op, n_bytes, group, system, algorithm, bandwidths, composition)
    # a sweep: composed over its distinct points, one axis, then put back in its shape; within `memoized`, once
    key = None if MEMO_TOKEN.get() is None else (
        _memo_op(op, system) if algorithm is ALG_AUTO and composition is ANY_COMPOSITION else op, algorithm,
        composition, id(system), flat.key)
    held = None if key is None else MEMO.get(key)
    if held is not None and held[0] is system:
        return flat.back(held[1], copy=True)
    composed = _compose(op, flat.n_bytes, flat.group, system, algorithm, flat.bandwidths, composition)
    if key is not None:
        remember(key, system, composed, flat.n_bytes.size)
        return flat.back(composed, copy=True)
    return flat.back(composed)



def _memo_op(op: Collective, system: System) -> Collective:
    """The collective a memo entry is kept under: a reduce-scatter as the all-gather of the same bytes where every
    dimension costs the two alike (`candidates.scatter_is_gather`: the same formulas, so the same bits under the
    automatic choice), so that one composes both; any other as itself."""
    if op is REDUCE_SCATTER:
        for d in system.network:
            if not scatter_is_gather(d):
                return op
        return ALL_GATHER
    return op


def _compose(op: Collective, n_bytes: Array, group: Placement, system: System, algorithm: Algorithm,
             bandwidths: tuple[Array | None, ...], composition: Composition) -> Composed:
    if composition is ANY_COMPOSITION and algorithm is ALG_AUTO and is_array(*group.spans):
        spans = group.spans
        inside = (~((spans[0] > 1) & (spans[1] > 1)) if len(spans) == 2 and type(spans[0]) is np.ndarray
                  and type(spans[1]) is np.ndarray else np.asarray(sum(np.asarray(s) > 1 for s in spans) <= 1))
        if np.count_nonzero(inside):  # a flattened sweep that mixes groups inside one dimension with the rest:
            # each costed as alone (`on_one_dimension`), not as a composition with one active dimension
            return _split(op, n_bytes, group, system, bandwidths, np.asarray(inside, dtype=bool))
    return _composed(op, n_bytes, group, system, algorithm, bandwidths, composition)


def _composed(op: Collective, n_bytes: Array, group: Placement, system: System, algorithm: Algorithm,
              bandwidths: tuple[Array | None, ...], composition: Composition) -> Composed:
    """`_compose` past its split of a sweep (every point spans two dimensions or more, or a pinned choice)."""
    net = PhaseNet(system, group, algorithm, bandwidths)
    choices = offered(system, algorithm) if composition is ANY_COMPOSITION else (composition,)
    built: list[Composed] = []
    for kind in choices:
        if built and kind is PIPELINED and never_faster_pipelined(op, n_bytes, net, built[0]):
            continue  # exact: `faster` would keep the earlier composition at every point
        c = _build(kind, op, n_bytes, net)
        if c is not None:
            built.append(c)
    if not built:
        raise ValueError(f"{op.value} cannot run as {' or '.join(c.value for c in choices)} over the dimensions "
                         f"{[d.name for d in system.network]} of {system.name!r}")
    best = built[0]
    for other in built[1:]:
        best = faster(best, other)
    pinned = algorithm is not ALG_AUTO or composition is not ANY_COMPOSITION
    if not (is_array(best.time) and not pinned) and not (
            np.isfinite(best.time).any() if is_array(best.time) else math.isfinite(best.time)):  # a pinned choice that
        # cannot run at any size of a sweep is refused as one configuration is (a search's points stay inf)
        raise ValueError(f"{op.value} cannot run over {system.name!r} with algorithm {algorithm.value!r} and "
                         f"composition {composition.value!r}")
    return best


def _split(op: Collective, n: Array, group: Placement, system: System, bandwidths: tuple[Array | None, ...],
           inside: np.ndarray) -> Composed:
    """A flattened sweep (every input one value per point) composed in two parts: the groups inside one
    dimension by `on_one_dimension`, the rest by `_compose`; put together point by point."""
    size = inside.size

    def part(points: np.ndarray) -> tuple[Array, Placement, tuple[Array | None, ...]]:
        def pick(x: Array) -> Array:  # (a flattened input has one value per point already)
            return x[points] if type(x) is np.ndarray and x.shape == (size,) else np.broadcast_to(x, (size,))[points]
        return (pick(n), Placement(tuple(pick(s) for s in group.spans)),
                tuple(None if b is None else pick(b) for b in bandwidths))

    one, rest = inside.nonzero()[0], (~inside).nonzero()[0]  # (np.flatnonzero of a flat mask, without its dispatch)
    n1, g1, b1 = part(one)
    a = on_one_dimension(op, n1, PhaseNet(system, g1, ALG_AUTO, b1))
    if not len(rest):
        return a
    n2, g2, b2 = part(rest)
    b = _composed(op, n2, g2, system, ALG_AUTO, b2, ANY_COMPOSITION)  # (none of these inside one dimension)

    def merged(x: Array, y: Array, kind: type = float) -> np.ndarray:
        out: np.ndarray = np.empty(size, dtype=kind)
        out[one], out[rest] = x, y
        return out

    dims = tuple(DimensionCost(merged(p.time, q.time), merged(p.sent_bytes, q.sent_bytes),
                               merged(p.algorithm, q.algorithm, int), merged(p.protocol, q.protocol, int),
                               merged(p.fixed, q.fixed)) for p, q in zip(a.dimensions, b.dimensions, strict=True))
    return Composed(merged(a.time, b.time), dims, merged(a.composition, b.composition, int))


def _build(kind: Composition, op: Collective, n: Array, net: PhaseNet) -> Composed | None:
    index = COMPOSITIONS.index(kind)
    if kind is FLAT_RING:
        return flat_ring(op, n, net, index)
    return phases(op, n, net, kind is PIPELINED, index)

