"""Cost of one transformer layer for one micro-batch on one device, per pass.

Forward runs the kernels of `workload.transformer`. Backward splits into input gradients (one GEMM per
forward GEMM, the element-wise backward kernels and the attention core's backward) and weight gradients
(one GEMM per weight GEMM): the T_B / T_W split of the zero-bubble schedules (Qi et al. 2024 §2).
Recomputation re-runs the forward (full) or the attention core (selective; Korthikanti et al. §5).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from armillary.cost.compute import addition_time
from armillary.estimate.kernels import LayerKernels, layer_kernels
from armillary.estimate.layer_comm import (
    TP_OPERATIONS,
    LayerExchange,
    context_parallel_exposed,
    expert_exchange_exposed,
    moe_block_recompute,
    tensor_parallel_exposed,
    tp_calls_per_pass,
    tp_collectives,
)
from armillary.estimate.result import (
    CommCall,
    EndsCost,
    LayerCost,
    PassCost,
)
from armillary.estimate.tp_layouts import summa_layer, two_d, two_d_kernels
from armillary.memo import quick_init
from armillary.numerics import Array, any_true, maximum, where
from armillary.plan.arrays import StrategyArrays
from armillary.plan.codes import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from armillary.specs.device import Device
from armillary.specs.system import System
from armillary.workload.experts import ExpertsForward
from armillary.workload.ops import Op
from armillary.workload.quantize import quantize_ops
from armillary.workload.transformer import Ends, LayerForward

# Backward element-wise kernels read the output gradient and the saved input and write the input
# gradient: about 1.5x the forward traffic [derived].
BACKWARD_STREAM_FACTOR = 1.5
# FlashAttention's backward recomputes the scores: 2.5x the forward FLOPs (FA2 §4.1; docs/formulas.md §3.5).
FLASH_BACKWARD_FACTOR = 2.5



# The strategy's fields a layer's cost reads (`layer_cost` and what it calls, here and in tp_layouts.py): with the
# kernels, the messages, the groups and the system, the key under which the estimator keeps a layer's cost for
# every strategy point that shares them (estimate/training_layers.py `MODEL_PARTS`; tests/test_estimate_memo.py
# checks the list against the code, so a field read and not listed fails there)
LAYER_FIELDS = ("attention", "attention_projections", "bf16_layers", "block_format", "cp", "cp_comm",
                "dispatch_dedup", "ep", "etp", "expert_gemm_call", "moe_dispatch_sync", "moe_host_op",
                "moe_host_ops", "overlap_ep", "overlap_tp", "precision", "recompute", "recompute_alternate_matmuls",
                "recompute_core_attn", "recompute_elementwise", "recompute_layernorm", "recompute_mla_up_proj",
                "recompute_mlp", "recompute_moe", "recompute_moe_act", "recompute_share",
                "recompute_shared_experts", "sequence_parallel", "summa_steps", "tp", "tp_layout",
                "tp_overlap_method")
layer_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*LAYER_FIELDS)
# of them, those `kernel_passes` reads (checked as LAYER_FIELDS)
KERNEL_FIELDS = ("precision", "attention", "expert_gemm_call", "block_format", "attention_projections", "bf16_layers",
                 "recompute", "recompute_moe_act", "recompute_mla_up_proj", "tp_layout", "summa_steps", "tp")
kernel_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*KERNEL_FIELDS)


def recompute_modes(st: StrategyArrays) -> tuple[Array, Array]:
    """(full, attention core) recomputation as it applies: full is the share of layers re-run (0 without
    full recomputation; `StrategyArrays.recompute_share`, every layer priced at the average); selective
    recomputation of core_attn re-runs the attention core, which FlashAttention already recomputes inside its
    backward (then it costs nothing)."""
    full = (st.recompute == RECOMPUTE_FULL) * st.recompute_share
    return full, (st.recompute == RECOMPUTE_SELECTIVE) & (st.recompute_core_attn > 0) & (st.attention == 0)


def requantizing_recompute(st: StrategyArrays) -> tuple[Array, Array]:
    """(moe_act, mla_up_proj) selective recomputation in effect (0/1): the modules whose recomputation makes a
    block-scaled recipe quantize some GEMM inputs again (`workload.quantize.quantize_ops`)."""
    selective = st.recompute == RECOMPUTE_SELECTIVE
    return where(selective, st.recompute_moe_act, 0.0), where(selective, st.recompute_mla_up_proj, 0.0)


def _module_recompute(st: StrategyArrays, parts: tuple[tuple[Array, Array, Array, Array], ...]) -> PassCost:
    """What selective recomputation of the other modules re-runs: each part is (module flag, FLOPs, bytes,
    time) of a module's forward (Megatron-Core --recompute-modules)."""
    selective = st.recompute == RECOMPUTE_SELECTIVE
    flop: Array = 0  # summed from 0, part by part, as sum() sums them (written out: no generators)
    moved: Array = 0
    time: Array = 0
    for on, part_flop, part_bytes, part_time in parts:
        # (a module off at every point, the float 0.0: that number where the points recompute selectively and
        # elsewhere, as where() gives it at each point, without an array over the points)
        on = on if type(on) is float and on == 0.0 and math.copysign(1.0, on) > 0 else where(selective, on, 0.0)
        flop, moved, time = flop + on * part_flop, moved + on * part_bytes, time + on * part_time
    return PassCost(flop, moved, time)


