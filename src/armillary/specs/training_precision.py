"""The numeric recipe of a training step: its precision, the block-scaled GEMM format, the storage precision
of the optimizer's states and main parameters, and which GEMMs a quantized recipe keeps in higher precision."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, NonNegativeInt

from armillary.specs.base import Spec


class TrainingPrecision(StrEnum):
    """Numeric recipe. fp8: fp8 GEMMs with bf16 activations and weights elsewhere (Transformer Engine).
    A block-scaled format for the linear layers' GEMMs is `Strategy.block_format`."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class BlockFormat(StrEnum):
    """The block-scaled format of the linear layers' GEMMs (`specs.formats`; docs/fp4.md): Transformer
    Engine's MXFP8BlockScaling (Megatron --fp8-recipe mxfp8) and NVFP4BlockScaling (--fp4-format e2m1
    --fp4-recipe nvfp4) recipes, MXFP4 as CDNA 4 runs it. Weights, activations and gradients stay bf16; each
    GEMM input is quantized by a kernel of its own. none: the precision's own GEMMs (per-tensor fp8 under fp8)."""

    NONE = "none"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"
    INT8 = "int8"  # AQT dynamic int8 (MaxText quantization=int8): each GEMM input scaled per channel on the fly


class OptimizerStatePrecision(StrEnum):
    """Storage precision of Adam's first and second moments (Megatron-Core --exp-avg-dtype /
    --exp-avg-sq-dtype with --use-precision-aware-optimizer: Transformer Engine's FusedAdam keeps them in it
    and computes in fp32)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class MainParamPrecision(StrEnum):
    """Storage precision of the optimizer's main parameters (Megatron-Core --main-params-dtype)."""

    FP32 = "fp32"
    FP16 = "fp16"


class ProjectionPrecision(StrEnum):
    """The precision of the attention projections (QKV, output) under a quantized recipe."""  # QuantizedGemms

    RECIPE = "recipe"  # the recipe's format, as the MLP (Transformer Engine recipes on every linear layer)
    FP8 = "fp8"  # per-tensor fp8 (NVIDIA's MaxText NVFP4 recipe quantizes only the MLP; attention stays fp8)
    BF16 = "bf16"


class QuantizedGemms(Spec):
    """Which weight GEMMs a quantized recipe (precision fp8, or a block format) keeps in higher precision.
    The attention core, the LM head and the MoE router always stay in bf16."""

    first_layers_bf16: NonNegativeInt = Field(
        0, description="the first this many layers run every GEMM in bf16 (Megatron --first-last-layers-bf16 "
        "--num-layers-at-start-in-bf16; the NVFP4 pretraining recipe keeps the first 2 of 62 blocks, "
        "arXiv:2509.25149 §4.1); priced as the average over the layers")
    last_layers_bf16: NonNegativeInt = Field(
        0, description="the same for the last layers (--num-layers-at-end-in-bf16; the NVFP4 recipe: the last 8)")
    attention_projections: ProjectionPrecision = Field(
        ProjectionPrecision.RECIPE, description="QKV and output projections in the recipe's format, in fp8 "
        "(MaxText's NVFP4 recipe: only the MLP in FP4) or in bf16")
