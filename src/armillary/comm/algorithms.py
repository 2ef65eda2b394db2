"""Collective algorithms on one network dimension: alpha-beta-gamma costs, protocols, automatic choice.

Costs (docs/formulas.md §1.2; Thakur, Rabenseifner & Gropp 2005; Chan et al. 2007), p ranks, n bytes as defined
per collective (all-reduce: the buffer; reduce-scatter: the input; all-gather: the gathered output;
all-to-all: one rank's send buffer; broadcast / reduce / send-recv: the message):

| algorithm | all-reduce | reduce-scatter / all-gather |
| ring | 2(p-1) a + 2(p-1)/p n b | (p-1) a + (p-1)/p n b |
| tree (double binary, pipelined) | 2 log2(p) a + min(p, 4)/2 n b | - |
| halving-doubling (Rabenseifner) | 2 log2(p) a + 2(p-1)/p n b | log2(p) a + (p-1)/p n b |
| direct (one-shot, needs a switch) | a + (p-1) n b | a + (p-1)/p n b |
| direct, two-shot (ASTRA-sim's direct) | 2 a + 2(p-1)/p n b | a + (p-1)/p n b |
| in-network reduction (switch reduces) | 2 a + n b_inr | 2 a + n b_inr (RS), 2 a + (p-1)/p n b_inr (AG) |

The double binary tree (NCCL Tree; Sanders, Speck & Traeff 2009) splits the buffer over two trees in which
each rank is inner in one and a leaf in the other: an inner rank with two children sends n/2 up and n down
in one tree and n/2 up in the other, 2n in all, so the busiest rank sends n, 1.5 n, 2 n for p = 2, 3, >= 4
(docs/formulas.md §1.2). A mesh is bounded by its corner devices, which have half the links of a torus's.

Plus, for the one-shot all-reduce, a reduction term (p-1) n g ((p-1)/p n g two-shot) after the transfer
(g: 3 bytes moved per byte reduced through HBM); pipelined ring and tree kernels reduce while data streams
through, hidden by the link. Each algorithm runs under a protocol (NCCL's LL, LL128, Simple: `PROTOCOLS`)
that trades latency for bandwidth; the automatic choice takes the fastest (algorithm, protocol) pair for each
size, as NCCL's tuner does (docs/formulas.md §1.3), which gives the size-dependent efficiency of real runs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from armillary.memo import IdentityCache, quick_init
from armillary.numerics import Array, any_true, minimum
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_DIRECT,
    ALG_HALVING_DOUBLING,
    ALG_IN_NETWORK,
    ALG_RING,
    ALG_SYNTHESIZED,
    ALG_TREE,
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    BROADCAST,
    REDUCE,
    REDUCE_SCATTER,
    Algorithm,
    Collective,
)
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.network import SWITCHED, DirectAllReduce, NetworkDimension, NetworkKind

_SIMPLE = "Simple"  # the protocol NVLS, CollNet and synthesized schedules run
# the network enums' members read once, as Collective's are (specs/communication.py says why)
_TWO_SHOT = DirectAllReduce.TWO_SHOT
_FAT_TREE = NetworkKind.FAT_TREE
_FULLY_CONNECTED = NetworkKind.FULLY_CONNECTED
_MESH = NetworkKind.MESH
_RAIL_OPTIMIZED = NetworkKind.RAIL_OPTIMIZED
_RING_NETWORK = NetworkKind.RING
_TORUS = NetworkKind.TORUS
# the collectives that reduce (`Collective.reduces`, a property that reads three members: ~0.9 us a call)
_REDUCING = frozenset(op for op in Collective if op.reduces)


@dataclass(frozen=True)
class Protocol:
    """A transfer protocol: fixed cost per collective, latency per step and bandwidth, relative to the
    network's Simple-protocol figures. NCCL defaults (src/graph/tuning.cc; docs/formulas.md §1.3): base
    latency 6.6 / 14 / 8.4 us; per NVLink hop 0.6 / 1.9 / 3.4 us; bandwidth x0.5 (LL, half of each word
    is a flag) / x0.92 (LL128, 120 of 128 bytes) / x1."""

    name: str
    base_latency_s: float
    hop_latency_factor: float
    bandwidth_factor: float


PROTOCOLS = (
    Protocol("LL", 6.6e-6, 0.6 / 3.4, 0.5),
    Protocol("LL128", 14e-6, 1.9 / 3.4, 0.92),
    Protocol("Simple", 8.4e-6, 1.0, 1.0),
)

# bytes moved through HBM per byte reduced: read two operands, write one
_REDUCE_TRAFFIC = 3.0


@quick_init  # a dozen a collective (memo.quick_init: the same frozen dataclass, built faster)
@dataclass(frozen=True)
class DimensionCost:
    """Cost of a collective on one dimension: time (of which `fixed` is the latency part: the protocol's
    base cost and the per-step latencies), bytes sent per rank, and what was chosen."""

    time: Array
    sent_bytes: Array
    algorithm: Array  # index into ALGORITHMS
    protocol: Array  # index into PROTOCOLS
    fixed: Array = 0.0

    @property
    def transfer(self) -> Array:
        """The time that scales with the bytes: what pipelining across dimensions overlaps."""
        return self.time - self.fixed


NOTHING = DimensionCost(0.0, 0.0, 0, 0)
ALGORITHMS = (ALG_RING, ALG_TREE, ALG_HALVING_DOUBLING, ALG_DIRECT, ALG_IN_NETWORK, ALG_SYNTHESIZED)


def bus_factor(op: Collective, ranks: Array) -> Array:
    """nccl-tests' busbw / algbw factor (doc/PERFORMANCE.md; docs/formulas.md §1.4): the bytes each rank
    sends in a ring over `ranks`, per byte of the message."""
    if op is ALL_REDUCE:
        return 2 * (ranks - 1) / ranks
    if op in (REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL):
        return (ranks - 1) / ranks
    return 1.0 + 0 * ranks


def _steps_and_bytes(op: Collective, alg: Algorithm, n: Array, p: Array,
                     log_p: Array, two_shot: bool = False) -> tuple[Array, Array] | None:
    """(latency steps, bytes sent per rank) of `alg` for `op`, or None where it does not apply; `two_shot`:
    a direct all-reduce is a reduce-scatter then an all-gather (ASTRA-sim's direct), not one-shot.
    Works on floats and on arrays alike."""
    frac = (p - 1) / p
    if alg is ALG_SYNTHESIZED:  # costed by comm/synthesized_cost.py when pinned
        return None
    if op is ALL_REDUCE:
        if alg is ALG_RING:
            return 2 * (p - 1), 2 * frac * n
        if alg is ALG_TREE:  # double binary tree: each rank is inner in one tree, a leaf in the other
            return 2 * log_p, minimum(p, 4.0) / 2 * n
        if alg is ALG_HALVING_DOUBLING:
            return 2 * log_p, 2 * frac * n
        if alg is ALG_DIRECT:  # one-shot, or two one-step phases (ASTRA-sim AllToAll.cc)
            return (2.0 + 0 * p, 2 * frac * n) if two_shot else (1.0 + 0 * p, (p - 1) * n)
        return 2.0 + 0 * p, n + 0 * p  # in-network: send n up, receive n reduced
    if op in (REDUCE_SCATTER, ALL_GATHER):
        if alg is ALG_RING:
            return p - 1, frac * n
        if alg is ALG_HALVING_DOUBLING:
            return log_p, frac * n
        if alg is ALG_DIRECT:
            return 1.0 + 0 * p, frac * n
        if alg is ALG_IN_NETWORK:
            return 2.0 + 0 * p, (n + 0 * p if op is REDUCE_SCATTER else frac * n)
        return None
    if op is ALL_TO_ALL:  # pairwise exchange (ring order) or all at once (direct)
        if alg is ALG_RING:
            return p - 1, frac * n
        return (1.0 + 0 * p, frac * n) if alg is ALG_DIRECT else None
    if op in (BROADCAST, REDUCE):  # pipelined chain, binomial tree, scatter + gather
        if alg is ALG_RING:
            return p - 1, n + 0 * p
        if alg is ALG_TREE:
            return log_p, log_p * n
        return (log_p + p - 1, 2 * frac * n) if alg is ALG_HALVING_DOUBLING else None
    # send / receive
    return (1.0 + 0 * p, n + 0 * p) if alg in (ALG_DIRECT, ALG_RING) else None


def _synthesizable(op: Collective, p: Array, net: NetworkDimension, algorithm: Algorithm,
                   exclude: tuple[Algorithm, ...]) -> bool:
    """Whether auto should weigh a synthesized schedule: offered on the dimension, one collective it
    synthesizes, one group size (a synthesis per size), not excluded."""
    return (algorithm is ALG_AUTO and ALG_SYNTHESIZED in net.algorithms and _SIMPLE in net.protocols
            and ALG_SYNTHESIZED not in exclude and np.ndim(p) == 0 and float(p) > 1
            and op in (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE))


def _synthesized(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension,
                 bandwidth: Array | None) -> DimensionCost:
    """A synthesized schedule (comm/synthesized_cost.py; imported here only when asked for), run by a
    Simple-protocol kernel: its base cost is added."""
    from armillary.comm.synthesized_cost import synthesized_time

    if _SIMPLE not in net.protocols:
        raise ValueError(f"algorithm 'synthesized' runs the Simple protocol, which the network {net.name!r} does not "
                         f"offer (protocols: {list(net.protocols)})")

    time, fixed = synthesized_time(op, n_bytes, p, net, bandwidth)
    time, fixed = time + PROTOCOLS[-1].base_latency_s, fixed + PROTOCOLS[-1].base_latency_s
    ring = _steps_and_bytes(op, ALG_RING, n_bytes, p, 0.0)
    sent = 0.0 if ring is None else ring[1]
    return DimensionCost(time, sent, ALGORITHMS.index(ALG_SYNTHESIZED), len(PROTOCOLS) - 1, fixed)


def _allowed(algorithm: Algorithm, net: NetworkDimension) -> bool:
    """What the tier's library offers; direct and halving-doubling also need any-to-any links, in-network
    reduction a reducing switch."""
    if algorithm not in net.algorithms:
        return False
    switched = net.kind in SWITCHED
    if algorithm in (ALG_DIRECT, ALG_HALVING_DOUBLING, ALG_TREE):
        return switched
    if algorithm is ALG_IN_NETWORK:
        return net.in_network_reduction
    return True


def _link_bandwidth(net: NetworkDimension, algorithm: Algorithm) -> float:
    """Achievable bytes/s per rank for an algorithm on this dimension."""
    if algorithm is ALG_IN_NETWORK:
        return net.in_network_efficiency * net.bandwidth / net.shared_by
    efficiency = net.efficiency
    if algorithm is ALG_TREE and net.tree_efficiency is not None:  # NCCL's tree: its own share
        efficiency = net.tree_efficiency
    bandwidth = efficiency * net.bandwidth / net.shared_by
    if net.kind is _MESH:  # a corner device has one link per axis, not two: it bounds the rest
        bandwidth /= 2
    return bandwidth  # `bandwidth` is the device's injection rate: a bidirectional ring uses all of it


def _ring_hops(net: NetworkDimension, p: Array) -> Array | None:
    """Steps of one ring pass on a torus or mesh that the group fills: the ring runs dimension by dimension,
    sum(s_k - 1) steps instead of p - 1 (docs/formulas.md §1.2, multi-dimensional row)."""
    if net.shape is None or net.kind not in (_TORUS, _MESH):
        return None
    size = float(np.prod(net.shape))
    hops = float(sum(k - 1 for k in net.shape))
    if _is_scalar(p):
        return hops if float(p) == size and p > 1 else None
    return np.where(np.asarray(p) == size, hops, np.maximum(np.asarray(p) - 1.0, 1.0))


def _line_distance(s: Array, wrap: bool) -> Array:
    """Summed hop distance from one position to all others of a line of s positions, averaged over the
    positions: a ring, shortest way round, floor(s^2 / 4); an open line (s^2 - 1) / 3 [derived]."""
    return np.floor(s * s / 4.0) if wrap else (s * s - 1.0) / 3.0


def _a2a_hops(net: NetworkDimension, p: Array) -> Array:
    """Mean hops of an all-to-all share on a direct network: each rank's p - 1 shares travel shortest paths
    over the device's links (a ring, or a torus / mesh the group fills, dimension-order distances summed
    over the axes), so the bytes its links carry are the bytes it sends times the mean distance [derived:
    link load of shortest-path routing; the bound comm/all_to_all.bounds calls "link load"]. 1 on switched
    networks, where every share is one hop."""
    ranks = np.asarray(p, float)
    ring = np.maximum(_line_distance(ranks, True), 1.0) / np.maximum(ranks - 1.0, 1.0)
    if net.kind is _RING_NETWORK:
        return ring
    if net.kind in (_TORUS, _MESH) and net.shape is not None:
        size = float(np.prod(net.shape))
        wrap = net.kind is _TORUS
        filled = sum(size / k * _line_distance(float(k), wrap) for k in net.shape) / (size - 1.0)
        return np.where(ranks == size, filled, ring)  # a smaller group: a ring through the axes
    return 1.0


def _candidates(net: NetworkDimension) -> tuple[tuple[int, Algorithm, float], ...]:
    """(index, algorithm, achievable bytes/s) of what can run on `net`."""
    return _derived(net)[0]


def _hop_latencies(net: NetworkDimension) -> tuple[float, ...]:
    """Per protocol (in PROTOCOLS order), the latency of one step on `net`: its own figure for the protocol
    where it lists one, else the protocol's factor times its latency."""
    return tuple(net.protocol_latency.get(proto.name, proto.hop_latency_factor * net.latency) for proto in PROTOCOLS)