@quick_init
@dataclass(frozen=True)
class Adapters:
    """A frozen base with LoRA adapters (`workload.adapters`), one layer and micro-batch on one device: the
    adapters' forward and the base weights' dequantization (QLoRA), priced through the roofline; `frozen`
    1 where the base has no weight gradient."""

    forward: PassCost
    dequantize: PassCost
    frozen: Array


def _with_adapters(passes: tuple[PassCost, PassCost, PassCost, PassCost, PassCost],
                   adapters: Adapters) -> tuple[PassCost, PassCost, PassCost, PassCost, PassCost]:
    """LoRA's passes (Hu et al. 2021 §4.1; Dettmers et al. 2023 §3): forward runs the frozen base, the
    adapters (and QLoRA's dequantization); the input gradient runs every base GEMM's dX, the adapters' dX
    and the dequantization again; the weight gradient only the adapters' (dA and dB, as many FLOPs as their
    forward): no base weight-gradient GEMM."""
    forward, backward_input, backward_weight, core_f, core_b = passes
    a, dq, frozen = adapters.forward, adapters.dequantize, adapters.frozen

    fields = ("flop", "bytes", "time_s")

    def plus(p: PassCost, *more: PassCost) -> PassCost:
        return PassCost(*(getattr(p, k) + sum(getattr(x, k) for x in more) for k in fields))

    weight = PassCost(*((1 - frozen) * getattr(backward_weight, k) + getattr(a, k) for k in fields))
    return plus(forward, a, dq), plus(backward_input, a, dq), weight, core_f, core_b


