"""What the routed experts of one MoE layer compute and send, per micro-batch and device.

Routing follows the Switch / GShard / DeepSeekMoE formulation (docs/formulas.md §7.1): every token goes to
top_k of the routed experts; expert parallelism (EP) spreads the experts over ep ranks, which exchange
tokens with an all-to-all before (dispatch) and after (combine) the experts; expert tensor parallelism
(ETP) splits each expert's intermediate dimension and gathers the tokens of its etp ranks. All functions
broadcast over arrays.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.arrays import ModelArrays
from armillary.workload.ops import Op, gemm, grouped, stream


@dataclass(frozen=True)
class ExpertsForward:
    """Forward kernels of the routed part of one MoE layer on the busiest device, and its exchange."""

    router: Op  # the gate GEMM, tokens x experts
    routing: Op  # softmax / sigmoid scores and top-k selection over fp32 logits
    permute: Op  # tokens into expert order for dispatch and back for the weighted combine
    experts_in: Op  # grouped GEMM: up (and gate) projections of the local experts
    activation: Op
    experts_out: Op  # grouped GEMM: down projections
    received_tokens: Array  # tokens the device's experts process (with ETP: gathered over etp ranks)
    ffn_shard: Array  # each expert's intermediate size on this device (expert_ffn / etp)
    dispatch_bytes: Array  # one device's all-to-all buffer for dispatch
    combine_bytes: Array  # and for combine (always in the activation precision)
    gathered_bytes: Array  # the tokens gathered over the ETP group (expert tensor parallelism)
    # elements of the expert GEMMs' inputs and outputs (what a block-scaled recipe quantizes; docs/fp4.md)
    gemm_inputs: Array = 0.0
    gemm_outputs: Array = 0.0


def replica_weights(experts: Array, ep: Array, redundant: Array) -> Array:
    """The routed expert weights (and their gradients and optimizer states in training) one EP rank holds,
    relative to its experts / ep without replicas: (experts / ep + redundant) / (experts / ep), each EPLB
    replica a full copy of one expert (deepseek-ai/EPLB: a physical expert slot holds one logical expert's
    weights; DeepSeek-V3 §3.4). 1 without replicas or without experts."""
    local = experts / maximum(ep, 1.0)
    return where(local > 0, (local + redundant) / maximum(local, 1e-300), 1.0)


def rank_load(experts: Array, ep: Array, imbalance: Array, capacity_factor: Array, pad: Array,
              redundant: Array = 0.0) -> Array:
    """Tokens the busiest EP rank's experts process, relative to the balanced mean.

    `imbalance` is the busiest expert's load over the mean; the other experts on its rank are taken at the
    mean, so a rank of n = experts/ep experts carries (imbalance + n - 1) / n. A capacity factor
    (Fedus et al. 2022 Eq. 3: capacity = factor x mean load) drops what exceeds it; padding to capacity
    makes every expert compute `capacity_factor` x the mean. capacity_factor 0 = dropless. With
    imbalance 1 and no capacity limit the load is exactly 1 (the balanced result).

    `redundant` expert replicas per rank (dropless routing; `Routing.redundant_experts`) go to the hottest
    experts first, as EPLB's greedy replication does (deepseek-ai/EPLB `replicate_experts`: the next copy to
    the expert of the highest load per copy): the busiest expert is split over as many copies as bring it
    down to the mean load of a copy, E / (E + R) for R = redundant x ep copies, or over all R + 1 when fewer;
    the rank holding one of its copies fills its other experts / ep + redundant - 1 slots at that mean
    [derived]. Balanced routing stays at 1; no replicas give the plain result."""
    capped = capacity_factor > 0
    busiest = where(capped, where(pad > 0, capacity_factor, minimum(imbalance, capacity_factor)), imbalance)
    typical = where(capped, where(pad > 0, capacity_factor, minimum(1.0, capacity_factor)), 1.0)
    local = experts / ep
    plain = (busiest + (local - 1) * typical) / local
    if not isinstance(redundant, np.ndarray) and redundant == 0:
        return plain
    copy_mean = experts / maximum(experts + redundant * ep, 1.0)  # mean load of one copy
    copies = minimum(1 + redundant * ep, np.ceil(imbalance / copy_mean - 1e-9))
    hottest = maximum(imbalance / copies, copy_mean)
    return where(redundant > 0, (hottest + (local + redundant - 1) * copy_mean) / local, plain)


def experts_touched(local: Array, per_expert: Array, share: Array) -> Array:
    """Local experts that receive at least one token, in expectation: each of T routed tokens picks a given
    expert with probability share = top_k / experts, so it stays idle with probability (1 - share)^T, where
    T share = per_expert, the mean tokens per expert [derived: occupancy of independent draws; the fused-MoE
    and grouped-GEMM kernels of vLLM, SGLang and Megatron skip experts without tokens, so a decode step of a
    few tokens reads only these experts' weights]. At least one expert runs when any token is routed; with
    thousands of tokens (training) every expert is touched and the result is exactly `local`."""
    idle = (1.0 - share) ** where(share > 0, per_expert / maximum(share, 1e-300), 0.0)
    return where(per_expert > 0, maximum(local * (1.0 - idle), minimum(local, 1.0)), 0.0)


def holders_hit(m: ModelArrays, parts: Array) -> Array:
    """Expected number of the `parts` equal blocks of the experts (EP ranks in expert order, or the nodes
    they fill) that hold at least one of a token's top_k experts, when routing is uniform (force-balanced
    benchmarks; DeepEP's tests draw random scores) and limited to group_top_k of the model's expert groups
    [derived: DeepSeek-V3 §2.1.2 node-limited routing; sampling without replacement]. A block that shares
    experts with the groups O is missed when the chosen groups meet O in A (probability
    C(G - |O|, g - |A|) / C(G, g)) and all k draws from the chosen groups' pool avoid A's experts in the
    block (C(pool - held, k) / C(pool, k)). Without groups (one group of all experts) this is
    parts (1 - C(E - E/parts, k) / C(E, k))."""
    if isinstance(parts, np.ndarray):
        values, index = np.unique(parts, return_inverse=True)
        return np.array([holders_hit(m, float(v)) for v in values])[index].reshape(parts.shape)
    experts, k = int(m.experts), int(m.top_k)
    groups, chosen, blocks = int(m.expert_groups), int(m.group_top_k), max(round(float(parts)), 1)
    size, width = experts // groups, experts // blocks
    # the experts each block holds of each group it meets; blocks alike in that are missed alike
    patterns = Counter(tuple(sorted(min((b + 1) * width, (g + 1) * size) - max(b * width, g * size)
                                    for g in range(b * width // size, ((b + 1) * width - 1) // size + 1)))
                       for b in range(blocks))
    return sum(count * (1.0 - _missed(overlap, k, groups, chosen, chosen * size))
               for overlap, count in patterns.items())


def _missed(overlap: tuple[int, ...], k: int, groups: int, chosen: int, pool: int) -> float:
    """Probability that a block holding `overlap` experts of as many groups gets none of a token's k."""
    missed, total = 0.0, math.comb(groups, chosen)
    for n in range(min(len(overlap), chosen) + 1):
        way = math.comb(groups - len(overlap), chosen - n) / total
        for met in itertools.combinations(overlap, n):
            missed += way * math.comb(pool - sum(met), k) / math.comb(pool, k)
    return missed


def experts_forward(m: ModelArrays, tokens: Array, ep: Array, etp: Array, load: Array, e: Array,
                    dispatch_e: Array, weight_bytes: Array | None = None,
                    redundant: Array = 0.0, bias_pass: Array = 0.0, fp8_pad: Array = 0.0,
                    sort_pass: Array = 0.0) -> ExpertsForward:
    """`tokens` routed by this device (its micro-batch share after sequence splitting), `load` from
    `rank_load`, e activation bytes, dispatch_e the bytes per element of the dispatched tokens (1 with
    fp8 dispatch, DeepSeek-V3 §3.3.3), weight_bytes per expert weight (quantized inference weights),
    `redundant` expert replicas per rank (EPLB), each one more problem of the grouped GEMMs.

    `bias_pass` 1: the software adds the down projection's bias of a model with expert biases
    (`linear_bias`) after the grouped GEMM, expert by expert in eager PyTorch, as Megatron-Core's
    TEGroupedMLP does (megatron/core/transformer/moe/experts.py `_apply_bias`, unchanged core_v0.15.0 to
    core_v0.17.0: linear_fc2 with skip_bias_add, then per local expert `t + b * p` over its tokens and one
    `torch.cat`). Over the N received tokens of width h that writes b p (N h), reads t and b p and writes the
    sum (3 N h), and the concatenation reads and writes the output again (2 N h): 6 N h elements [derived from
    that code], priced with the permutes (the combine side, where the probabilities are applied); the
    backward of the broadcast product reduces the output gradient times p and times b (the stream kernels'
    backward factor). The up projection's bias is added inside its GEMM (skip_bias_add=False).
    The same flag prices that path's clamp of a clamped gated activation (`Model.glu_clamp`, GPT-OSS):
    `weighted_bias_quick_geglu_impl` (megatron/core/fusions/fused_bias_geglu.py, core_v0.15.0 to core_v0.17.0)
    clamps the two halves of the up projection's output in eager PyTorch, outside its fused (torch.compile)
    kernel: `chunk` (views), two `clamp` (each reads and writes N f) and a `torch.cat` (reads and writes 2 N f),
    8 N f elements at activation width before the fused kernel [derived from that code], re-run with the
    activation where `moe_act` is recomputed; the backward of clamp and cat, with the stream kernels' factor.

    `fp8_pad` 1: under an fp8 recipe TEGroupedMLP pads each local expert's tokens to the recipe's alignment
    before the up projection (the permuted tokens and their fp32 probabilities) and unpads the down
    projection's output (megatron/core/transformer/moe/experts.py `fp8_padding` / `fp8_unpadding`,
    core_v0.15.0); Transformer Engine's Fp8Padding / Fp8Unpadding (pytorch/module/fp8_padding.py, v2.9: 16
    rows, 32 under MXFP8) copy through `fused_multi_row_padding` unless every count is already aligned, which
    dropless routing's counts are not. Over the N received tokens: read and write N h twice and N fp32
    probabilities once, 4 N h e + 8 N bytes [derived from that code], priced with the permutes; the backward
    copies the gradients back (the stream kernels' factor).

    `sort_pass` 1: Megatron-Core's `MoEAlltoAllTokenDispatcher` regroups the received tokens by local expert
    whenever a rank holds more than one (megatron/core/transformer/moe/token_dispatcher.py, core_v0.15.0:
    "Permutation 2" in `dispatch_postprocess`, `sort_chunks_by_idxs` of the tokens and their probabilities, or
    under drop-and-pad a `transpose(0, 1).contiguous()` of both; "Unpermutation 2" in `combine_preprocess`
    restores the expert outputs' order before the combine): beside the permutes around the all-to-all, a copy
    of the N received tokens (read and write N h) and of their fp32 probabilities (read and write 4 N bytes;
    `moe_router_dtype` fp32, as the Qwen3 / DeepSeek providers set it: a bf16 router's are half, 0.02% of the pass)
    before the experts, and one of the outputs after them: N (4 h e + 8) bytes [derived from that code], priced
    with the permutes; their backward is the inverse copy (the stream kernels' factor). Nothing with one local
    expert (the dispatcher skips both)."""
    h, k, experts, f = m.hidden, m.top_k, m.experts, m.expert_ffn
    local = experts / ep + redundant
    received = tokens * k * load * etp
    touched = experts_touched(local, received / local, where(experts > 0, k / maximum(experts, 1.0), 0.0))
    problems = maximum(touched, 1.0)  # touched is 0 only when nothing is routed (and then there is no work)
    per_expert = received / problems
    gated = m.mlp_matrices - 2
    w = e if weight_bytes is None else weight_bytes
    return ExpertsForward(
        router=gemm(tokens, experts, h, 1, e),
        routing=stream(3 * tokens * experts * 4),  # [derived] write fp32 logits, read for scores and top-k
        # [derived] dispatch reads T h and writes T k h; combine reads T k h and writes T h
        permute=stream(2 * (tokens + received / etp) * h * e + bias_pass * m.linear_bias * 6 * received * h * e
                       + fp8_pad * received * (4 * h * e + 8)
                       + sort_pass * where(local > 1, 1.0, 0.0) * received * (4 * h * e + 8)),
        # one problem per touched local expert: efficiency follows the per-expert size (grouped GEMM)
        experts_in=grouped(gemm(per_expert, (m.mlp_matrices - 1) * f / etp, h, touched, e, e, w), problems),
        activation=stream(received * f / etp * e * (2 + gated + bias_pass * m.glu_clamp * gated * 8)),
        experts_out=grouped(gemm(per_expert, h, f / etp, touched, e, e, w), problems),
        received_tokens=received,
        ffn_shard=f / etp,
        dispatch_bytes=tokens * k * load * h * dispatch_e,
        combine_bytes=tokens * k * load * h * e,
        gathered_bytes=received * h * e,
        gemm_inputs=received * (h + f / etp), gemm_outputs=received * ((m.mlp_matrices - 1) * f / etp + h),
    )