_Plan = tuple[tuple[int, Algorithm, tuple[tuple[tuple[int, int], float, float, float], ...]], ...]
_Derived = tuple[tuple[tuple[int, Algorithm, float], ...], tuple[float, ...], _Plan]

# per network dimension (a frozen spec), what `_candidate_costs` reads of it on every call: its candidates, its
# per-protocol step latencies and, per candidate, the protocols it runs with ((algorithm, protocol) label, base
# latency, step latency, the protocol's share of the link's bytes/s); bounded, a long search builds many systems
_DERIVED: IdentityCache[NetworkDimension, _Derived] = IdentityCache(1024)


def _derived(net: NetworkDimension) -> _Derived:
    return _DERIVED.get(net, _derive)


def _derive(net: NetworkDimension) -> _Derived:
    candidates = _candidate_table(net.kind, net.algorithms, net.in_network_reduction, net.in_network_efficiency,
                                  net.efficiency, net.bandwidth, net.shared_by, net.tree_efficiency)
    hops = _hop_latencies(net)
    offered = net.protocols  # the others are off for every algorithm (NCCL_PROTO: tuning.cc sets their bandwidth 0)
    # NVLS / CollNet run the Simple protocol only (NCCL tuning.cc)
    plan = tuple((a_index, alg, tuple(((a_index, p_index), proto.base_latency_s, hops[p_index],
                                       proto.bandwidth_factor * link)
                                      for p_index, proto in enumerate(PROTOCOLS)
                                      if proto.name in offered
                                      and (alg is not ALG_IN_NETWORK or proto.name == _SIMPLE)))
                 for a_index, alg, link in candidates)
    return candidates, hops, plan


