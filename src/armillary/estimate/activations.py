"""Activations per device: what one layer stores for backward under each recompute mode (Korthikanti et al.
2022 §4, docs/formulas.md §4.3, generalized to GQA, head_dim, gated MLPs, MoE, MLA, LoRA and eager kernels), what
a pipeline stage holds at its peak (§5), and the loss's logits."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from armillary.memo import quick_init
from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.codes import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, SCHEDULE_GPIPE, SCHEDULE_INTERLEAVED
from armillary.plan.layout import rank_queries
from armillary.workload.experts import ExpertsForward
from armillary.workload.transformer import sequence_shards

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
                      st: StrategyArrays, microbatches: Array, stage: Array = 0.0,
                      rebuilt: Array | None = None) -> tuple[Array, Array]:
    """(activations, checkpoints) bytes of pipeline stage `stage` at its peak, from what its layers store
    per micro-batch (of which layer inputs kept for full recomputation) and what one layer holds while its
    backward runs. `rebuilt`: `rebuilt_working(st.recompute, working)` where the caller has it (the same for every
    stage)."""
    in_flight = microbatches_in_flight(st, microbatches, stage)
    checkpoints = checkpointed_per_microbatch * in_flight
    if rebuilt is None:
        rebuilt = rebuilt_working(st.recompute, working)
    return (stored_per_microbatch - checkpointed_per_microbatch) * in_flight + rebuilt, checkpoints


def rebuilt_working(recompute: Array, working: Array) -> Array:
    """Under full recompute (`Strategy.recompute`'s code) one layer's activations (`working`) are rebuilt during its
    backward."""
    return where(recompute == RECOMPUTE_FULL, working, 0.0)


def logit_bytes(st: StrategyArrays, e: Array) -> Array:
    """Bytes per logit alive at the loss's peak (`Strategy.cross_entropy`). fused: the fp32 logits and their
    16-bit source, 4 + e (Megatron's vocab-parallel cross-entropy). eager_fp32: the output cast to fp32 and
    PyTorch's F.cross_entropy run op by op (torchtitan of 2024: `self.output(h).float()`, the train loop deletes
    the logits before backward): log_softmax keeps its fp32 output for backward (PyTorch derivatives.yaml,
    _log_softmax_backward_data reads the result), and nll_loss's gradient and log_softmax's input gradient,
    fp32 each, are alive beside it as backward starts: 12 [derived]."""
    return where(st.cross_entropy > 0, 12.0, 4 + e)
