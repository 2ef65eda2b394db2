"""Exact parameter counts of a language model (dense, MoE, MLA, MatMul-free), over arrays."""

from __future__ import annotations

from dataclasses import dataclass

from armillary.numerics import Array, where
from armillary.plan.arrays import ModelArrays


@dataclass(frozen=True)
class ParameterCount:
    """Parameters by place. A layer is attention (or the MLGRU token mixer) + its norms, and then either a
    dense MLP or an MoE block: router and shared experts (replicated like attention) plus routed experts
    (split over expert-parallel ranks)."""

    attention: Array  # per layer: token mixer and the layer's two norms
    dense_mlp: Array  # per dense layer
    moe_shared: Array  # per MoE layer: router and shared experts
    expert: Array  # one routed expert
    embedding: Array  # token (+ learned position) embeddings
    head: Array  # final norm + LM head (no LM-head weights when tied)
    dense_layers: Array
    moe_layers: Array
    experts: Array
    top_k: Array

    @property
    def dense_layer(self) -> Array:
        return self.attention + self.dense_mlp

    @property
    def moe_layer_replicated(self) -> Array:
        """The part of an MoE layer every expert-parallel rank holds."""
        return self.attention + self.moe_shared

    @property
    def total(self) -> Array:
        return (self.embedding + self.head + self.dense_layers * self.dense_layer
                + self.moe_layers * (self.moe_layer_replicated + self.experts * self.expert))

    @property
    def active(self) -> Array:
        """Parameters one token uses: top_k routed experts instead of all (DeepSeek-V3 report's 37B of 671B
        counts the embedding and the head, as here)."""
        return self.total - self.moe_layers * (self.experts - self.top_k) * self.expert


def count_parameters(m: ModelArrays) -> ParameterCount:
    """For GPT (MHA, 4h GeLU MLP, biases, LayerNorm, learned positions) this is
    12*l*h^2 + 13*l*h + (V + s)*h (+2h final norm): Narayanan et al. SC'21 Eq. 2 (with 2h for the final
    LayerNorm that Eq. 2 leaves out)."""
    h, a, f = m.hidden, m.heads, m.ffn
    dh, dv, mm, bias, norm = m.head_dim, m.value_dim, m.mlp_matrices, m.linear_bias, m.norm_params
    # multi-head / grouped-query attention: Q (a heads), K and V (kv heads), output projection
    qkv_out = m.qkv_width
    gqa = h * qkv_out + a * dv * h + bias * (qkv_out + h) + m.qkv_bias * qkv_out
    # multi-head latent attention (DeepSeek-V2 §2.1.2-2.1.3): query down (norm) up or direct; KV down to the
    # latent plus the shared RoPE key, norm, up to per-head no-RoPE keys and values; output projection
    r, dc, dq = m.rope_dim, m.kv_lora, m.q_lora
    query = where(dq > 0, h * dq + norm * dq + dq * a * dh, h * a * dh)
    mla = query + h * (dc + r) + norm * dc + dc * a * (dh - r + dv) + a * dv * h
    # the MLGRU's i, f, g, o projections have the shapes of MHA's Q, K, V, O (Zhu et al. 2024 §3.3.1)
    attention = (where(dc > 0, mla, gqa) + 2 * norm * h + m.qk_norm * norm * 2 * dh + m.attention_sinks * a)
    # MatMul-free LM (ridgerchu/matmulfreellm HGRNBit): each BitLinear normalizes its input (i, f, g, o:
    # 4h; gate-up: h; down: f, in the MLP), plus the token mixer's output norm and lower bound (h each)
    attention = attention + m.ternary * norm * 7 * h

    def mlp(width: Array) -> Array:
        return mm * h * width + bias * ((mm - 1) * width + where(width > 0, h, 0.0))

    embedding = m.vocab * h + m.learned_positions * m.max_seq_len * h
    head = norm * h + (1 - m.tied_embeddings) * m.vocab * h + m.ternary * norm * h  # BitLinear head norm
    return ParameterCount(
        attention=attention, dense_mlp=mlp(f) + m.ternary * norm * f,
        moe_shared=where(m.experts > 0, h * m.experts + m.router_bias * m.experts + mlp(m.shared_ffn), 0.0),
        expert=mlp(m.expert_ffn), embedding=embedding, head=head, dense_layers=m.dense_layers,
        moe_layers=m.moe_layers, experts=m.experts, top_k=m.top_k)
