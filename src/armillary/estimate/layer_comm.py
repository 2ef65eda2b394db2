"""A layer's communication: the TP collectives of each pass (all-reduces, or with sequence parallelism
all-gathers and reduce-scatters), the CP exchange around attention (ring K/V hops or Ulysses all-to-alls) and an
MoE layer's token exchange (dispatch and combine over the EP group, gathers over the ETP group), and how much of
each the layer's kernels hide (`layer.layer_cost` adds the exposed times to its passes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.comm.collectives import (
    NO_COMM,
    CommCost,
    all_gather,
    all_reduce,
    collective,
    needed,
    reduce_scatter,
    send_recv,
)
from armillary.comm.overlap import exposed, exposed_fully, pipelined_exposed, ring_exchange_exposed
from armillary.estimate.data_parallel import paired
from armillary.estimate.kernels import LayerKernels
from armillary.estimate.result import (
    DIM_CP,
    DIM_EP,
    DIM_ETP,
    DIM_SP,
    DIM_TP,
    CommCall,
    PassCost,
)
from armillary.estimate.token_exchange import Fanout, token_exchange
from armillary.memo import quick_init
from armillary.numerics import Array, any_true, where
from armillary.plan.arrays import StrategyArrays
from armillary.plan.codes import RECOMPUTE_SELECTIVE
from armillary.plan.placement import Placement
from armillary.specs.communication import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, SEND_RECV
from armillary.specs.system import System
from armillary.workload.experts import ExpertsForward

# Backward element-wise kernels read the output gradient and the saved input and write the input
# gradient: about 1.5x the forward traffic [derived].
BACKWARD_STREAM_FACTOR = 1.5
# FlashAttention's backward recomputes the scores: 2.5x the forward FLOPs (FA2 §4.1; docs/formulas.md §3.5).
FLASH_BACKWARD_FACTOR = 2.5


# Transformer Engine's userbuffers defaults (transformer_engine/pytorch/module/base.py `initialize_ub`): a
# pipelined reduce-scatter holds 16 SMs (set_sm_margin) and goes in 4 pieces.
TP_OVERLAP_SMS, TP_OVERLAP_SPLITS = 16, 4


@quick_init
@dataclass(frozen=True)
class ExpertGroups:
    """Where the ranks of an MoE layer's expert-parallel and expert-tensor-parallel groups sit."""

    ep: Placement
    etp: Placement
    fanout: Fanout  # the nodes and devices of the EP group a token reaches


# the cost per call of each of TP_OPERATIONS, and of the model's ends' all-reduce (`tp_collectives`)
TpCosts = tuple[tuple[CommCost, CommCost, CommCost], CommCost]


@quick_init
@dataclass(frozen=True)
class LayerExchange:
    """What a layer's communication needs besides the strategy: the TP message and group, the CP group with
    one rank's K and V (ring attention) and the all-to-all buffers around attention (QKV in, output out;
    Ulysses), and the expert groups of an MoE layer."""

    tp_bytes: Array
    tp_group: Placement
    cp_group: Placement | None = None  # None: no context parallelism
    kv_block: Array = 0.0
    a2a_bytes: tuple[Array, Array] = (0.0, 0.0)
    expert_groups: ExpertGroups | None = None
    # `tp_collectives(st, system, tp_bytes, tp_group)`, where the caller took it once for every layer kind
    tp_costs: TpCosts | None = None


def moe_block_recompute(st: StrategyArrays) -> Array:
    """1 where selective recomputation re-runs whole MoE layers (Megatron-Core --recompute-modules moe:
    MoELayer.forward under tensor_parallel.checkpoint, so the backward re-runs the router, the dispatch and
    combine with their communication and the dispatcher's host sync, the experts and the shared experts)."""
    return where(st.recompute == RECOMPUTE_SELECTIVE, st.recompute_moe, 0.0)


# TP collectives per layer and pass (one source for times and call counts): two all-reduces per pass
# (SC'21 §3.2); with SP each becomes an all-gather before and a reduce-scatter after the block
# (Korthikanti §4.2.2), and the backward gathers each block's input once more for the weight gradient
# (Megatron keeps only the 1/t shard)
TP_OPERATIONS = ((DIM_TP, ALL_REDUCE), (DIM_SP, ALL_GATHER),
                 (DIM_SP, REDUCE_SCATTER))


