"""The cost model of one inference replica (`ReplicaModel`, built by `replica_model`): the time of a pass
over its new tokens, its attention over the KV cache, and its LM head. The phases built from it:
`estimate.inference_phases`; a static batch of them: `estimate.static_batch`; memory and KV cache:
`estimate.inference_memory`; the weights' precision and the engine's fp8 kernels: `estimate.inference_precision`.

A pass runs the same per-layer kernels as training's forward (`workload.transformer.layer_forward`, costed
by `layer.layer_cost` through the device roofline), for the pass's new tokens, plus one fused attention
kernel over all sequences of the pass (`workload.attention.fused_attention_op`: new tokens attend over
the KV cache). Prefill is a pass over the prompts; each decode step a pass of one token per sequence
whose attention reads a cache that grows by a token per step. The serving simulation costs its
iterations with the same `ReplicaModel`.

Context parallelism (cp > 1, a static batch) follows Yang et al. 2024 (arXiv:2411.01783): each cp rank
prefills 1/cp of every prompt (balanced causal chunks) and passes its K/V blocks around the ring behind
the attention (pass-KV, §3.2); the cache stays sharded over the cp ranks, and a decode step runs the whole
batch's GEMMs on every cp rank, each attending over its shard, the partial outputs merged by an all-gather
(§3.4, pass-Q's merge).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from armillary.comm.collectives import all_gather, needed, send_recv
from armillary.comm.overlap import exposed
from armillary.cost.compute import fused_attention_time, kernel_times
from armillary.errors import SpecError
from armillary.estimate import memory as mem
from armillary.estimate.dp_attention import dp_attention_tokens_time
from armillary.estimate.inference_precision import fp8_kernels, recipe_weight_bytes, serving_block_format
from armillary.estimate.inference_result import PassTime
from armillary.estimate.layer import layer_cost
from armillary.estimate.layer_comm import ExpertGroups, LayerExchange, tp_collectives
from armillary.estimate.result import EndsCost, ParallelDimension
from armillary.estimate.token_exchange import Fanout
from armillary.numerics import Array
from armillary.plan import rules
from armillary.plan.arrays import ModelArrays, StrategyArrays
from armillary.plan.codes import RECOMPUTE_NONE
from armillary.plan.layout import busiest_stage_layers
from armillary.plan.placement import Placement, place_expert_groups, place_groups
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import DecodeAttention, Inference, MlaDecode
from armillary.workload.attention import (
    cache_read_bytes,
    fused_attention_op,
    kv_cache_elements_per_rank,
    ring_kv_block,
)
from armillary.workload.experts import ExpertsForward, experts_forward, rank_load
from armillary.workload.ops import Op
from armillary.workload.transformer import ends_forward, layer_forward


@dataclass(frozen=True)
class ReplicaModel:
    """Cost functions of one model replica (tp x cp x pp devices), built by `replica_model`."""

    m: ModelArrays
    st: StrategyArrays
    system: System
    activation_bytes: float
    weight_bytes: float
    cache_bytes: float
    tier2_fraction: float
    cache_reads: float  # passes of the decode kernel over the cache (query heads per KV head, or 1)
    attention_version: float
    tp_group: Placement
    pp_group: Placement
    expert_groups: ExpertGroups | None
    mla_expanded: float = 0.0  # MLA with per-head K/V cached (1) or the latent and absorbed decode (0)
    attention_dp: float = 1.0  # attention groups of the tp ranks, each with its own requests and cache
    attention_group: Placement | None = None  # the ranks of one attention group (None: the tp group)
    cp_group: Placement | None = None  # the context-parallel ring (None: cp = 1)
    cp: float = 1.0  # context-parallel degree (`st` keeps cp = 1: the layers' kernels see a rank's tokens)
    absorbed_prefill: float = 0.0  # MLA prompt chunks absorbed over the latent cache too (1) or per head (0)
    mla_materialized: float = 0.0  # MLA's absorbed products stored beside the raw weights (1; see MlaDecode)
    attention_weight_bytes: float | None = None  # the attention projections' weights, if not `weight_bytes`

    @property
    def attention_tp(self) -> float:
        """Ranks that split one attention group's heads (tp without data-parallel attention)."""
        return float(self.st.tp) / self.attention_dp

    @property
    def devices(self) -> int:
        return int(self.st.tp * self.cp * self.st.pp)

    @property
    def stage_layers(self) -> int:
        """Layers of the busiest pipeline stage."""
        return busiest_stage_layers(self.m.layers, self.st.pp)

    @property
    def cache_bytes_per_token(self) -> float:
        """KV-cache bytes one token takes on one device of the busiest stage (both memory tiers), the cache
        sharded over the cp ranks."""
        return float(self.stage_layers * kv_cache_elements_per_rank(self.m, self.attention_tp, self.mla_expanded)
                     * self.cache_bytes) / self.cp

    @property
    def stages_cross_nodes(self) -> bool:
        """Whether the pipeline's stages sit in different nodes (the stage-to-stage sends go scale-out)."""
        return bool(self.pp_group.outermost > 0)

    def tokens_time(self, tokens: Array) -> PassTime:
        """Everything of a pass that depends only on its new tokens: the layers' GEMMs and element-wise
        kernels, their TP all-reduces and EP exchanges, the embedding, the stage-to-stage sends.
        Broadcasts over an array of token counts. With data-parallel attention: one attention group's
        tokens (`dp_attention.dp_attention_tokens_time`)."""
        if self.attention_dp > 1:
            return dp_attention_tokens_time(self, tokens)
        m, st, system, e = self.m, self.st, self.system, self.activation_bytes
        t = st.tp
        ends = ends_forward(m, 1.0, tokens, t, e)
        n_tp = tokens * m.hidden * e
        tp_costs = tp_collectives(st, system, n_tp, self.tp_group)  # the same for both layer kinds

        def kind(mlp_width: Array | None, moe: bool) -> tuple[Array, Array, Array, EndsCost]:
            fw = layer_forward(m, 1.0, tokens, t, 0.0, e, 1.0, mlp_width, self.weight_bytes,
                               self.attention_weight_bytes)
            experts = replicated_experts(m, st, tokens, e, self.weight_bytes) if moe else None
            # no expert exchange: the MoE output's partial sums join the layer's MLP all-reduce
            exchange = LayerExchange(n_tp, self.tp_group, expert_groups=None, tp_costs=tp_costs)
            cost, ends_cost, calls = layer_cost(fw, ends, st, system, exchange, experts)
            ep = sum((c.time_each_s for c in calls if c.dimension in (ParallelDimension.EP, ParallelDimension.ETP)),
                     0.0)
            return cost.forward.time_s - cost.attention_core.time_s, cost.tp_forward_s, ep, ends_cost

        dense = kind(None, False)
        moe = kind(m.shared_ffn, True)[:3] if self.expert_groups is not None else (0.0, 0.0, 0.0)
        n_moe = m.moe_layers if self.expert_groups is not None else 0.0
        n_dense = m.layers - n_moe
        embedding = dense[3].embedding_forward_s
        embedding_ar = dense[3].tp.time  # the vocabulary-parallel embedding's all-reduce
        hops = (st.pp - 1) * needed(lambda: send_recv(n_tp, self.pp_group, system), st.pp > 1).time
        return PassTime(layers=n_dense * dense[0] + n_moe * moe[0], attention=0.0 * tokens,
                        tp=n_dense * dense[1] + n_moe * moe[1] + embedding_ar, ep=n_moe * moe[2], pp=hops,
                        ends=embedding, tier2=0.0 * tokens)

    def head_time(self, sequences: Array) -> Array:
        """LM head and sampling for the last token of each sequence, with the gather of the vocabulary-
        parallel logits (over an attention group's ranks with data-parallel attention)."""
        t, group = self.attention_tp, self.attention_group or self.tp_group
        ends = ends_forward(self.m, sequences, 1.0, t, self.activation_bytes)
        device, code = self.system.device, self.st.precision
        head = kernel_times((ends.head_gemm,), device, code, sixteen_bit=True)[0]
        sampling = kernel_times((ends.loss,), device, code)[0]
        gather = needed(lambda: all_gather(sequences * self.m.vocab * self.activation_bytes, group,
                                           self.system), t > 1).time
        return head + sampling + gather

    def attention(self, new: Array, past: Array, sequences: Array = 1.0, decode: Array | None = None) -> Op:
        """The attention kernel of one layer for `sequences` sequences of `new` tokens over `past` cached
        ones (arrays broadcast: one op per element), as `layer_forward` builds it. `decode` (default: one
        new token) marks decode steps, where MLA runs absorbed unless its cache is expanded; prefill keeps
        the per-head form (DeepSeek-V2 §2.1.3; vLLM, TensorRT-LLM) unless the engine absorbs it too
        (`absorbed_prefill`: SGLang 0.4's Triton backend)."""
        steps = np.asarray(new) <= 1 if decode is None else decode
        latent = 1.0 - self.mla_expanded
        absorbed = np.where(steps, latent, latent * self.absorbed_prefill) if float(self.m.kv_lora) > 0 else 0.0
        op = fused_attention_op(self.m, sequences, new, past + new, self.attention_tp, self.activation_bytes, past,
                                self.cache_bytes, self.cache_reads, absorbed, self.mla_expanded)
        if self.cp == 1:
            return op
        # one cp rank's share: 1/cp of the work (balanced chunks in prefill, its cache shard in decode); in
        # prefill it also reads the K/V blocks the ring brings in
        received = (self.cp - 1) * ring_kv_block(self.m, sequences * new / self.cp, self.attention_tp,
                                                 self.activation_bytes)
        return Op(op.flop / self.cp, op.bytes / self.cp + np.where(steps, 0.0, received), depth=op.depth / self.cp,
                  head_dim=op.head_dim)

    def attention_time(self, op: Op, cached_tokens: Array) -> tuple[Array, Array]:
        """(attention kernels, second-tier reads) of all layers: the share of the cache on the second tier
        streams over its link, the rest through HBM."""
        m, device = self.m, self.system.device
        cache = cache_read_bytes(m, self.attention_tp, cached_tokens / self.cp, self.cache_bytes, self.cache_reads,
                                 self.mla_expanded)
        moved = op.bytes - self.tier2_fraction * cache
        kernel = fused_attention_time(replace(op, bytes=moved), device, self.st.precision, self.attention_version)
        tier2 = device.second_tier
        remote = self.tier2_fraction * cache / tier2.rate if tier2 is not None and self.tier2_fraction else 0.0
        attends = 1.0 - float(m.mlgru)
        return attends * m.layers * kernel, m.layers * remote

    def pass_time(self, tokens: PassTime, sequences: Array, attention: Op, cached_tokens: Array) -> PassTime:
        """One pass: the token-dependent part (`tokens_time`), the attention of its sequences, the head."""
        core, remote = self.attention_time(attention, cached_tokens)
        return replace(tokens, attention=core, tier2=remote, ends=tokens.ends + self.head_time(sequences))

    def ring_kv_time(self, sequences: Array, new: Array, attention_s: Array) -> Array:
        """Context-parallel prefill, all layers: each layer passes every rank's K/V block (its 1/cp of
        `sequences` x `new` tokens) cp - 1 steps around the ring, behind that layer's attention kernels
        (`attention_s` for all layers; pass-KV, Yang et al. 2024 §3.2; as training's ring attention)."""
        layers = (1.0 - float(self.m.mlgru)) * self.m.layers
        if self.cp == 1 or self.cp_group is None:
            return 0.0 * attention_s
        block = ring_kv_block(self.m, sequences * new / self.cp, self.attention_tp, self.activation_bytes)
        hop = send_recv(block, self.cp_group, self.system).time
        return layers * exposed((self.cp - 1) * hop, attention_s / np.maximum(layers, 1.0), 1.0)

    def merge_time(self, sequences: Array) -> Array:
        """Context-parallel decode step, all layers: the all-gather of every rank's partial attention output
        and log-sum-exp (heads / tp x (d_v + 1) per sequence) that merges them (Yang et al. 2024 §3.4)."""
        if self.cp == 1 or self.cp_group is None:
            return 0.0 * sequences
        layers = (1.0 - float(self.m.mlgru)) * self.m.layers
        part = sequences * self.m.heads / self.attention_tp * (self.m.value_dim + 1) * self.activation_bytes
        return layers * all_gather(self.cp * part, self.cp_group, self.system).time


