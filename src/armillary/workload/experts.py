"""What the routed experts of one MoE layer compute and send, per micro-batch and device.

Routing follows the Switch / GShard / DeepSeekMoE formulation (docs/formulas.md §7.1): every token goes to
top_k of the routed experts; expert parallelism (EP) spreads the experts over ep ranks, which exchange
tokens with an all-to-all before (dispatch) and after (combine) the experts; expert tensor parallelism
(ETP) splits each expert's intermediate dimension and gathers the tokens of its etp ranks. All functions
broadcast over arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.numerics import Array, minimum, where
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


def rank_load(experts: Array, ep: Array, imbalance: Array, capacity_factor: Array, pad: Array) -> Array:
    """Tokens the busiest EP rank's experts process, relative to the balanced mean.

    `imbalance` is the busiest expert's load over the mean; the other experts on its rank are taken at the
    mean, so a rank of n = experts/ep experts carries (imbalance + n - 1) / n. A capacity factor
    (Fedus et al. 2022 Eq. 3: capacity = factor x mean load) drops what exceeds it; padding to capacity
    makes every expert compute `capacity_factor` x the mean. capacity_factor 0 = dropless. With
    imbalance 1 and no capacity limit the load is exactly 1 (the balanced result)."""
    capped = capacity_factor > 0
    busiest = where(capped, where(pad > 0, capacity_factor, minimum(imbalance, capacity_factor)), imbalance)
    typical = where(capped, where(pad > 0, capacity_factor, minimum(1.0, capacity_factor)), 1.0)
    local = experts / ep
    return (busiest + (local - 1) * typical) / local


def experts_forward(m: ModelArrays, tokens: Array, ep: Array, etp: Array, load: Array, e: Array,
                    dispatch_e: Array, weight_bytes: Array | None = None) -> ExpertsForward:
    """`tokens` routed by this device (its micro-batch share after sequence splitting), `load` from
    `rank_load`, e activation bytes, dispatch_e the bytes per element of the dispatched tokens (1 with
    fp8 dispatch, DeepSeek-V3 §3.3.3), weight_bytes per expert weight (quantized inference weights)."""
    h, k, experts, f = m.hidden, m.top_k, m.experts, m.expert_ffn
    local = experts / ep
    received = tokens * k * load * etp
    per_expert = received / local
    gated = m.mlp_matrices - 2
    w = e if weight_bytes is None else weight_bytes
    return ExpertsForward(
        router=gemm(tokens, experts, h, 1, e),
        routing=stream(3 * tokens * experts * 4),  # [derived] write fp32 logits, read for scores and top-k
        # [derived] dispatch reads T h and writes T k h; combine reads T k h and writes T h
        permute=stream(2 * (tokens + received / etp) * h * e),
        # one problem per local expert: efficiency follows the per-expert size (grouped GEMM)
        experts_in=grouped(gemm(per_expert, (m.mlp_matrices - 1) * f / etp, h, local, e, e, w), local),
        activation=stream(received * f / etp * e * (2 + gated)),
        experts_out=grouped(gemm(per_expert, h, f / etp, local, e, e, w), local),
        received_tokens=received,
        ffn_shard=f / etp,
        dispatch_bytes=tokens * k * load * h * dispatch_e,
        combine_bytes=tokens * k * load * h * e,
        gathered_bytes=received * h * e,
    )
