"""Cost of collectives on a two-tier system (scale-up inside a node, scale-out between nodes).

Each tier runs its fastest algorithm and protocol (`algorithms.py`); tiers compose hierarchically. Every
device of a node drives its own share of the scale-out links (rails), so the inter-node step moves
n / per_node bytes per device (docs/formulas.md pitfall 4). The estimator takes its communication costs from
here; the search and the simulators take them through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armillary.comm.algorithms import PROTOCOLS, Algorithm, Collective, DimensionCost, dimension_cost
from armillary.numerics import Array, maximum
from armillary.plan.placement import Placement
from armillary.specs.system import Network, System


@dataclass(frozen=True)
class CommCost:
    """Time of a collective and the bytes each device sends on each network tier."""

    time: Array
    scale_up_bytes: Array
    scale_out_bytes: Array
    __array_ufunc__ = None  # `array * cost` must call CommCost.__rmul__, not broadcast into an object array

    def __add__(self, other: CommCost) -> CommCost:
        return CommCost(self.time + other.time, self.scale_up_bytes + other.scale_up_bytes,
                        self.scale_out_bytes + other.scale_out_bytes)

    def __mul__(self, k: Array) -> CommCost:
        return CommCost(self.time * k, self.scale_up_bytes * k, self.scale_out_bytes * k)

    __rmul__ = __mul__


NO_COMM = CommCost(0.0, 0.0, 0.0)


def needed(cost: Callable[[], CommCost], used: Array) -> CommCost:
    """A collective only where it is used: skipped for a single configuration that does not use it, zeroed
    at the points of a sweep that do not (so callers never add the cost of an unused call)."""
    if isinstance(used, np.ndarray):
        return cost() * np.where(used, 1.0, 0.0)
    return cost() if used else NO_COMM


@dataclass(frozen=True)
class CollectiveResult:
    """A collective's cost and, per tier, the algorithm and protocol chosen."""

    cost: CommCost
    scale_up: DimensionCost
    scale_out: DimensionCost


