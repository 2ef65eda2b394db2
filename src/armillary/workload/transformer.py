"""What one transformer layer computes for one micro-batch on one tensor-parallel rank.

FLOPs follow Narayanan et al. SC'21, Appendix (a GEMM (M x K)(K x N) is 2MKN FLOPs; attention scores
and attention over V count the full s x s matrix, as Megatron and Korthikanti et al. count them:
formulas.md §3.1, §3.5). Bytes are HBM traffic (operands read, results written). Element-wise traffic is
derived from the tensors each fused Megatron kernel reads and writes (formulas.md §12) and is marked
[derived]. All functions broadcast over arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.specs.arrays import Array, ModelArrays, where


@dataclass(frozen=True)
class Op:
    """One kernel (or one group of identical kernels): FLOPs and HBM bytes, per device."""

    flop: Array
    bytes: Array


def gemm(M: Array, N: Array, K: Array, batch: Array, element_bytes: Array) -> Op:
    """Batched GEMM (M x K)(K x N): 2MKN FLOPs per batch entry; reads both operands, writes the result."""
    return Op(flop=2 * batch * M * N * K, bytes=batch * (M * K + K * N + M * N) * element_bytes)


def stream(bytes_moved: Array) -> Op:
    """A memory-bound element-wise kernel: no matrix FLOPs, only traffic."""
    return Op(flop=0.0 * bytes_moved, bytes=bytes_moved)


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
        return (self.norms, self.residuals, self.activation, self.rotary)


def keys_attended(s: Array, window: Array) -> Array:
    """Mean keys a query attends under a causal mask: s/2; with a sliding window w < s, w (1 - w / 2s)
    (the first w queries see fewer). The separate-kernel (standard) path computes all s keys and masks."""
    windowed = window * (1 - window / (2 * s))
    return where((window > 0) & (window < s), windowed, s / 2)


def sequence_shards(t: Array, sp: Array) -> Array:
    """Ways the sequence is split outside the TP regions: t with sequence parallelism, else 1
    (Korthikanti et al. §4.2.2)."""
    return 1 + sp * (t - 1)


def layer_forward(m: ModelArrays, b: Array, s: Array, t: Array, sp: Array, e: Array,
                  cp: Array = 1.0) -> LayerForward:
    """Kernels of one layer's forward pass on one TP rank.

    b micro-batch, s sequence, t tensor-parallel degree, sp sequence parallel (0/1), e activation bytes,
    cp context-parallel degree: this rank holds s/cp of the sequence and attends over all s keys.
    """
    h, a, kv, dh, f = m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn
    q = s / cp  # this rank's queries (tokens)
    T = b * q
    T_norm = T / sequence_shards(t, sp)  # with sequence parallelism norms and dropouts see s/t tokens
    gated = m.mlp_matrices - 2
    attn = b * (a / t) * q * s  # elements of the score matrix on this rank
    return LayerForward(
        qkv=gemm(T, (a + 2 * kv) * dh / t, h, 1, e),
        attention_scores=gemm(q, s, dh, b * a / t, e),
        attention_over_v=gemm(q, dh, s, b * a / t, e),
        out_proj=gemm(T, h, a * dh / t, 1, e),
        mlp_in=gemm(T, (m.mlp_matrices - 1) * f / t, h, 1, e),
        mlp_out=gemm(T, h, f / t, 1, e),
        # [derived] read x, write y, per norm
        norms=stream(2 * 2 * T_norm * h * e),
        # [derived] read bias-added output and residual, write sum (+1-byte dropout mask), per block
        residuals=stream(2 * T_norm * h * (3 * e + m.dropout)),
        # [derived] read scores, write probabilities; dropout reads them, writes result and 1-byte mask
        softmax=stream(attn * (2 * e + m.dropout * (2 * e + 1))),
        # [derived] GeLU: read, write T x f/t; gated: read gate and up, write product
        activation=stream(T * (f / t) * e * (2 + gated)),
        rotary=stream(m.rotary * 2 * T * (a + kv) * dh / t * e),
        # FlashAttention-2 (Dao 2023 §4.1): 4 s k d per head for k keys per query: causal masking halves
        # it (the masked blocks are skipped; context parallelism balances the causal chunks), a sliding
        # window keeps only the keys inside it; reads Q, K, V and writes O once
        flash_attention=Op(flop=4 * b * (a / t) * q * keys_attended(s, m.window) * dh,
                           bytes=(T * 2 * a + b * s * 2 * kv) * dh / t * e),
    )


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


def layer_forward_flop(m: ModelArrays, b: Array, s: Array) -> Array:
    """Model FLOPs of one layer's forward for b sequences (no parallelism): 24bsh^2 + 4bs^2h for GPT
    (SC'21 Appendix), generalized for GQA, head_dim and gated MLPs (formulas.md §3.4)."""
    fw = layer_forward(m, b, s, 1.0, 0.0, 2.0)
    return sum(op.flop for op in fw.gemms)


def tp_message_bytes(m: ModelArrays, b: Array, s: Array, e: Array) -> Array:
    """Size of each TP collective: the b x s x h activation (SC'21 §3.2; Korthikanti §4.2.2)."""
    return b * s * m.hidden * e
