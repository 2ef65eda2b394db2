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

from armillary.comm.collectives import all_gather, send_recv
from armillary.comm.placement import place_groups
from armillary.cost.compute import matrix_peak, stream_time
from armillary.estimate import memory as mem
from armillary.estimate.data_parallel import data_parallel_cost
from armillary.estimate.feasibility import check
from armillary.estimate.layer import layer_cost, needed, recompute_modes
from armillary.estimate.pipeline import microbatch_count, pipeline_time, stage_layers
from armillary.estimate.result import (
    CommCall,
    MemoryBreakdown,
    ParallelDimension,
    StepEstimate,
    TimeBreakdown,
    Traffic,
)
from armillary.specs.arrays import (
    Array,
    ModelArrays,
    StrategyArrays,
    TrainingArrays,
    maximum,
    where,
)
from armillary.specs.communication import Collective
from armillary.specs.system import System
from armillary.workload.parameters import count_parameters
from armillary.workload.transformer import ends_forward, layer_forward, layer_forward_flop, tp_message_bytes


@dataclass(frozen=True)
class _PerMicrobatch:
    """Time of one micro-batch through a set of layers or kernels, by component."""

    compute: Array
    recompute: Array
    tp: Array
    cp: Array = 0.0

    def __add__(self, o: _PerMicrobatch) -> _PerMicrobatch:
        return _PerMicrobatch(self.compute + o.compute, self.recompute + o.recompute, self.tp + o.tp,
                              self.cp + o.cp)

    def __mul__(self, k: Array) -> _PerMicrobatch:
        return _PerMicrobatch(self.compute * k, self.recompute * k, self.tp * k, self.cp * k)

    @property
    def total(self) -> Array:
        return self.compute + self.recompute + self.tp + self.cp