def layer_cost(fw: LayerForward, ends: Ends, st: StrategyArrays, system: System, exchange: LayerExchange,
               experts: ExpertsForward | None = None,
               adapters: Adapters | None = None,
               kernels: KernelPasses | None = None) -> tuple[LayerCost, EndsCost, tuple[CommCall, ...]]:
    """Per-pass cost of one layer and of the model's ends, and the layer's TP / SP / CP / EP calls per
    micro-batch. `experts`: the routed experts of an MoE layer, exchanged over `exchange.expert_groups`;
    `adapters`: LoRA fine-tuning of a frozen base (its embedding and LM head frozen too); `kernels`: the
    `kernel_passes` of these inputs, where the caller has them already."""
    kt, passes = kernels if kernels is not None else kernel_passes(fw, ends, experts, st, system.device)
    grid = two_d(st)  # the 2-D layout (`Strategy.tp_layout`; estimate/tp_layouts.py)
    base_weight_t = passes[2].time_s  # the base GEMMs' time, what TP all-reduces hide behind
    if adapters is not None:
        passes = _with_adapters(passes, adapters)
    forward, backward_input, backward_weight, core_f, core_b = passes
    full = recompute_modes(st)[0]
    recompute, modules = _recompute(fw, kt, experts, st, forward, core_f)
    tp_costs, ends_ar = exchange.tp_costs or tp_collectives(st, system, exchange.tp_bytes, exchange.tp_group)
    tp_calls = tp_calls_per_pass(st.sequence_parallel)  # (for the exposed time and the calls below)
    tp_f, tp_b, tp_b_alone = tensor_parallel_exposed(st, system, tp_costs, kt, base_weight_t, tp_calls)
    summa = summa_layer(fw, kt, st, system, exchange.tp_bytes) if any_true(grid) else None
    if summa is not None:  # SUMMA's broadcasts and reduces instead of the 1-D collectives (none hidden by W)
        tp_f, tp_b = where(grid, summa.forward_s, tp_f), where(grid, summa.backward_s, tp_b)
        tp_b_alone = where(grid, summa.backward_s, tp_b_alone)
    cp_f, cp_b, cp_calls = context_parallel_exposed(st, system, exchange, core_f, core_b, full)
    # the token exchange overlaps the whole pass, its exposed TP / CP time included (one schedule: a faster
    # kernel can expose more of it, never slow the pass); a dense layer has none (what expert_exchange_exposed
    # gives it, without the passes' sums it would not read)
    ep_f: Array = 0.0
    ep_b: Array = 0.0
    ep_b_alone: Array = 0.0
    ep_calls: tuple[CommCall, ...] = ()
    forward_s: Array = 0.0
    if experts is not None:
        forward_s = forward.time_s + tp_f + cp_f
        ep_f, ep_b, ep_calls, ep_b_alone = expert_exchange_exposed(
            experts, exchange.expert_groups, st, system, forward_s,
            backward_input.time_s + backward_weight.time_s + tp_b + cp_b, full,
            backward_input.time_s + tp_b_alone + cp_b)
    # what deferring the weight pass takes off the backward (zero-bubble schedules, Qi et al. ICLR'24 §3.1):
    # the pass, less the TP / EP communication it hid that the input-gradient pass alone leaves exposed
    deferrable = maximum(0.0, backward_weight.time_s - (tp_b_alone - tp_b) - (ep_b_alone - ep_b))
    rerun = full + (moe_block_recompute(st) if experts is not None else 0.0)  # passes re-running the exchange
    if experts is not None:  # the host's wait at the dispatcher's sync: part of the forward (and its re-run)
        wait = moe_host_wait(forward_s + ep_f, experts, st)  # (forward + TP + CP, as above) + EP
        forward = replace(forward, time_s=forward.time_s + wait)
        recompute = replace(recompute, time_s=recompute.time_s + rerun * wait)
    layer = LayerCost(forward, backward_input, backward_weight, recompute, tp_forward_s=tp_f, tp_backward_s=tp_b,
                      tp_recompute_s=full * tp_f, cp_forward_s=cp_f, cp_backward_s=cp_b,
                      cp_recompute_s=full * cp_f, ep_forward_s=ep_f, ep_backward_s=ep_b,
                      ep_recompute_s=rerun * ep_f, recompute_modules=modules, attention_core=core_f,
                      attention_core_backward=core_b,
                      expert_calls_s=kt.expert_calls * (3 + rerun),  # forward, input and weight gradients, re-runs
                      weight_gemms_s=base_weight_t if adapters is not None else None,
                      weight_deferrable_s=deferrable)
    k = BACKWARD_STREAM_FACTOR
    # a frozen embedding has no backward, a frozen LM head only its input gradient (LoRA)
    frozen = adapters.frozen if adapters is not None else 0.0
    ends_cost = EndsCost(embedding_s=(1 + k * (1 - frozen)) * kt.embedding,
                         head_s=(3 - frozen) * kt.head_gemm + (1 + k) * kt.loss,
                         tp=ends_ar,  # the ends' all-reduce (`tp_collectives`)
                         embedding_forward_s=kt.embedding, head_forward_s=kt.head_gemm + kt.loss)
    one_d = 1 - where(grid, 1.0, 0.0)
    per_layer = [_times(one_d, f * (1 + full) + b) for f, b in zip(*tp_calls, strict=True)]
    summa_calls = () if summa is None else (
        *(replace(c, per_step=c.per_step * (1 + full)) for c in summa.forward_calls), *summa.backward_calls)
    calls = (*(CommCall.of(dim, op, n, exchange.tp_bytes, cost) for (dim, op), n, cost in
               zip(TP_OPERATIONS, per_layer, tp_costs, strict=True)), *summa_calls, *cp_calls, *ep_calls)
    return layer, ends_cost, calls


