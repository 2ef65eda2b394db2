"""How Chakra point-to-point sends are costed when a trace is read on a system (`read_chakra(sends=...)`).

- `library`: the system's collective library (comm/collectives.py `send_recv`): each send a separate
  operation with its protocol's launch cost (NCCL's base latency) and per-step latency, as a framework
  issues pipeline sends.
- `astra-sim`: ASTRA-sim's analytical network (astra-network-analytical congestion_unaware
  BasicTopology::send / compute_communication_delay): hops x the dimension's latency + bytes / the link's
  bandwidth, truncated to whole nanoseconds, on the innermost dimension where the two ranks differ
  (MultiDimTopology::get_dim_to_transfer); a Ring takes the shorter way round (Ring::compute_hops_count,
  bidirectional), a Switch 2 hops, a FullyConnected 1. No launch cost per send: the sends of an ASTRA-sim
  custom collective (an MSCCL program through its Chakra converter) run inside one collective.
"""

from __future__ import annotations

import math
from enum import StrEnum

from armillary.errors import SpecError
from armillary.specs.network import NetworkKind
from armillary.specs.system import System


class SendCost(StrEnum):
    """What a foreign trace's COMM_SEND / COMM_RECV transfer costs (see the module's docstring)."""

    LIBRARY = "library"
    ASTRA_SIM = "astra-sim"


# ASTRA-sim's analytical topologies (astra-network-analytical congestion_unaware/basic-topology/*.cpp) and
# the hops a send takes on each; a ring's depend on the distance
_HOPS = {NetworkKind.FULLY_CONNECTED: 1, NetworkKind.SWITCH: 2}


def astra_sim_send_ns(size: float, src: int, dst: int, system: System) -> int:
    """ASTRA-sim's delay (ns) of `size` bytes from rank `src` to rank `dst` of `system` (ranks numbered
    mixed-radix over the dimensions, innermost first, as ASTRA-sim's translate_address), at each link's
    `bandwidth / links` (x the dimension's efficiency: 1 for a network read from ASTRA-sim)."""
    sizes = system.sizes
    if not (0 <= src < system.devices and 0 <= dst < system.devices) or src == dst:
        raise SpecError(f"send {src}->{dst}: two different ranks of 0 to {system.devices - 1} "
                        f"(system {system.name!r})")
    a, b, dim = src, dst, 0
    while a % sizes[dim] == b % sizes[dim]:  # they differ somewhere: src != dst
        a, b, dim = a // sizes[dim], b // sizes[dim], dim + 1
    net, n = system.network[dim], sizes[dim]
    x, y = a % n, b % n
    if net.kind is NetworkKind.RING:
        hops = min((y - x) % n, (x - y) % n)
    elif net.kind in _HOPS:
        hops = _HOPS[net.kind]
    else:
        raise SpecError(f"send {src}->{dst} crosses {net.name!r}, a {net.kind.value} network: the astra-sim send "
                        "cost knows ASTRA-sim's analytical topologies: ring, fully_connected, switch")
    per_link = net.bandwidth / (net.links or 1) * net.efficiency  # bytes/s
    return math.floor(hops * net.latency * 1e9 + size / per_link * 1e9 + 1e-6)  # EventTime: truncated
