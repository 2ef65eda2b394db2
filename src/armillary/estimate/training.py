"""One training iteration, composed from per-layer kernels, collectives and the pipeline schedule.

Recipe (docs/formulas.md §12), one named step each: one layer of each kind and the model's ends for one
micro-batch (`training_layers.py`, from `layer.py`: kernels through the device's roofline, exposed TP / CP / EP
collectives, recomputation); the pipeline sends; the stages' times and the schedule (`stages.py`, `pipeline.py`); the
parameters each stage holds and their data-parallel communication (`data_parallel.py`); the optimizer step,
the second memory tier and memory per device of the fullest stage (`training_memory.py`, `memory.py`); model FLOPs
(`flops.py`); every call of the step. Every function takes arrays, so one call evaluates one
configuration or a whole sweep.

One configuration's parts are kept under their inputs (`MODEL_PARTS` per model, `_SENDS`, `_DATA_PARALLEL` and
`_GROUPS` per system; `memo.KeyedCache`): each key holds the strategy fields the part reads (`*_FIELDS`, checked
against the code by tests/test_estimate_memo.py), the numbers it takes and, by identity, the spec objects and the
kept parts it follows from, which the value holds so that their ids stay their own. The same estimate again is
look-ups; a sweep's point takes what it shares with earlier points (its layers across pp, dp, ZeRO, offload; its
memory across overlap and collective choices). A sweep's arrays do not hash: computed as before.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import numpy as np

from armillary.comm.collectives import all_gather, needed, send_recv
from armillary.comm.overlap import at_least_zero
from armillary.cost.compute import matrix_peak
from armillary.estimate import memory as mem
from armillary.estimate.data_parallel import (
    DataParallelCost,
    data_parallel_cost,
    data_parallel_fields,
    exposed_together,
    parameter_tensors,
)
from armillary.estimate.embedding_sync import with_embedding_sync
from armillary.estimate.feasibility import check, system_shape
from armillary.estimate.flops import model_flop_per_iteration
from armillary.estimate.layer import recompute_modes
from armillary.estimate.mtp import MtpCost, mtp_cost, mtp_depth, mtp_flop, mtp_layers_model, trains_mtp, with_mtp
from armillary.estimate.pipeline import pipeline_time
from armillary.estimate.result import (
    DIM_EDP,
    DIM_PP,
    DIM_TP,
    CommCall,
    ParallelDimension,
    StepEstimate,
    TimeBreakdown,
    Traffic,
    over,
    pipeline_total,
)
from armillary.estimate.stages import (
    StageLayers,
    StageTime,
    critical_stage,
    split_stages,
    weighted_sum,
)
from armillary.estimate.step_figures import FIGURES, PARTS, Deferral, step_figures
from armillary.estimate.training_layers import MODEL_PARTS, spans_key, training_layers
from armillary.estimate.training_memory import memory_and_optimizer, memory_fields, stage_adapters
from armillary.estimate.training_parts import Layers, PipelineSends, StageParams, uses_lora
from armillary.memo import KeyedCache, derived, quick_replace, typed
from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.codes import BLOCK_FORMAT
from armillary.plan.layout import microbatch_count, rank_queries
from armillary.plan.placement import Groups, Placement, place_groups
from armillary.plan.rules import chunk_layers, chunk_share
from armillary.specs.communication import ALL_GATHER, ALL_REDUCE, SEND_RECV
from armillary.specs.device import Device, Precision
from armillary.specs.system import System
from armillary.specs.training_precision import BlockFormat
from armillary.workload.experts import replica_weights
from armillary.workload.parameters import count_parameters

_INT8 = BLOCK_FORMAT.code(BlockFormat.INT8)

T = TypeVar("T")

# one configuration's group placements per system (its sizes), by the degrees and rank order (`estimate_training`)
_GROUPS: KeyedCache[System, Groups] = KeyedCache(32, 512)


def estimate_training(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System) -> StepEstimate:
    device = system.device
    e = mem.per_precision(mem.ACTIVATION_BYTES, st.precision)
    microbatches = microbatch_count(w.global_batch, st.micro_batch, st.dp)
    groups, stages_key, stages = _placed(m, st, system)
    base, st = st, _chunked(st, stages)
    layers = training_layers(m, st, w, system, groups, e)
    # multi-token prediction: its modules on the last stage (estimate/mtp.py)
    depth, mtp = mtp_depth(m, w), None
    if trains_mtp(depth):
        stages = with_mtp(stages, depth, m)
        mtp = mtp_cost(m, st, w, system, layers.ends, depth, where(w.frozen, 1.0, 0.0), e, stages.single)
        layers = replace(layers, ends=replace(layers.ends, mtp_s=mtp.time.compute, mtp_forward_s=mtp.forward_s))
    sends = _SENDS.get(system, (typed(*sends_fields(st), w.seq_len, m.hidden, e), spans_key(groups.pp),
                                spans_key(groups.tp)), lambda: _pipeline_sends(m, st, w, system, groups, e))
    # each part for every point with the same inputs (kept per model: the kept objects it follows from held by the
    # value, so that their ids stay their own); with MTP made each time
    held = (layers.dense, layers.moe, stages)
    crit, pipe = _kept(m, mtp, "pipeline", held, typed(sends.per_mb, microbatches, st.pp, st.vpp, st.schedule),
                       lambda: _pipeline(layers, stages, mtp, sends.per_mb, microbatches, st))
    params = _kept(m, mtp, "stage params", (), (stages_key, *typed(st.tp, st.ep, st.etp, st.redundant_experts)),
                   lambda: _stage_params(m, st, stages, mtp.params if mtp is not None else 0.0))
    dp = _data_parallel(m, params, stages, microbatches, st, groups.gradient, system, layers, w)
    # the word embedding's gradient all-reduce between the first and last stage, after the flush (embedding_sync.py)
    dp = with_embedding_sync(dp, m, st, w, depth, groups.pp, system)
    optimizer, offload_s, hbm, tier2_mem = _kept(
        m, mtp, "memory", (layers, stages, params, sends, system, w if uses_lora(w) else None),
        (*typed(microbatches, e, w.seq_len), *typed(*memory_fields(st))),
        lambda: memory_and_optimizer(m, st, w, stages, params, layers, sends, microbatches, e, system, mtp))
    # every call of the step and their traffic: made here where a memory pool's link reads the traffic, else below
    # (a sweep's when first read: a search reads neither)
    path = system_shape(system)[2]
    linked = path is not None and path.network is not None
    calls_traffic = _kept_calls(m, mtp, layers, stages, sends, dp, microbatches, st) if linked else None
    offload_s = offload_s + _pool_link_s(system, None if calls_traffic is None else calls_traffic[1], offload_s)
    parts = (microbatches * crit.compute, microbatches * crit.recompute, microbatches * crit.tp,
             microbatches * crit.cp, microbatches * crit.ep, microbatches * sends.per_mb,
             maximum(0.0, pipe - microbatches * (crit.total + sends.per_mb)),  # the bubble, >= 0 after rounding
             exposed_together(dp, *_overlappable(crit), microbatches), optimizer)
    stall, step = _stall_and_step(parts, optimizer, offload_s)
    breakdown = TimeBreakdown(*parts, offload_stall=stall)
    # the shape rules of the point as given (`base`: the chunked copy differs only in the recompute and offload
    # shares, which no rule reads), so a search's mask and this check take them once (`feasibility.shape_rules`)
    feasible, reasons = check(m, base, w, system, hbm.total, tier2_mem.total)
    tier2 = path  # the device's second tier, or its share of the memory pool
    # the model FLOPs, throughput, utilization, the capacities and the offload time per point (`_figures`): one
    # configuration's now, a sweep's when first read (a search reads none of them: issue 47)
    inputs = (step, st, device, m, w, layers, microbatches, depth if mtp is not None else None,
              tier2.capacity if tier2 is not None else 0.0, offload_s)
    swept = isinstance(step, np.ndarray)
    (model_flop, hardware_flop, tokens_s, mfu, hfu, hbm_capacity, tier2_capacity,
     offload_total) = Deferral(_figures, *inputs).deferred(len(FIGURES)) if swept else _figures(*inputs)
    if calls_traffic is None:  # the calls and traffic not made above
        calls_traffic = (Deferral(_calls_and_traffic, layers, stages, sends, dp, microbatches, st).deferred(len(PARTS))
                         if swept else _kept_calls(m, mtp, layers, stages, sends, dp, microbatches, st))
    calls, traffic = calls_traffic
    return StepEstimate(
        step_time_s=step, breakdown=breakdown, tokens_per_s=tokens_s, model_flop=model_flop,
        hardware_flop=hardware_flop, mfu=mfu, hfu=hfu, memory_hbm=hbm, memory_tier2=tier2_mem,
        hbm_capacity_bytes=hbm_capacity, tier2_capacity_bytes=tier2_capacity, traffic=traffic, communication=calls,
        microbatches=microbatches, layer=layers.dense.cost,
        moe_layer=layers.moe.cost if layers.moe is not None else None, feasible=feasible, infeasible_reasons=reasons,
        ends=layers.ends, offload_s=offload_total,
    )



def _placed(m: ModelArrays, st: StrategyArrays, system: System) -> tuple[Groups, tuple[object, ...], StageLayers]:
    """Where each group's ranks sit (once per strategy point and network shape, kept on the frozen point, and by
    value for the points of a sweep), and the model's stages with their key (for every point of the same
    pipeline, kept per model)."""
    sizes = system_shape(system)[0]
    groups = derived(st, ("groups", sizes), lambda: _GROUPS.get(
        system, typed(st.tp, st.dp, st.pp, st.cp, st.rank_order),
        lambda: place_groups(st.tp, st.dp, st.pp, sizes, st.cp, st.rank_order)))
    stages_key = ("stages", *typed(st.pp, st.first_stage_layers, st.last_stage_layers))
    stages: StageLayers = MODEL_PARTS.get(m, stages_key, lambda: split_stages(
        m.layers, m.dense_layers, st.pp, st.first_stage_layers, st.last_stage_layers))
    return groups, stages_key, stages


def _chunked(st: StrategyArrays, stages: StageLayers) -> StrategyArrays:
    """The point with every layer priced at its chunk's average recomputation and offload: what a block-method
    recompute re-runs, what offloading the first N layers of each chunk moves. The copy is made once per point
    and shares (`memo.quick_replace`: dataclasses.replace of its 70 fields costs about 17 us)."""
    chunk = chunk_layers(*stages.totals, st.pp, st.vpp)
    share = chunk_share(st.recompute_layers, chunk)
    offloaded = st.offload_activations * chunk_share(st.offload_activation_layers, chunk)
    return derived(st, ("chunked", share, offloaded),
                   lambda: quick_replace(st, recompute_share=share, offload_activations=offloaded))


def _stall_and_step(parts: tuple[Array, ...], optimizer: Array, offload_s: Array) -> tuple[Array, Array]:
    """The second tier's stall and the step. Its link runs alongside the whole pipeline, so it stalls the step
    only by what it takes longer. The pipeline is every other part, summed in TimeBreakdown.total's order and
    taken once for the stall and the step: the step is that sum + the stall, as TimeBreakdown.total adds them."""
    pipeline = pipeline_total(*parts)
    if type(pipeline) is not np.ndarray or not pipeline.ndim:  # one configuration (numpy's 0-d results are scalars)
        stall = maximum(0.0, offload_s - ((pipeline + 0.0) - optimizer))
        return stall, pipeline + stall
    # a sweep: the same operations in the same order, each written over its temporary (`result.over`), without the
    # pass that adds 0.0, which changes only a pipeline of -0.0 (to +0.0): a sum ending in + optimizer is -0.0 only
    # where the optimizer is -0.0 too (IEEE 754, round to nearest), and there (+0.0) - (-0.0) and (-0.0) - (-0.0)
    # are both +0.0, so the spare time is the same bit for bit
    spare = pipeline - optimizer
    spare = over(np.subtract, offload_s, spare, spare)
    stall = at_least_zero(spare)  # (numpy's maximum of 0.0 and the spare time, written over it)
    return stall, over(np.add, pipeline, stall, pipeline)  # (the pipeline's sum read no more)


def _kept(m: ModelArrays, mtp: MtpCost | None, name: str, held: tuple[object, ...], numbers: tuple[object, ...],
          make: Callable[[], T]) -> T:
    """`make()` kept per model (`MODEL_PARTS`) under `name`, the ids of the kept objects it follows from (`held`, which
    the value holds so that their ids stay their own) and `numbers`; with MTP made each time (its layers are
    rebuilt for every estimate)."""
    if mtp is not None:
        return make()
    return MODEL_PARTS.get(m, (name, *map(id, held), *numbers), lambda: (held, make()))[1]



# the strategy's fields `_pipeline_sends` reads: with the sequence, the hidden size, the activation bytes and the
# groups' spans, the key of one configuration's sends kept per system (`_SENDS`; tests/test_estimate_memo.py checks
# the list)
SENDS_FIELDS = ("tp", "pp", "sequence_parallel", "tp_layout", "micro_batch", "cp", "pp_scatter_gather", "vpp")
sends_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*SENDS_FIELDS)
_SENDS: KeyedCache[System, PipelineSends] = KeyedCache(32, 512)


def _pipeline_sends(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System, groups: Groups,
                    e: Array) -> PipelineSends:
    """Pipeline activation per micro-batch; with scatter/gather only 1/t crosses nodes and is all-gathered
    inside (SC'21 §4.1); with sequence parallelism the activation is already the 1/t shard, sent as is
    (Megatron skips scatter/gather then), as under the 2-D layout, whose ranks each hold a 1/t block of it
    (Xu et al. arXiv 2104.05343 §3). Every micro-batch sends its activation forward and its gradient back,
    once per model chunk."""
    t, p, sp = st.tp, st.pp, maximum(st.sequence_parallel, st.tp_layout > 0)
    n_pp = st.micro_batch * rank_queries(w.seq_len, st.cp) * m.hidden * e
    crosses = groups.pp.outermost > 0  # the stages sit in different nodes
    scatter = where((st.pp_scatter_gather > 0) & crosses & (sp == 0), t, 1.0)
    n_send = where(sp > 0, n_pp / t, n_pp / scatter)
    send = send_recv(n_send, groups.pp, system)
    regather = needed(lambda: all_gather(n_pp, groups.tp, system), scatter > 1)
    sends_per_mb = (1 - where(p == 1, 1.0, 0.0)) * 2 * st.vpp
    return PipelineSends(n_pp, n_send, send, regather, scatter, sends_per_mb,
                         sends_per_mb * (send.time + (scatter > 1) * regather.time))


def _pipeline(layers: Layers, stages: StageLayers, mtp: MtpCost | None, sends_s: Array, microbatches: Array,
              st: StrategyArrays) -> tuple[StageTime, Array]:
    """The critical stage's time by component and the pipeline's time (`pipeline.pipeline_time`) of the stages'
    times (`_stage_times`) with `sends_s` of sends per micro-batch; of the strategy, pp, vpp and schedule."""
    times = _stage_times(layers, stages, mtp)
    first_s, middle_s, last_s = times[0].total, times[1].total, times[2].total  # once each
    mid_s = stages.has_mid * middle_s
    stage_max = maximum(maximum(first_s, last_s), mid_s) + sends_s
    stage_sum = first_s + (1 - stages.single) * last_s + maximum(st.pp - 2, 0) * middle_s + st.pp * sends_s
    # the critical (slowest) stage fixes the steady state; attribute it by component
    crit = critical_stage((first_s, times[0]), (last_s, times[2]), (mid_s, times[1]))
    # what deferring the weight passes takes off the critical stage, of its time (ZB-H1; estimate/pipeline.py)
    weight_share = crit.deferrable / stage_max
    return crit, pipeline_time(stage_max, stage_sum, microbatches, st.vpp, st.schedule, weight_share, st.pp)


def _stage_times(layers: Layers, stages: StageLayers,
                 mtp: MtpCost | None = None) -> tuple[StageTime, StageTime, StageTime]:
    """One micro-batch on the first, middle and last stage kinds: their layers, the embedding on the first
    and the LM head on the last (both on a single stage), and the MTP modules' other work on the last."""
    dense, moe = layers.dense.time, layers.moe.time if layers.moe is not None else None
    ends = layers.ends
    embedding = StageTime(compute=ends.embedding_s, recompute=0.0, tp=ends.tp.time)
    head = StageTime(compute=ends.head_s, recompute=0.0, tp=ends.tp.time)
    single = stages.single
    if mtp is not None:
        head = head + mtp.time

    def of(counts: tuple[Array, Array], *ends: tuple[StageTime, Array | None]) -> StageTime:
        """dense x its layers (+ MoE x its layers) + the ends, summed as StageTime's * and + sum them."""
        if moe is not None:
            return weighted_sum(dense, counts[0], (moe, counts[1]), *ends)
        return weighted_sum(dense, counts[0], *ends)

    return (of(stages.first, (embedding, None), (head, single)), of(stages.middle),
            of(stages.last, (head, None), (embedding, single)))



def _stage_params(m: ModelArrays, st: StrategyArrays, stages: StageLayers, mtp: Array = 0.0) -> StageParams:
    """Per device: dense layers and the replicated part of MoE layers split over tp; routed experts over ep
    (experts / ep each, and the rank's redundant replicas: EPLB) and etp; the embedding on the first stage,
    the LM head on the last, with the MTP modules' own parameters (`mtp`, beyond their layers)."""
    params = derived(m, "parameters", lambda: count_parameters(m))  # once per model
    t, single = st.tp, stages.single
    expert_local = m.experts / st.ep * replica_weights(m.experts, st.ep, st.redundant_experts) * params.expert / st.etp

    def of(counts: tuple[Array, Array], ends_params: Array) -> tuple[Array, Array]:
        return ((counts[0] * params.dense_layer + counts[1] * params.moe_layer_replicated + ends_params) / t,
                counts[1] * expert_local)

    first = of(stages.first, params.embedding + single * (params.head + mtp))
    middle = of(stages.middle, 0.0)
    last = of(stages.last, params.head + single * params.embedding + mtp)
    # each stage's total summed from 0 as sum() sums it; the busiest stage's (dense, experts) chosen per point
    total_first, total_mid, total_last = 0 + first[0] + first[1], 0 + middle[0] + middle[1], 0 + last[0] + last[1]
    take_last = total_last > total_first
    local = where(take_last, last[0], first[0]), where(take_last, last[1], first[1])
    take_mid = (stages.has_mid > 0) & (total_mid > maximum(total_first, total_last))
    dense_local, experts_local = where(take_mid, middle[0], local[0]), where(take_mid, middle[1], local[1])
    return StageParams(first, middle, last, dense_local, experts_local)


def _overlappable(crit: StageTime) -> tuple[Array, Array]:
    """(forward, backward) of one micro-batch on the critical stage, what data-parallel traffic hides
    behind: its forward and backward passes, exposed layer communication included, about a third forward
    and two thirds backward, and the recomputed forward (its exchanges included) with the backward. Each
    window is a whole pass or a sum of them, so a faster resource shrinks it or leaves it (one schedule: a
    faster pass can expose more of the traffic, never make the step slower)."""
    passes = crit.compute + crit.tp + crit.cp + crit.ep - crit.recomputed_exchange
    return passes / 3, 2 * passes / 3 + crit.recompute + crit.recomputed_exchange


def _data_parallel(m: ModelArrays, params: StageParams, stages: StageLayers, microbatches: Array,
                   st: StrategyArrays, group: Placement, system: System,
                   layers: Layers, w: TrainingArrays) -> tuple[DataParallelCost, ...]:
    """Gradient reduction and parameter gathers of the busiest device: its replicated parameters over the
    dp x cp ranks, its routed experts over expert-dp. They run on their own streams alongside the passes
    of the critical stage (`_overlappable`, `data_parallel.exposed_together`)."""
    # LoRA: only the adapters' gradients are reduced (Hu et al. 2021 §4.1); the frozen base is gathered by
    # ZeRO-3 / FSDP only
    lora = uses_lora(w)
    adapters = (stage_adapters(m, w, st, stages), params.dense_local * w.base_bytes) if lora else None
    dense = _kept_data_parallel(params.dense_local, stages.most_layers, microbatches, st, group, system,
                                ParallelDimension.DP, parameter_tensors(m), adapters)
    if layers.moe is None or layers.edp_group is None:
        return (dense,)
    experts = _kept_data_parallel(params.experts_local, maximum(stages.busiest(1), 1), microbatches, st,
                                  layers.edp_group, system, DIM_EDP, 0.0,
                                  (0.0 * params.experts_local, params.experts_local * w.base_bytes) if lora else None)
    return dense, experts


# one configuration's data-parallel costs per system, by their inputs (`_kept_data_parallel`)
_DATA_PARALLEL: KeyedCache[System, DataParallelCost] = KeyedCache(32, 512)


def _kept_data_parallel(params_local: Array, layers_local: Array, microbatches: Array, st: StrategyArrays,
                        group: Placement, system: System, dimension: ParallelDimension,
                        tensors_per_layer: Array, lora: tuple[Array, Array] | None) -> DataParallelCost:
    """`data_parallel_cost`, kept per system under its inputs: the numbers (LoRA's adapters and base bytes among
    them), the group's spans, the strategy's fields it reads (`data_parallel.DATA_PARALLEL_FIELDS`), so that a
    sweep's points with the same parameters, micro-batches and group (e.g. over recomputation or offload) take it
    once."""
    key = (typed(params_local, layers_local, microbatches, tensors_per_layer), spans_key(group), id(dimension),
           typed(*data_parallel_fields(st)), None if lora is None else typed(*lora))
    return _DATA_PARALLEL.get(system, key, lambda: data_parallel_cost(
        params_local, layers_local, microbatches, st, group, system, dimension, tensors_per_layer, lora))



def _pool_link_s(system: System, traffic: Traffic | None, offload_s: Array) -> Array:
    """Where a step offloads to a memory pool reached over a network dimension: the time that dimension's links
    carry the step's own traffic, which the pool's transfers wait behind (one link, two users: their times add,
    docs/memory-pool.md) [derived rule; ASTRA-sim's pool loads no link]. Dimension 0 carries the scale-up bytes,
    an outer one every byte beyond the node (an upper bound on a network of more than two dimensions). `traffic`:
    the step's, given where the pool is reached over the network (None elsewhere: not read)."""
    path = system_shape(system)[2]
    if path is None or path.network is None or traffic is None:
        return 0.0 * offload_s
    dim = system.network[path.network]
    sent = traffic.scale_up_bytes if path.network == 0 else traffic.scale_out_bytes
    return where(offload_s > 0, sent / (dim.efficiency * dim.bandwidth / dim.shared_by), 0.0)



def _figures(step: Array, st: StrategyArrays, device: Device, m: ModelArrays, w: TrainingArrays, layers: Layers,
             microbatches: Array, mtp_depth: Array | None, tier2_capacity: Array,
             offload_s: Array) -> tuple[Array, ...]:
    """The step's model and hardware FLOPs (`_flops`) and the figures that follow from its time (`step_figures`), in
    `step_figures.FIGURES` order."""
    devices = st.tp * st.cp * st.pp * st.dp
    model_flop, recompute_flop = _flops(m, st, w, layers, microbatches, mtp_depth)
    peak = matrix_peak(device, st.precision)
    if np.any(np.asarray(st.block_format) == _INT8):  # AQT int8 GEMMs: utilization against the int8 MXU rate they
        # run at, above the recipe family's (fp8, on TPUs the bf16 rate)
        peak = where(st.block_format == _INT8, device.matrix_peak(Precision.INT8), peak)
    hardware_flop = model_flop + recompute_flop
    return (model_flop, hardware_flop, *step_figures(step, devices, peak, w.global_batch * w.seq_len, model_flop,
                                                     hardware_flop, device.hbm.capacity, tier2_capacity, offload_s))


def _flops(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, layers: Layers,
           microbatches: Array, mtp_depth: Array | None = None) -> tuple[Array, Array]:
    """(model FLOPs, recomputed FLOPs) of the iteration, whole cluster. GEMM FLOPs are linear in the batch
    and split evenly over TP ranks (all of them but MLA's down-projections): the whole batch's dense-layer
    FLOPs follow from this rank's micro-batch. Recomputation re-runs a layer's forward (full) or its
    attention core, 4Bs^2h (selective; our recount of Korthikanti's hardware FLOPs, docs/formulas.md §3.2
    pitfall), plus what the further selective modules re-run, summed over every device's layers and
    micro-batches. `mtp_depth`: the MTP modules' layers counted as the model's, their LM-head passes and
    projections added (`mtp.mtp_flop`)."""
    head_model = m
    if mtp_depth is not None:
        m = mtp_layers_model(m, mtp_depth)
    t, c = st.tp, st.cp
    rank_to_batch = t * c * w.global_batch / st.micro_batch
    split_evenly = not isinstance(m.kv_lora, np.ndarray) and m.kv_lora == 0
    fw = layers.dense.forward
    processed = where(st.capacity_factor > 0, minimum(st.capacity_factor, 1.0), 1.0)  # routed tokens computed
    gemms = None
    if split_evenly:  # (the forward's sums once per forward object, `derived`)
        gemm, core = derived(fw, "gemm flops", lambda: (sum(op.flop for op in fw.gemms),
                                                        sum(op.flop for op in fw.core_gemms)))
        gemms = (gemm * rank_to_batch, core * rank_to_batch)
    if mtp_depth is None:  # kept per model and workload (held by the value, so that its id stays its own)
        flops = MODEL_PARTS.get(m, ("model flops", id(w), typed(*(gemms or (None,)), processed)),
                           lambda: (w, model_flop_per_iteration(m, w, gemms, processed)))[1]
    else:
        flops = model_flop_per_iteration(m, w, gemms, processed)
    full, selective = recompute_modes(st)
    moe_modules = m.moe_layers * layers.moe.cost.recompute_modules.flop if layers.moe is not None else 0.0
    modules_flop = microbatches * t * c * st.dp * (m.dense_layers * layers.dense.cost.recompute_modules.flop
                                                   + moe_modules)
    recompute_flop = full * flops.layers_forward + where(selective, flops.attention_core, 0.0) + modules_flop
    if mtp_depth is not None:
        return flops.total + mtp_flop(head_model, w, mtp_depth, flops.head), recompute_flop
    return flops.total, recompute_flop


def _kept_calls(m: ModelArrays, mtp: MtpCost | None, layers: Layers, stages: StageLayers, sends: PipelineSends,
                dp: tuple[DataParallelCost, ...], microbatches: Array,
                st: StrategyArrays) -> tuple[tuple[CommCall, ...], Traffic]:
    """`_calls_and_traffic`, kept per model (`_kept`) under the parts it reads."""
    return _kept(m, mtp, "calls", (layers.dense, layers.moe, stages, sends, *dp), typed(microbatches, st.tp),
                 lambda: _calls_and_traffic(layers, stages, sends, dp, microbatches, st))


def _calls_and_traffic(layers: Layers, stages: StageLayers, sends: PipelineSends, dp: tuple[DataParallelCost, ...],
                       microbatches: Array, st: StrategyArrays) -> tuple[tuple[CommCall, ...], Traffic]:
    """`_calls`, and the bytes they send inside and beyond the scale-up domain."""
    calls = _calls(layers, stages, sends, dp, microbatches, st)
    scale_up: Array = 0  # each summed from 0 over the calls, as sum() sums them (one loop for both)
    scale_out: Array = 0
    for c in calls:
        per_step = c.per_step
        scale_up, scale_out = scale_up + per_step * c.scale_up_bytes_each, scale_out + per_step * c.scale_out_bytes_each
    return calls, Traffic(scale_up_bytes=scale_up, scale_out_bytes=scale_out)


def _calls(layers: Layers, stages: StageLayers, sends: PipelineSends, dp: tuple[DataParallelCost, ...],
           microbatches: Array, st: StrategyArrays) -> tuple[CommCall, ...]:
    """Every call of the step, as a device of the busiest stage makes them; traffic is their sum."""
    moe_calls = layers.moe.calls if layers.moe is not None else ()
    pp_calls = sends.per_step_each_mb * microbatches
    kept: list[CommCall] = []  # in this order: the layers' calls, the ends', the pipeline's, data-parallel
    for layer_calls, count in ((layers.dense.calls, stages.busiest(0)), (moe_calls, stages.busiest(1))):
        for call in layer_calls:
            if not _never(call.per_step):
                per_step = call.per_step * count * microbatches
                if not _never(per_step):
                    kept.append(_times(call, per_step))
    for call in (
        CommCall.of(DIM_TP, ALL_REDUCE,
                    (1 + stages.single) * microbatches * where(st.tp > 1, 1.0, 0.0), layers.tp_bytes, layers.ends.tp),
        CommCall.of(DIM_PP, SEND_RECV, pp_calls, sends.sent_bytes, sends.send),
        CommCall.of(DIM_PP, ALL_GATHER, pp_calls * (sends.scatter > 1),
                    sends.activation_bytes, sends.regather),
        *(call for cost in dp for call in cost.calls),
    ):
        if not _never(call.per_step):
            kept.append(call)
    return tuple(kept)


def _times(call: CommCall, per_step: Array) -> CommCall:
    """`call` made `per_step` times (a new CommCall: dataclasses.replace costs twice as much)."""
    return CommCall(call.dimension, call.operation, per_step, call.message_bytes, call.time_each_s,
                    call.scale_up_bytes_each, call.scale_out_bytes_each)


def _never(count: Array) -> bool:
    """A call that a single configuration never makes (kept in a sweep, where some points make it)."""
    return not isinstance(count, np.ndarray) and count == 0
