"""Data-parallel attention with experts over all ranks (DeepSeek-style serving; SGLang --enable-dp-attention).

A replica's tp ranks form `attention_dp` attention groups of tp / attention_dp ranks. Each group runs attention
for its own requests over its own KV cache (for MLA the latent is then stored once per group instead of on
every TP rank: the replica holds attention_dp times the tokens). The rest of the layer spans all tp ranks in
one of two ways (`plan.rules.attention_dp_experts_span_tp`):

- expert_tp = tp (SGLang 0.4): every group's tokens are gathered to every rank, the dense MLP, shared and
  routed experts run tensor-parallel over the gathered batch, and the outputs are reduce-scattered back
  (SGLang docs, DeepSeek optimizations: "synchronized before and after processing through the MoE layer");
- ep = tp (wide expert parallelism; DeepSeek-V3 §3.4.2: attention DP, MoE EP, shared experts and dense MLPs
  replicated): each rank dispatches its tokens' top-k copies to the experts' ranks with an all-to-all and
  combines them back; the dense MLP and shared experts run on the group's own tokens.

A decode step of a group is its attention over its own batch, the exchange, and the expert GEMMs over the
batch gathered from every group (the groups step together: every group is taken to carry the same batch).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from armillary.comm.collectives import all_gather, all_reduce, needed, reduce_scatter, send_recv
from armillary.estimate.inference_result import PassTime
from armillary.estimate.kernels import LayerKernels, layer_kernels
from armillary.estimate.token_exchange import token_exchange
from armillary.numerics import Array
from armillary.workload.experts import ExpertsForward, experts_forward, rank_load, replica_weights
from armillary.workload.parameters import ParameterCount
from armillary.workload.transformer import ends_forward, layer_forward

if TYPE_CHECKING:
    from armillary.estimate.inference import ReplicaModel


def wide_ep(r: ReplicaModel) -> bool:
    """Whether the routed experts are split whole over the ranks (all-to-all) rather than sharded (gather)."""
    return bool(r.st.ep > 1)


def _attention_side(kt: LayerKernels) -> Array:
    return kt.qkv + kt.out_proj + kt.norms + kt.residuals + kt.rotary


def _mlp_side(kt: LayerKernels) -> Array:
    return kt.mlp_in + kt.mlp_out + kt.activation


def dp_attention_tokens_time(r: ReplicaModel, tokens: Array) -> PassTime:
    """The token-dependent part of one attention group's pass of `tokens` new tokens (every group alike),
    as `ReplicaModel.tokens_time` for a plain replica. Broadcasts over token counts."""
    own, shared = dp_attention_parts(r, tokens, r.attention_dp * tokens)
    return own + shared


def dp_attention_parts(r: ReplicaModel, tokens: Array, gathered: Array) -> tuple[PassTime, PassTime]:
    """(what a group's own `tokens` cost on its ranks, what the `gathered` tokens of all groups cost on
    every rank) of a pass: attention, its all-reduces and (wide EP) the dense MLP and shared experts are the
    group's own; the routed experts, their exchange and (experts sharded over tp) the dense MLP and shared
    experts over the gathered batch are shared. `tokens` also sizes the busiest rank's all-to-all buffer."""
    m, st, system, e, wb = r.m, r.st, r.system, r.activation_bytes, r.weight_bytes
    ta = r.attention_tp
    device, code, flash = system.device, st.precision, st.attention
    ends = ends_forward(m, 1.0, tokens, ta, e)
    ep_wide = wide_ep(r)
    # the MLP side: the group's own tokens on its ranks (wide EP) or all groups' tokens over all tp ranks
    mlp_tokens, mlp_t = (tokens, ta) if ep_wide else (gathered, st.tp)
    attention = layer_kernels(layer_forward(m, 1.0, tokens, ta, 0.0, e, 1.0, None, wb), ends, None, device, code,
                              flash)
    dense = layer_kernels(layer_forward(m, 1.0, mlp_tokens, mlp_t, 0.0, e, 1.0, None, wb), ends, None, device,
                          code, flash)
    routed = routed_experts(r, tokens, gathered)
    shared = layer_kernels(layer_forward(m, 1.0, mlp_tokens, mlp_t, 0.0, e, 1.0, m.shared_ffn, wb), ends, routed,
                           device, code, flash)
    experts = shared.expert_gemms + shared.expert_streams + shared.router
    n_moe = m.moe_layers if r.expert_groups is not None else 0.0
    n_dense = m.layers - n_moe
    own_bytes = tokens * m.hidden * e
    group = r.attention_group or r.tp_group
    attention_ar = needed(lambda: all_reduce(own_bytes, group, system), ta > 1).time
    hops = (st.pp - 1) * needed(lambda: send_recv(own_bytes, r.pp_group, system), st.pp > 1).time
    zero = 0.0 * tokens
    if ep_wide:
        groups_ep = r.expert_groups
        assert groups_ep is not None
        dispatch = token_exchange(routed.dispatch_bytes, groups_ep.fanout, groups_ep.ep, system,
                                  st.dispatch_dedup).time
        combine = token_exchange(routed.combine_bytes, groups_ep.fanout, groups_ep.ep, system, st.dispatch_dedup).time
        # the dense MLP and the shared experts all-reduce over the group like attention (and the embedding)
        own_layers = m.layers * _attention_side(attention) + n_dense * _mlp_side(dense) + n_moe * _mlp_side(shared)
        own = PassTime(own_layers, zero, (2 * m.layers + 1) * attention_ar, zero, hops, attention.embedding, zero)
        return own, PassTime(n_moe * experts, zero, zero, n_moe * (dispatch + combine) + zero, zero, zero, zero)
    moved = gathered * m.hidden * e
    exchange = all_gather(moved, r.tp_group, system).time + reduce_scatter(moved, r.tp_group, system).time
    own = PassTime(m.layers * _attention_side(attention), zero, (m.layers + 1) * attention_ar, zero, hops,
                   attention.embedding, zero)
    shared_layers = n_dense * _mlp_side(dense) + n_moe * (_mlp_side(shared) + experts)
    return own, PassTime(shared_layers + zero, zero, zero, m.layers * exchange + zero, zero, zero, zero)


