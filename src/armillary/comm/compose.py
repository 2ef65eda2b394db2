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

Beside this entry: the result and phase helpers (composed.py), a sweep's distinct points (distinct_points.py),
the pipelined phases' joint choice (joint_choice.py) and a search's memo of collectives (compose_memo.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from armillary.comm.algorithms import (
    ALGORITHMS,
    NOTHING,
    PROTOCOLS,
    DimensionCost,
    bus_factor,
    dimension_cost,
    dimension_options,
    ring_protocols,
)
from armillary.comm.compose_memo import MEMO, MEMO_TOKEN, copied, inputs_key, remember
from armillary.comm.compose_memo import forget as forget  # public here too (search/run.py)
from armillary.comm.compose_memo import memoized as memoized
from armillary.comm.composed import COMPOSITIONS, Composed, scaled, select, shared_base, summed_phases, when
from armillary.comm.distinct_points import Flattened
from armillary.comm.fabrics import all_to_all_slowdown
from armillary.comm.joint_choice import Stack, fastest_together, frontier, joint, on_mask
from armillary.memo import IdentityCache, quick_init
from armillary.numerics import Array, all_true, any_true, is_array, logical_not, nan_maximum, where
from armillary.plan.placement import Placement
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_RING,
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    ANY_COMPOSITION,
    BROADCAST,
    FLAT_RING,
    PIPELINED,
    REDUCE,
    REDUCE_SCATTER,
    Algorithm,
    Collective,
    Composition,
)
from armillary.specs.network import CollectiveLibrary, NetworkDimension
from armillary.specs.system import System
from armillary.units import MIB

# CollectiveLibrary's members read once, as Collective's are (specs/communication.py says why)
_HIERARCHICAL = CollectiveLibrary.HIERARCHICAL
_NCCL = CollectiveLibrary.NCCL

_FLAT_RING_INDEX, _PIPELINED_INDEX = COMPOSITIONS.index(FLAT_RING), COMPOSITIONS.index(PIPELINED)
_RING_INDEX = ALGORITHMS.index(ALG_RING)
# bytes per pipelined chunk: the order of NCCL's per-step slice over its channels (NCCL_BUFFSIZE 4 MiB
# split in NCCL_STEPS = 8 slots per channel)
PIPELINE_CHUNK_BYTES = MIB
_RINGS = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE)
# NCCL tuning.cc (llMaxBws, x86 Intel hosts, as in the shipped GPU presets): the LL ring's bus bandwidth across
# 2 nodes and across 3 or more (the network proxy moves LL's flagged 8-byte lines); bytes/s
LL_NET_BUSBW = (39.0e9, 20.4e9)


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
        if spanned and not any(_pinnable(algorithm, op, d) for d in spanned):
            raise ValueError(f"algorithm {algorithm.value!r} cannot run {op.value} on "
                             f"{' or '.join(d.name for d in spanned)}; they offer "
                             f"{sorted({a.value for d in spanned for a in d.algorithms})}")
    if composition is ANY_COMPOSITION and algorithm is ALG_AUTO and _one_dimension_each(group):
        # cheap as it comes (not flattened); within `memoized`, once per collective, system and inputs
        key = None if MEMO_TOKEN.get() is None else inputs_key(op, system, n_bytes, group, bandwidths)
        held = None if key is None else MEMO.get(key)
        if held is not None and held[0] is system:
            return copied(held[1])
        composed = _on_one_dimension(op, n_bytes, _Net(system, group, algorithm, bandwidths))
        if key is None:
            return composed
        remember(key, system, composed, math.prod(np.shape(composed.time)))
        return copied(composed)
    flat = Flattened.of(n_bytes, group, bandwidths)
    if flat is None:
        return _compose(op, n_bytes, group, system, algorithm, bandwidths, composition)
    # a sweep: composed over its distinct points, one axis, then put back in its shape; within `memoized`, once
    key = None if MEMO_TOKEN.get() is None else (op, algorithm, composition, id(system), flat.key)
    held = None if key is None else MEMO.get(key)
    if held is not None and held[0] is system:
        return flat.back(held[1], copy=True)
    composed = _compose(op, flat.n_bytes, flat.group, system, algorithm, flat.bandwidths, composition)
    if key is not None:
        remember(key, system, composed, flat.n_bytes.size)
        return flat.back(composed, copy=True)
    return flat.back(composed)