@functools.lru_cache(maxsize=256)
def _candidate_table(kind: NetworkKind, algorithms: tuple[Algorithm, ...], in_network_reduction: bool,
                     in_network_efficiency: float, efficiency: float,
                     bandwidth: float, shared_by: int,
                     tree_efficiency: float | None = None) -> tuple[tuple[int, Algorithm, float], ...]:
    """`_candidates` of the network with these fields: a pure function of them, so cached by value."""
    net = NetworkDimension(name="", kind=kind, algorithms=algorithms, in_network_reduction=in_network_reduction,
                  in_network_efficiency=in_network_efficiency, efficiency=efficiency, bandwidth=bandwidth,
                  shared_by=shared_by, latency=0.0, tree_efficiency=tree_efficiency)
    return tuple((i, a, _link_bandwidth(net, a)) for i, a in enumerate(ALGORITHMS) if _allowed(a, net))


def _is_scalar(x: Array) -> bool:
    return not isinstance(x, np.ndarray) or x.ndim == 0


def dimension_cost(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                   algorithm: Algorithm = ALG_AUTO, bandwidth: Array | None = None,
                   exclude: tuple[Algorithm, ...] = (), latency_scale: Array = 1.0) -> DimensionCost:
    """Fastest (algorithm, protocol) for `op` of `n_bytes` over `p` ranks of one dimension, or the pinned
    algorithm (still with its fastest protocol), leaving out `exclude`. Broadcasts over n_bytes, p and
    `bandwidth` (which replaces the dimension's per-device bandwidth, so a search can sweep it).
    `latency_scale` multiplies the per-step latency: the share of a flat ring's steps on this dimension."""
    scalar = ((type(n_bytes) is float and type(p) is float and bandwidth is None and type(latency_scale) is float)
              or (_is_scalar(n_bytes) and _is_scalar(p) and (bandwidth is None or _is_scalar(bandwidth))
                  and _is_scalar(latency_scale)))  # the common one configuration tested first
    if scalar and p <= 1 and algorithm is ALG_AUTO:
        return NOTHING  # a group of one does nothing
    if algorithm is ALG_SYNTHESIZED:
        if ALG_SYNTHESIZED not in net.algorithms:
            raise ValueError(f"algorithm 'synthesized' is not offered on the network {net.name!r}; list it in the "
                             f"dimension's algorithms (offered: {[a.value for a in net.algorithms]})")
        return _synthesized(op, n_bytes, p, net, bandwidth)
    if _synthesizable(op, p, net, algorithm, exclude):  # offered here: auto weighs it against the rest
        other = dimension_cost(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth,
                               (*exclude, ALG_SYNTHESIZED), latency_scale)
        return _faster(_synthesized(op, n_bytes, p, net, bandwidth), other)
    return _fastest(*_candidate_costs(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth, exclude,
                                      latency_scale, scalar))


