"""ASTRA-sim's analytical network and collective configuration as an armillary System (issue 48).

ASTRA-sim describes a network as `topology` / `npus_count` / `bandwidth` (GB/s, read as 2^30 bytes/s: its
analytical backend, astra-network-analytical common/NetworkFunction.cpp bw_GBps_to_Bpns) / `latency` (ns) per
dimension, and the system file names each dimension's collective implementation. Its semantics, as its
analytical congestion-unaware backend runs them (astra-network-analytical congestion_unaware/*.cpp):

- Ring: one direction of the ring, `bandwidth` per link: a ring all-reduce sends 2 (p-1) messages of n/p at
  that rate;
- FullyConnected: one link of `bandwidth` to each of the p - 1 peers, all usable at once (our
  fully_connected dimension with p - 1 links sharing p - 1 times that injection rate);
- Switch: `bandwidth` per NPU to the switch.

Implementations: ring, halvingDoubling, doubleBinaryTree, and direct, which ASTRA-sim runs as a
reduce-scatter then an all-gather, each one step to all peers at once (AllToAll.cc): the two-shot direct.
Its multi-dimensional all-reduce is reduce-scatter up the dimensions, all-reduce at the last, all-gather
down (Sys.cc), pipelined in chunks: the hierarchical library.
"""

from __future__ import annotations

from collections.abc import Sequence

from armillary.errors import SpecError
from armillary.specs.communication import Algorithm
from armillary.specs.loading import load_system
from armillary.specs.network import CollectiveLibrary, DirectAllReduce, NetworkDimension, NetworkKind
from armillary.specs.system import System

GB = 2.0 ** 30  # ASTRA-sim's GB/s: bw_GBps_to_Bpns multiplies by 2^30 / 1e9
_KINDS = {"Ring": NetworkKind.RING, "FullyConnected": NetworkKind.FULLY_CONNECTED, "Switch": NetworkKind.SWITCH}
_IMPLEMENTATIONS = {"ring": Algorithm.RING, "direct": Algorithm.DIRECT, "halvingDoubling": Algorithm.HALVING_DOUBLING,
                    "doubleBinaryTree": Algorithm.TREE}


def astra_sim_system(topology: Sequence[str], npus_count: Sequence[int], bandwidth: Sequence[float],
                     latency: Sequence[float], implementations: Sequence[str],
                     local_memory_bandwidth: float | None = None, device_of: str = "astra-3d") -> System:
    """The System of an ASTRA-sim network file (`topology`, `npus_count`, `bandwidth` in its GB/s, `latency`
    in ns) with one collective implementation per dimension (its system file's all-reduce-implementation).
    `local_memory_bandwidth` (bytes/s): ASTRA-sim's local-mem-bw, taken as the device's memory rate for
    the reductions the model charges (a direct reduce-scatter's); default: the device's own."""
    lengths = {len(topology), len(npus_count), len(bandwidth), len(latency), len(implementations)}
    if len(lengths) != 1:
        raise SpecError("topology, npus_count, bandwidth, latency and implementations need one entry per "
                             f"dimension; got {len(topology)}, {len(npus_count)}, {len(bandwidth)}, {len(latency)}, "
                             f"{len(implementations)}")
    dims = []
    for i, (kind, size, rate, alpha, impl) in enumerate(zip(topology, npus_count, bandwidth, latency,
                                                            implementations, strict=True)):
        if kind not in _KINDS:
            raise SpecError(f"topology[{i}] {kind!r}: one of {', '.join(_KINDS)}")
        if impl not in _IMPLEMENTATIONS:
            raise SpecError(f"implementation[{i}] {impl!r}: one of {', '.join(_IMPLEMENTATIONS)}")
        peers = int(size) - 1 if _KINDS[kind] is NetworkKind.FULLY_CONNECTED else 1
        dims.append(NetworkDimension(
            name=f"ASTRA-sim {kind} {size}", kind=_KINDS[kind], size=int(size), bandwidth=float(rate) * GB * peers,
            links=peers if peers > 1 else None, latency=float(alpha) * 1e-9, efficiency=1.0,
            algorithms=(_IMPLEMENTATIONS[impl],), direct=DirectAllReduce.TWO_SHOT,
            sources={"network": "an ASTRA-sim analytical network configuration (comm/astra_network.py)"}))
    base = load_system(device_of)
    device = base.device
    if local_memory_bandwidth is not None:
        local = device.hbm.model_copy(update={"bandwidth": local_memory_bandwidth, "efficiency": 1.0})
        device = device.model_copy(update={"memory": (local, *device.memory[1:])})
    return base.model_copy(update={"name": f"ASTRA-sim {'_'.join(topology)}", "device": device,
                                   "collectives": CollectiveLibrary.HIERARCHICAL, "network": tuple(dims)})