def _compose(op: Collective, n_bytes: Array, group: Placement, system: System, algorithm: Algorithm,
             bandwidths: tuple[Array | None, ...], composition: Composition) -> Composed:
    if composition is ANY_COMPOSITION and algorithm is ALG_AUTO and is_array(*group.spans):
        spans = group.spans
        inside = (~((spans[0] > 1) & (spans[1] > 1)) if len(spans) == 2 and type(spans[0]) is np.ndarray
                  and type(spans[1]) is np.ndarray else np.asarray(sum(np.asarray(s) > 1 for s in spans) <= 1))
        if inside.any():  # a flattened sweep that mixes groups inside one dimension with the rest: each costed
            # as alone (`_on_one_dimension`), not as a composition with one active dimension
            return _split(op, n_bytes, group, system, bandwidths, np.asarray(inside, dtype=bool))
    return _composed(op, n_bytes, group, system, algorithm, bandwidths, composition)


def _composed(op: Collective, n_bytes: Array, group: Placement, system: System, algorithm: Algorithm,
              bandwidths: tuple[Array | None, ...], composition: Composition) -> Composed:
    """`_compose` past its split of a sweep (every point spans two dimensions or more, or a pinned choice)."""
    net = _Net(system, group, algorithm, bandwidths)
    choices = offered(system, algorithm) if composition is ANY_COMPOSITION else (composition,)
    built: list[Composed] = []
    for kind in choices:
        if built and kind is PIPELINED and _never_faster_pipelined(op, n_bytes, net, built[0]):
            continue  # exact: `_faster` would keep the earlier composition at every point
        c = _build(kind, op, n_bytes, net)
        if c is not None:
            built.append(c)
    if not built:
        raise ValueError(f"{op.value} cannot run as {' or '.join(c.value for c in choices)} over the dimensions "
                         f"{[d.name for d in system.network]} of {system.name!r}")
    best = built[0]
    for other in built[1:]:
        best = _faster(best, other)
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
    dimension by `_on_one_dimension`, the rest by `_compose`; put together point by point."""
    size = inside.size

    def part(points: np.ndarray) -> tuple[Array, Placement, tuple[Array | None, ...]]:
        def pick(x: Array) -> Array:  # (a flattened input has one value per point already)
            return x[points] if type(x) is np.ndarray and x.shape == (size,) else np.broadcast_to(x, (size,))[points]
        return (pick(n), Placement(tuple(pick(s) for s in group.spans)),
                tuple(None if b is None else pick(b) for b in bandwidths))

    one, rest = np.flatnonzero(inside), np.flatnonzero(~inside)
    n1, g1, b1 = part(one)
    a = _on_one_dimension(op, n1, _Net(system, g1, ALG_AUTO, b1))
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



@quick_init  # one a collective (memo.quick_init)
@dataclass(frozen=True)
class _Net:
    """What a phase needs: the system, the group, the pinned algorithm and swept bandwidths."""

    system: System
    group: Placement
    algorithm: Algorithm
    bandwidths: tuple[Array | None, ...]

    @functools.cached_property
    def outermost(self) -> Array:
        """The group's outermost spanned dimension (`Placement.outermost`), once per composition."""
        return self.group.outermost

    def top(self, i: int) -> Array:
        """Whether dimension i is the outermost the group spans."""
        return self.outermost == i

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
        if algorithm is not None and not _pinnable(algorithm, op, dim):
            return _blocked(span)  # a phase that must run this algorithm cannot run here
        pinned = algorithm or self.algorithm
        if pinned is not ALG_AUTO and not _pinnable(pinned, op, dim, exclude):  # (auto is never pinnable)
            pinned = ALG_AUTO
        try:
            cost = dimension_cost(op, n, ranks, dim, self.system.device.hbm.rate, pinned, self.bandwidths[i], exclude,
                                  latency_scale)
        except ValueError:
            return _blocked(span)
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
        pinned = self.algorithm if _pinnable(self.algorithm, op, dim, exclude) else ALG_AUTO
        try:
            return dimension_options(op, n, span, dim, self.system.device.hbm.rate, pinned, self.bandwidths[i],
                                     exclude)
        except ValueError:
            return (_blocked(span),)

    def ring(self, i: int, op: Collective, n: Array, latency_scale: Array) -> tuple[DimensionCost, ...]:
        """Dimension i's part of a ring over the whole group carrying n bytes, under each protocol; nothing
        where the group does not span i, infinite where no ring runs there. Below the group's top, the
        dimension's size curve is not read: the ring's ramp is the top dimension's ring curve, fitted on a
        ring sweep across that dimension (comm/calibration.fit_ring_after_tree), while an inner curve
        comes from a sweep inside the inner dimension (NVLink: its >= 2 MiB messages ran NVLS)."""
        dim, span = self.system.network[i], self.group.spans[i]
        if not any_true(span > 1):
            return (NOTHING,) * len(PROTOCOLS)
        try:
            costs = ring_protocols(op, n, self.group.size, dim, self.system.device.hbm.rate, self.bandwidths[i],
                                   latency_scale, curve=self.top(i))
        except ValueError:
            costs = ()
        if len(costs) != len(PROTOCOLS):
            return (DimensionCost(where(span > 1, np.inf, 0.0), 0.0, 0, 0, 0.0),) * len(PROTOCOLS)
        if type(span) is np.ndarray and _of_shape(costs, span.shape) and (span > 1).all():
            return costs  # spanned at every point, costs of its shape: x * 1.0 is x (IEEE 754), so as they are
        spanned = where(span > 1, 1.0, 0.0)  # (one mask for every protocol)
        return tuple(scaled(c, spanned) for c in costs)