def replicated_experts(m: ModelArrays, st: StrategyArrays, tokens: Array, e: float,
                       weight_bytes: float) -> ExpertsForward:
    """The routed experts of one MoE layer on a replica's busiest device, as vLLM's and SGLang's fused MoE
    run them with tensor parallelism (vLLM `FusedMoE`, SGLang `fused_moe`): after attention every TP rank
    holds all `tokens` of the pass, so none is dispatched; the ranks regroup as expert-tp x ep x expert-dp
    (tp / (ep etp) groups each taking a share of the tokens), each rank computes its experts' shard
    (expert_ffn / etp) for the tokens routed to them, and the partial outputs are summed by the layer's
    one all-reduce over TP (the dense MLP's). Received tokens per rank: tokens k load etp / tp. Every rank
    routes all tokens (the router and top-k run replicated). EPLB replicas (`Routing.redundant_experts`:
    vLLM `--enable-eplb` with `num_redundant_experts`, SGLang `--ep-num-redundant-experts`) split the hottest
    experts' load and add grouped-GEMM problems on every rank, as in training (`rank_load`)."""
    redundant = st.redundant_experts
    load = rank_load(m.experts, st.ep, st.imbalance, st.capacity_factor, st.pad_to_capacity, redundant)
    local = experts_forward(m, tokens / st.tp, st.ep, st.etp, load, e, e, weight_bytes, redundant=redundant)
    routed = experts_forward(m, tokens, st.ep, st.etp, load, e, e, weight_bytes, redundant=redundant)
    return replace(local, router=routed.router, routing=routed.routing, dispatch_bytes=0.0 * tokens,
                   combine_bytes=0.0 * tokens, gathered_bytes=0.0 * tokens)


