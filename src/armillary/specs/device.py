"""One accelerator as the estimates see it: the precisions its matrix units run (`Precision`), its software
platform, its peak rates, GEMM and attention efficiencies, memory tiers (`specs/memory.py`) and the HBM its
runtime keeps back. Hardware is data: presets live in `armillary/presets/devices`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, NonNegativeFloat, PositiveInt

from armillary.errors import SpecError
from armillary.specs.base import Spec
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.formats import FORMATS, element_bytes
from armillary.specs.memory import MemoryTier
from armillary.specs.quantity import BytesOrZero, FlopPerSecond, Fraction, Seconds


class Precision(StrEnum):
    """A GEMM precision of the matrix units. mxfp8, nvfp4, mxfp4: block-scaled (`specs.formats`), run only by
    matrix units that apply the block scales (Blackwell, CDNA 4), at the rate a device lists for them."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"
    INT8 = "int8"  # integer 8-bit MXU passes (TPU), per-channel scaled by the framework (AQT)

    @property
    def bytes(self) -> float:
        """Bytes per element, a block-scaled format's scales included (NVFP4: 4.5 bits)."""
        return element_bytes(self.value)

    @property
    def block_scaled(self) -> bool:
        return self.value in FORMATS


class Platform(StrEnum):
    """The device's software platform: which vendor kernels an engine can run on it."""

    CUDA = "cuda"
    ROCM = "rocm"
    XLA = "xla"  # TPU
    NEURON = "neuron"  # Trainium
    SYNAPSE = "synapse"  # Gaudi


class GemmLatency(Spec):
    """The latency of a small-M weight GEMM: a fixed part (launch, prologue, scale epilogue) and a serial walk
    over the reduction dimension K in 128-wide blocks (one output tile per thread block); a floor under its
    roofline time, or (`adds`) time added to it."""

    fixed_s: Seconds = Field(description="per kernel")
    per_k_block_s: Seconds = Field(description="per 128 elements of K")
    adds: bool = Field(False, description="the latency is work of its own that adds to the GEMM's roofline time "
                       "(an unfused fallback's serial GEMM and scale passes), not a floor under it")