def _times(k: Array, x: Array) -> Array:
    """k x, without the multiply where k is the float 1.0 and x float64 (IEEE 754 x 1 is exact: the same values)."""
    if type(k) is float and k == 1.0 and (type(x) is float or (type(x) is np.ndarray and x.dtype == np.float64)):
        return x
    return k * x


Passes = tuple[PassCost, PassCost, PassCost, PassCost, PassCost]
KernelPasses = tuple[LayerKernels, Passes]


def kernel_passes(fw: LayerForward, ends: Ends, experts: ExpertsForward | None, st: StrategyArrays,
                  device: Device) -> KernelPasses:
    """The kernel times of a layer and its ends (`layer_kernels`, under the 2-D layout `two_d_kernels`) and
    the layer's passes without communication (`_passes`): what a layer's cost takes from its kernels alone, of
    the strategy's precision, attention, expert_gemm_call, block_format, attention_projections, bf16_layers,
    the recomputation that re-quantizes (`requantizing_recompute`), tp_layout, tp and summa_steps only."""
    kt = layer_kernels(fw, ends, experts, device, st.precision, st.attention, st.expert_gemm_call, st.block_format,
                       st.attention_projections, st.bf16_layers, *requantizing_recompute(st))
    if any_true(two_d(st)):  # the 2-D layout (`Strategy.tp_layout`; estimate/tp_layouts.py)
        _two_d_defined(fw, experts)
        kt = two_d_kernels(kt, fw, st, device)
    return kt, _passes(fw, kt, experts, st, device)


def _two_d_defined(fw: LayerForward, experts: ExpertsForward | None) -> None:
    """The layers the 2-D layout is defined for (Optimus §3, Colossal-AI 2-D): dense layers whose projections
    are plain GEMMs; MoE layers and MLA's latent projections have no 2-D split in the sources."""
    if experts is not None:
        raise ValueError("strategy.tp_layout '2d' is not defined for MoE layers (Optimus / Colossal-AI split dense "
                         "layers only): use tp_layout '1d'")
    if any_true(fw.latent_up.flop > 0):
        raise ValueError("strategy.tp_layout '2d' is not defined for multi-head latent attention (MLA's "
                         "down-projections are not split): use tp_layout '1d'")


def moe_host_wait(device_forward_s: Array, experts: ExpertsForward, st: StrategyArrays) -> Array:
    """Seconds an MoE layer's forward (one micro-batch) waits on the host past `device_forward_s`, its time
    on the device (exposed communication included), when the token dispatcher blocks the host on the token
    counts once per layer (`Strategy.moe_host`; docs/moe.md). The host then cannot run ahead: the device
    idles until the host has issued the layer's kernels again, so the layer takes at least their host time,
    the stack's kernels issued one by one (`moe_host.ops` x `moe_host.op`) and its per-expert GEMM calls
    (`expert_gemm_call`, one per touched local expert and grouped GEMM) [derived: a device-to-host sync
    drains the launch queue; Megatron-Core's MoEAlltoAllTokenDispatcher synchronises at
    "before_ep_alltoall" in dropless training]. Without the sync the host runs ahead and hides its time."""
    op, ops, sync = st.moe_host_op, st.moe_host_ops, st.moe_dispatch_sync
    calls = (experts.experts_in.group + experts.experts_out.group) * st.expert_gemm_call
    return where(sync > 0, maximum(0.0, ops * op + calls - device_forward_s), 0.0)


