"""Memory per device: the bytes per parameter and per element of each precision recipe, and the runtime's
reserve; the model states they make under ZeRO are `model_states`, the activations `activations`.

Bytes per parameter: the Megatron-LM distributed-optimizer table (docs/formulas.md §4.1-4.2).
"""

from __future__ import annotations

import numpy as np

from armillary.memo import derived
from armillary.numerics import Array, minimum, where
from armillary.plan.arrays import StrategyArrays
from armillary.plan.codes import PRECISION
from armillary.specs.formats import MXFP4, MXFP8, NVFP4
from armillary.specs.strategy import TrainingPrecision

# Bytes per parameter of each precision recipe, indexed like plan.codes.PRECISION (fp32, bf16, fp16, fp8).
# Megatron-LM README, distributed optimizer table: fp32 16 = 4 + 4 + 8 (m, v); bf16 18 = 2 + 4 (fp32
# main grad) + 12 (master, m, v); fp16 20 = 2 + 2 + 16 (fp32 main grad, master, m, v). fp8 keeps bf16
# weights plus an fp8 copy (Transformer Engine) [derived]: 3 + 4 + 12.
WEIGHT_BYTES = (4.0, 2.0, 2.0, 3.0)
GRAD_BYTES = (4.0, 4.0, 2.0, 4.0)
OPTIMIZER_BYTES = (8.0, 12.0, 16.0, 12.0)
ACTIVATION_BYTES = (4.0, 2.0, 2.0, 2.0)
# Bytes of each GEMM input kept for the weight gradient: fp8 recipes keep the fp8 copy the forward GEMM
# read (Transformer Engine Linear/LayerNormLinear/GroupedLinear save the quantized input; DeepSeek-V3 report
# §3.3.2 caches Linear inputs in FP8 the same way); tensors kept for other kernels (norm inputs, Q/K/V and the
# attention output for FlashAttention, the gate/up output for the activation) stay at the activation precision.
SAVED_GEMM_INPUT_BYTES = (4.0, 2.0, 2.0, 1.0)
GRAD_REDUCE_BYTES = (4.0, 4.0, 2.0, 4.0)  # dtype of the data-parallel gradient reduction
# The quantized copies of a weight and the saved GEMM inputs of the fp8 family, indexed like
# plan.codes.BLOCK_FORMAT (none, mxfp8, nvfp4, mxfp4, int8), scales included (specs.formats). Per-tensor fp8: one fp8
# copy (WEIGHT_BYTES' 3 = 2 + 1). A block-scaled format scales along the GEMM's reduction dimension, which differs
# between the forward GEMM and the input-gradient GEMM, so a weight keeps a rowwise and a columnwise copy
# (Transformer Engine MXFP8Tensor / NVFP4Tensor rowwise_data and columnwise_data, both cached across the
# micro-batches), and the input kept for the weight gradient its columnwise copy (TE Linear saves the input
# quantized for wgrad only) [derived; docs/fp4.md]: MXFP8 2 x 1.03, NVFP4 2 x 0.5625, MXFP4 2 x 0.53 bytes.
# int8 (AQT): no cached weight copy, each weight is quantized inside the GEMM call that reads it (aqt_flax
# AqtDotGeneral in QuantMode.TRAIN quantizes both operands per call; MaxText keeps only its parameters); the saved
# inputs are counted at bf16 (not checked that AQT's backward keeps its int8 operands instead: an assumption)
QUANTIZED_WEIGHT_BYTES = (1.0, 2 * MXFP8.bytes, 2 * NVFP4.bytes, 2 * MXFP4.bytes, 0.0)
QUANTIZED_INPUT_BYTES = (1.0, MXFP8.bytes, NVFP4.bytes, MXFP4.bytes, 2.0)
# HBM traffic of one optimizer step per updated parameter [derived from Megatron-LM's mixed-precision
# optimizer passes]: fp16 grads to fp32 main grads (2 + 4, fp16 only), unscale / inf check (4 + 4, fp16
# only), grad-norm for clipping (4), Adam (read grad 4, read+write master 8, m 8, v 8 = 28), master to
# model copy (4 + 2, not fp32; + 1 fp8 copy), zeroing the grad buffer (grad bytes).
OPTIMIZER_STEP_BYTES = (4 + 28 + 4.0, 4 + 28 + 6 + 4.0, 6 + 8 + 4 + 28 + 6 + 2.0, 4 + 28 + 7 + 4.0)


def runtime_reserve(st: StrategyArrays, device_reserve: float) -> Array:
    """HBM the runtime holds outside the tensors: the strategy's `memory_reserve`, else (coded -1) the device's
    (`Device.memory_reserve`)."""
    return where(st.memory_reserve >= 0, st.memory_reserve, device_reserve)


def per_precision(table: tuple[float, ...], code: Array) -> Array:
    """The table entry of each precision code (`plan.codes.PRECISION`)."""
    if not isinstance(code, np.ndarray):
        return table[int(code)]
    return np.asarray(table)[code.astype(int)]


