"""LoRA adapters of one decoder layer (Hu et al. 2021, arXiv:2106.09685 §4.1): beside a frozen linear
layer W (d_in x d_out) a trained B·A of rank r, A: d_in x r, B: r x d_out, its output added to W's. Per
token an adapter's forward is two skinny GEMMs, 2·r·(d_in + d_out) FLOPs; backward runs them twice more
(input gradient through A and B, weight gradients of A and B). QLoRA (Dettmers et al. 2023,
arXiv:2305.14314 §3) stores W in 4-bit NormalFloat and dequantizes it to bf16 before each GEMM.
"""

from __future__ import annotations

from armillary.numerics import Array, maximum
from armillary.plan.arrays import ModelArrays, TrainingArrays
from armillary.workload.ops import Op, stream


def adapter_widths(m: ModelArrays, w: TrainingArrays, mlp_width: Array | None = None) -> tuple[Array, Array]:
    """(sum of d_in, sum of d_out) over a layer's adapters, whole layer (all TP ranks). Fused: one adapter
    reads the QKV input for q, k and v (Megatron / NeMo linear_qkv) and one the MLP input for gate and up
    (linear_fc1), its B as wide as the targeted outputs; else one adapter per projection (PEFT)."""
    h, f = m.hidden, m.ffn if mlp_width is None else mlp_width
    q_out, k_out, v_out = m.heads * m.head_dim, m.kv_heads * m.head_dim, m.kv_heads * m.value_dim
    gated = m.mlp_matrices - 2  # a non-gated MLP has no gate projection
    attention_in = w.lora_q + w.lora_k + w.lora_v
    mlp_in = gated * w.lora_gate + w.lora_up
    fused = w.lora_fused
    d_in = (h * (fused * maximum(w.lora_q, maximum(w.lora_k, w.lora_v)) + (1 - fused) * attention_in)
            + w.lora_o * m.heads * m.value_dim
            + h * (fused * maximum(gated * w.lora_gate, w.lora_up) + (1 - fused) * mlp_in)
            + w.lora_down * f)
    d_out = (w.lora_q * q_out + w.lora_k * k_out + w.lora_v * v_out + w.lora_o * h + mlp_in * f
             + w.lora_down * h)
    return d_in, d_out


def adapter_parameters(m: ModelArrays, w: TrainingArrays, mlp_width: Array | None = None) -> Array:
    """Trained parameters of one layer's adapters: r·(d_in + d_out) each (Hu et al. 2021 §4.1); 0 without
    LoRA."""
    d_in, d_out = adapter_widths(m, w, mlp_width)
    return w.lora_rank * (d_in + d_out)


def adapter_forward(m: ModelArrays, w: TrainingArrays, tokens: Array, t: Array, e: Array,
                    mlp_width: Array | None = None) -> Op:
    """The adapters' forward on one TP rank for `tokens` tokens: 2·r·(d_in + d_out) FLOPs per token
    (Hu et al. 2021 §4.1), split over the t ranks as the base layer is (NeMo ParallelLinearAdapter shards A
    or B with the layer; the rank-r all-reduces are negligible and not priced). Bytes [derived]: read the
    input, read and write the base output the adapter adds to, the r-wide intermediate out and back, and
    the adapters' weights; at 16 bits (the adapters run in bf16 under every recipe)."""
    d_in, d_out = adapter_widths(m, w, mlp_width)
    r = w.lora_rank
    adapters = (w.lora_q + w.lora_k + w.lora_v + w.lora_o + w.lora_gate + w.lora_up + w.lora_down)
    return Op(flop=2 * tokens * r * (d_in + d_out) / t,
              bytes=(e * tokens * (d_in + 2 * d_out) + 2 * e * tokens * r * adapters + e * r * (d_in + d_out)) / t,
              kernels=2 * adapters, depth=r)


def base_layer_weights(m: ModelArrays, t: Array, mlp_width: Array | None = None) -> Array:
    """Weights of one layer's linear layers on one TP rank (QKV, output, MLP)."""
    f = m.ffn if mlp_width is None else mlp_width
    return (m.hidden * m.qkv_width + m.heads * m.value_dim * m.hidden + m.mlp_matrices * m.hidden * f) / t


def dequantize(m: ModelArrays, w: TrainingArrays, t: Array, mlp_width: Array | None = None) -> Op:
    """QLoRA's dequantization of one layer's base weights before its GEMMs (Dettmers et al. 2023 §3: NF4
    storage, bf16 computation; bitsandbytes dequantizes the whole matrix, then runs the bf16 GEMM): read
    the stored weights, write them at 2 bytes [derived]. Once per forward and once per backward (the input
    gradient needs W again); 0 unless the base is nf4."""
    return stream(w.base_dequantize * base_layer_weights(m, t, mlp_width) * (w.base_bytes + 2.0))
