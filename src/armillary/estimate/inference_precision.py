"""The precisions a served model runs at: the weights' precision a serving recipe stores when the workload
names none (`recipe_weights`; the int8-GEMM training recipe refused: `serving_block_format`), and the engine's
fp8 GEMM kernels for the checkpoint's weight scales, as the device then sees them (`fp8_kernels`)."""

from __future__ import annotations

from armillary.errors import SpecError
from armillary.specs.device import Precision
from armillary.specs.strategy import BlockFormat, Strategy, TrainingPrecision
from armillary.specs.system import System
from armillary.specs.workload import Fp8Kernels, Inference, StoredPrecision, WeightScales


def serving_block_format(strategy: Strategy) -> None:
    """Refuse a block format serving does not model: int8 (`BlockFormat.INT8`) is AQT's training recipe
    (MaxText quantization=int8: int8 x int8 GEMMs forward and backward, read from its training config only).
    Served, it would store int8 weights (`StoredPrecision.INT8`), which everywhere else in serving means
    weight-only int8 (AWQ / GPTQ: GEMMs at the activation precision), while the block format prices int8 GEMMs
    with training's quantize kernels; no engine profile or measurement reads int8-GEMM serving on the devices
    that list an int8 rate (TPUs)."""
    if strategy.block_format is BlockFormat.INT8:
        raise SpecError("strategy.block_format 'int8' (AQT int8 GEMMs, MaxText quantization=int8) is a training "
                        "recipe: int8-GEMM (W8A8) serving is not modelled. For int8 weights with GEMMs at the "
                        "activation precision (AWQ / GPTQ style) give workload.weights: int8 and block_format none")


def recipe_weights(strategy: Strategy) -> StoredPrecision | None:
    """The weights' precision a serving recipe stores when the workload names none: its block format's (W4A4
    checkpoints such as NVIDIA's ModelOpt NVFP4 ones), fp8 under the fp8 recipe, else None (the activation
    precision). A block format serving refuses (`serving_block_format`) raises."""
    serving_block_format(strategy)
    if strategy.block_format is not BlockFormat.NONE:
        return StoredPrecision(strategy.block_format.value)
    return StoredPrecision.FP8 if strategy.precision is TrainingPrecision.FP8 else None


def recipe_weight_bytes(strategy: Strategy, activation_bytes: float) -> float:
    """Bytes per weight a serving recipe stores when the workload names none (`recipe_weights`), scales
    included (NVFP4 0.5625, fp8 1), else the activation precision's."""
    weights = recipe_weights(strategy)
    return weights.bytes if weights is not None else activation_bytes


def engine_fp8_kernels(system: System, w: Inference) -> Fp8Kernels | None:
    """The engine's GEMM kernels for the workload's fp8 weight scales on the system's device (filled into
    the workload from its profile): block-scaled on every platform, channel-scaled on the platforms the
    profile lists; none where the device's own fp8 GEMMs run them (per-tensor scales, fused scaled GEMMs)."""
    if w.weight_scales is WeightScales.BLOCK:
        return w.block_fp8_kernels
    platform = system.device.platform
    if w.weight_scales is WeightScales.CHANNEL and platform is not None:
        return w.channel_fp8_kernels.get(platform)
    return None


def fp8_kernels(system: System, w: Inference) -> System:
    """The system as the engine's fp8 GEMMs for the workload's weight scales see it (`engine_fp8_kernels`):
    the device's fp8 curve capped at the kernels' ceiling, their small-M latency floor, and the fused-MoE
    kernel's own ceiling and weight-streaming rate for the routed experts. Without such kernels, the system
    as it is."""
    kernels = engine_fp8_kernels(system, w)
    if kernels is None:
        return system
    device = system.device
    curves = {**device.matrix_efficiency_by_precision,
              Precision.FP8: device.gemm_efficiency(Precision.FP8).capped(kernels.ceiling)}
    update = {"matrix_efficiency_by_precision": curves, "fp8_gemm_latency": kernels.latency,
              "expert_gemm_ceiling": kernels.moe_ceiling, "expert_stream_efficiency": kernels.moe_memory_efficiency}
    return system.model_copy(update={"device": device.model_copy(update=update)})
