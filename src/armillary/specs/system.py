"""System specification: a cluster of one device type (`specs/device.py`, its memory tiers and an optional
memory pool: `specs/memory.py`) joined by a network (`specs/network.py`).
Hardware is data: presets live in `armillary/presets/{devices,systems}`.
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from armillary.specs.base import Spec
from armillary.specs.device import Device
from armillary.specs.memory import MemoryPool, OffloadPath
from armillary.specs.network import CollectiveLibrary, NetworkDimension


class System(Spec):
    """A cluster: devices joined by a network of one or more dimensions, innermost first.

    The innermost dimension is the scale-up domain ("node": NVLink, a TPU tray, an NVL72 rack); devices
    number mixed-radix over the dimensions' sizes. The two-tier form (`devices_per_node`, `scale_up`,
    `nodes`, `scale_out`) still loads: it is a two-dimension network.
    """

    name: str
    device: Device
    network: tuple[NetworkDimension, ...] = Field(min_length=1, description="dimensions, innermost first")
    collectives: CollectiveLibrary = Field(
        CollectiveLibrary.NCCL, description="how collectives spanning several dimensions run (docs/formulas.md §1.5)")
    memory_pool: MemoryPool | None = Field(
        None, description="a disaggregated memory (CXL pool, in-switch memory) that offloaded states go to instead "
        "of the device's second tier (docs/memory-pool.md); None: offload goes to the device's second tier")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _two_tier(cls, data: object) -> object:
        """The two-tier form: scale_up (devices_per_node positions) under scale_out (nodes positions)."""
        if not isinstance(data, dict) or "network" in data or "scale_up" not in data:
            return data
        legacy = {"devices_per_node", "nodes", "scale_up", "scale_out"}
        missing = sorted({"devices_per_node", "scale_up", "scale_out"} - data.keys())
        if missing:
            raise ValueError(f"the two-tier form needs {missing} too (or give `network`: a list of dimensions)")
        up, out = (_as_dict(data[k]) for k in ("scale_up", "scale_out"))
        network = [{**up, "size": data["devices_per_node"]}, {**out, "size": data.get("nodes", 1)}]
        return {**{k: v for k, v in data.items() if k not in legacy}, "network": network}

    @model_validator(mode="after")
    def _pool_network(self) -> System:
        pool = self.memory_pool
        if pool is not None and pool.network is not None and pool.network >= len(self.network):
            raise ValueError(f"memory_pool.network {pool.network}: the system has network dimensions 0.."
                             f"{len(self.network) - 1} (0 = innermost)")
        return self

    @property
    def offload_path(self) -> OffloadPath | None:
        """Where `Strategy.offload` puts states, per device: the memory pool when the system has one (the
        device's share of its bandwidth and capacity, capped by the network dimension it is reached over),
        else the device's second tier; None: neither."""
        pool = self.memory_pool
        if pool is None:
            tier = self.device.second_tier
            return None if tier is None else OffloadPath(tier.name, tier.rate, 0.0, tier.capacity)
        n = pool.sharers(self.devices, self.devices_per_node)
        rate = pool.efficiency * pool.bandwidth / n  # an even split among the devices streaming at once
        if pool.network is not None:
            dim = self.network[pool.network]
            rate = min(rate, dim.efficiency * dim.bandwidth / dim.shared_by)
        return OffloadPath(pool.name, rate, pool.latency, pool.capacity / n, pool.network)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Positions along each dimension, innermost first."""
        return tuple(d.size for d in self.network)

    @property
    def devices(self) -> int:
        return math.prod(self.sizes)

    @property
    def devices_per_node(self) -> int:
        """Devices of one scale-up domain: the innermost dimension."""
        return self.network[0].size

    @property
    def nodes(self) -> int:
        return self.devices // self.devices_per_node

    def with_devices(self, n: int) -> System:
        """The same system sized to `n` devices: the inner dimensions fill first, the outermost takes the
        rest (part of one node when `n` is smaller than a node). Where `n` does not fill whole inner
        dimensions, each takes the largest share that divides the rest evenly: a 256-GPU job on 72-GPU NVLink
        racks runs on 64 GPUs of each of 4 racks, as schedulers place such jobs."""
        if n < 1:
            raise ValueError(f"gpus={n}: need at least one device")
        sizes: list[int] = []
        rest = n
        for dim in self.network[:-1]:
            take = max(k for k in range(1, min(dim.size, rest) + 1) if rest % k == 0)
            sizes.append(take)
            rest //= take
        sizes.append(rest)
        return self.resized(tuple(sizes))

    def resized(self, sizes: tuple[int, ...]) -> System:
        """The same system with `sizes` positions along its dimensions."""
        return self.model_copy(update={"network": tuple(d.sized(k) for d, k in zip(self.network, sizes, strict=True))})

    def scaled(self, flops: float = 1.0, hbm_bandwidth: float = 1.0, network_bandwidth: float = 1.0,
               latency: float = 1.0) -> System:
        """What if: the same system with its device's peak FLOP/s (matrix and vector), its HBM bandwidth,
        every network dimension's bandwidth or latency multiplied by these factors."""
        d = self.device
        device = d.model_copy(update={
            "matrix_flops": {p: flops * v for p, v in d.matrix_flops.items()},
            "vector_flops": {p: flops * v for p, v in d.vector_flops.items()},
            # `hbm` is the first memory tier (a property): the tier itself is replaced
            "memory": (d.hbm.model_copy(update={"bandwidth": hbm_bandwidth * d.hbm.bandwidth}), *d.memory[1:])})
        network = tuple(n.model_copy(update={"bandwidth": network_bandwidth * n.bandwidth,
                                             "latency": latency * n.latency}) for n in self.network)
        return self.model_copy(update={"device": device, "network": network})

    def with_dimension(self, index: int, **changes: object) -> System:
        """The same system with fields of one dimension replaced (e.g. its bandwidth, for a sweep)."""
        dims = list(self.network)
        dims[index] = dims[index].model_copy(update=changes)
        return self.model_copy(update={"network": tuple(dims)})


def _as_dict(value: object) -> dict[str, object]:
    if isinstance(value, Spec):
        return value.model_dump(exclude_unset=True)
    if not isinstance(value, dict):
        raise ValueError(f"scale_up / scale_out must be a network dimension (a mapping), got {value!r}")
    return value
