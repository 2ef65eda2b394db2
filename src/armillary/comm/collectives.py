"""Cost of collectives on a two-tier system (scale-up inside a node, scale-out between nodes).

Hierarchical ring algorithms, alpha-beta model (Thakur et al. 2005; formulas.md §1.2, hierarchical
2-D row): each tier is a ring over the group's ranks in that tier, with the per-device bandwidth of the
tier derated by its efficiency. Every device of a node drives its own share of the scale-out links
(rails), so the inter-node step moves n / per_node bytes per device (formulas.md pitfall 4).
Topology-aware algorithms replace these behind the same functions in a later issue.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.comm.placement import Placement
from armillary.specs.arrays import Array
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


def _ring(n_bytes: Array, p: Array, steps_factor: int, net: Network) -> tuple[Array, Array]:
    """Ring reduce-scatter/all-gather (steps_factor 1) or all-reduce (2) of n bytes over p ranks:
    k(p-1)*alpha + k(p-1)/p * n / (eta * B). Returns (time, bytes sent per rank)."""
    sent = steps_factor * (p - 1) / p * n_bytes
    time = steps_factor * (p - 1) * net.latency + sent / (net.efficiency * net.bandwidth)
    return time, sent


def all_gather(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """All-gather of an n-byte result (each rank holds n/p): inter-node ring on n/per_node, then
    intra-node ring on n. Reduce-scatter has the same cost (`reduce_scatter`)."""
    t_out, b_out = _ring(n_bytes / group.per_node, group.nodes, 1, system.scale_out)
    t_in, b_in = _ring(n_bytes, group.per_node, 1, system.scale_up)
    return CommCost(t_out + t_in, b_in, b_out)


def reduce_scatter(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """Reduce-scatter of an n-byte input; the mirror image of `all_gather`."""
    return all_gather(n_bytes, group, system)


def all_reduce(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """All-reduce of n bytes: intra-node reduce-scatter, inter-node all-reduce of n/per_node,
    intra-node all-gather (formulas.md §1.2, hierarchical 2-D)."""
    t_in, b_in = _ring(n_bytes, group.per_node, 2, system.scale_up)
    t_out, b_out = _ring(n_bytes / group.per_node, group.nodes, 2, system.scale_out)
    return CommCost(t_in + t_out, b_in, b_out)


def send_recv(n_bytes: Array, crosses_nodes: Array, system: System) -> CommCost:
    """Point-to-point transfer: alpha + n / (eta * B) on the tier it crosses (formulas.md §1.1)."""
    up, out = system.scale_up, system.scale_out
    t_up = up.latency + n_bytes / (up.efficiency * up.bandwidth)
    t_out = out.latency + n_bytes / (out.efficiency * out.bandwidth)
    time = crosses_nodes * t_out + (1 - crosses_nodes) * t_up
    return CommCost(time, (1 - crosses_nodes) * n_bytes, crosses_nodes * n_bytes)