def fp8_family(st: StrategyArrays) -> Array:
    """1 where the recipe is priced in fp8's family (precision fp8, or a block format: plan.arrays.recipe_family)."""
    return where(st.precision == _FP8, 1.0, 0.0)


def weight_bytes(params: Array, st: StrategyArrays) -> Array:
    """Bytes of the working weights of `params` parameters, unsharded, in the precision recipe: the fp8 family
    keeps 16-bit weights and their quantized copies (`QUANTIZED_WEIGHT_BYTES`), with `fp8_params` the
    quantized copies alone (Transformer Engine fp8_model_init: the parameters are fp8 tensors)."""
    return params * weight_bytes_each(st)


def weight_bytes_each(st: StrategyArrays) -> Array:
    """`weight_bytes` of one parameter, once per strategy point (`memo.derived`)."""
    return derived(st, "weight bytes", lambda: _weight_bytes_each(st))


def _weight_bytes_each(st: StrategyArrays) -> Array:
    """`weight_bytes` of one parameter."""
    quantized = 2.0 * (1 - st.fp8_params) + per_precision(QUANTIZED_WEIGHT_BYTES, st.block_format)
    return where(fp8_family(st) > 0, quantized, per_precision(WEIGHT_BYTES, st.precision))


def gathered_weight_bytes(params: Array, st: StrategyArrays) -> Array:
    """Bytes of `params` parameters that a ZeRO / distributed-optimizer parameter all-gather moves: the 16-bit
    weights (Megatron-Core's param buffer holds the model's bf16 parameters, the fp8 copies are made after
    the gather), fp32 in fp32 training; with `fp8_params` the quantized weights, one (rowwise) copy
    (Megatron-LM --fp8-param-gather: 'perform the param all-gather in fp8')."""
    recipe = where(fp8_family(st) > 0, 2.0, per_precision(WEIGHT_BYTES, st.precision))
    return params * where(st.fp8_params > 0, per_precision(QUANTIZED_INPUT_BYTES, st.block_format), recipe)


def saved_input_bytes(st: StrategyArrays) -> Array:
    """Bytes per element of a GEMM input kept for the weight gradient (`SAVED_GEMM_INPUT_BYTES`; the fp8
    family's quantized copy at its block format's bytes: `QUANTIZED_INPUT_BYTES`)."""
    return where(fp8_family(st) > 0, per_precision(QUANTIZED_INPUT_BYTES, st.block_format),
                 per_precision(SAVED_GEMM_INPUT_BYTES, st.precision))


def grad_bytes(st: StrategyArrays, code: Array | None = None) -> Array:
    """Bytes per parameter of the gradient buffer of precision `code` (default the recipe's): 2 when the
    gradients are reduced in bf16, whose buffer then holds bf16 (Megatron-Core param_and_grad_buffer: the grad
    dtype is fp32 only with grad_reduce_in_fp32; --grad-reduce-in-bf16 clears it)."""
    recipe = per_precision(GRAD_BYTES, st.precision if code is None else code)
    return where(st.grad_reduce_bf16 > 0, minimum(recipe, 2.0), recipe)


_FP32 = PRECISION.code(TrainingPrecision.FP32)
_FP8, _BF16 = PRECISION.code(TrainingPrecision.FP8), PRECISION.code(TrainingPrecision.BF16)


def optimizer_bytes(st: StrategyArrays, code: Array | None = None) -> Array:
    """Bytes per parameter of the optimizer's states for precision `code` (default the recipe's):
    `OPTIMIZER_BYTES`, with Adam's two moments at `Strategy.optimizer_states` (Megatron-Core
    --exp-avg-dtype / --exp-avg-sq-dtype) and the main parameters of a 16-bit or fp8 recipe at
    `Strategy.main_params` (--main-params-dtype) instead of 4 bytes each."""
    code = st.precision if code is None else code
    moments = 2 * (4.0 - st.moment_bytes)
    main = where(code == _FP32, 0.0, 4.0 - st.main_param_bytes)  # fp32 training's weights are its main params
    return per_precision(OPTIMIZER_BYTES, code) - moments - main


def optimizer_step_bytes(st: StrategyArrays, code: Array | None = None) -> Array:
    """HBM bytes one optimizer step moves per updated parameter (`OPTIMIZER_STEP_BYTES`) at the stored
    precisions: each moment read and written at its bytes, the main parameters read and written and read
    again for the copy to the model weights at theirs, and with `fp8_params` no 16-bit weight written."""
    code = st.precision if code is None else code
    moments = 2 * 2 * (4.0 - st.moment_bytes)
    main = where(code == _FP32, 0.0, 3 * (4.0 - st.main_param_bytes))
    return per_precision(OPTIMIZER_STEP_BYTES, code) - moments - main - 2.0 * st.fp8_params


def adapter_precision(st: StrategyArrays) -> Array:
    """The precision code of LoRA adapters' states: bf16 under an fp8 recipe (the adapters are not fp8
    GEMMs: NeMo's ParallelLinearAdapter is a plain bf16 linear), else the recipe's."""
    return where(st.precision == _FP8, _BF16, st.precision)
