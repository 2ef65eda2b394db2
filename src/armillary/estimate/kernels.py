"""Kernel times of one layer's forward (and of the model's ends) on a device, by name.

One vectorized roofline evaluation per precision class (`cost.compute.kernel_times`): the weight GEMMs
and element-wise kernels at the recipe's GEMM precision (a block-scaled format where the recipe has one),
the attention core, the LM head and the router at 16 bits (fp8 recipes keep them in bf16), the fused
attention kernel at its own efficiency; a block-scaled recipe's quantize kernels as streams, and the weight
GEMMs of the layers it keeps in bf16 at 16 bits (docs/fp4.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.cost.compute import fused_attention_time, kernel_seconds, kernel_times
from armillary.memo import quick_init
from armillary.numerics import Array, any_true, maximum, where
from armillary.plan.codes import PRECISION
from armillary.specs.device import Device
from armillary.specs.strategy import TrainingPrecision
from armillary.workload.experts import ExpertsForward
from armillary.workload.quantize import bf16_share, quantize_ops
from armillary.workload.transformer import Ends, LayerForward

_FP8 = PRECISION.code(TrainingPrecision.FP8)  # read once (as estimate/memory.py)


@quick_init
@dataclass(frozen=True)
class LayerKernels:
    """Seconds of each forward kernel of one layer on one device (0 where the layer has no such kernel)."""

    qkv: Array
    out_proj: Array
    mlp_in: Array
    mlp_out: Array
    norms: Array
    residuals: Array
    activation: Array
    rotary: Array
    recurrence: Array
    quantize: Array
    embedding: Array  # the model's ends, priced with the layer
    loss: Array
    scores: Array  # attention core, separate kernels (16-bit)
    over_v: Array
    softmax: Array
    head_gemm: Array  # LM head (16-bit)
    flash: Array  # the fused attention kernel
    experts_in: Array = 0.0  # routed experts (MoE layers)
    experts_out: Array = 0.0
    routing: Array = 0.0
    permute: Array = 0.0
    expert_activation: Array = 0.0
    router: Array = 0.0  # the gate GEMM (16-bit)
    expert_calls: Array = 0.0  # of experts_in + experts_out: the wait on per-expert GEMM calls past the roofline
    quantize_forward: Array = 0.0  # a block-scaled recipe's quantize kernels: GEMM inputs (forward)
    quantize_backward: Array = 0.0  # and output gradients (backward)

    @property
    def dense_gemms(self) -> Array:
        """The weight GEMMs of attention and the dense MLP (or shared experts)."""
        return self.qkv + self.out_proj + self.mlp_in + self.mlp_out

    @property
    def dense_streams(self) -> Array:
        return self.norms + self.residuals + self.activation + self.rotary + self.recurrence + self.quantize

    @property
    def expert_gemms(self) -> Array:
        return self.experts_in + self.experts_out

    @property
    def expert_streams(self) -> Array:
        return self.routing + self.permute + self.expert_activation

    @property
    def core_gemms(self) -> Array:
        return self.scores + self.over_v


def layer_kernels(fw: LayerForward, ends: Ends, experts: ExpertsForward | None, device: Device,
                  precision: Array, flash_version: Array, expert_call: Array = 0.0, block_format: Array = 0.0,
                  projections: Array = 0.0, bf16_layers: Array = 0.0, moe_act_recompute: Array = 0.0,
                  mla_up_recompute: Array = 0.0) -> LayerKernels:
    """Roofline time of every kernel of the layer `fw` (with the routed `experts` of an MoE layer) and of
    the ends, at the recipe's `precision` code and `block_format` (`plan.codes.BLOCK_FORMAT`). `expert_call`:
    the least time each local expert adds to a grouped expert GEMM run as one library call per expert
    (`Strategy.expert_gemm_call`). `projections` (`plan.codes.PROJECTIONS`): the attention projections in the
    recipe's format, in fp8 or in bf16; `bf16_layers`: layers whose weight GEMMs all run in bf16, priced as
    their share of every layer (`Strategy.quantized_gemms`); `moe_act_recompute`, `mla_up_recompute`: those
    selective recomputations in effect (0/1), which re-quantize some GEMM inputs (`quantize_ops`)."""
    routed = (experts.experts_in, experts.experts_out, experts.routing, experts.permute,
              experts.activation) if experts is not None else ()
    (qkv, out_proj, mlp_in, mlp_out, norms, residuals, activation, rotary, recurrence, quantize, embedding, loss,
     *expert_times) = kernel_seconds((*fw.dense_gemms, *fw.dense_streams, ends.embedding, ends.loss, *routed), device,
                                   precision, block_format=block_format)
    scores, over_v, softmax, head_gemm, *router = kernel_seconds(
        (*fw.core_gemms, fw.softmax, ends.head_gemm, *((experts.router,) if experts is not None else ())), device,
        precision, sixteen_bit=True)
    if fw.sixteen_bit_attention:  # a checkpoint that keeps its attention projections in bf16
        qkv, out_proj = kernel_times((fw.qkv, fw.out_proj), device, precision, sixteen_bit=True)
    elif any_true(projections > 0):  # a recipe that keeps them in fp8 (1) or bf16 (2)
        kept_fp8 = kernel_times((fw.qkv, fw.out_proj), device, _FP8)
        kept_bf16 = kernel_times((fw.qkv, fw.out_proj), device, precision, sixteen_bit=True)
        qkv, out_proj = (where(projections == 1, f8, where(projections == 2, b16, fmt))
                         for f8, b16, fmt in zip(kept_fp8, kept_bf16, (qkv, out_proj), strict=True))
    flash = fused_attention_time(fw.flash_attention, device, precision, flash_version)
    share = bf16_share(fw, bf16_layers)  # of the layers kept in bf16
    if any_true(share > 0):
        qkv, out_proj, mlp_in, mlp_out = (
            (1 - share) * t + share * b16 for t, b16 in
            zip((qkv, out_proj, mlp_in, mlp_out), kernel_times(fw.dense_gemms, device, precision, sixteen_bit=True),
                strict=True))
    q_forward, q_backward = (kernel_times(quantize_ops(fw, experts, block_format, projections, bf16_layers,
                                                       moe_act_recompute, mla_up_recompute, fw.latent_inputs),
                                          device, precision) if any_true(block_format > 0) else (0.0, 0.0))
    kernels = LayerKernels(qkv, out_proj, mlp_in, mlp_out, norms, residuals, activation, rotary, recurrence,
                           quantize, embedding, loss, scores, over_v, softmax, head_gemm, flash,
                           quantize_forward=q_forward, quantize_backward=q_backward)
    if experts is None:
        return kernels
    experts_in, experts_out, routing, permute, expert_activation = expert_times
    if device.expert_gemm_ceiling is not None or device.expert_stream_efficiency is not None:
        experts_in, experts_out = kernel_times((experts.experts_in, experts.experts_out), device, precision,
                                               ceiling=device.expert_gemm_ceiling,
                                               stream_efficiency=device.expert_stream_efficiency,
                                               block_format=block_format)
    if any_true(share > 0):
        experts_in, experts_out = ((1 - share) * t + share * b16 for t, b16 in zip(
            (experts_in, experts_out), kernel_times((experts.experts_in, experts.experts_out), device, precision,
                                                    sixteen_bit=True), strict=True))
    # a loop of one GEMM call per expert takes at least its calls' host and launch time [derived: the calls
    # are issued one after another; a tiny expert's kernel ends before the next call is issued; TE PR #3134,
    # docs/formulas.md §7.2]
    roofline = experts_in + experts_out
    experts_in, experts_out = (maximum(t, op.group * expert_call) for t, op in
                               ((experts_in, experts.experts_in), (experts_out, experts.experts_out)))
    return LayerKernels(qkv, out_proj, mlp_in, mlp_out, norms, residuals, activation, rotary, recurrence, quantize,
                        embedding, loss, scores, over_v, softmax, head_gemm, flash, experts_in, experts_out,
                        routing, permute, expert_activation, router[0], experts_in + experts_out - roofline,
                        q_forward, q_backward)

