"""Kernel times of one layer's forward (and of the model's ends) on a device, by name.

One vectorized roofline evaluation per precision class (`cost.compute.kernel_times`): the weight GEMMs
and element-wise kernels at the recipe's GEMM precision, the attention core, the LM head and the router
at 16 bits (fp8 recipes keep them in bf16), the fused attention kernel at its own efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.cost.compute import fused_attention_time, kernel_times
from armillary.numerics import Array, maximum
from armillary.specs.system import Device
from armillary.workload.experts import ExpertsForward
from armillary.workload.transformer import Ends, LayerForward


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
                  precision: Array, flash_version: Array, expert_call: Array = 0.0) -> LayerKernels:
    """Roofline time of every kernel of the layer `fw` (with the routed `experts` of an MoE layer) and of
    the ends, at the recipe's `precision` code. `expert_call`: the least time each local expert adds to a
    grouped expert GEMM run as one library call per expert (`Strategy.expert_gemm_call`)."""
    routed = (experts.experts_in, experts.experts_out, experts.routing, experts.permute,
              experts.activation) if experts is not None else ()
    (qkv, out_proj, mlp_in, mlp_out, norms, residuals, activation, rotary, recurrence, quantize, embedding, loss,
     *expert_times) = kernel_times((*fw.dense_gemms, *fw.dense_streams, ends.embedding, ends.loss, *routed), device,
                                   precision)
    scores, over_v, softmax, head_gemm, *router = kernel_times(
        (*fw.core_gemms, fw.softmax, ends.head_gemm, *((experts.router,) if experts is not None else ())), device,
        precision, sixteen_bit=True)
    if fw.sixteen_bit_attention:  # a checkpoint that keeps its attention projections in bf16
        qkv, out_proj = kernel_times((fw.qkv, fw.out_proj), device, precision, sixteen_bit=True)
    flash = fused_attention_time(fw.flash_attention, device, precision, flash_version)
    kernels = LayerKernels(qkv, out_proj, mlp_in, mlp_out, norms, residuals, activation, rotary, recurrence,
                           quantize, embedding, loss, scores, over_v, softmax, head_gemm, flash)
    if experts is None:
        return kernels
    experts_in, experts_out, routing, permute, expert_activation = expert_times
    if device.expert_gemm_ceiling is not None or device.expert_stream_efficiency is not None:
        experts_in, experts_out = kernel_times((experts.experts_in, experts.experts_out), device, precision,
                                               ceiling=device.expert_gemm_ceiling,
                                               stream_efficiency=device.expert_stream_efficiency)
    # a loop of one GEMM call per expert takes at least its calls' host and launch time [derived: the calls
    # are issued one after another; a tiny expert's kernel ends before the next call is issued; TE PR #3134,
    # docs/formulas.md §7.2]
    roofline = experts_in + experts_out
    experts_in, experts_out = (maximum(t, op.group * expert_call) for t, op in
                               ((experts_in, experts.experts_in), (experts_out, experts.experts_out)))
    return LayerKernels(qkv, out_proj, mlp_in, mlp_out, norms, residuals, activation, rotary, recurrence, quantize,
                        embedding, loss, scores, over_v, softmax, head_gemm, flash, experts_in, experts_out,
                        routing, permute, expert_activation, router[0], experts_in + experts_out - roofline)
