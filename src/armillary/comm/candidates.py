"""What can run on one network dimension: the algorithms its library offers and its links allow, each one's
achievable bytes/s, and the protocols each runs with at their step latencies (NCCL tuning.cc;
docs/formulas.md §1.2, §1.3), derived once per dimension."""

from __future__ import annotations

import functools

import numpy as np

from armillary.comm.cost_types import ALGORITHMS, PROTOCOLS, SIMPLE
from armillary.memo import IdentityCache
from armillary.specs.communication import (
    ALG_DIRECT,
    ALG_HALVING_DOUBLING,
    ALG_IN_NETWORK,
    ALG_RING,
    ALG_SYNTHESIZED,
    ALG_TREE,
    Algorithm,
)
from armillary.specs.network import SWITCHED, NetworkDimension, NetworkKind

_MESH = NetworkKind.MESH  # read once, as Collective's members are (specs/communication.py says why)


def allowed(algorithm: Algorithm, net: NetworkDimension) -> bool:
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


def link_bandwidth(net: NetworkDimension, algorithm: Algorithm) -> float:
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


def candidates_of(net: NetworkDimension) -> tuple[tuple[int, Algorithm, float], ...]:
    """(index, algorithm, achievable bytes/s) of what can run on `net`."""
    return derived(net)[0]


def hop_latencies(net: NetworkDimension) -> tuple[float, ...]:
    """Per protocol (in PROTOCOLS order), the latency of one step on `net`: its own figure for the protocol
    where it lists one, else the protocol's factor times its latency."""
    return tuple(net.protocol_latency.get(proto.name, proto.hop_latency_factor * net.latency) for proto in PROTOCOLS)


_Plan = tuple[tuple[int, Algorithm, tuple[tuple[tuple[int, int], float, float, float], ...]], ...]
# per candidate algorithm that runs with a protocol: (algorithm, its (algorithm, protocol) labels, per number of
# axes d of a sweep, its protocols' (base latencies, step latencies, shares of the link's bytes/s) as columns of
# shape (protocols, 1 x d) that broadcast against the sweep's arrays: every protocol costed in one array pass)
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray]
_Stacked = tuple[tuple[Algorithm, tuple[tuple[int, int], ...], tuple[_Columns, ...]], ...]
_Derived = tuple[tuple[tuple[int, Algorithm, float], ...], tuple[float, ...], _Plan, _Stacked, bool]
COLUMN_AXES = 12  # the columns are made for sweeps of up to this many axes (a search block has one per varying axis)

# per network dimension (a frozen spec), what `_candidate_costs` reads of it on every call: its candidates, its
# per-protocol step latencies and, per candidate, the protocols it runs with ((algorithm, protocol) label, base
# latency, step latency, the protocol's share of the link's bytes/s), those as columns; bounded, a long search
# builds many systems
_DERIVED: IdentityCache[NetworkDimension, _Derived] = IdentityCache(1024)


def derived(net: NetworkDimension) -> _Derived:
    return _DERIVED.get(net, _derive)


def _derive(net: NetworkDimension) -> _Derived:
    candidates = candidate_table(net.kind, net.algorithms, net.in_network_reduction, net.in_network_efficiency,
                                  net.efficiency, net.bandwidth, net.shared_by, net.tree_efficiency)
    hops = hop_latencies(net)
    offered = net.protocols  # the others are off for every algorithm (NCCL_PROTO: tuning.cc sets their bandwidth 0)
    # NVLS / CollNet run the Simple protocol only (NCCL tuning.cc)
    plan = tuple((a_index, alg, tuple(((a_index, p_index), proto.base_latency_s, hops[p_index],
                                       proto.bandwidth_factor * link)
                                      for p_index, proto in enumerate(PROTOCOLS)
                                      if proto.name in offered
                                      and (alg is not ALG_IN_NETWORK or proto.name == SIMPLE)))
                 for a_index, alg, link in candidates)
    stacked = tuple((alg, tuple(label for label, _, _, _ in protocols), _columns(protocols))
                    for _, alg, protocols in plan if protocols)
    # whether a reduce-scatter of n bytes costs what an all-gather of n bytes costs here, term for term: the ring
    # and halving-doubling send and step alike for both ((p-1) a + (p-1)/p n b: Thakur, Rabenseifner & Gropp 2005;
    # algorithm_steps.steps_and_bytes), the tree runs neither; not where a direct algorithm (the reduce-scatter
    # also reduces what it receives), in-network reduction (the switch reduces) or a synthesized schedule runs
    alike = ALG_SYNTHESIZED not in net.algorithms and all(alg in _ALIKE for _, alg, _ in candidates)
    return candidates, hops, plan, stacked, alike


_ALIKE = frozenset((ALG_RING, ALG_HALVING_DOUBLING, ALG_TREE))  # (the algorithms `scatter_is_gather` allows)


def scatter_is_gather(net: NetworkDimension) -> bool:
    """Whether the automatic choice on `net` costs a reduce-scatter exactly as an all-gather of the same bytes
    (`_derive`): every (algorithm, protocol) that can run has the same steps and bytes for both."""
    return derived(net)[4]


def _columns(protocols: tuple[tuple[tuple[int, int], float, float, float], ...]) -> tuple[_Columns, ...]:
    """The protocols' (base latency, step latency, bytes/s share) as read-only columns, one set per sweep rank."""
    values = np.array([[base, hop, rate] for _, base, hop, rate in protocols]).T.copy()
    values.flags.writeable = False
    return tuple(tuple(v.reshape((len(protocols),) + (1,) * axes) for v in values)  # type: ignore[misc]
                 for axes in range(COLUMN_AXES + 1))


@functools.lru_cache(maxsize=256)
def candidate_table(kind: NetworkKind, algorithms: tuple[Algorithm, ...], in_network_reduction: bool,
                     in_network_efficiency: float, efficiency: float,
                     bandwidth: float, shared_by: int,
                     tree_efficiency: float | None = None) -> tuple[tuple[int, Algorithm, float], ...]:
    """`candidates_of` of the network with these fields: a pure function of them, so cached by value."""
    net = NetworkDimension(name="", kind=kind, algorithms=algorithms, in_network_reduction=in_network_reduction,
                  in_network_efficiency=in_network_efficiency, efficiency=efficiency, bandwidth=bandwidth,
                  shared_by=shared_by, latency=0.0, tree_efficiency=tree_efficiency)
    return tuple((i, a, link_bandwidth(net, a)) for i, a in enumerate(ALGORITHMS) if allowed(a, net))
