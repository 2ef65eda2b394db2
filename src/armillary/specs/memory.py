"""Memory outside a device's compute units: its memory tiers (HBM, and an optional slower, larger second
tier), a disaggregated memory pool the devices of a system share, and the path one device's offloaded states
take to either (`System.offload_path`; docs/memory-pool.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field, NonNegativeInt, model_validator

from armillary.specs.base import Spec
from armillary.specs.quantity import Bytes, BytesPerSecond, Fraction, Seconds


class MemoryTier(Spec):
    """One memory level of a device: HBM, or a slower, larger second tier (host DRAM, CXL, LPDDR)."""

    name: str
    capacity: Bytes
    bandwidth: BytesPerSecond = Field(description="bandwidth between this tier and the compute units")
    efficiency: Fraction = Field(0.85, description="achievable fraction of the bandwidth for streams")

    @property
    def rate(self) -> float:
        """Achievable bytes/s for streams: the bandwidth derated by the streaming efficiency."""
        return self.efficiency * self.bandwidth


class PoolKind(StrEnum):
    """Who shares a memory pool, after ASTRA-sim 2.0's remote-memory modes (astra-memory-analytical @641cce8,
    AnalyticalRemoteMemory.cc: `memory-type` MEMORY_POOL, PER_NODE_MEMORY_EXPANSION, PER_NPU_MEMORY_EXPANSION)."""

    POOLED = "pooled"  # one pool shared by every device of the system (MEMORY_POOL)
    PER_NODE = "per_node"  # one pool per scale-up node, shared by its devices (PER_NODE_MEMORY_EXPANSION)
    PER_DEVICE = "per_device"  # one expansion per device, no contention (PER_NPU_MEMORY_EXPANSION)


# ASTRA-sim's remote-memory config keys and `memory-type` values (inputs/remote_memory/analytical/*.json at tag
# 2.0.0): latency in ns, bandwidth in GB/s (1 GB/s = 1 byte/ns since astra-memory-analytical bb12dd56)
_ASTRA_KINDS = {"MEMORY_POOL": PoolKind.POOLED, "PER_NODE_MEMORY_EXPANSION": PoolKind.PER_NODE,
                "PER_NPU_MEMORY_EXPANSION": PoolKind.PER_DEVICE}


class MemoryPool(Spec):
    """A disaggregated memory outside the devices (a CXL memory pool, memory in a switch), where offloaded
    states live instead of the device's own second tier (`Strategy.offload`; docs/memory-pool.md). A transfer
    of B bytes takes latency + B / (the device's share of the bandwidth) (ASTRA-sim's analytical remote memory:
    remote-mem-latency + tensor_size / remote-mem-bw); the devices that share one pool (`kind`) stream at once
    and split its bandwidth and capacity evenly."""

    name: str = "memory pool"
    kind: PoolKind = Field(description="pooled (one for the system), per_node or per_device")
    capacity: Bytes = Field(description="of one pool: the whole system's (pooled), a node's or a device's")
    bandwidth: BytesPerSecond = Field(description="of one pool, per direction, shared by the devices it serves")
    latency: Seconds = Field(0.0, description="per access (one layer's tensor moved one way)")
    efficiency: Fraction = Field(1.0, description="achievable fraction of the bandwidth for streams")
    network: NonNegativeInt | None = Field(
        None, description="the network dimension (0 = innermost) the devices reach the pool over: a device's rate "
        "to it is then at most its injection bandwidth there (bandwidth x efficiency / shared_by), and that "
        "dimension's own traffic in the step holds the same links (docs/memory-pool.md); None: a path of its own "
        "(ASTRA-sim's model: the pool loads no network link)")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _astra(cls, data: object) -> object:
        """ASTRA-sim's remote-memory config (`--remote-memory-configuration`): memory-type, remote-mem-latency
        (ns), remote-mem-bw (GB/s); it models no capacity, so one must be given beside it."""
        if not isinstance(data, dict) or "memory-type" not in data:
            return data
        rest = {k: v for k, v in data.items() if k not in ("memory-type", "remote-mem-latency", "remote-mem-bw",
                                                           "num-nodes", "num-npus-per-node")}
        kind = _ASTRA_KINDS.get(str(data["memory-type"]))
        if kind is None:
            raise ValueError(f"memory-type {data['memory-type']!r}: allowed {sorted(_ASTRA_KINDS)} "
                             "(NO_MEMORY_EXPANSION: give no memory_pool)")
        return {**rest, "kind": kind, "latency": float(data.get("remote-mem-latency", 0)) * 1e-9,
                "bandwidth": float(data["remote-mem-bw"]) * 1e9}

    def sharers(self, devices: int, devices_per_node: int) -> int:
        """Devices that share one pool and stream at once: all of them, a node's, or one."""
        return {PoolKind.POOLED: devices, PoolKind.PER_NODE: min(devices_per_node, devices),
                PoolKind.PER_DEVICE: 1}[self.kind]


@dataclass(frozen=True)
class OffloadPath:
    """Where offloaded states go, as one device sees it: the device's second tier, or its share of the
    system's memory pool."""

    name: str
    rate: float  # achievable bytes/s of one device's transfers
    latency: float  # s per access
    capacity: float  # bytes one device may hold there
    network: int | None = None  # the network dimension the transfers cross (a pool reached over it)