def estimate_training(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System) -> StepEstimate:
    device = system.device
    b, s, t, p, d, v = st.micro_batch, w.seq_len, st.tp, st.pp, st.dp, st.vpp
    sp = st.sequence_parallel
    e = mem.per_precision(mem.ACTIVATION_BYTES, st.precision)
    peak = matrix_peak(device, st.precision)
    microbatches = microbatch_count(w.global_batch, b, d)
    c = st.cp
    tp_group, dp_group, pp_group, cp_group = place_groups(t, d, p, system.devices_per_node, c)

    # --- one layer, one micro-batch; embedding (first stage), LM head and loss (last stage) --------
    # with context parallelism every rank works on s/cp tokens of each sequence
    q = s / c
    fw = layer_forward(m, b, s, t, sp, e, c)
    n_tp = tp_message_bytes(m, b, q, e)
    kv_block = 2 * b * q * m.kv_heads * m.head_dim / t * e  # one rank's K and V (ring attention)
    a2a_bytes = (b * q * (m.heads + 2 * m.kv_heads) * m.head_dim / t * e, b * q * m.heads * m.head_dim / t * e)
    lc, ends, layer_calls = layer_cost(fw, ends_forward(m, b, q, t, e), st, n_tp, tp_group, system, cp_group,
                                       kv_block, a2a_bytes)
    layer = _PerMicrobatch(compute=lc.compute_s, recompute=lc.recompute.time_s + lc.tp_recompute_s, tp=lc.tp_s,
                           cp=lc.cp_s)
    embedding = _PerMicrobatch(compute=ends.embedding_s, recompute=0.0, tp=ends.tp.time)
    head = _PerMicrobatch(compute=ends.head_s, recompute=0.0, tp=ends.tp.time)

    # --- pipeline stages ---------------------------------------------------------------------------
    L = m.layers
    n_first, n_mid, n_last = stage_layers(L, p, st.first_stage_layers, st.last_stage_layers)
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

    first = layer * n_first + embedding + head * single
    last = layer * n_last + head + embedding * single
    middle = layer * n_mid
    stage_first, stage_last, stage_mid = first.total, last.total, middle.total
    has_mid = where(p > 2, 1.0, 0.0)
    stage_max = maximum(maximum(stage_first, stage_last), has_mid * stage_mid) + p2p_per_mb
    stage_sum = stage_first + (1 - single) * stage_last + maximum(p - 2, 0) * stage_mid + p * p2p_per_mb
    pipe = pipeline_time(stage_max, stage_sum, microbatches, v, st.schedule)
    # the critical (slowest) stage fixes the steady state; attribute it by component
    crit = _pick_max((stage_first, first), (stage_last, last), (has_mid * stage_mid, middle))
    busy = microbatches * (crit.total + p2p_per_mb)

    # --- parameters, data parallelism / ZeRO / FSDP ---------------------------------------------------
    params = count_parameters(m)
    params_first = (n_first * params.per_layer + params.embedding + single * params.head) / t
    params_mid = n_mid * params.per_layer / t
    params_last = (n_last * params.per_layer + params.head + single * params.embedding) / t
    params_local = maximum(maximum(params_first, params_last), has_mid * params_mid)
    n_layers_local = maximum(maximum(maximum(n_first, n_last), has_mid * n_mid), 1)
    weight_bytes = mem.weight_bytes(params_local, st)
    # about a third of a micro-batch's compute is forward, two thirds backward
    dp = data_parallel_cost(params_local, n_layers_local, crit.compute / 3, 2 * crit.compute / 3,
                            microbatches, st, dp_group, system)

    # --- optimizer step and second memory tier -----------------------------------------------------
    updated = params_local / mem.zero_shards(st, 1)
    adam_bytes = updated * mem.per_precision(mem.OPTIMIZER_STEP_BYTES, st.precision)
    tier2 = device.second_tier
    tier2_bw = (tier2.efficiency * tier2.bandwidth) if tier2 is not None else np.inf
    optimizer = where(st.offload_optimizer > 0, adam_bytes / tier2_bw, stream_time(adam_bytes, device))

    acts = mem.layer_activations(m, b, s, t, sp, e, st.attention, c)
    compute_total = microbatches * (crit.compute + crit.recompute)
    # weights (the device's shard under ZeRO-3) and stored activations share the one link to tier 2
    offload_weights = st.offload_weights * 2 * microbatches * weight_bytes / mem.zero_shards(st, 3) / tier2_bw
    stored_mb = acts.stored(st.recompute) * n_layers_local
    offload_acts = st.offload_activations * 2 * microbatches * stored_mb / tier2_bw
    offload_stall = maximum(0.0, offload_weights + offload_acts - compute_total)

    # --- memory per tier: every stage kind, the fullest device reported ------------------------------
    unsharded_units = where(st.zero >= 3, 2 * weight_bytes / n_layers_local, 0.0)  # prefetched layers
    buffers = 4 * n_send * (1 - single) + 2 * n_tp * where(t > 1, 1.0, 0.0) + unsharded_units
    logits = b * q * (m.vocab / t) * (4 + e)  # fp32 logits and their 16-bit source on the last stage
    ow, oa, oo = st.offload_weights, st.offload_activations, st.offload_optimizer

    def stage_memory(layers: Array, stage_params: Array, index: Array, extra: Array) -> tuple[
            MemoryBreakdown, MemoryBreakdown]:
        states = mem.model_states(stage_params, st)
        activations, checkpoints = mem.stage_activations(acts, layers, st, microbatches, index)
        activations = activations + extra
        stage_weight_bytes = mem.weight_bytes(stage_params, st)
        hbm = MemoryBreakdown(
            weights=states.weights * (1 - ow) + ow * 2 * stage_weight_bytes / maximum(layers, 1),
            gradients=states.gradients, optimizer_states=states.optimizer_states * (1 - oo),
            activations=activations * (1 - oa) + oa * acts.working, checkpoints=checkpoints * (1 - oa),
            comm_buffers=buffers)
        tier2_mem = MemoryBreakdown(
            weights=states.weights * ow, gradients=0.0 * ow, optimizer_states=states.optimizer_states * oo,
            activations=activations * oa, checkpoints=checkpoints * oa, comm_buffers=0.0 * oa)
        return hbm, tier2_mem

    hbm, tier2_mem = _fullest(
        stage_memory(n_first, params_first, 0.0, single * logits),
        stage_memory(n_mid, params_mid, 1.0, 0.0),
        stage_memory(n_last, params_last, p - 1, logits),
        has_mid)

    # --- totals ------------------------------------------------------------------------------------
    breakdown = TimeBreakdown(
        forward_backward=microbatches * crit.compute,
        recompute=microbatches * crit.recompute,
        tp_exposed=microbatches * crit.tp,
        cp_exposed=microbatches * crit.cp,
        pp_exposed=microbatches * p2p_per_mb,
        bubble=pipe - busy,
        dp_exposed=dp.exposed_s,
        optimizer=optimizer,
        offload_stall=offload_stall,
    )
    step = breakdown.total
    devices = t * c * p * d
    # GEMM FLOPs are linear in the batch and split evenly over TP ranks: the whole batch's model FLOPs of
    # one layer follow from this rank's micro-batch (same as layer_forward_flop(m, B, s))
    layer_flop = sum(op.flop for op in fw.gemms) * t * c * w.global_batch / b
    model_flop = model_flop_per_iteration(m, w, layer_flop)
    core_flop = sum(op.flop for op in fw.core_gemms) * t * c * w.global_batch / b  # attention core, whole batch
    full, selective = recompute_modes(st)
    # recomputation re-runs a layer's forward (full) or its attention core, 4Bs^2h (selective; our recount
    # of Korthikanti's hardware FLOPs, formulas.md §3.2 pitfall)
    recompute_flop = m.layers * where(full, layer_flop, where(selective, core_flop, 0.0))
    tokens = w.global_batch * w.seq_len
    # every call of the step, as a device of the busiest stage makes them; traffic is their sum
    layers_here = n_layers_local
    ends_ar = ends.tp
    pp_calls = sends_per_mb * microbatches
    calls = (
        *(replace(c, per_step=c.per_step * layers_here * microbatches) for c in layer_calls if not _never(c.per_step)),
        CommCall(ParallelDimension.TP, Collective.ALL_REDUCE, (1 + single) * microbatches * where(t > 1, 1.0, 0.0),
                 n_tp, ends_ar.time, ends_ar.scale_up_bytes, ends_ar.scale_out_bytes),
        CommCall(ParallelDimension.PP, Collective.SEND_RECV, pp_calls, n_send, send.time,
                 send.scale_up_bytes, send.scale_out_bytes),
        CommCall(ParallelDimension.PP, Collective.ALL_GATHER, pp_calls * (scatter > 1), n_pp, regather.time,
                 regather.scale_up_bytes, regather.scale_out_bytes),
        *dp.calls,
    )
    calls = tuple(c for c in calls if not _never(c.per_step))
    traffic = Traffic(scale_up_bytes=sum(c.per_step * c.scale_up_bytes_each for c in calls),
                      scale_out_bytes=sum(c.per_step * c.scale_out_bytes_each for c in calls))
    feasible, reasons = check(m, st, w, system, hbm.total, tier2_mem.total)
    tier2_capacity = tier2.capacity if tier2 is not None else 0.0
    return StepEstimate(
        step_time_s=step, breakdown=breakdown, tokens_per_s=tokens / step,
        model_flop=model_flop, hardware_flop=model_flop + recompute_flop,
        mfu=model_flop / (step * devices * peak), hfu=(model_flop + recompute_flop) / (step * devices * peak),
        memory_hbm=hbm, memory_tier2=tier2_mem,
        hbm_capacity_bytes=device.hbm.capacity + 0.0 * step, tier2_capacity_bytes=tier2_capacity + 0.0 * step,
        traffic=traffic, communication=calls,
        microbatches=microbatches, layer=lc, feasible=feasible, infeasible_reasons=reasons,
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
                              where(take, parts.cp, best.cp))
        best_time = where(take, time, best_time)
    return best


def model_flop_per_iteration(m: ModelArrays, w: TrainingArrays, layer_flop: Array | None = None) -> Array:
    """Model FLOPs of one iteration: 3 x forward (backward = 2 x forward) of all layers and the LM head.
    For GPT: 72 B L s h^2 (1 + s/(6h) + V/(12 h L)) (Korthikanti et al. 2022, App. A)."""
    B, s = w.global_batch, w.seq_len
    head = 2 * B * s * m.hidden * m.vocab
    layer_flop = layer_forward_flop(m, B, s) if layer_flop is None else layer_flop
    return 3 * (m.layers * layer_flop + head)
