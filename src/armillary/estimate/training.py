"""One training iteration, composed from per-layer kernels, collectives and the pipeline schedule.

Recipe: formulas.md §12. Per stage and micro-batch: the layers' passes (`layer.py`: kernels through the
device's roofline, exposed TP collectives, recomputation), the embedding and the LM head; the schedule
turns stage times into the pipeline time (`pipeline.py`); data-parallel communication
(`data_parallel.py`), the optimizer step and the second memory tier follow; memory per device comes
from `memory.py`. Every function takes
arrays, so one call evaluates one configuration or a whole sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from armillary.comm.collectives import all_gather, needed, send_recv
from armillary.cost.compute import matrix_peak, stream_time
from armillary.estimate import memory as mem
from armillary.estimate.data_parallel import data_parallel_cost
from armillary.estimate.feasibility import check
from armillary.estimate.layer import ExpertGroups, layer_cost, recompute_modes
from armillary.estimate.pipeline import pipeline_time
from armillary.estimate.result import (
    CommCall,
    EndsCost,
    LayerCost,
    MemoryBreakdown,
    ParallelDimension,
    StepEstimate,
    TimeBreakdown,
    Traffic,
)
from armillary.numerics import Array, maximum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import microbatch_count, rank_queries, stage_dense_layers, stage_layers
from armillary.plan.placement import place_expert_groups, place_groups
from armillary.specs.communication import Collective
from armillary.specs.system import System
from armillary.workload.experts import ExpertsForward, experts_forward, rank_load
from armillary.workload.parameters import count_parameters
from armillary.workload.transformer import (
    LayerForward,
    ends_forward,
    layer_forward,
    sequence_shards,
    tp_message_bytes,
)


@dataclass(frozen=True)
class _PerMicrobatch:
    """Time of one micro-batch through a set of layers or kernels, by component."""

    compute: Array
    recompute: Array
    tp: Array
    cp: Array = 0.0
    ep: Array = 0.0

    def __add__(self, o: _PerMicrobatch) -> _PerMicrobatch:
        return _PerMicrobatch(self.compute + o.compute, self.recompute + o.recompute, self.tp + o.tp,
                              self.cp + o.cp, self.ep + o.ep)

    def __mul__(self, k: Array) -> _PerMicrobatch:
        return _PerMicrobatch(self.compute * k, self.recompute * k, self.tp * k, self.cp * k, self.ep * k)

    @property
    def total(self) -> Array:
        return self.compute + self.recompute + self.tp + self.cp + self.ep


def estimate_training(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System) -> StepEstimate:
    device = system.device
    b, s, t, p, d, v = st.micro_batch, w.seq_len, st.tp, st.pp, st.dp, st.vpp
    sp = st.sequence_parallel
    e = mem.per_precision(mem.ACTIVATION_BYTES, st.precision)
    peak = matrix_peak(device, st.precision)
    microbatches = microbatch_count(w.global_batch, b, d)
    c = st.cp
    tp_group, dp_group, pp_group, cp_group = place_groups(t, d, p, system.devices_per_node, c, st.rank_order)

    # --- one layer of each kind, one micro-batch; embedding (first stage), LM head and loss (last stage) --
    # with context parallelism every rank works on s/cp tokens of each sequence
    q = rank_queries(s, c)
    n_tp = tp_message_bytes(m, b, q, e)
    kv_block = b * q * m.kv_width / t * e  # one rank's K and V (ring attention)
    a2a_bytes = (b * q * m.qkv_width / t * e,
                 b * q * m.heads * m.value_dim / t * e)
    ends_fw = ends_forward(m, b, q, t, e)

    def kind(mlp_width: Array | None, experts: ExpertsForward | None, groups: ExpertGroups | None) -> tuple[
            LayerCost, EndsCost, tuple[CommCall, ...], mem.LayerActivations, LayerForward]:
        fw = layer_forward(m, b, s, t, sp, e, c, mlp_width)
        cost = layer_cost(fw, ends_fw, st, n_tp, tp_group, system, cp_group, kv_block, a2a_bytes, experts, groups)
        return (*cost, mem.layer_activations(m, b, s, t, sp, e, st.attention, c, mlp_width, experts), fw)

    lc, ends, layer_calls, acts, dense_fw = kind(None, None, None)
    has_moe = isinstance(m.experts, np.ndarray) or m.experts > 0
    edp = t * c * d / (st.etp * st.ep)  # expert layers regroup the tp x cp x dp ranks as etp x ep x edp
    moe_lc, moe_acts = lc, acts
    moe_calls: tuple[CommCall, ...] = ()
    if has_moe:
        etp_group, ep_group, edp_group = place_expert_groups(st.etp, st.ep, edp, system.devices_per_node)
        load = rank_load(m.experts, st.ep, st.imbalance, st.capacity_factor, st.pad_to_capacity)
        experts = experts_forward(m, b * q / sequence_shards(t, sp), st.ep, st.etp, load, e,
                                  where(st.dispatch_fp8 > 0, 1.0, e))
        moe_lc, _, moe_calls, moe_acts, _ = kind(m.shared_ffn, experts, ExpertGroups(ep_group, etp_group))

    def per_microbatch(cost: LayerCost) -> _PerMicrobatch:
        return _PerMicrobatch(compute=cost.compute_s, recompute=cost.recompute.time_s + cost.tp_recompute_s,
                              tp=cost.tp_s, cp=cost.cp_s, ep=cost.ep_s)

    dense_layer, moe_layer = per_microbatch(lc), per_microbatch(moe_lc)
    embedding = _PerMicrobatch(compute=ends.embedding_s, recompute=0.0, tp=ends.tp.time)
    head = _PerMicrobatch(compute=ends.head_s, recompute=0.0, tp=ends.tp.time)

    # --- pipeline stages: (dense, MoE) layers of the first, (last) middle and last stage ------------------
    L = m.layers
    n_first, n_mid, n_last = stage_layers(L, p, st.first_stage_layers, st.last_stage_layers)
    dense_first, dense_mid, dense_last = stage_dense_layers(m.dense_layers, p, n_first, n_mid, n_last)
    stages = ((dense_first, n_first - dense_first), (dense_mid, n_mid - dense_mid),
              (dense_last, n_last - dense_last))

    def layers_of(counts: tuple[Array, Array]) -> _PerMicrobatch:
        return dense_layer * counts[0] + moe_layer * counts[1] if has_moe else dense_layer * counts[0]

    single = where(p == 1, 1.0, 0.0)
    # pipeline activation per micro-batch; with scatter/gather only 1/t crosses nodes and is all-gathered
    # inside (SC'21 §4.1); with sequence parallelism the activation is already the 1/t shard, sent as is
    # (Megatron skips scatter/gather then)
    n_pp = b * q * m.hidden * e
    pp_crosses = where(pp_group.per_node < p, 1.0, 0.0)
    scatter = where((st.pp_scatter_gather > 0) & (pp_crosses > 0) & (sp == 0), t, 1.0)
    n_send = where(sp > 0, n_pp / t, n_pp / scatter)
    send = send_recv(n_send, pp_crosses, system)
    regather = needed(lambda: all_gather(n_pp, tp_group, system), scatter > 1)
    # every micro-batch sends its activation forward and its gradient back, once per model chunk
    sends_per_mb = (1 - single) * 2 * v
    p2p_per_mb = sends_per_mb * (send.time + (scatter > 1) * regather.time)

    first = layers_of(stages[0]) + embedding + head * single
    middle = layers_of(stages[1])
    last = layers_of(stages[2]) + head + embedding * single
    stage_first, stage_last, stage_mid = first.total, last.total, middle.total
    has_mid = where(p > 2, 1.0, 0.0)
    stage_max = maximum(maximum(stage_first, stage_last), has_mid * stage_mid) + p2p_per_mb
    stage_sum = stage_first + (1 - single) * stage_last + maximum(p - 2, 0) * stage_mid + p * p2p_per_mb
    pipe = pipeline_time(stage_max, stage_sum, microbatches, v, st.schedule)
    # the critical (slowest) stage fixes the steady state; attribute it by component
    crit = _pick_max((stage_first, first), (stage_last, last), (has_mid * stage_mid, middle))
    busy = microbatches * (crit.total + p2p_per_mb)

    # --- parameters, data parallelism / ZeRO / FSDP ---------------------------------------------------
    # per device: dense layers and the replicated part of MoE layers split over tp; routed experts over
    # ep (experts / ep each) and etp
    params = count_parameters(m)
    expert_local = m.experts / st.ep * params.expert / st.etp

    def stage_params(counts: tuple[Array, Array], ends_params: Array) -> tuple[Array, Array]:
        """(replicated over dp x cp, routed experts) parameters of one device of a stage."""
        return ((counts[0] * params.dense_layer + counts[1] * params.moe_layer_replicated + ends_params) / t,
                counts[1] * expert_local)

    params_first = stage_params(stages[0], params.embedding + single * params.head)
    params_mid = stage_params(stages[1], 0.0)
    params_last = stage_params(stages[2], params.head + single * params.embedding)
    totals = [sum(x) for x in (params_first, params_mid, params_last)]
    take_last = totals[2] > totals[0]
    params_local = tuple(where(take_last, lst, fst) for fst, lst in zip(params_first, params_last, strict=True))
    take_mid = (has_mid > 0) & (totals[1] > maximum(totals[0], totals[2]))
    dense_local, experts_local = (where(take_mid, mid, loc) for mid, loc in zip(params_mid, params_local,
                                                                                strict=True))
    n_layers_local = maximum(maximum(maximum(n_first, n_last), has_mid * n_mid), 1)
    moe_layers_local = maximum(maximum(stages[0][1], stages[2][1]), has_mid * stages[1][1])
    weight_bytes = mem.weight_bytes(dense_local + experts_local, st)
    # about a third of a micro-batch's compute is forward, two thirds backward
    dp = data_parallel_cost(dense_local, n_layers_local, crit.compute / 3, 2 * crit.compute / 3,
                            microbatches, st, dp_group, system)
    edp_cost = data_parallel_cost(experts_local, maximum(moe_layers_local, 1), crit.compute / 3,
                                  2 * crit.compute / 3, microbatches, st, edp_group, system,
                                  ParallelDimension.EDP) if has_moe else None

    # --- optimizer step and second memory tier -----------------------------------------------------
    updated = dense_local / mem.zero_shards(st, 1) + experts_local / mem.zero_shards(st, 1, edp)
    adam_bytes = updated * mem.per_precision(mem.OPTIMIZER_STEP_BYTES, st.precision)
    tier2 = device.second_tier
    tier2_bw = tier2.rate if tier2 is not None else np.inf
    optimizer = where(st.offload_optimizer > 0, adam_bytes / tier2_bw, stream_time(adam_bytes, device))

    compute_total = microbatches * (crit.compute + crit.recompute)

    per_layer_stored = (acts.stored(st), moe_acts.stored(st) if has_moe else 0.0)

    def stored(counts: tuple[Array, Array]) -> Array:
        """Bytes one micro-batch leaves stored in a stage's layers."""
        return counts[0] * per_layer_stored[0] + counts[1] * per_layer_stored[1]

    working = maximum(acts.working, moe_acts.working)
    # weights (the device's shard under ZeRO-3) and stored activations share the one link to tier 2
    sharded_weights = (mem.model_states(dense_local, st) + mem.model_states(experts_local, st, edp)).weights
    offload_weights = st.offload_weights * 2 * microbatches * sharded_weights / tier2_bw
    stored_mb = maximum(maximum(stored(stages[0]), stored(stages[2])), has_mid * stored(stages[1]))
    offload_acts = st.offload_activations * 2 * microbatches * stored_mb / tier2_bw
    offload_stall = maximum(0.0, offload_weights + offload_acts - compute_total)

    # --- memory per tier: every stage kind, the fullest device reported ------------------------------
    unsharded_units = where(st.zero >= 3, 2 * weight_bytes / n_layers_local, 0.0)  # prefetched layers
    buffers = 4 * n_send * (1 - single) + 2 * n_tp * where(t > 1, 1.0, 0.0) + unsharded_units
    logits = b * q * (m.vocab / t) * (4 + e)  # fp32 logits and their 16-bit source on the last stage
    ow, oa, oo = st.offload_weights, st.offload_activations, st.offload_optimizer

    def stage_memory(counts: tuple[Array, Array], stage_params: tuple[Array, Array], index: Array,
                     extra: Array) -> tuple[MemoryBreakdown, MemoryBreakdown]:
        layers = counts[0] + counts[1]
        states = mem.model_states(stage_params[0], st) + mem.model_states(stage_params[1], st, edp)
        activations, checkpoints = mem.stage_activations(stored(counts), working, st, microbatches, index)
        activations = activations + extra
        stage_weight_bytes = mem.weight_bytes(stage_params[0] + stage_params[1], st)
        hbm = MemoryBreakdown(
            weights=states.weights * (1 - ow) + ow * 2 * stage_weight_bytes / maximum(layers, 1),
            gradients=states.gradients, optimizer_states=states.optimizer_states * (1 - oo),
            activations=activations * (1 - oa) + oa * working, checkpoints=checkpoints * (1 - oa),
            comm_buffers=buffers)
        tier2_mem = MemoryBreakdown(
            weights=states.weights * ow, gradients=0.0 * ow, optimizer_states=states.optimizer_states * oo,
            activations=activations * oa, checkpoints=checkpoints * oa, comm_buffers=0.0 * oa)
        return hbm, tier2_mem

    hbm, tier2_mem = _fullest(
        stage_memory(stages[0], params_first, 0.0, single * logits),
        stage_memory(stages[1], params_mid, 1.0, 0.0),
        stage_memory(stages[2], params_last, p - 1, logits),
        has_mid)

    # --- totals ------------------------------------------------------------------------------------
    breakdown = TimeBreakdown(
        forward_backward=microbatches * crit.compute,
        recompute=microbatches * crit.recompute,
        tp_exposed=microbatches * crit.tp,
        cp_exposed=microbatches * crit.cp,
        ep_exposed=microbatches * crit.ep,
        pp_exposed=microbatches * p2p_per_mb,
        bubble=pipe - busy,
        dp_exposed=dp.exposed_s + (edp_cost.exposed_s if edp_cost is not None else 0.0),
        optimizer=optimizer,
        offload_stall=offload_stall,
    )
    step = breakdown.total
    devices = t * c * p * d
    # GEMM FLOPs are linear in the batch and split evenly over TP ranks (all of them but MLA's
    # down-projections): the whole batch's dense-layer FLOPs follow from this rank's micro-batch
    rank_to_batch = t * c * w.global_batch / b
    split_evenly = not isinstance(m.kv_lora, np.ndarray) and m.kv_lora == 0
    flops = model_flop_per_iteration(m, w, (sum(op.flop for op in dense_fw.gemms) * rank_to_batch,
                                            sum(op.flop for op in dense_fw.core_gemms) * rank_to_batch)
                                     if split_evenly else None)
    full, selective = recompute_modes(st)
    # recomputation re-runs a layer's forward (full) or its attention core, 4Bs^2h (selective; our recount
    # of Korthikanti's hardware FLOPs, formulas.md §3.2 pitfall)
    # + what the further selective modules re-run, summed over every device's layers and micro-batches
    modules_flop = microbatches * t * c * d * (m.dense_layers * lc.recompute_modules.flop
                                               + (m.moe_layers * moe_lc.recompute_modules.flop if has_moe else 0.0))
    recompute_flop = where(full, flops.layers / 3, where(selective, flops.attention_core, 0.0)) + modules_flop
    tokens = w.global_batch * w.seq_len
    # every call of the step, as a device of the busiest stage makes them; traffic is their sum
    ends_ar = ends.tp
    pp_calls = sends_per_mb * microbatches
    dense_local_layers = maximum(maximum(stages[0][0], stages[2][0]), has_mid * stages[1][0])
    calls = (
        *(replace(call, per_step=call.per_step * dense_local_layers * microbatches) for call in layer_calls
          if not _never(call.per_step)),
        *(replace(call, per_step=call.per_step * moe_layers_local * microbatches) for call in moe_calls
          if not _never(call.per_step)),
        CommCall.of(ParallelDimension.TP, Collective.ALL_REDUCE, (1 + single) * microbatches * where(t > 1, 1.0, 0.0),
                    n_tp, ends_ar),
        CommCall.of(ParallelDimension.PP, Collective.SEND_RECV, pp_calls, n_send, send),
        CommCall.of(ParallelDimension.PP, Collective.ALL_GATHER, pp_calls * (scatter > 1), n_pp, regather),
        *dp.calls,
        *(edp_cost.calls if edp_cost is not None else ()),
    )
    calls = tuple(c for c in calls if not _never(c.per_step))
    traffic = Traffic(scale_up_bytes=sum(c.per_step * c.scale_up_bytes_each for c in calls),
                      scale_out_bytes=sum(c.per_step * c.scale_out_bytes_each for c in calls))
    feasible, reasons = check(m, st, w, system, hbm.total, tier2_mem.total)
    tier2_capacity = tier2.capacity if tier2 is not None else 0.0
    return StepEstimate(
        step_time_s=step, breakdown=breakdown, tokens_per_s=tokens / step,
        model_flop=flops.total, hardware_flop=flops.total + recompute_flop,
        mfu=flops.total / (step * devices * peak), hfu=(flops.total + recompute_flop) / (step * devices * peak),
        memory_hbm=hbm, memory_tier2=tier2_mem,
        hbm_capacity_bytes=device.hbm.capacity + 0.0 * step, tier2_capacity_bytes=tier2_capacity + 0.0 * step,
        traffic=traffic, communication=calls,
        microbatches=microbatches, layer=lc, moe_layer=moe_lc if has_moe else None,
        feasible=feasible, infeasible_reasons=reasons, ends=ends,
    )