def _of_shape(costs: tuple[DimensionCost, ...], shape: tuple[int, ...]) -> bool:
    """Whether every cost's time, bytes and fixed cost is an array of `shape` (a loop: no generator)."""
    for c in costs:
        for x in (c.time, c.sent_bytes, c.fixed):
            if type(x) is not np.ndarray or x.shape != shape:
                return False
    return True


def _never_faster_pipelined(op: Collective, n: Array, net: _Net, first: Composed) -> bool:
    """Whether the pipelined phases are at no point faster than `first` (NCCL's flat ring), so `_faster`
    would keep `first` everywhere: where no algorithm but the ring runs `op` on the group's top dimension
    (NCCL's tree family does not reduce-scatter or all-gather without NVLS / CollNet: tuning.cc), the top
    phase is blocked and the pipelined time infinite wherever the group has two ranks or more (at finite
    inputs: finite fixed costs); a group of one runs no phase (pipelined time 0), so `first` is kept there
    where it takes no time."""
    if op is ALL_TO_ALL or net.algorithm is not ALG_AUTO or _SKIP_CHECK_OFF:
        return False
    blocked = [_top_blocked(op, dim, net.system.collectives is _NCCL) for dim in net.system.network]
    if not any(blocked):
        return False
    group, t = net.group, first.time
    if not is_array(t, n, *group.spans, *(b for b in net.bandwidths if b is not None)):
        if not all(math.isfinite(float(x)) for x in (n, *group.spans, *(b for b in net.bandwidths if b is not None))):
            return False
        return (blocked[int(group.outermost)] and not math.isnan(t)) if group.size > 1 else bool(t <= 0)
    if not all(np.isfinite(x).all() for x in (n, *group.spans, *(b for b in net.bandwidths if b is not None))):
        return False
    at_top = np.asarray(blocked)[np.asarray(group.outermost, dtype=int)]
    return bool(np.all(np.where(np.asarray(group.size) > 1, at_top & ~np.isnan(t), t <= 0)))


_SKIP_CHECK_OFF = False  # tests set it to compare with the pipelined phases always built


