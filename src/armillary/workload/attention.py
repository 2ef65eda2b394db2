"""Attention-specific quantities: keys a query attends under a mask, the HBM traffic of the attention
kernels (FlashAttention's IO complexity), and the per-token KV cache of each attention kind."""

from __future__ import annotations

import math

from armillary.specs.arrays import Array, ModelArrays, where


def keys_attended(s: Array, window: Array, window_layers: Array = 1.0) -> Array:
    """Mean keys a query attends under a causal mask: s/2; with a sliding window w < s, w (1 - w / 2s)
    (the first w queries see fewer), on the `window_layers` fraction of layers that use it. The
    separate-kernel (standard) path computes all s keys and masks."""
    windowed = window * (1 - window / (2 * s))
    local = where((window > 0) & (window < s), windowed, s / 2)
    return window_layers * local + (1 - window_layers) * s / 2


def standard_attention_hbm_accesses(n: float, d: float) -> float:
    """Elements read and written by standard attention of one head (Dao et al. 2022, Algorithm 0): Q, K
    read, S = QK^T written (2Nd + N^2); S read, P = softmax(S) written (2N^2); P, V read, O written
    (N^2 + 2Nd). Theorem 2: Theta(Nd + N^2)."""
    return 4 * n * d + 4 * n * n


def flash_attention_hbm_accesses(n: float, d: float, sram: float, version: int = 1) -> float:
    """Elements read and written by FlashAttention for one head of N tokens, head dimension d and M = `sram`
    elements of on-chip memory. Block sizes B_c = ceil(M / 4d), B_r = min(B_c, d) (Dao et al. 2022, Alg. 1).
    Version 1 (Alg. 1): K_j, V_j are read once; for each of the T_c = ceil(N / B_c) key blocks every
    Q_i, O_i, l_i, m_i is read and O_i, l_i, m_i written: 2Nd + T_c (3Nd + 4N) = Theta(N^2 d^2 / M)
    (Theorem 2). Version 2 (Dao 2023, Alg. 1) swaps the loops: Q_i is read and O_i, L_i written once, K and
    V are read once per query block: 2Nd + N + T_r 2Nd with T_r = ceil(N / B_r)."""
    if not d <= sram <= n * d:
        raise ValueError(f"FlashAttention's analysis needs d <= M <= N d; got d={d}, M={sram}, N={n}")
    block_c = math.ceil(sram / (4 * d))
    block_r = min(block_c, d)
    if version == 1:
        return 2 * n * d + math.ceil(n / block_c) * (3 * n * d + 4 * n)
    return 2 * n * d + n + math.ceil(n / block_r) * 2 * n * d


def kv_cache_elements_per_token(m: ModelArrays) -> Array:
    """Elements cached per token and layer: 2 n_kv d_h for MHA / GQA / MQA; the compressed latent plus
    the shared RoPE key, d_c + d_h^R, for MLA (DeepSeek-V2 §2.1.4, Table 1); the MatMul-free LM keeps a
    fixed recurrent state instead (0 per token)."""
    gqa = m.kv_width
    return where(m.mlgru > 0, 0.0, where(m.kv_lora > 0, m.kv_lora + m.rope_dim, gqa))