def _never(count: Array) -> bool:
    """A call that a single configuration never makes (kept in a sweep, where some points make it)."""
    return not isinstance(count, np.ndarray) and count == 0


def _fullest(first: tuple[MemoryBreakdown, MemoryBreakdown], middle: tuple[MemoryBreakdown, MemoryBreakdown],
             last: tuple[MemoryBreakdown, MemoryBreakdown], has_mid: Array) -> tuple[MemoryBreakdown, MemoryBreakdown]:
    """The (HBM, tier 2) memory of the stage whose HBM is fullest (elementwise over a sweep)."""
    best_total, (best_hbm, best_t2) = first[0].total, first
    for (hbm, t2), present in ((middle, has_mid), (last, 1.0)):
        take = (present > 0) & (hbm.total > best_total)
        if not isinstance(take, np.ndarray):  # one configuration: take the whole stage or keep the best
            if take:
                best_hbm, best_t2, best_total = hbm, t2, hbm.total
            continue
        best_hbm = MemoryBreakdown(*(where(take, getattr(hbm, f.name), getattr(best_hbm, f.name))
                                     for f in fields(MemoryBreakdown)))
        best_t2 = MemoryBreakdown(*(where(take, getattr(t2, f.name), getattr(best_t2, f.name))
                                    for f in fields(MemoryBreakdown)))
        best_total = where(take, hbm.total, best_total)
    return best_hbm, best_t2