def dimension_options(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                      algorithm: Algorithm = ALG_AUTO, bandwidth: Array | None = None,
                      exclude: tuple[Algorithm, ...] = ()) -> tuple[DimensionCost, ...]:
    """Every (algorithm, protocol) that `dimension_cost` weighs, each costed as it costs the fastest: what a
    tuner compares when the part's own fastest is not the whole collective's (comm/compose.py: the pipelined
    phases). A group of one does nothing under each. Raises where none can run."""
    scalar = _is_scalar(n_bytes) and _is_scalar(p) and (bandwidth is None or _is_scalar(bandwidth))
    if scalar and p <= 1 and algorithm is ALG_AUTO:
        return (NOTHING,)
    if algorithm is ALG_SYNTHESIZED:
        return (dimension_cost(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth, exclude),)
    found = []
    if _synthesizable(op, p, net, algorithm, exclude):
        found.append(_synthesized(op, n_bytes, p, net, bandwidth))
        exclude = (*exclude, ALG_SYNTHESIZED)
    times, sents, fixeds, labels, p, scalar = _candidate_costs(op, n_bytes, p, net, reduce_bytes_per_s, algorithm,
                                                               bandwidth, exclude, 1.0, scalar)
    if scalar:
        found += [_fastest([t], [s], [f], [label], p, scalar)
                  for t, s, f, label in zip(times, sents, fixeds, labels, strict=True)]
        return tuple(found)
    active = np.asarray(p) > 1  # what `_fastest` gives one candidate, without its argmin over one (as ring_protocols)
    found += [DimensionCost(np.where(active, t, 0.0), np.where(active, s, 0.0), a, k, np.where(active, f, 0.0))
              for t, s, f, (a, k) in zip(times, sents, fixeds, labels, strict=True)]
    return tuple(found)