def _passes(fw: LayerForward, kt: LayerKernels, experts: ExpertsForward | None, st: StrategyArrays,
            device: Device) -> Passes:
    """(forward, input gradient, weight gradient, attention core forward, attention core backward) of the
    layer's kernels, without communication."""
    flash = st.attention
    gemm_t, stream_t = kt.dense_gemms, kt.dense_streams
    if experts is not None:  # routed experts: fp8-able GEMMs and their element-wise kernels
        gemm_t, stream_t = gemm_t + kt.expert_gemms, stream_t + kt.expert_streams
    # ternary projections as additions in forward and input gradient; the weight gradient stays a matmul
    weight_gemm_t = gemm_t
    if isinstance(fw.additions, np.ndarray) or fw.additions > 0:
        adds = sum(addition_time(op, fw.additions, device) for op in fw.dense_gemms)
        weight_gemm_t = where(fw.additions > 0, adds + (gemm_t - kt.dense_gemms), gemm_t)
    expert_gemms = (experts.experts_in, experts.experts_out) if experts is not None else ()
    expert_streams = (experts.routing, experts.permute, experts.activation) if experts is not None else ()
    gemm_flop, gemm_bytes = _total((*fw.dense_gemms, *expert_gemms))
    _, stream_bytes = _total((*fw.dense_streams, *expert_streams))
    if experts is not None:  # the router GEMM joins the layer's GEMMs, at 16 bits
        gemm_flop, gemm_bytes = gemm_flop + experts.router.flop, gemm_bytes + experts.router.bytes
        gemm_t, weight_gemm_t = gemm_t + kt.router, weight_gemm_t + kt.router
    # attention core: separate GEMMs + softmax kernels, or one fused FlashAttention kernel (one choice at every
    # point: only its passes, what where() would pick)
    fused = flash > 0
    k = BACKWARD_STREAM_FACTOR
    if type(fused) is bool or type(fused) is np.bool_:
        core_f, core_b = _fused_core(fw, kt) if fused else _unfused_core(fw, kt)
    else:
        (flash_f, flash_b), (unfused_f, unfused_b) = _fused_core(fw, kt), _unfused_core(fw, kt)
        core_f, core_b = (PassCost(where(fused, f.flop, u.flop), where(fused, f.bytes, u.bytes),
                                   where(fused, f.time_s, u.time_s))
                          for f, u in ((flash_f, unfused_f), (flash_b, unfused_b)))
    # a block-scaled recipe quantizes the GEMM inputs in forward, the output gradients in backward; without a
    # block format anywhere its kernels move elements x 0 bytes (workload/quantize.py), the 0.0 taken here as
    # `layer_kernels` takes their times
    quantize_f_bytes: Array = 0.0
    quantize_b_bytes: Array = 0.0
    if any_true(st.block_format > 0):
        quantize_f, quantize_b = quantize_ops(fw, experts, st.block_format, st.attention_projections,
                                              st.bf16_layers, *requantizing_recompute(st), fw.latent_inputs)
        quantize_f_bytes, quantize_b_bytes = quantize_f.bytes, quantize_b.bytes
    forward = PassCost(gemm_flop + core_f.flop, gemm_bytes + stream_bytes + core_f.bytes + quantize_f_bytes,
                       weight_gemm_t + stream_t + core_f.time_s + kt.quantize_forward)
    backward_input = PassCost(gemm_flop + core_b.flop, gemm_bytes + k * stream_bytes + core_b.bytes + quantize_b_bytes,
                              weight_gemm_t + k * stream_t + core_b.time_s + kt.quantize_backward)
    backward_weight = PassCost(gemm_flop, gemm_bytes, gemm_t)
    return forward, backward_input, backward_weight, core_f, core_b


def _fused_core(fw: LayerForward, kt: LayerKernels) -> tuple[PassCost, PassCost]:
    """The attention core as one fused FlashAttention kernel: (forward, backward)."""
    op = fw.flash_attention
    return (PassCost(op.flop, op.bytes, kt.flash),
            PassCost(FLASH_BACKWARD_FACTOR * op.flop, FLASH_BACKWARD_FACTOR * op.bytes,
                     FLASH_BACKWARD_FACTOR * kt.flash))


def _unfused_core(fw: LayerForward, kt: LayerKernels) -> tuple[PassCost, PassCost]:
    """The attention core as separate GEMMs and softmax kernels: (forward, backward)."""
    core_gemm_flop, core_gemm_bytes = _total(fw.core_gemms)
    k = BACKWARD_STREAM_FACTOR
    core_gemms = kt.core_gemms
    return (PassCost(core_gemm_flop, core_gemm_bytes + fw.softmax.bytes, core_gemms + kt.softmax),
            PassCost(2 * core_gemm_flop, 2 * core_gemm_bytes + k * fw.softmax.bytes, 2 * core_gemms + k * kt.softmax))


def _total(ops: tuple[Op, ...]) -> tuple[Array, Array]:
    """The ops' FLOPs and bytes, each summed from 0 in order as sum() sums them (one loop for both)."""
    flop: Array = 0
    moved: Array = 0
    for op in ops:
        flop, moved = flop + op.flop, moved + op.bytes
    return flop, moved