def _top_blocked(op: Collective, dim: NetworkDimension, nccl: bool) -> bool:
    """Whether no (algorithm, protocol) can run `op` as the top phase on `dim` (`_Net.options` with NCCL's
    ring left out): which algorithms run depends on the dimension and the collective, not on the sizes."""
    known = _TOP_BLOCKED.get(dim, lambda _: {})
    if (op, nccl) not in known:
        try:
            dimension_options(op, 1e6, 2.0, dim, 1.0, ALG_AUTO, None, (ALG_RING,) if nccl else ())
            known[op, nccl] = False
        except ValueError:
            known[op, nccl] = True
    return known[op, nccl]


# per network dimension (a frozen spec, by identity), `_top_blocked` of each (collective, NCCL or not)
_TOP_BLOCKED: IdentityCache[NetworkDimension, dict[tuple[Collective, bool], bool]] = IdentityCache(1024)


def _blocked(span: Array) -> DimensionCost:
    """A phase that cannot run: infinite where the group spans the dimension."""
    return DimensionCost(where(span > 1, np.inf, 0.0), 0.0, 0, 0, 0.0)


def _one_dimension_each(group: Placement) -> bool:
    """Whether the group spans at most one dimension (at every point of a sweep)."""
    spans = group.spans
    if len(spans) == 2 and type(spans[0]) is np.ndarray and type(spans[1]) is np.ndarray:  # a two-tier sweep: no
        return not ((spans[0] > 1) & (spans[1] > 1)).any()  # point spans both (the count below, in fewer passes)
    spanned: Array = 0
    for s in group.spans:  # (the sum in a loop: one configuration's path makes no generator; the same adds)
        spanned = spanned + (s > 1)
    return not any_true(spanned > 1)


def _on_one_dimension(op: Collective, n: Array, net: _Net) -> Composed:
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
        # (a dimension one configuration's group does not span: NOTHING, as `phase` gives it, without its message)
        d = NOTHING if type(s) is float and not s > 1 else net.phase(i, op, phase_message(op, n, group, i))
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


def _build(kind: Composition, op: Collective, n: Array, net: _Net) -> Composed | None:
    index = COMPOSITIONS.index(kind)
    if kind is FLAT_RING:
        return _flat_ring(op, n, net, index)
    return _phases(op, n, net, kind is PIPELINED, index)


def _flat_ring(op: Collective, n: Array, net: _Net, index: int) -> Composed | None:
    """One ring through all ranks, run with one protocol (the fastest); dimension i carries the share f_i
    of its edges. NCCL's ring model (src/graph/tuning.cc, ncclTopoTuneModel): time = latency + bytes /
    bandwidth, where the latency adds up the ring's steps, each at the latency of the link it crosses
    (base + intra-node steps x intra latency + inter-node steps x network latency: `_step_shares`) and the
    slowest link sets the bandwidth. Across nodes, LL's bus bandwidth is capped (`LL_NET_BUSBW`), and on a
    dimension with a per-channel limit every protocol's bus bandwidth is at most its share of channels x
    channel_bandwidth (each channel carries 1/channels of the message round the ring: comm/channels.py)."""
    if op not in _RINGS:
        return None
    group, count = net.group, len(net.system.network)
    shares = [where(net.top(i), 1.0 / group.inner(i), (group.spans[i] - 1) / (group.inner(i) * group.spans[i]))
              for i in range(count)]
    steps = _step_shares(group, count)
    across = group.size / group.spans[0]  # blocks of the innermost dimension the ring visits (NCCL's nodes)
    ll_cap = where(across <= 2, LL_NET_BUSBW[0], LL_NET_BUSBW[1])
    per_dimension = [net.ring(i, op, n * shares[i], steps[i]) for i in range(count)]
    ring_bytes = n * bus_factor(op, group.size)  # what each rank sends round the ring
    best: Composed | None = None
    for k, proto in enumerate(PROTOCOLS):
        dims = tuple(d[k] for d in per_dimension)
        # the active dimensions and the fixed costs added in a loop as sum() adds them, from 0 (no generators)
        active: Array = 0
        fixed: Array = 0
        for d in dims:
            active = active + (np.where(d.time > 0, 1.0, 0.0) if type(d.time) is np.ndarray else
                               np.where(np.asarray(d.time) > 0, 1.0, 0.0) if is_array(d.time) else
                               (1.0 if d.time > 0 else 0.0))
            fixed = fixed + d.fixed
        latency = fixed - nan_maximum(active - 1.0, 0.0) * proto.base_latency_s  # one base
        transfer = dims[0].transfer
        for d in dims[1:]:
            transfer = nan_maximum(transfer, d.transfer)
        if proto.name == "LL":
            transfer = where(across > 1, nan_maximum(transfer, ring_bytes / ll_cap), transfer)
        for i, dim in enumerate(net.system.network):  # each channel moves its share of the ring (comm/channels.py)
            if dim.channels is not None and dim.channel_bandwidth is not None:
                cap = proto.bandwidth_factor * dim.channels * dim.channel_bandwidth
                transfer = where(group.spans[i] > 1, nan_maximum(transfer, ring_bytes / cap), transfer)
            if proto.name in dim.ring_busbw:  # the protocol's own ceiling there (tuning.cc llMaxBws, LL128 caps)
                transfer = where(group.spans[i] > 1, nan_maximum(transfer, ring_bytes / dim.ring_busbw[proto.name]),
                                 transfer)
        time = latency + transfer
        built = Composed(time if is_array(time) else float(time), dims, index)
        best = built if best is None else _faster(best, built)
    return best


