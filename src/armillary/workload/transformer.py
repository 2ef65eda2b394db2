"""What one transformer layer computes for one micro-batch on one tensor-parallel rank.

FLOPs follow Narayanan et al. SC'21, Appendix (a GEMM (M x K)(K x N) is 2MKN FLOPs; attention scores
and attention over V count the full s x s matrix, as Megatron and Korthikanti et al. count them:
docs/formulas.md §3.1, §3.5). Bytes are HBM traffic (operands read, results written). Element-wise traffic is
derived from the tensors each fused Megatron kernel reads and writes (docs/formulas.md §12) and is marked
[derived]. All functions broadcast over arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.memo import quick_init
from armillary.numerics import Array, where
from armillary.plan.arrays import ModelArrays
from armillary.plan.layout import rank_queries
from armillary.workload.attention import fused_attention_op
from armillary.workload.ops import Op, gemm, stream


@quick_init  # 23 fields, one or more an estimate (memo.quick_init: the same frozen dataclass, built faster)
@dataclass(frozen=True)
class LayerForward:
    """Forward kernels of one layer. Backward runs each GEMM twice (input and weight gradient) and each
    element-wise kernel with about twice the traffic."""

    qkv: Op
    attention_scores: Op  # Q K^T
    attention_over_v: Op
    out_proj: Op
    mlp_in: Op  # up (and gate) projection
    mlp_out: Op
    norms: Op  # two pre-norms
    residuals: Op  # two (bias-)dropout-add kernels
    softmax: Op  # scale-mask-softmax (+ attention dropout)
    activation: Op  # GeLU / SwiGLU
    rotary: Op
    flash_attention: Op  # the fused kernel that replaces scores, softmax and attention over V
    recurrence: Op  # MLGRU token mixer: the element-wise recurrence and output gate (no attention core)
    quantize: Op  # BitLinear: activation (and, dequantizing, weight) quantization before each projection
    additions: Array = 0.0  # share of nonzero ternary weights when the projections run as additions, else 0
    latent_up: Op = Op(0.0, 0.0)  # noqa: RUF009 (Op is frozen) MLA's up-projections: the part of `qkv` that mla_up_proj recomputes
    key_share: Array = 0.0  # the K projection's share of `qkv`
    gated: Array = 0.0  # 1 when `mlp_in` is a gate and an up projection side by side
    sixteen_bit_attention: bool = False  # QKV and output projection at 16 bits under an fp8 recipe
    # elements of the weight GEMMs' inputs and outputs, (attention projections, MLP): what a block-scaled
    # recipe quantizes (inputs in forward, output gradients in backward; docs/fp4.md)
    gemm_inputs: tuple[Array, Array] = (0.0, 0.0)
    gemm_outputs: tuple[Array, Array] = (0.0, 0.0)
    layers: Array = 0.0  # the model's layers (the share a recipe keeps in bf16 is counted over them)
    latent_inputs: Array = 0.0  # MLA: elements of the up-projections' inputs (tokens x (q_lora + kv_lora))

    @property
    def gemms(self) -> tuple[Op, ...]:
        return (self.qkv, self.attention_scores, self.attention_over_v, self.out_proj, self.mlp_in, self.mlp_out)

    @property
    def dense_gemms(self) -> tuple[Op, ...]:
        """The weight GEMMs (everything but the attention core)."""
        return (self.qkv, self.out_proj, self.mlp_in, self.mlp_out)

    @property
    def core_gemms(self) -> tuple[Op, ...]:
        return (self.attention_scores, self.attention_over_v)

    @property
    def dense_streams(self) -> tuple[Op, ...]:
        return (self.norms, self.residuals, self.activation, self.rotary, self.recurrence, self.quantize)


def sequence_shards(t: Array, sp: Array) -> Array:
    """Ways the sequence is split outside the TP regions: t with sequence parallelism, else 1
    (Korthikanti et al. §4.2.2)."""
    return 1 + sp * (t - 1)


def layer_forward(m: ModelArrays, b: Array, s: Array, t: Array, sp: Array, e: Array,
                  cp: Array = 1.0, mlp_width: Array | None = None, weight_bytes: Array | None = None,
                  attention_weight_bytes: float | None = None, eager_yarn: Array = 0.0) -> LayerForward:
    """Kernels of one layer's forward pass on one TP rank.

    b micro-batch, s sequence, t tensor-parallel degree, sp sequence parallel (0/1), e activation bytes,
    cp context-parallel degree: this rank holds s/cp of the sequence and attends over all s keys.
    `mlp_width` is the intermediate size of the layer's dense MLP: `ffn` (default), or the shared experts'
    total in an MoE layer (whose routed experts are `experts.experts_forward`).
    Inference: `weight_bytes` per weight element (quantized weights; default e); attention over a KV cache
    is built by `attention.fused_attention_op` with the cached tokens. `attention_weight_bytes`: the QKV and
    output projections' weights where an fp8 checkpoint keeps them at 16 bits (their GEMMs then run at 16 bits).
    `eager_yarn` 1: a YaRN model's rotary embedding runs op by op, as Megatron-Core's unfused
    `_apply_rotary_pos_emb_bshd` (megatron/core/models/common/embeddings/rope_utils.py, core_v0.15.0): Megatron-Bridge
    turns `apply_rope_fusion` off unless position_embedding_type is "rope" (or MLA's), and GPT-OSS's is "yarn"
    (src/megatron/bridge/utils/fusions.py `validate_rope_fusion_compatibility`, v0.2.0 to v0.4.2; GPTOSSProvider).
    Over the X elements of Q and K: t * cos (read and write X), the rotated half (-x2 and a cat: 3 X), times sin
    (2 X), the sum (3 X) and the cat with the unrotated part (2 X): 12 X against a fused kernel's 2 X [derived
    from that code]; MLA's rotary part is fused (not counted here).
    """
    h, a, kv, dh, dv = m.hidden, m.heads, m.kv_heads, m.head_dim, m.value_dim
    f = m.ffn if mlp_width is None else mlp_width
    q = rank_queries(s, cp)  # this rank's queries (tokens)
    T = b * q
    T_norm = T / sequence_shards(t, sp)  # with sequence parallelism norms and dropouts see s/t tokens
    gated = m.mlp_matrices - 2
    attends = 1 - m.mlgru  # the MLGRU token mixer has no attention core
    keys = s
    attn = attends * b * (a / t) * q * keys  # elements of the score matrix on this rank
    core_batch = attends * b * a / t  # the attention GEMMs' batch: heads x sequences on this rank
    qkv_width, out_width, ffn_width = m.qkv_width, a * dv / t, f / t  # (each read or computed once)
    # ternary weights run as additions read 8-bit inputs and 2-bit packed weights (docs/formulas.md §10)
    adds = m.ternary_additions
    w_bytes = e if weight_bytes is None else weight_bytes
    e_in, e_w = (e, w_bytes) if not isinstance(adds, np.ndarray) and adds == 0 else (
        where(adds > 0, 1.0, e), where(adds > 0, 0.25, w_bytes))
    e_a = e_w if attention_weight_bytes is None else attention_weight_bytes  # the attention projections'
    qkv = gemm(T, qkv_width / t, h, 1, e, e_in, e_a)
    latent_up = Op(0.0, 0.0)
    latent_inputs: Array = 0.0
    if isinstance(m.kv_lora, np.ndarray) or m.kv_lora > 0:  # multi-head latent attention
        (mla, up), latent = _latent_projections(m, T, t, e, w_bytes), m.kv_lora > 0
        latent_inputs = where(latent, T * (m.q_lora + m.kv_lora), 0.0)  # q_lora 0: no query up-projection
        qkv = Op(where(latent, mla.flop, qkv.flop), where(latent, mla.bytes, qkv.bytes), where(latent, mla.group, 1.0),
                 where(latent, mla.kernels, 1.0), where(latent, mla.depth, qkv.depth))
        latent_up = Op(where(latent, up.flop, 0.0), where(latent, up.bytes, 0.0))
    # BitLinear quantizes each projection's input per token to 8 bits [derived: read e, write 1 byte]; the
    # released code also fake-quantizes each weight matrix every forward (read and write it, e bytes)
    dense_inputs = T * (h + out_width + h + ffn_width)  # QKV (one read for the three), out, MLP in, MLP out
    weights = (h * qkv_width + a * dv * h) / t + m.mlp_matrices * h * f / t
    return LayerForward(
        qkv=qkv, key_share=where(m.kv_lora > 0, 0.0, kv * dh / qkv_width), gated=gated,
        attention_scores=gemm(q, keys, dh, core_batch, e),
        attention_over_v=gemm(q, dv, keys, core_batch, e),
        out_proj=gemm(T, h, out_width, 1, e, e_in, e_a),
        mlp_in=gemm(T, (m.mlp_matrices - 1) * f / t, h, 1, e, e_in, e_w),
        mlp_out=gemm(T, h, ffn_width, 1, e, e_in, e_w),
        # [derived] read x, write y, per norm
        norms=stream(2 * 2 * T_norm * h * e),
        # [derived] read bias-added output and residual, write sum (+1-byte dropout mask), per block
        residuals=stream(2 * T_norm * h * (3 * e + m.dropout)),
        # [derived] read scores, write probabilities; dropout reads them, writes result and 1-byte mask
        softmax=stream(attn * (2 * e + m.dropout * (2 * e + 1))),
        # [derived] GeLU: read, write T x f/t; gated: read gate and up, write product
        activation=stream(T * ffn_width * e * (2 + gated)),
        rotary=stream(attends * m.rotary * (2 + eager_yarn * m.yarn * where(m.kv_lora > 0, 0.0, 10.0))
                      * T * (a + kv) * dh / t * e),
        flash_attention=fused_attention_op(m, b, q, keys, t, e, chunks=cp),
        # [derived] MLGRU (Zhu et al. 2024 §3.3.1; HGRNBitAttention): the recurrence reads i, f and writes h;
        # the output gate reads h, g and writes o: 6 T h/t elements
        recurrence=stream(m.mlgru * 6 * T * h / t * e),
        quantize=stream(m.ternary * (dense_inputs * (e + 1) + (1 - m.ternary_additions) * 2 * weights * e)),
        additions=adds * m.nonzero_fraction,
        latent_up=latent_up, sixteen_bit_attention=attention_weight_bytes is not None,
        gemm_inputs=(T * (h + out_width), T * (h + ffn_width)),
        gemm_outputs=(T * (qkv_width / t + h), T * ((m.mlp_matrices - 1) * f / t + h)), layers=m.layers,
        latent_inputs=latent_inputs,
    )


def _latent_projections(m: ModelArrays, T: Array, t: Array, e: Array, w: Array) -> tuple[Op, Op]:
    """MLA's projections (DeepSeek-V2 §2.1.2-2.1.3) as one op, and the up-projections among them: the query
    and KV down-projections run on every TP rank (Megatron keeps them unsplit), the up-projections are
    split by heads."""
    h, a, dh, dv, r, dc, dq = m.hidden, m.heads, m.head_dim, m.value_dim, m.rope_dim, m.kv_lora, m.q_lora
    direct_q = gemm(T, a * dh / t, h, 1, e, e, w)
    q_down, q_up = gemm(T, dq, h, 1, e, e, w), gemm(T, a * dh / t, dq, 1, e, e, w)
    kv_down, kv_up = gemm(T, dc + r, h, 1, e, e, w), gemm(T, a * (dh - r + dv) / t, dc, 1, e, e, w)
    with_lora = dq > 0
    flop = where(with_lora, q_down.flop + q_up.flop, direct_q.flop) + kv_down.flop + kv_up.flop
    moved = where(with_lora, q_down.bytes + q_up.bytes, direct_q.bytes) + kv_down.bytes + kv_up.bytes
    up = Op(where(with_lora, q_up.flop, 0.0) + kv_up.flop, where(with_lora, q_up.bytes, 0.0) + kv_up.bytes)
    depth = where(with_lora, q_down.depth + q_up.depth, direct_q.depth) + kv_down.depth + kv_up.depth
    kernels = where(with_lora, 4.0, 3.0)
    return Op(flop, moved, kernels, kernels, depth), up


@quick_init  # (memo.quick_init)
@dataclass(frozen=True)
class Ends:
    """Kernels outside the layers: embedding on the first stage, final norm, LM head and loss on the last."""

    embedding: Op
    head_gemm: Op
    loss: Op  # final norm + vocabulary-parallel cross entropy over fp32 logits


def ends_forward(m: ModelArrays, b: Array, s: Array, t: Array, e: Array) -> Ends:
    h, V = m.hidden, m.vocab
    T = b * s
    return Ends(
        embedding=stream(2 * T * h * e),  # [derived] gather rows, write activations
        head_gemm=gemm(T, V / t, h, 1, e),  # SC'21 Appendix: 2BshV forward
        # [derived] norm (2 T h e); logits read in e, cast and softmax in fp32 (write 4, read 4)
        loss=stream(2 * T * h * e + T * (V / t) * (e + 8)),
    )


def tp_message_bytes(m: ModelArrays, b: Array, s: Array, e: Array) -> Array:
    """Size of each TP collective: the b x s x h activation (SC'21 §3.2; Korthikanti §4.2.2)."""
    return b * s * m.hidden * e