def tp_calls_per_pass(sp: Array) -> tuple[tuple[Array, Array, Array], tuple[Array, Array, Array]]:
    """Calls of each of TP_OPERATIONS in (forward, backward) of one layer."""
    return (2 * (1 - sp), 2 * sp, 2 * sp), (2 * (1 - sp), 4 * sp, 2 * sp)


def tp_collectives(st: StrategyArrays, system: System, tp_bytes: Array, tp_group: Placement) -> TpCosts:
    """Cost per call of each of TP_OPERATIONS on `tp_bytes` over the TP group (only those the strategy makes:
    all-reduces without sequence parallelism, all-gathers and reduce-scatters with it), and of the all-reduce
    of the model's ends (the vocabulary-parallel embedding all-reduces its output; the LM head its input
    gradient). Every layer kind of a micro-batch sends the same message over the same group: taken once for
    all of them."""
    sp = st.sequence_parallel
    # a sweep's all-reduce composed once, for the layers' (zeroed where sequence parallel) and the ends'
    ends_ar = all_reduce(tp_bytes, tp_group, system) if isinstance(sp, np.ndarray) else None
    ar = needed(lambda: all_reduce(tp_bytes, tp_group, system) if ends_ar is None else ends_ar, sp < 1)
    ag = needed(lambda: all_gather(tp_bytes, tp_group, system), sp > 0)
    rs = needed(lambda: reduce_scatter(tp_bytes, tp_group, system), sp > 0)
    if ends_ar is None:  # one configuration: the layers' all-reduce, or (sequence parallel) one of its own
        ends_ar = ar if not sp else all_reduce(tp_bytes, tp_group, system)
    return (ar, ag, rs), ends_ar