def _step_shares(group: Placement, count: int) -> list[Array]:
    """The share of a flat ring's steps that cross dimension i (its latency counts that often): NCCL counts
    2(N-1) of an all-reduce's 2(p-1) steps as inter-node on N nodes (tuning.cc), the rest intra-node; in
    general c_i = (p / inner_i - 1) / (p - 1) of the steps leave a block of the dimensions below i, and
    dimension i takes c_i - c_(i+1)."""
    p = group.size
    left = [where(p > 1, (p / group.inner(i) - 1) / nan_maximum(p - 1, 1.0), 0.0) for i in range(count)] + [0.0]
    return [left[i] - left[i + 1] for i in range(count)]


def _phases(op: Collective, n: Array, net: _Net, pipelined: bool, index: int) -> Composed:
    """A phase per dimension, pipelined or one after another."""
    if pipelined and op is not ALL_TO_ALL:
        return _pipelined(op, n, net, index)
    count, group = len(net.system.network), net.group
    stages: list[list[DimensionCost]] = []
    for i in range(count):
        top, message = net.top(i), phase_message(op, n, group, i)
        if op is ALL_TO_ALL:  # all dimensions at once, the scale-out tier under incast
            stages.append([_incast(net, i).phase(i, op, message)])
            continue
        at_top = when(top, partial(net.phase, i, op, message))
        if op is ALL_REDUCE:
            # below the top: reduce-scatter up, all-gather down (ASTRA-sim, Sys.cc generate_all_reduce), not
            # the dimension's all-reduce: a one-shot direct all-reduce would send (p - 1) n, not 2 (p - 1)/p n
            below = [when(logical_not(top), partial(net.phase, i, o, message))
                     for o in (REDUCE_SCATTER, ALL_GATHER)]
            stages.append([select(top, at_top, NOTHING)] + [select(top, NOTHING, b) for b in below])
        else:
            stages.append([select(top, at_top, when(logical_not(top), partial(net.phase, i, op, message)))])
    flat = [s for dim in stages for s in dim]
    dims = tuple(summed_phases(dim) for dim in stages)
    if op is ALL_TO_ALL:
        time = flat[0].time
        for s in flat[1:]:
            time = np.maximum(time, s.time)
        return Composed(time if is_array(time) else float(time), dims, index)
    return Composed(sum(s.time for s in flat) - shared_base(flat), dims, index)