def replica_model(m: ModelArrays, strategy: Strategy, w: Inference, system: System) -> ReplicaModel:
    """Check the strategy for serving and fix the precisions of weights, activations and cache."""
    serving_block_format(strategy)
    if strategy.cp > 1 and strategy.attention_dp > 1:
        raise SpecError("strategy.cp: context parallelism with data-parallel attention (attention_dp > 1) is not "
                        "modelled (use one of them)")
    moe = bool(m.experts > 0)
    experts_fit = rules.expert_groups_fit(strategy.ep, strategy.etp, strategy.tp, "tp for inference")
    if moe and not experts_fit.ok:
        raise SpecError(f"strategy: {experts_fit.message} (the experts of a replica spread over its tensor-parallel "
                        "devices)")
    spans = rules.attention_dp_experts_span_tp(strategy.attention_dp, strategy.ep, strategy.etp, strategy.tp)
    if moe and not spans.ok:
        raise SpecError(f"strategy: {spans.message}")
    st = replace(StrategyArrays.of(strategy, 1), sequence_parallel=0.0, recompute=RECOMPUTE_NONE, cp=1.0)
    e = mem.per_precision(mem.ACTIVATION_BYTES, st.precision)
    weights = w.weights.bytes if w.weights is not None else recipe_weight_bytes(strategy, float(e))
    cache = w.kv_cache.precision.bytes if w.kv_cache.precision is not None else e
    if w.kv_cache.tier2_fraction > 0 and system.device.second_tier is None:
        raise SpecError(f"workload.kv_cache.tier2_fraction: the device {system.device.name} has no second memory tier")
    system = fp8_kernels(system, w)
    attention_weights = None
    if not w.fp8_attention_projections and weights < e:
        if m.kv_lora > 0 or strategy.attention_dp > 1:
            raise SpecError("workload.fp8_attention_projections: 16-bit attention projections are modelled for "
                            "multi-head / grouped-query attention without data-parallel attention only")
        attention_weights = float(e)
    placed = place_groups(st.tp, 1.0, st.pp, system.sizes, cp=float(strategy.cp))
    groups = None
    if moe:
        etp_group, ep_group, _ = place_expert_groups(st.etp, st.ep, st.tp / (st.ep * st.etp), system.sizes)
        groups = ExpertGroups(ep_group, etp_group, Fanout.of(m, ep_group))
    per_head = w.decode_attention is DecodeAttention.PER_QUERY_HEAD and not m.kv_lora > 0
    reads = float(m.heads / m.kv_heads) if per_head else 1.0
    expanded = float(m.kv_lora > 0 and w.mla_decode is MlaDecode.EXPANDED)
    groups_dp = float(strategy.attention_dp)
    attention_group = place_groups(st.tp / groups_dp, 1.0, 1.0, system.sizes).tp if groups_dp > 1 else None
    return ReplicaModel(m, st, system, float(e), float(weights), float(cache), w.kv_cache.tier2_fraction, reads,
                        2.0 if st.attention == 0 else float(st.attention),
                        placed.tp, placed.pp, groups, expanded, groups_dp, attention_group,
                        placed.cp if strategy.cp > 1 else None, float(strategy.cp), float(w.absorbed_mla_prefill),
                        float(m.kv_lora > 0 and w.mla_decode is MlaDecode.MATERIALIZED), attention_weights)