def tensor_parallel_exposed(st: StrategyArrays, system: System, costs: tuple[CommCost, CommCost, CommCost],
                     kt: LayerKernels, gemm_t: Array,
                     calls: tuple[tuple[Array, Array, Array], tuple[Array, Array, Array]] | None = None
                     ) -> tuple[Array, Array, Array]:
    """(exposed forward, exposed backward, exposed backward without its weight-gradient GEMMs: what ZB-H1's
    deferral leaves) per layer and micro-batch, of the TP operations at `costs` per call (`tp_collectives`).

    With TP overlap and sequence parallelism every all-gather and reduce-scatter runs tile by tile with the
    GEMM it feeds or drains (`strategy.overlap.tp_comm_method`; comm/overlap.py). userbuffers, Transformer
    Engine's defaults (transformer_engine/pytorch/module/base.py `initialize_ub`): forward, the gathers into
    QKV and the MLP's first GEMM by ring exchange, the reduce-scatters after the output projection and the
    MLP's last GEMM pipelined in 4 pieces with 16 SMs held (TE's default and NeMo's fc2_fprop; NeMo's 70B
    config holds 24 for proj_fprop); backward, the output-gradient gathers of those two by ring exchange, and
    QKV's and the first MLP GEMM's input gather and input-gradient reduce-scatter in bulk beside their input-
    and weight-gradient GEMMs (no SMs held: NeMo's performance configs, nemo/collections/llm/recipes/
    tp_overlap_configs/userbuffers.py, set_sm_margin False; TE's own default holds 16, not modeled). ring:
    all of them by ring exchange. Without sequence parallelism the all-reduces hide behind the forward's
    GEMMs (`gemm_t`) and the backward's (twice as many): max(0, comm - GEMMs). `calls`: `tp_calls_per_pass`
    of the strategy's sequence parallelism, where the caller has them."""
    sp = st.sequence_parallel
    ag, rs = costs[1], costs[2]
    forward_calls, backward_calls = calls if calls is not None else tp_calls_per_pass(sp)
    comm_f = sum(k * c.time for c, k in zip(costs, forward_calls, strict=True))
    comm_b = sum(k * c.time for c, k in zip(costs, backward_calls, strict=True))
    on = st.overlap_tp > 0
    if not any_true(on):  # nothing overlapped anywhere (one estimate, or a sweep without TP overlap)
        return comm_f, comm_b, comm_b
    ring = st.tp_overlap_method > 0
    sms = system.device.multiprocessors
    held = TP_OVERLAP_SMS / sms if sms else 0.0  # share of the SMs the pipelined reduce-scatter holds

    # one method at every point (a number): only its own formula, what `where` would pick (the same object)
    one = type(ring) is bool or type(ring) is np.bool_

    def drained(gemm: Array) -> Array:  # a GEMM whose output is reduce-scattered
        if one:
            return (ring_exchange_exposed(rs.time, gemm, st.tp) if ring else
                    pipelined_exposed(rs.time, gemm, TP_OVERLAP_SPLITS, held))
        return where(ring, ring_exchange_exposed(rs.time, gemm, st.tp),
                     pipelined_exposed(rs.time, gemm, TP_OVERLAP_SPLITS, held))

    def beside(comm: Array, gemm: Array) -> Array:  # a collective beside an independent GEMM
        if one:
            return ring_exchange_exposed(comm, gemm, st.tp) if ring else exposed_fully(comm, gemm)
        return where(ring, ring_exchange_exposed(comm, gemm, st.tp), exposed_fully(comm, gemm))

    tiled_f = (ring_exchange_exposed(ag.time, kt.qkv, st.tp) + ring_exchange_exposed(ag.time, kt.mlp_in, st.tp)
               + drained(kt.out_proj) + drained(kt.mlp_out))
    # the input gradients' reduce-scatters beside QKV's and the first MLP GEMM's weight gradients, once each
    rs_qkv, rs_mlp_in = beside(rs.time, kt.qkv), beside(rs.time, kt.mlp_in)
    tiled_b = (ring_exchange_exposed(ag.time, kt.out_proj, st.tp) + ring_exchange_exposed(ag.time, kt.mlp_out, st.tp)
               + beside(ag.time, kt.qkv) + beside(ag.time, kt.mlp_in) + rs_qkv + rs_mlp_in)
    sequence = sp > 0  # (taken once for the three passes)
    tp_f = where(on, where(sequence, tiled_f, exposed_fully(comm_f, gemm_t)), comm_f)
    tp_b = where(on, where(sequence, tiled_b, exposed_fully(comm_b, 2 * gemm_t)), comm_b)
    # the weight pass deferred: the input gradients' reduce-scatters ran beside the weight-gradient GEMMs (TE's
    # bulk dgrad reduce-scatter / wgrad overlap), the all-reduces hide behind the input-gradient GEMMs alone
    tiled_b_alone = tiled_b - rs_qkv - rs_mlp_in + 2 * rs.time
    tp_b_alone = where(on, where(sequence, tiled_b_alone, exposed_fully(comm_b, gemm_t)), comm_b)
    return tp_f, tp_b, tp_b_alone


def context_parallel_exposed(st: StrategyArrays, system: System, exchange: LayerExchange, core_f: PassCost,
                      core_b: PassCost, full: Array) -> tuple[Array, Array, tuple[CommCall, ...]]:
    """Exposed forward and backward time and the calls of context parallelism: ring attention passes the
    K/V blocks around (cp - 1 steps per pass, K/V and their gradients in backward) behind the attention
    kernels (Liu et al. 2023 §3); Ulysses re-shards QKV and the output with all-to-alls, which nothing
    hides (Jacobs et al. 2023 §3.2)."""
    cp = st.cp
    on_a2a: Array
    ring_steps: Array
    cp_f: Array
    cp_b: Array
    if not isinstance(cp, np.ndarray) and cp == 1:  # one configuration without context parallelism
        if not isinstance(full, np.ndarray):  # no time and no call: each would be made 0 times, and the step's
            return 0.0, 0.0, ()  # calls leave a count of 0 out (a sweep keeps its arrays of 0: below)
        on_a2a, ring_steps, hop, a2a_in, a2a_out = 0.0, 0.0, NO_COMM, NO_COMM, NO_COMM
        cp_f = cp_b = 0.0
    else:
        on_ring = (cp > 1) & (st.cp_comm == 0)
        on_a2a = (cp > 1) & (st.cp_comm > 0)
        group, (bytes_in, bytes_out) = exchange.cp_group, exchange.a2a_bytes
        if group is None:
            raise ValueError("context parallelism needs the cp group's placement")
        hop = needed(lambda: send_recv(exchange.kv_block, group, system), on_ring)
        # a sweep's two all-to-alls (QKV in, the output back) on the one group composed in one call (`paired`)
        both = (paired(all_to_all_cost, bytes_in, bytes_out, group, system)
                if isinstance(on_a2a, np.ndarray) and on_a2a.any() else None)
        a2a_in = needed(lambda: all_to_all_cost(bytes_in, group, system) if both is None else both[0], on_a2a)
        a2a_out = needed(lambda: all_to_all_cost(bytes_out, group, system) if both is None else both[1], on_a2a)
        ring_steps = where(on_ring, cp - 1, 0.0)
        cp_f = exposed_fully(ring_steps * hop.time, core_f.time_s) + a2a_in.time + a2a_out.time
        cp_b = exposed_fully(2 * ring_steps * hop.time, core_b.time_s) + a2a_in.time + a2a_out.time
    passes = 2 + full  # forward, backward (+ the recomputed forward)
    calls = (
        CommCall.of(DIM_CP, SEND_RECV, ring_steps * (3 + full), exchange.kv_block, hop),
        CommCall.of(DIM_CP, ALL_TO_ALL, on_a2a * passes, exchange.a2a_bytes[0], a2a_in),
        CommCall.of(DIM_CP, ALL_TO_ALL, on_a2a * passes, exchange.a2a_bytes[1], a2a_out),
    )
    return cp_f, cp_b, calls