def ring_protocols(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                   bandwidth: Array | None = None, latency_scale: Array = 1.0,
                   curve: Array = True) -> tuple[DimensionCost, ...]:
    """The ring's cost on this dimension under each protocol (in PROTOCOLS order): a ring that spans
    several dimensions runs one protocol on all of them (comm/compose.py). `curve`: where the dimension's
    size curve is read (elsewhere the ring runs at its full rate). A protocol the dimension does not offer
    (`NetworkDimension.protocols`) is infinite wherever the ring takes steps across it (`latency_scale` > 0),
    so no ring through it runs that protocol. Raises where no ring runs."""
    scalar = (_is_scalar(n_bytes) and _is_scalar(p) and (bandwidth is None or _is_scalar(bandwidth))
              and _is_scalar(latency_scale) and _is_scalar(curve))
    times, sents, fixeds, labels, p, _ = _candidate_costs(op, n_bytes, p, net, reduce_bytes_per_s, ALG_RING,
                                                          bandwidth, (), latency_scale, scalar, curve)
    if scalar:
        costs = tuple(_fastest([t], [s], [f], [label], p, scalar)
                      for t, s, f, label in zip(times, sents, fixeds, labels, strict=True))
    else:
        active = np.asarray(p) > 1  # a group of one does nothing
        costs = tuple(DimensionCost(np.where(active, t, 0.0), np.where(active, s, 0.0), a, k,
                                    np.where(active, f, 0.0))
                      for t, s, f, (a, k) in zip(times, sents, fixeds, labels, strict=True))
    if len(costs) == len(PROTOCOLS):
        return costs
    return _with_unoffered(costs, p, latency_scale, scalar)