def _pick_max(*candidates: tuple[Array, _PerMicrobatch]) -> _PerMicrobatch:
    """The per-component times of whichever stage is slowest (elementwise over a sweep)."""
    best_time, best = candidates[0]
    for time, parts in candidates[1:]:
        take = time > best_time
        best = _PerMicrobatch(where(take, parts.compute, best.compute),
                              where(take, parts.recompute, best.recompute), where(take, parts.tp, best.tp),
                              where(take, parts.cp, best.cp), where(take, parts.ep, best.ep))
        best_time = where(take, time, best_time)
    return best


@dataclass(frozen=True)
class ModelFlop:
    """Model FLOPs of one iteration, whole cluster (no recomputation)."""

    layers: Array  # forward + backward of all layers
    head: Array  # LM head, forward + backward
    attention_core: Array  # forward of the attention core of all layers (what selective recompute re-runs)

    @property
    def total(self) -> Array:
        return self.layers + self.head


def model_flop_per_iteration(m: ModelArrays, w: TrainingArrays,
                             dense_layer: tuple[Array, Array] | None = None) -> ModelFlop:
    """3 x forward (backward = 2 x forward) of all layers and the LM head. For GPT:
    72 B L s h^2 (1 + s/(6h) + V/(12 h L)) (Korthikanti et al. 2022, App. A). An MoE layer counts its
    router, shared experts and top_k routed experts per token (the active parameters). `dense_layer`: the
    (all GEMMs, attention core) forward FLOPs of one dense layer for the whole batch, when known."""
    B, s = w.global_batch, w.seq_len
    if dense_layer is None:
        fw = layer_forward(m, B, s, 1.0, 0.0, 2.0)
        dense_layer = sum(op.flop for op in fw.gemms), sum(op.flop for op in fw.core_gemms)
    dense, core = dense_layer
    moe: Array = 0.0
    if isinstance(m.experts, np.ndarray) or m.experts > 0:
        moe_fw = layer_forward(m, B, s, 1.0, 0.0, 2.0, mlp_width=m.shared_ffn)
        routed = experts_forward(m, B * s, 1.0, 1.0, 1.0, 2.0, 2.0)
        moe = sum(op.flop for op in (*moe_fw.gemms, routed.router, routed.experts_in, routed.experts_out))
    layers = 3 * (m.dense_layers * dense + m.moe_layers * moe)
    return ModelFlop(layers=layers, head=3 * 2 * B * s * m.hidden * m.vocab, attention_core=m.layers * core)
