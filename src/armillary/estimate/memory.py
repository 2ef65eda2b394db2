"""Memory per device: the bytes per parameter of each precision recipe, activations under each recompute mode,
buffers; the model states they make under ZeRO are `model_states`.

Bytes per parameter: the Megatron-LM distributed-optimizer table (docs/formulas.md §4.1-4.2). Activations:
Korthikanti et al. 2022 §4 (docs/formulas.md §4.3), generalized to GQA, head_dim and gated MLPs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armillary.memo import derived, quick_init
from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.codes import PRECISION, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, SCHEDULE_GPIPE, SCHEDULE_INTERLEAVED
from armillary.plan.layout import rank_queries
from armillary.specs.formats import MXFP4, MXFP8, NVFP4
from armillary.specs.strategy import TrainingPrecision
from armillary.workload.experts import ExpertsForward
from armillary.workload.transformer import sequence_shards

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
# plan.codes.BLOCK_FORMAT (none, mxfp8, nvfp4, mxfp4), scales included (specs.formats). Per-tensor fp8: one fp8
# copy (WEIGHT_BYTES' 3 = 2 + 1). A block-scaled format scales along the GEMM's reduction dimension, which differs
# between the forward GEMM and the input-gradient GEMM, so a weight keeps a rowwise and a columnwise copy
# (Transformer Engine MXFP8Tensor / NVFP4Tensor rowwise_data and columnwise_data, both cached across the
# micro-batches), and the input kept for the weight gradient its columnwise copy (TE Linear saves the input
# quantized for wgrad only) [derived; docs/fp4.md]: MXFP8 2 x 1.03, NVFP4 2 x 0.5625, MXFP4 2 x 0.53 bytes.
QUANTIZED_WEIGHT_BYTES = (1.0, 2 * MXFP8.bytes, 2 * NVFP4.bytes, 2 * MXFP4.bytes)
QUANTIZED_INPUT_BYTES = (1.0, MXFP8.bytes, NVFP4.bytes, MXFP4.bytes)
# HBM traffic of one optimizer step per updated parameter [derived from Megatron-LM's mixed-precision
# optimizer passes]: fp16 grads to fp32 main grads (2 + 4, fp16 only), unscale / inf check (4 + 4, fp16
# only), grad-norm for clipping (4), Adam (read grad 4, read+write master 8, m 8, v 8 = 28), master to
# model copy (4 + 2, not fp32; + 1 fp8 copy), zeroing the grad buffer (grad bytes).
OPTIMIZER_STEP_BYTES = (4 + 28 + 4.0, 4 + 28 + 6 + 4.0, 6 + 8 + 4 + 28 + 6 + 2.0, 4 + 28 + 7 + 4.0)


def logit_bytes(st: StrategyArrays, e: Array) -> Array:
    """Bytes per logit alive at the loss's peak (`Strategy.cross_entropy`). fused: the fp32 logits and their
    16-bit source, 4 + e (Megatron's vocab-parallel cross-entropy). eager_fp32: the output cast to fp32 and
    PyTorch's F.cross_entropy run op by op (torchtitan of 2024: `self.output(h).float()`, the train loop deletes
    the logits before backward): log_softmax keeps its fp32 output for backward (PyTorch derivatives.yaml,
    _log_softmax_backward_data reads the result), and nll_loss's gradient and log_softmax's input gradient,
    fp32 each, are alive beside it as backward starts: 12 [derived]."""
    return where(st.cross_entropy > 0, 12.0, 4 + e)


def runtime_reserve(st: StrategyArrays, device_reserve: float) -> Array:
    """HBM the runtime holds outside the tensors: the strategy's `memory_reserve`, else (coded -1) the device's
    (`Device.memory_reserve`)."""
    return where(st.memory_reserve >= 0, st.memory_reserve, device_reserve)


def per_precision(table: tuple[float, ...], code: Array) -> Array:
    """The table entry of each precision code (`plan.codes.PRECISION`)."""
    if not isinstance(code, np.ndarray):
        return table[int(code)]
    return np.asarray(table)[code.astype(int)]


# the strategy's fields `LayerActivations.stored` and `.checkpointed` read (with `grid_split`): with the
# activations, the key under which the estimator keeps them (tests/test_estimate_memo.py checks the list)
STORED_FIELDS = ("tp_layout", "tp", "eager_kernels", "recompute", "recompute_share", "recompute_moe",
                 "recompute_shared_experts", "recompute_mlp", "recompute_elementwise", "recompute_alternate_matmuls",
                 "recompute_core_attn", "recompute_layernorm", "recompute_mla_up_proj", "recompute_moe_act")
stored_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*STORED_FIELDS)


@quick_init
@dataclass(frozen=True)
class LayerActivations:
    """Bytes one layer stores for backward, for one micro-batch on one TP rank (Korthikanti Table 2)."""

    replicated: Array  # norm inputs, block inputs, dropout masks: 10sbh, split by t only with SP
    tensor_parallel: Array  # Q, K, V, projections, MLP: 24sbh / t for GPT
    attention_core: Array  # softmax output, dropout mask and output: 5as^2b / t
    layer_input: Array  # what full recomputation keeps: 2sbh (/ t with SP)
    experts: Array = 0.0  # routed experts of an MoE layer: router scores, dispatched tokens, expert MLPs
    # what recomputing each further module (selective) saves, out of the terms above
    norm_outputs: Array = 0.0  # of `replicated`: the two pre-norms' outputs
    mlp_hidden: Array = 0.0  # of `tensor_parallel`: the MLP's (dense or shared experts') hidden activations
    latent_up: Array = 0.0  # of `tensor_parallel`: MLA's up-projected Q, K, V less the latents kept instead
    expert_act: Array = 0.0  # of `experts`: the routed experts' activation output
    activation_output: Array = 0.0  # of `mlp_hidden`: the activation's output (the down projection's input)
    up_output: Array = 0.0  # of `mlp_hidden`: a gated MLP's up-projection output
    key_output: Array = 0.0  # of `tensor_parallel`: K
    moe: Array = 0.0  # 1 for an MoE layer (its MLP is the shared experts)
    # what eager kernels keep beyond the fused count (`eager_activations`; Strategy.activation_kernels eager)
    eager_act: Array = 0.0  # the gated MLP's activation output, saved by the multiply
    eager_rope: Array = 0.0  # the rotated Q and K, copies beside the QKV output that V's view keeps whole
    eager_scatter: Array = 0.0  # a LoRA on part of the fused QKV: its output scattered into the QKV width

    def stored(self, st: StrategyArrays) -> Array:
        """Per-layer bytes kept between forward and backward for each recompute mode (none, selective,
        full): s*b*h*(10 + 24/t + 5as/(ht)), s*b*h*(10 + 24/t), 2sbh (Korthikanti Table 2, Eq. 2, 6); selective
        drops the attention core and whatever further modules it recomputes (Megatron --recompute-modules);
        full recomputation of a share of the layers keeps the others' activations (the average layer). The
        whole MoE block (module moe) keeps only its input: neither the routed experts' activations nor the
        shared experts' (Megatron-Core MoELayer under tensor_parallel.checkpoint). Eager kernels
        (`Strategy.activation_kernels`) keep the further tensors of `eager_activations`; recomputing the
        element-wise ops (or the MLP) re-makes the activation output and the rotated Q and K."""
        split = grid_split(st)  # the 2-D layout splits the replicated activations too
        replicated, norm_outputs = self.replicated / split, self.norm_outputs / split
        eager = st.eager_kernels * (self.eager_act + self.eager_rope + self.eager_scatter)
        no_recompute = replicated + self.tensor_parallel + self.attention_core + self.experts + eager
        moe_block = self.moe * st.recompute_moe
        mlp_flag = where(self.moe > 0, maximum(st.recompute_shared_experts, moe_block), st.recompute_mlp)
        elementwise, alternate = st.recompute_elementwise, st.recompute_alternate_matmuls
        selective = (no_recompute - st.recompute_core_attn * self.attention_core
                     - maximum(st.recompute_layernorm, elementwise) * norm_outputs - mlp_flag * self.mlp_hidden
                     - (1 - mlp_flag) * (elementwise * self.activation_output + alternate * self.up_output)
                     - alternate * self.key_output
                     - st.recompute_mla_up_proj * self.latent_up
                     - where(moe_block > 0, self.experts, st.recompute_moe_act * self.expert_act)
                     - st.eager_kernels * (maximum(elementwise, mlp_flag) * self.eager_act
                                           + elementwise * self.eager_rope))
        full = self.checkpointed(st)
        return where(st.recompute == RECOMPUTE_FULL, full + (1 - st.recompute_share) * no_recompute,
                     where(st.recompute == RECOMPUTE_SELECTIVE, selective, no_recompute))

    def checkpointed(self, st: StrategyArrays) -> Array:
        """Of `stored`: the layer inputs that full recomputation keeps, per (average) layer."""
        return where(st.recompute == RECOMPUTE_FULL, st.recompute_share * self.layer_input / grid_split(st), 0.0)

    @property
    def working(self) -> Array:
        """Everything one layer holds while its backward runs (full recomputation rebuilds this)."""
        return self.replicated + self.tensor_parallel + self.attention_core + self.experts


# bytes per element kept of the QKV, MLP and down-projection inputs under LoRA, and of the q, k, v adapter
# outputs LitGPT scatters (`lora_saved_inputs`)
LoraInputs = tuple[Array, Array, Array, tuple[Array, Array, Array]]


def grid_split(st: StrategyArrays) -> Array:
    """Ways the 2-D layout (`Strategy.tp_layout` '2d') splits the activations the 1-D layout keeps whole on
    every rank without sequence parallelism (norm inputs, block inputs, dropout masks, the layer input):
    tp, as Optimus partitions every activation over the q x q grid (Xu et al. arXiv 2104.05343 §3: activation
    memory O(1/q^2)); 1 under 1-D."""
    return where(st.tp_layout > 0, st.tp, 1.0)


def layer_activations(m: ModelArrays, b: Array, s: Array, t: Array, sp: Array, e: Array,
                      flash: Array = 0.0, cp: Array = 1.0, mlp_width: Array | None = None,
                      experts: ExpertsForward | None = None, g: Array | None = None,
                      saved_inputs: LoraInputs | None = None) -> LayerActivations:
    """With context parallelism a rank keeps its s/cp tokens, and scores of its queries against all keys.
    `mlp_width` and `experts` as in `layer_forward` / `experts_forward` (MoE layers); `g` the bytes of a
    GEMM input kept for backward (`SAVED_GEMM_INPUT_BYTES`; default e); `saved_inputs` the bytes kept of
    the QKV, MLP and down-projection inputs where they differ from g (LoRA: `lora_saved_inputs`)."""
    g = e if g is None else g
    g_qkv, g_mlp, g_down = (g, g, g) if saved_inputs is None else saved_inputs[:3]
    # LitGPT's LoRAQKVLinear scatters the adapted q / k / v outputs into the QKV width (`eager_activations`)
    s_q, s_k, s_v = (0.0, 0.0, 0.0) if saved_inputs is None else saved_inputs[3]
    scattered = m.head_dim * (s_q * m.heads + s_k * m.kv_heads) + s_v * m.kv_heads * m.value_dim
    h, a, dv = m.hidden, m.heads, m.value_dim
    f = m.ffn if mlp_width is None else mlp_width
    q = rank_queries(s, cp)
    T = b * q
    sp_div = sequence_shards(t, sp)
    # two norm inputs (e bytes), QKV input and MLP input (GEMM inputs, g bytes) + two 1-byte dropout masks
    replicated = (2 * e + g_qkv + g_mlp + 2 * m.dropout) * T * h / sp_div
    # Q, K, V, attention output (projection input), MLP hidden activations (2 tensors, 3 when gated: the
    # last one, the down projection's input, at g bytes); the MLGRU keeps its i, f, g gates and output
    mlp_hidden = (e * (m.mlp_matrices - 1) + g_down) * T * f / t
    tensor_parallel = e * T * (m.qkv_width + a * dv) / t + mlp_hidden
    scores = (1 - m.mlgru) * b * (a / t) * q * s
    # FlashAttention keeps no s x s tensor, only the fp32 softmax statistics per row: max and sum
    # (FlashAttention-1, Dao et al. 2022 §3.1) or their log-sum-exp (FlashAttention-2, Dao 2023 §3.1.1)
    row_stats = where(flash == 1, 8.0, 4.0) * (1 - m.mlgru) * b * (a / t) * q
    attention_core = where(flash > 0, row_stats, scores * (e + m.dropout * (e + 1)))
    layer_input = e * T * h / sp_div
    routed: Array = 0.0
    expert_act: Array = 0.0
    if experts is not None:
        # [derived] fp32 router logits and probabilities; the dispatched tokens (expert input), the expert
        # MLP's hidden activations (2, gated 3, tensors of expert_ffn / etp) and its output before combine
        tokens = experts.received_tokens
        # a clamped gated activation (`Model.glu_clamp`) as Megatron-Core's TEGroupedMLP runs it (the time's
        # `experts_forward` bias_pass): the eager clamps keep the up projection's output and the fused
        # activation saves the concatenated copy, one more up-projection output [derived:
        # fused_bias_geglu.py weighted_bias_quick_geglu_impl, core_v0.15.0; clamp saves its input,
        # derivatives.yaml]; dropped with the activation when moe_act is recomputed
        clamped = m.glu_clamp * (m.mlp_matrices - 2) * e * (m.mlp_matrices - 1) * tokens * experts.ffn_shard
        routed = (8 * T / sp_div * m.experts
                  + tokens * ((e + g) * h + (e * (m.mlp_matrices - 1) + g) * experts.ffn_shard) + clamped)
        expert_act = g * tokens * experts.ffn_shard + clamped
    # MLA keeps the query and KV latents (and the RoPE key) when its up-projections are recomputed
    latent_up = where(m.kv_lora > 0, e * T * (m.qkv_width / t - (m.q_lora + m.kv_lora + m.rope_dim)),
                      0.0)
    eager = eager_activations(m, T, t, e, f, scattered)
    return LayerActivations(replicated, tensor_parallel, attention_core, layer_input, routed,
                            eager_act=eager[0], eager_rope=eager[1], eager_scatter=eager[2],
                            norm_outputs=(g_qkv + g_mlp) * T * h / sp_div, mlp_hidden=mlp_hidden,
                            latent_up=latent_up, expert_act=expert_act, moe=float(experts is not None),
                            activation_output=g_down * T * f / t, up_output=(m.mlp_matrices - 2) * e * T * f / t,
                            key_output=where(m.kv_lora > 0, 0.0, e * T * m.kv_heads * m.head_dim / t))


def eager_activations(m: ModelArrays, tokens: Array, t: Array, e: Array, f: Array,
                      scattered: Array = 0.0) -> tuple[Array, Array, Array]:
    """(activation output, rotated Q and K, scattered LoRA output): bytes that PyTorch autograd run op by op
    keeps for backward beyond the fused count, as LitGPT's model code of 2023 runs it (lit_gpt/model.py and
    lora.py @8641822, PyTorch 2.1), for `tokens` tokens on one TP rank. Autograd saves an operand only for
    another operand's gradient (PyTorch tools/autograd/gen_variable_type.py: `guard_for`, derivatives.yaml):
    - LLaMAMLP `silu(fc_1(x)) * fc_2(x)`: silu saves its input, the multiply both factors, so the SiLU output
      is kept beside the two projections' outputs (a fused SwiGLU saves only its input): e * f per token;
      none for a non-gated MLP (GELU saves its input, the fc output, already counted).
    - CausalSelfAttention: q, k, v are views of the fused QKV output; `apply_rope` and `torch.cat` make the
      rotated q and k new tensors (also under partial rotary: the cat copies the whole head), and attention
      saves them with v, a view that keeps the whole QKV output: e * (q + k widths) beyond Q, K, V; none without
      rotary positions.
    - LoRAQKVLinear.zero_pad (LoRA on some of q, k, v): `index_copy` saves its source (derivatives.yaml:
      `grad.index_select(dim, index).expand_as(source)`), the adapters' output reshaped to a copy:
      `scattered` bytes per token (`lora_saved_inputs`)."""
    gated = m.mlp_matrices - 2
    rope = m.rotary * where(m.kv_lora > 0, 0.0, e * (m.heads + m.kv_heads) * m.head_dim)
    return gated * e * tokens * f / t, rope * tokens / t, scattered * tokens / t


def lora_saved_inputs(w: TrainingArrays, e: Array, g: Array) -> LoraInputs:
    """Bytes per element kept of the QKV, MLP and down-projection inputs under LoRA. A frozen linear layer
    keeps no input: only its weight gradient would read it (Transformer Engine Linear / LayerNormLinear /
    LayerNormMLP save it only when `backward_needs_input = is_grad_enabled and weight.requires_grad`;
    PyTorch's matmul backward likewise saves an operand only for the other's gradient). An adapted one
    keeps it at 16 bits for its adapter's A gradient (NeMo's ParallelLinearAdapter runs in bf16, beside the
    fp8 GEMM). The attention output (the output projection's input) stays: FlashAttention's backward reads
    it. A QLoRA base keeps every input: bitsandbytes' 4-bit matmul saves its input whenever any of its inputs
    needs a gradient, the activation always does (bitsandbytes autograd/_functions.py MatMul4Bit.forward:
    `if any(ctx.needs_input_grad[:2]): ctx.tensors = (A, B)`). Without LoRA: g each. Last, the bytes per
    element of the q, k and v adapter outputs that LitGPT's LoRAQKVLinear scatters into the QKV width when it
    adapts some but not all of them (`zero_pad`: `index_copy` keeps its source; `eager_activations`).
    With the adapters' dropout (`Lora.dropout`), A's gradient reads the dropped input instead, kept at e bytes
    beside its 1-byte mask (PyTorch native_dropout saves its bool mask: derivatives.yaml native_dropout_backward),
    one per adapted input (LitGPT's LoRAQKVLinear drops x once before its stacked A: lit_gpt/lora.py @8641822),
    the input itself only where the base keeps it (QLoRA)."""
    def kept(adapted: Array) -> Array:
        dropped = w.base_dequantize * e + adapted * (e + 1.0)
        return where(w.frozen, where(w.lora_dropout > 0, dropped, maximum(adapted, w.base_dequantize) * e), g)

    adapted = maximum(w.lora_q, maximum(w.lora_k, w.lora_v))
    partial = adapted * (1 - minimum(w.lora_q, minimum(w.lora_k, w.lora_v))) * e
    return (kept(adapted), kept(maximum(w.lora_gate, w.lora_up)), kept(w.lora_down),
            (partial * w.lora_q, partial * w.lora_k, partial * w.lora_v))


def microbatches_in_flight(st: StrategyArrays, microbatches: Array, stage: Array = 0.0) -> Array:
    """Micro-batches whose activations pipeline stage `stage` (0 = first) holds at its peak (docs/formulas.md §5):
    GPipe m; 1F1B min(p - stage, m); interleaved min(p, m) * (1 + (p-1)/(p*v)) (Korthikanti §4.2.3)."""
    p, v = st.pp, st.vpp
    one_f_one_b = minimum(p - stage, microbatches)
    interleaved = one_f_one_b * (1 + (p - 1) / (p * v))
    return where(st.schedule == SCHEDULE_GPIPE, microbatches,
                    where(st.schedule == SCHEDULE_INTERLEAVED, interleaved, one_f_one_b))


def stage_activations(stored_per_microbatch: Array, checkpointed_per_microbatch: Array, working: Array,
                      st: StrategyArrays, microbatches: Array, stage: Array = 0.0) -> tuple[Array, Array]:
    """(activations, checkpoints) bytes of pipeline stage `stage` at its peak, from what its layers store
    per micro-batch (of which layer inputs kept for full recomputation) and what one layer holds while its
    backward runs."""
    in_flight = microbatches_in_flight(st, microbatches, stage)
    checkpoints = checkpointed_per_microbatch * in_flight
    # under full recompute one layer's activations are rebuilt during its backward
    rebuilt = where(st.recompute == RECOMPUTE_FULL, working, 0.0)
    return (stored_per_microbatch - checkpointed_per_microbatch) * in_flight + rebuilt, checkpoints


def _fp8_family(st: StrategyArrays) -> Array:
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
    return where(_fp8_family(st) > 0, quantized, per_precision(WEIGHT_BYTES, st.precision))


def gathered_weight_bytes(params: Array, st: StrategyArrays) -> Array:
    """Bytes of `params` parameters that a ZeRO / distributed-optimizer parameter all-gather moves: the 16-bit
    weights (Megatron-Core's param buffer holds the model's bf16 parameters, the fp8 copies are made after
    the gather), fp32 in fp32 training; with `fp8_params` the quantized weights, one (rowwise) copy
    (Megatron-LM --fp8-param-gather: 'perform the param all-gather in fp8')."""
    recipe = where(_fp8_family(st) > 0, 2.0, per_precision(WEIGHT_BYTES, st.precision))
    return params * where(st.fp8_params > 0, per_precision(QUANTIZED_INPUT_BYTES, st.block_format), recipe)


def saved_input_bytes(st: StrategyArrays) -> Array:
    """Bytes per element of a GEMM input kept for the weight gradient (`SAVED_GEMM_INPUT_BYTES`; the fp8
    family's quantized copy at its block format's bytes: `QUANTIZED_INPUT_BYTES`)."""
    return where(_fp8_family(st) > 0, per_precision(QUANTIZED_INPUT_BYTES, st.block_format),
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