def _with_unoffered(costs: tuple[DimensionCost, ...], p: Array, latency_scale: Array,
                    scalar: bool) -> tuple[DimensionCost, ...]:
    """`costs` of the offered protocols, in PROTOCOLS order with each protocol not offered put in its place:
    infinite where the ring crosses the dimension (a group of two or more, steps across it), nothing elsewhere."""
    crossing = (p > 1 and latency_scale > 0) if scalar else (np.asarray(p) > 1) & (np.asarray(latency_scale) > 0)
    blocked: Array = (math.inf if crossing else 0.0) if scalar else np.where(crossing, np.inf, 0.0)
    by_protocol = {int(c.protocol): c for c in costs}
    ring = ALGORITHMS.index(ALG_RING)
    return tuple(by_protocol.get(k, DimensionCost(blocked, 0.0, ring, k, 0.0)) for k in range(len(PROTOCOLS)))


def _candidate_costs(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                     algorithm: Algorithm, bandwidth: Array | None, exclude: tuple[Algorithm, ...],
                     latency_scale: Array, scalar: bool, curve: Array = True
                     ) -> tuple[list[Array], list[Array], list[Array], list[tuple[int, int]], Array, bool]:
    """(times, bytes sent, fixed latencies, (algorithm, protocol) labels) of every candidate that can run,
    with p and `scalar` for `_fastest`."""
    scale = _bandwidth_scale(net, p, bandwidth, scalar)
    if scalar:
        n_bytes, p = float(n_bytes), float(p)
        log_p: Array = float(math.ceil(math.log2(max(p, 1.0))))
    else:
        log_p = np.ceil(np.log2(np.maximum(p, 1)))
    times, fixeds, sents, labels = [], [], [], []
    reduces = op in _REDUCING
    ring_hops = _ring_hops(net, p)
    a2a_hops = _a2a_hops(net, p) if op is ALL_TO_ALL else 1.0
    if scalar:
        a2a_hops = float(a2a_hops)
    everywhere = curve is True  # (the common call: the curve read at every point)
    ramp = _ramp(net.size_efficiency if everywhere or any_true(curve) else None, n_bytes, scalar)
    if not (everywhere or _is_scalar(curve) or np.all(curve)):
        ramp = np.where(curve, ramp, 1.0)
    tree_ramp = ramp if net.tree_size_efficiency is None else _ramp(net.tree_size_efficiency, n_bytes, scalar)
    two_shot = net.direct == _TWO_SHOT
    unit_scale = type(latency_scale) is float and latency_scale == 1.0
    for _, alg, protocols in _derived(net)[2]:
        if (algorithm is not ALG_AUTO and alg is not algorithm) or alg in exclude:
            continue
        steps_bytes = _steps_and_bytes(op, alg, n_bytes, p, log_p, two_shot)
        if steps_bytes is None:
            continue
        steps, sent = steps_bytes
        if op is ALL_TO_ALL:
            sent = sent * a2a_hops
        if alg is ALG_RING and ring_hops is not None:
            steps = steps * ring_hops / (p - 1)
        reduce_time: Array = 0.0
        if reduces and alg is ALG_DIRECT:  # one-shot reduces the p received buffers afterwards
            one_shot = op is ALL_REDUCE and not two_shot  # two-shot: the reduce-scatter's share
            reduced = (p - 1) * n_bytes if one_shot else (p - 1) / p * n_bytes
            reduce_time = reduced * _REDUCE_TRAFFIC / reduce_bytes_per_s
        ramped = tree_ramp if alg is ALG_TREE else ramp
        reduce_free = type(reduce_time) is float and reduce_time == 0.0
        for label, base_latency, hop, rate in protocols:  # rate: the protocol's share of the link's bytes/s
            # (x * 1.0 is x and x + 0.0 is x for x > 0 or NaN, IEEE 754: the common call skips those array ops,
            # the same bits; fixed >= the protocol's base latency > 0)
            fixed = base_latency + (steps * hop if unit_scale else steps * hop * latency_scale)
            transfer = sent / (rate * scale * ramped)
            times.append(fixed + transfer if reduce_free else fixed + transfer + reduce_time)
            fixeds.append(fixed)
            sents.append(sent)
            labels.append(label)
    if not times:
        raise ValueError(f"algorithm {algorithm.value!r} cannot run {op.value} on the {net.kind.value} network "
                         f"{net.name!r}; it offers {[a.value for _, a, _ in _candidates(net) if a not in exclude]}")
    return times, sents, fixeds, labels, p, scalar