def collective(op: Collective, n_bytes: Array, group: Placement, system: System,
               algorithm: Algorithm = Algorithm.AUTO, scale_up_bandwidth: Array | None = None,
               scale_out_bandwidth: Array | None = None) -> CollectiveResult:
    """Cost of `op` over `group` (its ranks spread over nodes, `per_node` in each): the fastest algorithm
    on each tier (or the pinned one), composed hierarchically across tiers (docs/formulas.md §1.2):
    all-reduce = reduce-scatter inside + all-reduce of n/per_node across + all-gather inside; all-gather =
    across on n/per_node, then inside on n; reduce-scatter mirrors it; all-to-all splits its bytes between
    the tiers and runs both at once (docs/formulas.md §1.2, NIC-bound two-level estimate). The per-device
    bandwidths of the tiers may be given as arrays to sweep them."""
    up, out, rate = system.scale_up, system.scale_out, system.device.hbm.rate
    p_in, nodes, p = group.per_node, group.nodes, group.size
    if algorithm is not Algorithm.AUTO and not isinstance(p, np.ndarray):
        crossed = [tier for tier, ranks in ((up, p_in), (out, nodes)) if float(ranks) > 1]
        if crossed and not any(_pinnable(algorithm, op, tier) for tier in crossed):
            raise ValueError(f"algorithm {algorithm.value!r} cannot run {op.value} on "
                             f"{' or '.join(t.name for t in crossed)}; they offer "
                             f"{sorted({a.value for t in crossed for a in t.algorithms})}")

    def on(inside: bool, o: Collective, n: Array, ranks: Array) -> DimensionCost:
        tier, bandwidth = (up, scale_up_bandwidth) if inside else (out, scale_out_bandwidth)
        pinned = algorithm if _pinnable(algorithm, o, tier) else Algorithm.AUTO
        return dimension_cost(o, n, ranks, tier, rate, pinned, bandwidth)

    n_inside, n_across = tier_bytes(op, n_bytes, group)
    if op is Collective.ALL_REDUCE:
        across = on(False, op, n_across, nodes)
        multi = nodes > 1
        scalar = not isinstance(multi, np.ndarray)
        if scalar and not multi:  # one node: the whole all-reduce inside, in-network reduction possible
            flat = on(True, op, n_inside, p_in)
            return CollectiveResult(CommCost(flat.time + across.time, flat.sent_bytes, across.sent_bytes),
                                    flat, across)
        rs, ag = on(True, Collective.REDUCE_SCATTER, n_inside, p_in), on(True, Collective.ALL_GATHER, n_inside, p_in)
        saved = _shared_base(rs, across, ag)  # one collective call: its fixed cost is paid once
        if scalar:  # several nodes: reduce-scatter inside, all-reduce across, all-gather inside
            inside = DimensionCost(rs.time + ag.time - saved, rs.sent_bytes + ag.sent_bytes, rs.algorithm,
                                   rs.protocol)
        else:
            flat = on(True, op, n_inside, p_in)
            inside = DimensionCost(np.where(multi, rs.time + ag.time - saved, flat.time),
                                   np.where(multi, rs.sent_bytes + ag.sent_bytes, flat.sent_bytes),
                                   np.where(multi, rs.algorithm, flat.algorithm),
                                   np.where(multi, rs.protocol, flat.protocol))
        return CollectiveResult(CommCost(inside.time + across.time, inside.sent_bytes, across.sent_bytes),
                                inside, across)
    if op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.BROADCAST, Collective.REDUCE):
        across, inside = on(False, op, n_across, nodes), on(True, op, n_inside, p_in)
        time = across.time + inside.time - _shared_base(across, inside)
        return CollectiveResult(CommCost(time, inside.sent_bytes, across.sent_bytes),
                                inside, across)
    if op is Collective.ALL_TO_ALL:
        inside, across = on(True, op, n_inside, p_in), on(False, op, n_across, nodes)
        return CollectiveResult(CommCost(np.maximum(inside.time, across.time), inside.sent_bytes,
                                         across.sent_bytes), inside, across)
    raise ValueError(f"{op.value} is point-to-point: use send_recv")


def tier_bytes(op: Collective, n_bytes: Array, group: Placement) -> tuple[Array, Array]:
    """The message each tier's stage handles (inside a node, across nodes) in the hierarchical composition
    of `collective`: all-reduce, all-gather and reduce-scatter cross nodes with n / per_node per device
    (every device drives its own rail); broadcast and reduce with the whole message; all-to-all sends
    (per_node - 1)/p of its buffer inside the node and the rest, (p - per_node)/p, across."""
    p_in, nodes, p = group.per_node, group.nodes, group.size
    if op is Collective.ALL_TO_ALL:
        return n_bytes * p_in / p, n_bytes * (p - p_in) / p * nodes / maximum(nodes - 1, 1)
    if op in (Collective.BROADCAST, Collective.REDUCE):
        return n_bytes, n_bytes
    return n_bytes, n_bytes / p_in


def collective_time(op: Collective, size_bytes: Array, group: Placement, system: System,
                    algorithm: Algorithm = Algorithm.AUTO, scale_up_bandwidth: Array | None = None,
                    scale_out_bandwidth: Array | None = None) -> Array:
    """Seconds of one collective: `collective(...)` without the breakdown. Array-friendly in size and in
    the tiers' bandwidths."""
    return collective(op, size_bytes, group, system, algorithm, scale_up_bandwidth, scale_out_bandwidth).cost.time


_SMALLEST_BASE = min(proto.base_latency_s for proto in PROTOCOLS)