def _routed(experts: ExpertsForward | None) -> tuple[Op, ...]:
    """The routed part of an MoE layer's forward: router, routing, permutes, expert GEMMs, activation."""
    return () if experts is None else (experts.router, experts.routing, experts.permute, experts.experts_in,
                                       experts.activation, experts.experts_out)


def _recompute(fw: LayerForward, kt: LayerKernels, experts: ExpertsForward | None, st: StrategyArrays,
               forward: PassCost, core_f: PassCost) -> tuple[PassCost, PassCost]:
    """(what recomputation re-runs, of which the further selective modules). Full recomputation re-runs the
    forward; selective re-runs the attention core (FlashAttention already recomputes it inside) and the
    other modules chosen: norms, the dense MLP or the shared experts, the experts' activation, MLA's
    up-projections (time in proportion to their FLOPs within the projection op), every element-wise kernel,
    every second matmul (K's share of the QKV projection, the output projection, and half the gated MLP's
    input projection or, without a gate, its output projection)."""
    full, selective = recompute_modes(st)
    moe = experts is not None
    block = moe_block_recompute(st) if moe else 0.0  # the whole MoE layer: router, experts, shared experts
    mlp = maximum(st.recompute_shared_experts, block) if moe else st.recompute_mlp
    mlp_in, mlp_out, activation = fw.mlp_in, fw.mlp_out, fw.activation
    # torchtitan counts a block's matmuls q, k, v, o, gate, up, down (or fc1, fc2) and recomputes the 2nd, 4th, 6th
    mlp_in_share, mlp_out_share = (0.0, 0.0) if moe else (fw.gated / 2, 1 - fw.gated)
    qkv, out_proj = fw.qkv, fw.out_proj
    # (share, op, time) of each: summed from 0 in this order, as sum() sums them (written out)
    key, in_share, out_share = fw.key_share, mlp_in_share * (1 - mlp), mlp_out_share * (1 - mlp)
    # each kernel counted once whichever of the overlapping modules (norms, MLP, element-wise) re-run it. A dense
    # layer has no routed module, and a layer without MLA's up-projections (its op the scalar zero) none: their
    # parts (0/1 flag x 0 FLOPs, bytes and seconds) would add +0.0 to a sum that is never -0.0 (it starts from
    # 0), nothing: left out. The output projection's share is 1 (x 1.0 is exact: left out).
    routed = () if not moe else (
        (st.recompute_moe_act * moe * (1 - block), 0.0, experts.activation.bytes if experts else 0.0,
         kt.expert_activation if moe else 0.0),
        (block, *_total(_routed(experts)),
         kt.router + kt.expert_gemms + kt.expert_streams))
    up = fw.latent_up
    latent = () if type(up.flop) is float and type(up.bytes) is float and up.flop == 0.0 and up.bytes == 0.0 else (
        (st.recompute_mla_up_proj, up.flop, up.bytes, fw.latent_up.flop / maximum(fw.qkv.flop, 1e-30) * kt.qkv),)
    modules = _module_recompute(st, (
        (maximum(st.recompute_layernorm, st.recompute_elementwise), 0.0, fw.norms.bytes, kt.norms),
        (mlp, 0 + mlp_in.flop + mlp_out.flop + activation.flop, 0 + mlp_in.bytes + mlp_out.bytes + activation.bytes,
         kt.mlp_in + kt.mlp_out + kt.activation),
        *routed,
        *latent,
        (st.recompute_elementwise, 0.0, fw.residuals.bytes + fw.rotary.bytes + (1 - mlp) * fw.activation.bytes,
         kt.residuals + kt.rotary + (1 - mlp) * kt.activation),
        (st.recompute_alternate_matmuls,
         0 + key * qkv.flop + out_proj.flop + in_share * mlp_in.flop + out_share * mlp_out.flop,
         0 + key * qkv.bytes + out_proj.bytes + in_share * mlp_in.bytes + out_share * mlp_out.bytes,
         0 + key * kt.qkv + kt.out_proj + in_share * kt.mlp_in + out_share * kt.mlp_out),
    ))
    # modules re-run only under selective recomputation: 0 where full
    recompute = PassCost(*(full * f + where(selective, c, 0.0) + mod for f, c, mod in (
        (forward.flop, core_f.flop, modules.flop), (forward.bytes, core_f.bytes, modules.bytes),
        (forward.time_s, core_f.time_s, modules.time_s))))
    return recompute, modules