def _ramp(curve: EfficiencyCurve | None, n_bytes: Array, scalar: bool) -> Array:
    """A size-efficiency curve read at the message (1 where the dimension has none)."""
    if curve is None:
        return 1.0
    value = curve(n_bytes)
    return float(value) if scalar else value


def _bandwidth_scale(net: NetworkDimension, p: Array, bandwidth: Array | None, scalar: bool) -> Array:
    """The dimension's per-device bandwidth as a group of `p` ranks sees it, relative to `net.bandwidth`:
    `bandwidth` when swept; a small fully connected group reaches only its peers' links; a group beyond
    one leaf of an oversubscribed fat tree crosses the spines."""
    scale: Array = 1.0 if bandwidth is None else bandwidth / net.bandwidth
    if net.kind is _FULLY_CONNECTED and net.links:
        scale = scale * (min(max(p - 1, 1), net.links) if scalar else np.clip(p - 1, 1, net.links)) / net.links
    if net.kind in (_FAT_TREE, _RAIL_OPTIMIZED) and net.oversubscription > 1:
        beyond = 1.0 if net.leaf_size is None else (p > net.leaf_size)
        scale = scale / (1.0 + (net.oversubscription - 1.0) * (beyond if scalar else np.asarray(beyond, float)))
    return scale


def _faster(a: DimensionCost, b: DimensionCost) -> DimensionCost:
    """Elementwise the faster of two costs (`a` where strictly faster)."""
    take = np.asarray(a.time) < np.asarray(b.time)
    if take.ndim == 0:
        return a if take else b
    return DimensionCost(*(np.where(take, x, y) for x, y in zip(
        (a.time, a.sent_bytes, a.algorithm, a.protocol, a.fixed),
        (b.time, b.sent_bytes, b.algorithm, b.protocol, b.fixed), strict=True)))


def _fastest(times: list[Array], sents: list[Array], fixeds: list[Array], labels: list[tuple[int, int]],
             p: Array, scalar: bool) -> DimensionCost:
    """The fastest candidate (algorithm, protocol), elementwise over a sweep; a group of one does nothing."""
    if scalar:
        k = times.index(min(times))  # the first of the least, as min over the indices by time picks it
        if not p > 1:
            return DimensionCost(0.0, 0.0, labels[k][0], labels[k][1])
        return DimensionCost(times[k], sents[k], labels[k][0], labels[k][1], fixeds[k])
    stacked = _stacked(times)  # only the times: np.choose broadcasts the bytes and latencies
    k = np.argmin(stacked, axis=0)  # (the times hold every input's shape, so k has the common shape)
    active = np.asarray(p) > 1
    table = _label_table(tuple(labels))
    sent = np.choose(k, sents)  # type: ignore[arg-type]  # (numbers or arrays: np.choose takes either)
    fixed = np.choose(k, fixeds)  # type: ignore[arg-type]
    return DimensionCost(np.where(active, np.choose(k, stacked), 0.0), np.where(active, sent, 0.0),
                         table[k, 0], table[k, 1], np.where(active, fixed, 0.0))


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
def _label_table(labels: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The (algorithm, protocol) labels of `_fastest`'s candidates as an array (read-only: shared)."""
    table = np.array(labels)
    table.flags.writeable = False
    return table