def _shared_base(*stages: DimensionCost) -> Array:
    """What composing stages into one collective saves: each stage's cost includes a protocol's fixed cost
    per collective call, which the whole hierarchical collective pays once (docs/formulas.md §1.3). The saving
    is the smallest fixed cost per extra stage, independent of the protocols chosen, so that time stays
    non-decreasing in size."""
    if not any(isinstance(st.time, np.ndarray) for st in stages):  # one configuration
        return max(sum(1 for st in stages if st.time > 0) - 1, 0) * _SMALLEST_BASE
    active = sum(np.where(np.asarray(st.time) > 0, 1.0, 0.0) for st in stages)
    return np.maximum(active - 1, 0.0) * _SMALLEST_BASE


def _pinnable(algorithm: Algorithm, op: Collective, tier: Network) -> bool:
    """A pinned algorithm applies where it can run; elsewhere the tier chooses for itself."""
    if algorithm is Algorithm.AUTO:
        return False
    try:
        dimension_cost(op, 1.0, 2.0, tier, 1.0, algorithm)
    except ValueError:
        return False
    return True


def all_gather(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """All-gather of an n-byte result (each rank holds n/p)."""
    return collective(Collective.ALL_GATHER, n_bytes, group, system).cost


def reduce_scatter(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """Reduce-scatter of an n-byte input."""
    return collective(Collective.REDUCE_SCATTER, n_bytes, group, system).cost


def all_reduce(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """All-reduce of an n-byte buffer."""
    return collective(Collective.ALL_REDUCE, n_bytes, group, system).cost


def send_recv(n_bytes: Array, crosses_nodes: Array, system: System) -> CommCost:
    """Point-to-point transfer on the tier it crosses (docs/formulas.md §1.1), with its best protocol."""
    rate = system.device.hbm.rate

    def on(tier: Network) -> Array:
        return dimension_cost(Collective.SEND_RECV, n_bytes, 2.0, tier, rate).time

    if not isinstance(crosses_nodes, np.ndarray):  # one configuration: only the tier it crosses
        time = on(system.scale_out) if crosses_nodes else on(system.scale_up)
    else:
        time = crosses_nodes * on(system.scale_out) + (1 - crosses_nodes) * on(system.scale_up)
    return CommCost(time, (1 - crosses_nodes) * n_bytes, crosses_nodes * n_bytes)


def all_to_all_matrix(matrix: np.ndarray, group: Placement, system: System) -> CommCost:
    """Non-uniform all-to-all (MoE dispatch with uneven routing): `matrix[i, j]` bytes go from rank i to
    rank j; ranks fill nodes in order (`group.per_node` each). Every rank sends its row and receives its
    column on both tiers at once; on each tier its time is the uniform all-to-all with the same busiest
    direction, and the slowest rank sets the time (docs/formulas.md pitfall 12)."""
    m = np.asarray(matrix, dtype=float)
    p = m.shape[0]
    if m.shape != (p, p) or p != int(float(group.size)):
        raise ValueError(f"matrix must be {int(float(group.size))} x {int(float(group.size))}, got {m.shape}")
    per_node = int(float(group.per_node))
    node = np.arange(p) // per_node
    same = node[:, None] == node[None, :]
    np.fill_diagonal(same, False)  # a rank's bytes to itself stay put
    other = node[:, None] != node[None, :]
    busiest_in = np.maximum((m * same).sum(axis=1), (m * same).sum(axis=0))
    busiest_out = np.maximum((m * other).sum(axis=1), (m * other).sum(axis=0))
    rate = system.device.hbm.rate
    nodes = p / per_node
    # the uniform all-to-all of n bytes sends (k-1)/k n per rank: find the n with this rank's busiest load
    inside = dimension_cost(Collective.ALL_TO_ALL, busiest_in * per_node / max(per_node - 1, 1), float(per_node),
                            system.scale_up, rate)
    across = dimension_cost(Collective.ALL_TO_ALL, busiest_out * nodes / max(nodes - 1, 1), nodes,
                            system.scale_out, rate)
    slowest = int(np.argmax(np.maximum(inside.time, across.time)))
    return CommCost(float(np.maximum(inside.time, across.time)[slowest]), float(busiest_in[slowest]),
                    float(busiest_out[slowest]))