def _pipelined(op: Collective, n: Array, net: _Net, index: int) -> Composed:
    """The phases pipelined: T = sum of fixed costs + max_i B_i + (sum_i B_i - max_i B_i) / k, with the
    (algorithm, protocol) of every phase chosen together for the least T, as a library's tuner picks the
    configuration of least modelled time for the whole collective (NCCL tuning.cc, ncclTopoGetAlgoTime per
    algorithm and protocol of the collective). Each phase choosing by its own time is not the same: a phase
    off the slowest dimension pays only 1/k of its bandwidth time, so its own fastest (more latency, less
    transfer) can be the whole's slowest, and a lower latency that flipped its choice made the collective
    slower. The joint choice is exact (`fastest_together`), so a faster resource never slows it.
    NCCL's tree family keeps ring off the top and the dimension's all-reduce below it (its intra-node reduce
    and broadcast, NVLS or chain); the hierarchical library reduce-scatters up and all-gathers down below the
    top (ASTRA-sim, Sys.cc generate_all_reduce: a one-shot direct all-reduce would send (p - 1) n, not
    2 (p - 1)/p n), each of the two phases with its own choice."""
    count, group = len(net.system.network), net.group
    nccl = net.system.collectives is _NCCL
    sweep = is_array(n, *group.spans)
    choices: list[list[tuple[DimensionCost, ...]] | Stack] = []
    for i in range(count):
        top, message = net.top(i), phase_message(op, n, group, i)
        at_top: list[tuple[DimensionCost, ...]] = (
            [(o,) for o in net.options(i, op, message, (ALG_RING,) if nccl else ())] if any_true(top) else [])
        below: list[tuple[DimensionCost, ...]] = []
        if not all_true(top):
            if op is ALL_REDUCE and not nccl:
                scatter = frontier([(o,) for o in net.options(i, REDUCE_SCATTER, message)])
                gather = frontier([(o,) for o in net.options(i, ALL_GATHER, message)])
                below = [r + g for r in scatter for g in gather]
            else:
                below = [(o,) for o in net.options(i, op, message)]
        if sweep:  # the same steps on stacked options (`Stack`): a few numpy calls per dimension, not per option
            choices.append(Stack.on_mask(top, at_top, below, np.shape(n)).frontier())
        else:
            choices.append(frontier(on_mask(top, at_top, below)))
    chunks = np.maximum(np.asarray(n, dtype=float) / PIPELINE_CHUNK_BYTES, 1.0) if sweep else \
        nan_maximum(float(n) / PIPELINE_CHUNK_BYTES, 1.0)
    if sweep:
        stacks = [c for c in choices if isinstance(c, Stack)]
        picked = [st.gather(j) for st, j in zip(stacks, joint(stacks, np.broadcast_to(chunks, stacks[0].shape)),
                                                               strict=True)]
    else:
        picked = fastest_together([c for c in choices if isinstance(c, list)], float(chunks))
    flat = [s for dim in picked for s in dim]
    dims = tuple(summed_phases(list(dim)) for dim in picked)
    fixed = sum(s.fixed for s in flat) - shared_base(flat)
    transfers = [d.transfer for d in dims]
    slowest = transfers[0]
    for t in transfers[1:]:
        slowest = nan_maximum(slowest, t)
    total = sum(transfers)
    fill: Array
    if is_array(total, slowest, chunks):
        runs = np.isfinite(total)  # where a phase cannot run, the composition takes forever
        fill = np.where(runs, total - np.where(runs, slowest, 0.0), 0.0) / chunks
    else:
        fill = (total - slowest if math.isfinite(total) else 0.0) / chunks
    time = fixed + slowest + fill
    return Composed(time if is_array(time) else float(time), dims, index)



def _incast(net: _Net, i: int) -> _Net:
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
    return n / group.inner(i)


def _faster(a: Composed, b: Composed) -> Composed:
    """Point by point, the faster of two compositions."""
    if not (is_array(a.time) or is_array(b.time)):
        return a if a.time <= b.time else b
    take_a = np.asarray(a.time) <= np.asarray(b.time)
    return Composed(np.where(take_a, a.time, b.time),
                    tuple(select(take_a, x, y) for x, y in zip(a.dimensions, b.dimensions, strict=True)),
                    np.where(take_a, a.composition, b.composition))



def _pinnable(algorithm: Algorithm, op: Collective, dim: object, exclude: tuple[Algorithm, ...] = ()) -> bool:
    """A pinned algorithm applies where it can run; elsewhere the dimension chooses for itself."""
    if algorithm is ALG_AUTO or algorithm in exclude:
        return False
    try:
        dimension_cost(op, 1.0, 2.0, dim, 1.0, algorithm)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True
