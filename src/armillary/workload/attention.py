"""Attention-specific quantities: keys a query attends under a mask, the HBM traffic of the attention
kernels (FlashAttention's IO complexity), and the per-token KV cache of each attention kind."""

from __future__ import annotations

import math

from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.arrays import ModelArrays
from armillary.workload.ops import Op


def keys_attended(s: Array, window: Array, window_layers: Array = 1.0, past: Array = 0.0) -> Array:
    """Mean keys a query attends under a causal mask when the queries are the last s - past of s positions
    (past = tokens already in the KV cache; 0 in training and prefill): (s + past) / 2, i.e. s/2 for a
    whole sequence and about s for one decoded token. With a sliding window w < s a query at position j
    sees min(j, w) keys: w (1 - w / 2s) for past = 0; on the `window_layers` fraction of layers that use
    it. The separate-kernel (standard) path computes all s keys and masks."""
    full = (s + past) / 2
    span = maximum(s - past, 1e-30)
    windowed = where(past >= window, window, ((window * window - past * past) / 2 + (s - window) * window) / span)
    local = where((window > 0) & (window < s), windowed, full)
    return window_layers * local + (1 - window_layers) * full


def fused_attention_op(m: ModelArrays, b: Array, queries: Array, keys: Array, t: Array, e: Array,
                       past: Array = 0.0, cache_bytes: Array = 0.0, cache_reads: Array = 1.0,
                       absorbed: Array = 0.0, expanded: Array = 0.0, chunks: Array = 1.0) -> Op:
    """The fused attention kernel of one layer on one TP rank (FlashAttention, Dao 2023 §4.1; in decode
    FlashDecoding / paged attention): b sequences of `queries` new tokens each attend over `keys` keys,
    of which `past` are read from the KV cache.

    FLOPs: 2 (d_qk + d_v) per head, query and key attended (`keys_attended`: the causal mask halves a
    whole sequence, masked blocks are skipped). Bytes: Q and O of the new tokens and their K and V (at
    `e` bytes) once (K/V re-reads per query block hit L2: `flash_attention_hbm_accesses` has the paper's
    IO count); with a KV cache (`cache_bytes` per element, 0 in training) the past keys' cache is read
    `cache_reads` times (1: once per KV head; a kernel that walks query heads separately reads each KV head
    once per query head of its group) and the new keys' entries written, `kv_cache_elements_per_rank` each.
    MLA: `absorbed` (0/1) runs the absorbed form over the latent (`attention_dims`); `expanded` (0/1) caches
    per-head K and V instead of the latent (`kv_cache_elements_per_token`). Depth: the keys a query walks in
    one kernel call, its mean keys attended over the `chunks` the keys arrive in (ring attention's steps
    under context parallelism, one otherwise). Head dim: the MMA work per score element, 2 (d_qk + d_v)
    FLOPs forward, in head-dimension units: (d_qk + d_v) / 2 (cuDNN's SDPA benchmark counts the same two
    BMMs, NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training `flops`)."""
    attends = 1 - m.mlgru  # the MLGRU token mixer has no attention core
    a = m.heads
    d_qk, d_v = attention_dims(m, absorbed)
    latent = (m.kv_lora > 0) & (absorbed > 0)
    # the new tokens' keys and values: the shared latent and RoPE key on every rank when absorbed
    new_kv = where(latent, (m.kv_lora + m.rope_dim) * t, m.kv_width)
    mean_keys = keys_attended(keys, m.window, m.window_layers, past)
    new_keys = keys - past
    per_rank = kv_cache_elements_per_rank(m, t, expanded)  # read (the past keys') and written (the new keys')
    moved = ((b * queries * a * (d_qk + d_v) + b * new_keys * new_kv) / t * e
             + b * (_cache_read(cache_reads, past, per_rank, cache_bytes) + new_keys * per_rank * cache_bytes))
    return Op(flop=2 * attends * b * (a / t) * queries * mean_keys * (d_qk + d_v), bytes=attends * moved,
              depth=mean_keys / chunks, head_dim=(d_qk + d_v) / 2)


def ring_kv_block(m: ModelArrays, tokens: Array, t: Array, e: Array) -> Array:
    """K and V of `tokens` tokens on one TP rank: the block ring attention passes from rank to rank
    (Liu et al. 2023 §3; in inference pass-KV, Yang et al. 2024 §3.2)."""
    return tokens * m.kv_width / t * e


def attention_dims(m: ModelArrays, absorbed: Array = 0.0) -> tuple[Array, Array]:
    """(d_qk, d_v) of each head's scores and values in the attention kernel: d_h and d_v; for MLA's
    absorbed decode W^UK is folded into the query and W^UV into the output projection (DeepSeek-V2
    §2.1.3: "we can absorb W^UK into W^Q, and W^UV into W^O"), so every head attends over the cached latent
    c^KV (d_c) with the shared RoPE key (d_h^R): scores over d_c + d_h^R, values of d_c (vLLM
    MLACommonImpl._forward_decode, SGLang forward_absorb)."""
    latent = (m.kv_lora > 0) & (absorbed > 0)
    return where(latent, m.kv_lora + m.rope_dim, m.head_dim), where(latent, m.kv_lora, m.value_dim)


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


def kv_cache_elements_per_token(m: ModelArrays, expanded: Array = 0.0) -> Array:
    """Elements cached per token and layer: 2 n_kv d_h for MHA / GQA / MQA; the compressed latent plus
    the shared RoPE key, d_c + d_h^R, for MLA (DeepSeek-V2 §2.1.4, Table 1), or its per-head keys and
    values, n_h (d_h + d_v), where the engine caches them `expanded`; the MatMul-free LM keeps a fixed
    recurrent state instead (0 per token)."""
    gqa = m.kv_width
    latent = where(expanded > 0, gqa, m.kv_lora + m.rope_dim)
    return where(m.mlgru > 0, 0.0, where(m.kv_lora > 0, latent, gqa))


def kv_cache_elements_per_rank(m: ModelArrays, t: Array, expanded: Array = 0.0) -> Array:
    """Cache elements per token and layer on one of t tensor-parallel ranks: the KV heads split over the
    ranks (a rank keeps at least one head: with t > n_kv heads are replicated, as Megatron / TRT-LLM do);
    MLA's latent is shared by all heads and not split (its expanded per-head cache is)."""
    per_token = kv_cache_elements_per_token(m, expanded)
    return where((m.kv_lora > 0) & (expanded <= 0), per_token, per_token / minimum(t, m.kv_heads))


def cache_read_bytes(m: ModelArrays, t: Array, cached_tokens: Array, cache_bytes: Array, reads: Array = 1.0,
                     expanded: Array = 0.0) -> Array:
    """Bytes one layer's attention reads from the KV cache of `cached_tokens` tokens on one TP rank, the
    cache walked `reads` times (see `fused_attention_op`)."""
    return _cache_read(reads, cached_tokens, kv_cache_elements_per_rank(m, t, expanded), cache_bytes)


def _cache_read(reads: Array, cached_tokens: Array, per_rank: Array, cache_bytes: Array) -> Array:
    """`cache_read_bytes` of the cache elements per token and rank `per_rank`."""
    return reads * cached_tokens * per_rank * cache_bytes