def all_to_all_cost(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """An all-to-all of `n_bytes` a rank over `group` (comm.collectives.collective)."""
    return collective(ALL_TO_ALL, n_bytes, group, system).cost


def expert_exchange_exposed(experts: ExpertsForward | None, groups: ExpertGroups | None, st: StrategyArrays,
                     system: System, forward_s: Array, backward_s: Array,
                     full: Array, input_backward_s: Array = 0.0) -> tuple[Array, Array, tuple[CommCall, ...], Array]:
    """Exposed time (one forward, the backward), calls, and exposed time behind `input_backward_s` (the
    backward without its weight pass, ZB-H1's deferral) of an MoE layer's token exchange, per
    micro-batch: a dispatch and a combine
    all-to-all over the EP group in forward, their gradients in backward, again under full recomputation
    (docs/formulas.md §7.2: 4 T k h bytes per rank and layer); with expert TP the dispatched tokens are
    all-gathered over the ETP group before the experts and reduce-scattered after (DeepSpeed-MoE §5;
    Megatron's all-to-all dispatcher). The busiest rank sets the pace: its buffers carry the load factor.
    Overlap (DeepSeek-V3 §3.2.1 DualPipe, Megatron's 1F1B all-to-all overlap) hides the exchange behind
    the other micro-batch's compute of the same pass. Dispatch and combine as the strategy moves the tokens
    (`estimate/token_exchange.py`: one copy per routed expert, or one per node and device)."""
    if experts is None or groups is None:
        return 0.0, 0.0, (), 0.0

    def exchange(copies_bytes: Array) -> CommCost:
        return needed(lambda: token_exchange(copies_bytes, groups.fanout, groups.ep, system, st.dispatch_dedup),
                       st.ep > 1)

    dispatch, combine = exchange(experts.dispatch_bytes), exchange(experts.combine_bytes)
    gathered = experts.gathered_bytes
    gather = needed(lambda: all_gather(gathered, groups.etp, system), st.etp > 1)
    scatter = needed(lambda: reduce_scatter(gathered, groups.etp, system), st.etp > 1)
    per_pass = dispatch.time + combine.time + gather.time + scatter.time
    passes = 2 + full + moe_block_recompute(st)  # the forward, backward, re-runs
    calls = (
        CommCall.of(DIM_EP, ALL_TO_ALL, passes * (st.ep > 1), experts.dispatch_bytes,
                    dispatch),
        CommCall.of(DIM_EP, ALL_TO_ALL, passes * (st.ep > 1), experts.combine_bytes,
                    combine),
        CommCall.of(DIM_ETP, ALL_GATHER, passes * (st.etp > 1), gathered, gather),
        CommCall.of(DIM_ETP, REDUCE_SCATTER, passes * (st.etp > 1), gathered, scatter),
    )
    return (exposed(per_pass, forward_s, st.overlap_ep), exposed(per_pass, backward_s, st.overlap_ep), calls,
            exposed(per_pass, input_backward_s, st.overlap_ep))
