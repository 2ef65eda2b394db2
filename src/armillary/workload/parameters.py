"""Exact parameter counts of a dense transformer, over arrays."""

from __future__ import annotations

from dataclasses import dataclass

from armillary.specs.arrays import Array, ModelArrays


@dataclass(frozen=True)
class ParameterCount:
    per_layer: Array  # one transformer block: attention, MLP, two norms, biases
    embedding: Array  # token (+ learned position) embeddings
    head: Array  # final norm + LM head (no LM-head weights when tied)
    layers: Array

    @property
    def total(self) -> Array:
        return self.embedding + self.layers * self.per_layer + self.head


def count_parameters(m: ModelArrays) -> ParameterCount:
    """Parameters by place. For GPT (MHA, 4h GeLU MLP, biases, LayerNorm, learned positions) this is
    12*l*h^2 + 13*l*h + (V + s)*h (+2h final norm): Narayanan et al. SC'21 Eq. 2 (with 2h for the final
    LayerNorm that Eq. 2 leaves out)."""
    h, dh, a, kv, f = m.hidden, m.head_dim, m.heads, m.kv_heads, m.ffn
    qkv_out = (a + 2 * kv) * dh
    attention = h * qkv_out + a * dh * h + m.linear_bias * (qkv_out + h)
    mlp = m.mlp_matrices * h * f + m.linear_bias * ((m.mlp_matrices - 1) * f + h)
    per_layer = attention + mlp + 2 * m.norm_params * h
    embedding = m.vocab * h + m.learned_positions * m.max_seq_len * h
    head = m.norm_params * h + (1 - m.tied_embeddings) * m.vocab * h
    return ParameterCount(per_layer=per_layer, embedding=embedding, head=head, layers=m.layers)