def routed_experts(r: ReplicaModel, tokens: Array, gathered: Array | None = None) -> ExpertsForward:
    """The routed experts of one MoE layer on a rank when each attention group passes `tokens` (all groups
    together `gathered`, default attention_dp x tokens): with wide EP each rank routes its share of its
    group's tokens and dispatches top_k copies of each (T k h bytes each way, docs/formulas.md §7.2), and its
    experts receive their share of every group's copies; sharded experts compute their shard of every
    gathered token (as `replicated_experts` over the gathered batch)."""
    m, st, e, wb = r.m, r.st, r.activation_bytes, r.weight_bytes
    total = r.attention_dp * tokens if gathered is None else gathered
    redundant = st.redundant_experts  # EPLB replicas per rank, as in training (`rank_load`)
    load = rank_load(m.experts, st.ep, st.imbalance, st.capacity_factor, st.pad_to_capacity, redundant)
    if wide_ep(r):
        received = experts_forward(m, total / st.tp, st.ep, 1.0, load, e, e, wb, redundant=redundant)
        sent = experts_forward(m, tokens / r.attention_tp, st.ep, 1.0, load, e, e, wb, redundant=redundant)
        return replace(received, dispatch_bytes=sent.dispatch_bytes, combine_bytes=sent.combine_bytes)
    return experts_forward(m, total / st.tp, 1.0, st.etp, load, e, e, wb, redundant=redundant)


def dp_attention_weights(params: ParameterCount, r: ReplicaModel) -> Array:
    """Weight elements per device of all layers (no ends): attention split over its group only; the dense
    MLP and shared experts over the group (wide EP) or all tp ranks; routed experts over ep x expert_tp,
    with each rank's EPLB replicas (`replica_weights`)."""
    st = r.st
    attention = params.attention * params_layers(params)
    routed = params.moe_layers * params.experts * params.expert * replica_weights(params.experts, st.ep,
                                                                                  st.redundant_experts)
    rest = params.dense_layers * params.dense_mlp + params.moe_layers * params.moe_shared
    return attention / r.attention_tp + rest / (r.attention_tp if wide_ep(r) else st.tp) + routed / (st.ep * st.etp)


def params_layers(params: ParameterCount) -> Array:
    return params.dense_layers + params.moe_layers
