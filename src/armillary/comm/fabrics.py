"""Scale-out fabrics as the collective library runs on them (`presets/network/fabrics.yaml`).

One description per fabric (InfiniBand, RoCE, AWS EFA, GCP TCPXO / RDMA, Pollara, Omni-Path, rack-scale
NVLink domains), never per source: per-NIC bandwidth and NICs per GPU, the per-step latency and large-message
efficiency, the algorithms the library runs across nodes there, and where the figures come from. A fabric
either points at the system preset whose outermost dimension already describes it (`dimension_of`: that
calibrated dimension is the one source of truth) or gives its own fields. `fabric_dimension` builds the
NetworkDimension a system's outermost tier takes on that fabric; `with_fabric` puts it in a system.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from armillary.numerics import Array
from armillary.presets.registry import preset_dir, read_data_file
from armillary.specs.base import Spec
from armillary.specs.communication import Algorithm
from armillary.specs.loading import load_system
from armillary.specs.network import PROTOCOL_NAMES, NetworkDimension
from armillary.specs.quantity import BytesPerSecond, Seconds
from armillary.specs.system import System
from armillary.units import parse_quantity

FAMILIES = ("infiniband", "roce", "efa", "tcpxo", "pollara", "omni-path", "ethernet", "nvlink-domain")


class Fabric(Spec):
    """One scale-out fabric; every number names its source in `sources` (a fit names the tool and rows)."""

    family: str = Field(description=f"one of {', '.join(FAMILIES)}")
    description: str
    nic_bandwidth: str = Field(description="one NIC's line rate, one direction, e.g. '400 Gb/s'")
    nics_per_gpu: float = Field(1.0, gt=0, description="compute NICs per GPU (0.5: one NIC per two GPUs)")
    library: str = Field("nccl", description="the collective library measured on it (nccl, rccl)")
    protocols: tuple[str, ...] | None = Field(
        None, min_length=1, description="the protocols the library is set to offer on this fabric (NCCL_PROTO of the "
        "fabric's published NCCL profile; NCCL's names LL, LL128, Simple), which `with_fabric` applies to every "
        "dimension of the job (NCCL reads NCCL_PROTO per communicator, for every collective and algorithm: "
        "tuning.cc); None: what the fabric's dimension states (dimension_of; default all three)")
    dimension_of: str | None = Field(None, description="system preset whose outermost dimension is this fabric")
    dimension: dict[str, Any] = Field(default_factory=dict, description="NetworkDimension fields (per NIC rate "
                                      "comes from nic_bandwidth x nics_per_gpu)")
    calibrated: bool = Field(False, description="whether latency / efficiency were fitted on measurements")
    net_plugin_latency: Seconds | None = Field(
        None, description="the latency the fabric's NCCL net plugin reports to NCCL (ncclNetProperties_t.latency), "
        "which NCCL's tuner adds to every network step, twice for Simple (`nccl_network_hops`); None: none reported "
        "(NCCL's own IB transport reports 0)")
    all_to_all_incast: float = Field(0.0, ge=0.0, description="all-to-all incast: the transfer time of the "
                                     "all-to-all's phase on this fabric grows by this fraction per remote host past "
                                     "the first that sends to a NIC at once (comm/fabrics.all_to_all_slowdown)")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sourced(self) -> Fabric:
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r}: one of {', '.join(FAMILIES)}")
        incast = ("all_to_all_incast",) if self.all_to_all_incast else ()
        plugin = ("net_plugin_latency",) if self.net_plugin_latency is not None else ()
        protocols = ("protocols",) if self.protocols is not None else ()
        unknown = [p for p in self.protocols or () if p not in PROTOCOL_NAMES]
        if unknown:
            raise ValueError(f"protocols: {unknown} not NCCL's; one of {', '.join(PROTOCOL_NAMES)}")
        if "protocols" in self.dimension:
            raise ValueError("protocols are the fabric's `protocols`, not dimension.protocols")
        for name in ("nic_bandwidth", "nics_per_gpu", *self.dimension, *incast, *plugin, *protocols):
            if name not in self.sources and not (name == "nics_per_gpu" and self.nics_per_gpu == 1.0):
                raise ValueError(f"{name} needs a source (sources.{name})")
        if self.dimension_of is None and not {"latency", "efficiency"} <= set(self.dimension):
            raise ValueError("a fabric without dimension_of states dimension.latency and dimension.efficiency")
        return self

    @property
    def gpu_bandwidth(self) -> float:
        """Bytes/s of compute NICs per GPU, one direction."""
        return float(parse_quantity(self.nic_bandwidth, "bytes_per_s")) * self.nics_per_gpu


class NvlinkDomain(Spec):
    """A rack-scale NVLink domain (GB200 / GB300 NVL72): its GPUs, the GPUs of one tray (which own the
    compute NICs), and the algorithms the library runs between domains."""

    domain_gpus: int = Field(gt=1)
    tray_gpus: int = Field(gt=0)
    presets: tuple[str, ...] = Field((), description="system presets built of this domain (their NVLink dimension "
                                     "names the domain in a sized system: comm/fabrics.host_gpus)")
    across_domains: tuple[Algorithm, ...] = Field(min_length=1)
    ring_protocol_latency: dict[str, Seconds] = Field(
        default_factory=dict, description="per-hop latency of each protocol on the domain's NVLink in a ring "
        "across domains (NetworkDimension.protocol_latency of its inner dimension there)")
    ring_busbw: dict[str, BytesPerSecond] = Field(
        default_factory=dict, description="bus bandwidth ceiling of a protocol's ring across domains "
        "(NetworkDimension.ring_busbw of its inner dimension there)")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sourced(self) -> NvlinkDomain:
        named = ("domain_gpus", "tray_gpus", "across_domains",
                 *(k for k in ("ring_protocol_latency", "ring_busbw") if getattr(self, k)))
        missing = [k for k in named if k not in self.sources]
        if missing:
            raise ValueError(f"{', '.join(missing)} need a source (sources.<field>)")
        return self


class FabricTable(Spec):
    fabrics: dict[str, Fabric] = Field(min_length=1)
    nvlink_domains: dict[str, NvlinkDomain] = Field(default_factory=dict)


@functools.cache
def _table() -> FabricTable:
    return FabricTable.model_validate(read_data_file(preset_dir("network") / "fabrics.yaml"))


def fabrics() -> dict[str, Fabric]:
    """The shipped fabrics, by name."""
    return dict(_table().fabrics)


def nvlink_domain(name: str = "nvl72") -> NvlinkDomain:
    """The rack-scale NVLink domain called `name`."""
    domains = _table().nvlink_domains
    if name not in domains:
        raise ValueError(f"unknown NVLink domain {name!r}; known: {', '.join(sorted(domains))}")
    return domains[name]


# NCCL's network hop latency per protocol of a ring step (src/graph/tuning.cc ncclTunerConstantsDefaults
# hwLatencies[NCCL_HW_NET][ring]: LL 2.7, LL128 4.0, Simple 14 us; docs/formulas.md section 1.3)
_NCCL_NET_HOP = {"LL": 2.7e-6, "LL128": 4.0e-6, "Simple": 14e-6}


def nccl_network_hops(plugin_latency: float) -> dict[str, Any]:
    """The per-step latencies NCCL's own tuner gives a network step whose net plugin reports `plugin_latency`
    seconds, as NetworkDimension fields (`latency`: Simple's; `protocol_latency`: LL's and LL128's): NCCL's
    network hop latency of the protocol plus the plugin's latency (src/graph/search.cc: graph->latencyInter =
    the NIC's reported latency; tuning.cc: interLat = hwLat[NET] + latencyInter, and + latencyInter again for
    Simple, "the flush extra latency")."""
    return {"latency": _NCCL_NET_HOP["Simple"] + 2 * plugin_latency,
            "protocol_latency": {p: _NCCL_NET_HOP[p] + plugin_latency for p in ("LL", "LL128")}}


def fabric(name: str) -> Fabric:
    """The fabric called `name`; an unknown name is an error listing the known ones."""
    table = fabrics()
    if name not in table:
        raise ValueError(f"unknown fabric {name!r}; known: {', '.join(sorted(table))}")
    return table[name]


@functools.cache
def fabric_dimension(name: str, gpu_bandwidth: float | None = None) -> NetworkDimension:
    """The outermost network dimension on fabric `name`, at `gpu_bandwidth` bytes/s of NICs per GPU (default:
    the fabric's own NICs). A per-channel limit is kept only at the fabric's own NIC rate (it was fitted there)."""
    spec = fabric(name)
    if spec.dimension_of is not None:
        base = load_system(spec.dimension_of).network[-1].model_dump(exclude_defaults=True)
    else:
        base = {"name": spec.description, "kind": "rail_optimized"}
    data = {**base, **spec.dimension, "size": 1}
    if spec.protocols is not None:
        data["protocols"] = spec.protocols
    data["sources"] = {**base.get("sources", {}), **{k: v for k, v in spec.sources.items()}}
    own = float(parse_quantity(data["bandwidth"], "bytes_per_s")) if "bandwidth" in base else None
    rate = gpu_bandwidth or spec.gpu_bandwidth
    data["bandwidth"] = rate
    data.pop("shared_by", None)  # the rate is per GPU already
    if own is not None and abs(rate - own) > 1e-6 * own:
        data.pop("channels", None)
        data.pop("channel_bandwidth", None)
    return NetworkDimension.model_validate(data)


def rack_scale(system: System) -> bool:
    """Whether `system` (as shipped, before sizing) is built of rack-scale NVLink domains (NVL72)."""
    return system.network[0].size >= nvlink_domain().domain_gpus


def with_fabric(system: System, name: str, gpu_bandwidth: float | None = None,
                nvlink_reduction: bool = True, across_racks: bool = False) -> System:
    """`system` with its outermost dimension on fabric `name` (its size kept); `nvlink_reduction` False turns
    the in-switch reduction of the inner (NVLink) dimensions off (NCCL_NVLS_ENABLE=0); `across_racks`: the
    outermost tier joins rack-scale NVLink domains, where the library runs `nvlink_domain().across_domains`.
    The protocols the fabric's dimension offers are the job's (NCCL_PROTO holds for every communicator, inside a
    node too: tuning.cc), so every dimension keeps only those."""
    network = list(system.network)
    if len(network) > 1:
        network[-1] = fabric_dimension(name, gpu_bandwidth).sized(network[-1].size)
        network[:-1] = [_offering(d, network[-1].protocols) for d in network[:-1]]
        source = fabric(name).dimension_of
        if source is not None and load_system(source).device.name != system.device.name:
            # a per-channel limit fitted on another GPU's node does not carry over (its channel count is the
            # ring search's on that node: search.cc, connect.cc)
            network[-1] = network[-1].model_copy(update={"channels": None, "channel_bandwidth": None})
        if across_racks:
            domain = nvlink_domain()
            network[-1] = network[-1].model_copy(update={"algorithms": domain.across_domains})
            network[0] = network[0].model_copy(update={  # the NVLink hops of a ring that leaves the rack
                "protocol_latency": {**network[0].protocol_latency, **domain.ring_protocol_latency},
                "ring_busbw": {**network[0].ring_busbw, **domain.ring_busbw}})
    if not nvlink_reduction:
        network = [d if i == len(network) - 1 and len(network) > 1 else _without_nvls(d)
                   for i, d in enumerate(network)]
    return system.model_copy(update={"network": tuple(network)})


def _offering(dim: NetworkDimension, offered: tuple[str, ...]) -> NetworkDimension:
    """`dim` with only the protocols of `offered` (the job's NCCL_PROTO); unchanged where it offers no other."""
    if set(dim.protocols) <= set(offered):
        return dim
    kept = tuple(p for p in dim.protocols if p in offered)
    if not kept:
        raise ValueError(f"protocols: the fabric offers {list(offered)}, dimension {dim.name!r} none of them "
                         f"({list(dim.protocols)})")
    return dim.model_copy(update={"protocols": kept})


def _without_nvls(dim: NetworkDimension) -> NetworkDimension:
    """NVLS off (NCCL_NVLS_ENABLE=0, init.cc): the NVLink switch no longer reduces."""
    algorithms = tuple(a for a in dim.algorithms if a is not Algorithm.IN_NETWORK) or (Algorithm.RING,)
    return dim.model_copy(update={"in_network_reduction": False, "algorithms": algorithms})


def with_fabric_nvls_off(system: System) -> System:
    """`system` with NVLS off on every dimension but a scale-out tier (NCCL_NVLS_ENABLE=0)."""
    last = len(system.network) - 1
    return system.model_copy(update={"network": tuple(
        d if i == last and last > 0 else _without_nvls(d) for i, d in enumerate(system.network))})


# All-to-all incast on the scale-out tier. NCCL runs an all-to-all as grouped send / receive to every peer
# (nccl-tests alltoall_perf: ncclSend / ncclRecv per peer in one group) and puts every peer of the group in one
# kernel plan (src/enqueue.cc, scheduleP2pTasksToPlan: all p2pSchedule rounds, each channel running up to
# NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8 peers at once, src/include/device.h; with one network channel per peer at
# scale, src/graph/paths.cc ncclTopoGetNchannels). So every remote host sends to a NIC at once, and the
# receiving NIC and its leaf see the incast of all remote hosts together; RCCL's all-to-all is the same
# grouped send / receive across nodes (its pivot kernel is single-node). A lossless fabric shares the NIC
# fairly among them at a cost that grows with the number of senders (credit stalls on InfiniBand, PFC pauses
# and ECN / DCQCN rate cuts on RoCE), which each fabric states as `all_to_all_incast`: the phase's transfer
# time times 1 + incast x (remote hosts - 1). A host is one node, or one tray of a rack-scale NVLink domain
# (its NICs are the tray's). With NCCL's PXN (paths.cc, on by default; on GB200 / GB300 trays from NCCL 2.28,
# NCCL_PXN_C2C=1) a NIC talks to one rail peer per remote host, without it (RCCL: PXN_DISABLE=1 by default;
# NCCL 2.27 on GB200) to each remote GPU: the fitted coefficient of each fabric is for the library and version
# its rows ran, counted per remote host either way.


@functools.cache
def _incast_by_dimension() -> dict[str, float]:
    """Each fabric's all-to-all incast by the name its scale-out dimension carries (`fabric_dimension`)."""
    out: dict[str, float] = {}
    for name, spec in fabrics().items():
        if spec.all_to_all_incast:
            out.setdefault(fabric_dimension(name).name, spec.all_to_all_incast)
    return out


def all_to_all_incast(dim: NetworkDimension) -> float:
    """The all-to-all incast of the fabric `dim` is (0 where none states one)."""
    return _incast_by_dimension().get(dim.name, 0.0)


@functools.cache
def _tray_of_dimension() -> dict[str, int]:
    """The GPUs of one tray (one host) by the name of the NVLink dimension of the rack-scale presets."""
    return {load_system(preset).network[0].name: domain.tray_gpus
            for domain in _table().nvlink_domains.values() for preset in domain.presets}


def host_gpus(system: System, per_block: Array) -> Array:
    """The group's GPUs on one host: a block of the innermost dimension (`per_block` of the group's ranks),
    or at most one tray of a rack-scale NVLink domain."""
    tray = _tray_of_dimension().get(system.network[0].name)
    return per_block if tray is None else np.minimum(per_block, float(tray))


def all_to_all_slowdown(system: System, spans: tuple[Array, ...], i: int) -> Array:
    """What the incast multiplies the transfer time of an all-to-all's phase on dimension i by: 1 +
    incast x (remote hosts - 1), the remote hosts (span_i - 1) x the hosts in one block below i."""
    incast = all_to_all_incast(system.network[i])
    if i == 0 or not incast:
        return 1.0
    inner = math.prod(spans[:i], start=1.0)
    hosts = (spans[i] - 1.0) * inner / host_gpus(system, spans[0])
    return 1.0 + incast * np.maximum(hosts - 1.0, 0.0)
