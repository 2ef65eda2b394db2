"""System specification: device (compute units, memory tiers), node (scale-up network) and cluster
(scale-out network). Hardware is data: presets live in `armillary/presets/{devices,systems}`.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
from pydantic import Field, PositiveInt, PrivateAttr, field_validator

from armillary.specs.base import Spec
from armillary.specs.communication import NCCL_ALGORITHMS, Algorithm
from armillary.specs.quantity import Bytes, BytesPerSecond, FlopPerSecond, Fraction, Seconds


class Precision(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def bytes(self) -> int:
        return {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[self.value]


class EfficiencyCurve(Spec):
    """Achieved fraction of peak as a function of operation size (FLOP or bytes).

    Piecewise linear in log(size) between the points, constant beyond the ends. The same curve
    serves one estimate (a float) and a sweep (an array of sizes).
    """

    points: tuple[tuple[float, Fraction], ...] = Field(min_length=1)
    _log_sizes: np.ndarray = PrivateAttr()
    _efficiencies: np.ndarray = PrivateAttr()

    @field_validator("points")
    @classmethod
    def _ascending(cls, points: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        sizes = [p[0] for p in points]
        if any(s <= 0 for s in sizes) or sizes != sorted(sizes):
            raise ValueError("points must have positive sizes in ascending order: [[size, efficiency], ...]")
        return points

    def model_post_init(self, context: object, /) -> None:
        self._log_sizes = np.log([p[0] for p in self.points])
        self._efficiencies = np.array([p[1] for p in self.points])

    def __call__(self, size: np.ndarray | float) -> np.ndarray:
        return np.interp(np.log(np.maximum(size, 1.0)), self._log_sizes, self._efficiencies)


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


class Device(Spec):
    """One accelerator: per-precision peak rates, efficiency curves and memory tiers."""

    name: str
    matrix_flops: dict[Precision, FlopPerSecond] = Field(description="dense peak of the matrix units")
    vector_flops: dict[Precision, FlopPerSecond] = Field(description="peak of the vector units")
    matrix_efficiency: EfficiencyCurve = Field(description="GEMM efficiency vs FLOP per GEMM")
    matrix_efficiency_by_precision: dict[Precision, EfficiencyCurve] = Field(
        default_factory=dict, description="precisions whose GEMMs follow another curve (e.g. fp8)")
    flash1_attention_efficiency: Fraction | None = Field(
        None, description="the same for FlashAttention-1; defaults to half the FlashAttention-2 figure "
        "(Dao 2023, abstract and §4.1: FlashAttention-2 is about 2x faster)")
    flash_attention_efficiency: Fraction = Field(
        0.5, description="fraction of the 16-bit matrix peak that FlashAttention-2 kernels achieve")
    flash3_attention_efficiency: Fraction | None = Field(
        None, description="the same for FlashAttention-3 / cuDNN fused attention (Hopper and later); "
        "defaults to the FlashAttention-2 figure")
    memory: tuple[MemoryTier, ...] = Field(min_length=1, max_length=2, description="[HBM, optional tier 2]")
    kernel_overhead: Seconds = Field(0.0, description="fixed launch/tail cost per kernel")
    power: float | None = Field(None, gt=0, description="board power in watts (TDP)")
    sources: dict[str, str] = Field(default_factory=dict)

    def matrix_peak(self, precision: Precision) -> float:
        """Peak FLOP/s for GEMMs at `precision`; falls back to the nearest slower precision listed."""
        for p in _FALLBACK[precision]:
            if p in self.matrix_flops:
                return self.matrix_flops[p]
        raise ValueError(
            f"device {self.name!r} lists no matrix peak for {precision.value}; "
            f"listed: {sorted(p.value for p in self.matrix_flops)}"
        )

    def gemm_efficiency(self, precision: Precision) -> EfficiencyCurve:
        return self.matrix_efficiency_by_precision.get(precision, self.matrix_efficiency)

    @property
    def hbm(self) -> MemoryTier:
        return self.memory[0]

    @property
    def second_tier(self) -> MemoryTier | None:
        return self.memory[1] if len(self.memory) > 1 else None


_FALLBACK = {
    Precision.FP8: (Precision.FP8, Precision.BF16, Precision.FP16),
    Precision.BF16: (Precision.BF16, Precision.FP16),
    Precision.FP16: (Precision.FP16, Precision.BF16),
    Precision.TF32: (Precision.TF32, Precision.FP32),
    Precision.FP32: (Precision.FP32,),
}


class NetworkKind(StrEnum):
    """How the devices of one network tier are connected."""

    SWITCH = "switch"  # non-blocking switch (NVSwitch, one InfiniBand switch): any pair at full rate
    FULLY_CONNECTED = "fully_connected"  # a direct link between every pair (AMD Infinity Fabric)
    FAT_TREE = "fat_tree"  # switched, possibly oversubscribed above the leaves
    RING = "ring"  # each device links to two neighbours
    TORUS = "torus"  # `shape` gives the dimensions (2D/3D, wrap-around links)
    MESH = "mesh"  # like a torus without wrap-around links


class Network(Spec):
    """One network tier as seen by one device: injection bandwidth, latency and efficiency.

    `bandwidth` is per device and per direction (e.g. NVLink3: 300 GB/s; 8 HDR NICs for 8 GPUs:
    25 GB/s; where NICs are shared, the NIC bandwidth times NICs per node over devices per node).
    """

    name: str
    kind: NetworkKind = NetworkKind.SWITCH
    bandwidth: BytesPerSecond
    latency: Seconds = Field(description="per-step (per hop) latency, alpha, of the Simple protocol")
    efficiency: Fraction = Field(description="achievable fraction of `bandwidth` for large messages")
    in_network_reduction: bool = Field(False, description="the switch reduces (NVLink SHARP, IB SHARP)")
    in_network_efficiency: Fraction = Field(
        0.6, description="achievable fraction of `bandwidth` for in-network-reduction collectives")
    size_efficiency: EfficiencyCurve | None = Field(
        None, description="bandwidth multiplier vs message bytes (ramp-up of mid-size messages), fitted from "
        "nccl-tests sweeps by `armillary calibrate-network`")
    oversubscription: float = Field(1.0, ge=1.0, description="fat-tree: bandwidth above the leaves is divided")
    links: PositiveInt | None = Field(
        None, description="fully connected: direct links per device (devices - 1), sharing `bandwidth` evenly; "
        "a group of p ranks uses p - 1 of them")
    shared_by: PositiveInt = Field(
        1, description="devices sharing each link of `bandwidth` (e.g. 2 when 4 NICs serve 8 GPUs)")
    shape: tuple[PositiveInt, ...] | None = Field(None, description="torus / mesh dimensions, e.g. [4, 4, 4]")
    algorithms: tuple[Algorithm, ...] = Field(
        NCCL_ALGORITHMS, description="algorithms the communication library offers on this tier (auto picks)")
    sources: dict[str, str] = Field(default_factory=dict)


class System(Spec):
    """A cluster: nodes of `devices_per_node` devices joined by `scale_up`, nodes joined by `scale_out`."""

    name: str
    device: Device
    devices_per_node: PositiveInt
    scale_up: Network
    scale_out: Network
    nodes: PositiveInt = 1
    sources: dict[str, str] = Field(default_factory=dict)

    @property
    def devices(self) -> int:
        return self.devices_per_node * self.nodes

    def with_devices(self, n: int) -> System:
        """The same system sized to `n` devices (whole nodes, or part of one node)."""
        if n < 1:
            raise ValueError(f"gpus={n}: need at least one device")
        if n <= self.devices_per_node:
            return self.model_copy(update={"devices_per_node": n, "nodes": 1})
        if n % self.devices_per_node:
            raise ValueError(
                f"gpus={n} is not a multiple of devices_per_node={self.devices_per_node} of {self.name!r}"
            )
        return self.model_copy(update={"nodes": n // self.devices_per_node})