# HBM a CUDA (or ROCm) training process holds outside its tensors [estimate from measurements]: the CUDA
# context, 287 MB with lazy module loading and 667 MB without (PyTorch PR #86509); cuBLAS workspaces, 32 MiB per
# stream on Hopper and later in Transformer Engine and PyTorch; NCCL's buffers, 4 MiB per channel, peer and
# protocol by default (NCCL_BUFFSIZE), about 0.5 GiB for a communicator of 32 channels, and a run has several
# (TP, DP, PP, EP). docs/formulas.md §4.5. A device whose runtime holds another amount says so
# (`Device.memory_reserve`: the TPU presets).
RUNTIME_RESERVE_BYTES = 2 * 2**30


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
    flash_attention_overhead_keys: NonNegativeFloat = Field(
        0.0, description="a fused attention kernel's fixed work per query block, in keys per query: over d keys "
        "per query it runs at d / (d + this) of its efficiency (0: the same at every length)")
    attention_nonmatmul_dims: NonNegativeFloat | None = Field(
        None, description="the FlashAttention-3 / cuDNN class fused attention kernel's work per score element "
        "besides its matrix products (softmax exponential, rescaling), in head-dimension units: a score element "
        "costs as long as (d + this) of MMA work, so a head dimension d below the 128 the efficiencies are "
        "calibrated at runs at [d / (d + this)] / [128 / (128 + this)] of flash3_attention_efficiency "
        "(`cost.compute.head_dim_factor`); none: no dependence on the head dimension")
    memory: tuple[MemoryTier, ...] = Field(min_length=1, max_length=2, description="[HBM, optional tier 2]")
    memory_reserve: BytesOrZero = Field(
        RUNTIME_RESERVE_BYTES, description="HBM the device's runtime holds outside the model's tensors, which a "
        "training run cannot use: CUDA / ROCm context, GEMM library workspaces and communicator buffers (2 GiB, "
        "docs/formulas.md §4.5); what the XLA runtime keeps back from a TPU's HBM (its presets); "
        "`Strategy.memory_reserve` overrides it")
    kernel_overhead: Seconds = Field(0.0, description="fixed launch/tail cost per kernel")
    multiprocessors: PositiveInt | None = Field(
        None, description="streaming multiprocessors (NVIDIA) or compute units (AMD): communication kernels that "
        "hold some of them slow the GEMMs beside them (TP overlap); none: not modeled")
    platform: Platform | None = Field(None, description="its software platform (cuda, rocm, ...); none: "
                                      "unknown, no engine kernels specific to a platform apply")
    fp8_gemm_latency: GemmLatency | None = Field(None, description="latency floor of fp8 weight GEMMs at small "
                                                  "M (set from an engine's block-fp8 kernels); none: roofline only")
    expert_gemm_ceiling: Fraction | None = Field(None, description="highest share of the matrix peak the routed "
                                                 "experts' GEMMs reach (set from an engine's fused-MoE kernels); "
                                                 "none: as the other GEMMs")
    expert_stream_efficiency: Fraction | None = Field(None, description="share of the HBM bandwidth at which the "
                                                      "routed experts' GEMMs stream their weights (set from an "
                                                      "engine's fused-MoE kernels); none: the memory's efficiency")
    power: float | None = Field(None, gt=0, description="board power in watts (TDP)")
    prior: str | None = Field(
        None, description="an uncalibrated device's prior: the calibrated or benchmarked device of the same vendor "
        "whose GEMM curves (read at equal kernel time: the FLOP axis scaled by the ratio of the peaks), "
        "attention efficiencies and kernel overhead it carries (written by tools/device_prior.py); none: its own")
    calibrated_on: tuple[str, ...] = Field(
        (), description="validation sources the efficiency curves were fitted on (a sibling chip's count: "
        "same silicon); empty = uncalibrated, and sources.matrix_efficiency says what it was copied from")
    sources: dict[str, str] = Field(default_factory=dict)

    def matrix_peak(self, precision: Precision) -> float:
        """Peak FLOP/s for GEMMs at `precision`; falls back to the nearest slower precision listed. A
        block-scaled precision has no fallback: its GEMMs need matrix units that apply the block scales."""
        for p in _FALLBACK[precision]:
            if p in self.matrix_flops:
                return self.matrix_flops[p]
        if precision.block_scaled:  # only strategy.block_format asks for one (cost.compute._BLOCK_FORMATS)
            listed = ', '.join(sorted(p.value for p in self.matrix_flops))
            devices = ', '.join(_devices_with(precision)) or 'no preset device'
            if precision is Precision.INT8:  # GPUs have int8 tensor cores, but no preset lists their rate: no
                # int8-GEMM training recipe (AQT) is sourced on them, so none is priced there
                raise SpecError(f"strategy.block_format 'int8' (AQT int8 x int8 GEMMs, MaxText quantization=int8): "
                                f"device {self.name!r} lists no int8 matrix rate (it lists {listed}); the preset "
                                f"devices that list one: {devices}")
            raise SpecError(f"strategy.block_format {precision.value!r}: device {self.name!r} has no "
                            f"{precision.value} matrix units (it lists {listed}); {precision.value} GEMMs run on: "
                            f"{devices}")
        raise ValueError(
            f"device {self.name!r} lists no matrix peak for {precision.value}; "
            f"listed: {sorted(p.value for p in self.matrix_flops)}"
        )

    def gemm_efficiency(self, precision: Precision) -> EfficiencyCurve:
        """The GEMM efficiency curve at `precision`. A precision without a curve of its own reads its base's at
        equal kernel time, as an uncalibrated device reads its prior's (tools/device_prior.py): a GEMM of F FLOPs
        at the faster peak P runs as long as one of F x P_base / P at P_base, so it reaches that GEMM's
        efficiency [derived; docs/fp4.md, docs/hardware.md "fp8 at equal kernel time"]. Bases: a block-scaled
        precision (mxfp8, nvfp4, mxfp4) reads fp8's; fp8 reads the 16-bit curve (`matrix_efficiency`), so a
        faster MMA shortens the large GEMMs and not the fixed costs of the small ones (B200 cuBLAS bf16 against
        CUTLASS fp8 at M 64-1024: 1.1-1.7x, not 2x; vllm-project/vllm PR #19566). Every other precision takes
        `matrix_efficiency` as it is."""
        own = self.matrix_efficiency_by_precision.get(precision)
        if own is not None:
            return own
        if precision.block_scaled:
            base_precision = Precision.FP8
        elif precision is Precision.FP8 and Precision.FP8 in self.matrix_flops:
            base_precision = Precision.BF16
        else:
            return self.matrix_efficiency
        base = self.gemm_efficiency(base_precision)
        ratio = self.matrix_peak(precision) / self.matrix_peak(base_precision)
        if ratio == 1.0:
            return base
        return EfficiencyCurve(points=tuple((size * ratio, e) for size, e in base.points))

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
    Precision.MXFP8: (Precision.MXFP8,),
    Precision.NVFP4: (Precision.NVFP4,),
    Precision.MXFP4: (Precision.MXFP4,),
    Precision.INT8: (Precision.INT8,),
}


def _devices_with(precision: Precision) -> list[str]:
    """The preset devices that list a matrix peak for `precision` (for an error message)."""
    from armillary.presets.registry import find_preset, preset_names, read_data_file  # only on this error path

    paths = [(name, find_preset("devices", name)) for name in preset_names("devices")]
    return [name for name, path in paths
            if path is not None and precision.value in (read_data_file(path).get("matrix_flops") or {})]

