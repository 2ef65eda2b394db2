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
from typing import Any

from pydantic import Field, model_validator

from armillary.presets.registry import preset_dir, read_data_file
from armillary.specs.base import Spec
from armillary.specs.communication import Algorithm
from armillary.specs.loading import load_system
from armillary.specs.network import NetworkDimension
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
    protocols: tuple[str, ...] = Field(("LL", "LL128", "Simple"), description="protocols offered across nodes")
    dimension_of: str | None = Field(None, description="system preset whose outermost dimension is this fabric")
    dimension: dict[str, Any] = Field(default_factory=dict, description="NetworkDimension fields (per NIC rate "
                                      "comes from nic_bandwidth x nics_per_gpu)")
    calibrated: bool = Field(False, description="whether latency / efficiency were fitted on measurements")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sourced(self) -> Fabric:
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r}: one of {', '.join(FAMILIES)}")
        for name in ("nic_bandwidth", "nics_per_gpu", *self.dimension):
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
    outermost tier joins rack-scale NVLink domains, where the library runs `nvlink_domain().across_domains`."""
    network = list(system.network)
    if len(network) > 1:
        network[-1] = fabric_dimension(name, gpu_bandwidth).sized(network[-1].size)
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


def _without_nvls(dim: NetworkDimension) -> NetworkDimension:
    """NVLS off (NCCL_NVLS_ENABLE=0, init.cc): the NVLink switch no longer reduces."""
    algorithms = tuple(a for a in dim.algorithms if a is not Algorithm.IN_NETWORK) or (Algorithm.RING,)
    return dim.model_copy(update={"in_network_reduction": False, "algorithms": algorithms})


def with_fabric_nvls_off(system: System) -> System:
    """`system` with NVLS off on every dimension but a scale-out tier (NCCL_NVLS_ENABLE=0)."""
    last = len(system.network) - 1
    return system.model_copy(update={"network": tuple(
        d if i == last and last > 0 else _without_nvls(d) for i, d in enumerate(system.network))})
