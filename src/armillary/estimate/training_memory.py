"""A training step's optimizer step, offload path and memory per device of every stage kind (docs/formulas.md
§12, `memory.py`, `model_states.py` and `activations.py` for the per-tensor rules), kept per model under
`MEMORY_FIELDS` by `training.py`."""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from armillary.cost.compute import stream_time
from armillary.estimate import memory as mem
from armillary.estimate.activations import logit_bytes, rebuilt_working, stage_activations
from armillary.estimate.feasibility import system_shape
from armillary.estimate.model_states import (
    ModelStates,
    lora_states,
    replicated_and_expert_states,
    replicated_and_expert_weights,
    zero_shards,
)
from armillary.estimate.mtp import MtpCost
from armillary.estimate.result import MemoryBreakdown
from armillary.estimate.stages import StageLayers, StageMemory, fullest_stage
from armillary.estimate.training_parts import Layers, PipelineSends, StageParams, uses_lora
from armillary.memo import derived
from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import rank_queries
from armillary.specs.system import System
from armillary.workload.adapters import adapter_parameters
from armillary.workload.parameters import count_parameters


def sharded_states(params: tuple[Array, Array], st: StrategyArrays, edp: Array, w: TrainingArrays,
                    adapters: Array) -> ModelStates:
    """Model states of a device's (replicated, routed expert) parameters under ZeRO: the replicated ones
    sharded over dp x cp, the experts over expert-dp. LoRA: the frozen base and the device's `adapters`
    (`model_states.lora_states`; routed experts carry no adapters)."""
    if uses_lora(w):
        return lora_states(params[0], adapters, st, w) + lora_states(params[1], 0.0, st, w, edp)
    return replicated_and_expert_states(params[0], params[1], st, edp)


def routed_expert_weights(params: tuple[Array, Array], st: StrategyArrays, edp: Array, w: TrainingArrays) -> Array:
    """`sharded_states((0 x the replicated, the experts), ...).weights`: the routed experts' weights on one
    device (the same expression; without LoRA, none of the other states)."""
    if uses_lora(w):
        return sharded_states((0.0 * params[0], params[1]), st, edp, w, 0.0).weights
    return replicated_and_expert_weights(0.0 * params[0], params[1], st, edp)


def stage_adapters(m: ModelArrays, w: TrainingArrays, st: StrategyArrays, stages: StageLayers,
                    counts: tuple[Array, Array] | None = None) -> Array:
    """LoRA adapter parameters on one device of a stage of `counts` (dense, MoE) layers (default: the
    most any stage holds), split over the tp ranks as their layers are; MoE layers adapt their attention
    and shared experts."""
    dense, moe = counts if counts is not None else (stages.busiest(0), stages.busiest(1))
    return (dense * adapter_parameters(m, w) + moe * adapter_parameters(m, w, m.shared_ffn)) / st.tp


def stored_bytes(layers: Layers, counts: tuple[Array, Array]) -> tuple[Array, Array]:
    """Bytes one micro-batch leaves stored in a stage's (dense, MoE) layers, and of them the layer inputs
    kept for full recomputation."""
    dense, moe = layers.dense, layers.moe
    # summed as sum() over the kinds sums them (from 0), written out
    stored, checkpointed = 0 + counts[0] * dense.stored, 0 + counts[0] * dense.checkpointed
    if moe is None:
        return stored, checkpointed
    return stored + counts[1] * moe.stored, checkpointed + counts[1] * moe.checkpointed


# the strategy's fields the optimizer step, the offload path and the memory read (`memory_and_optimizer` and its
# callees): with the layers, stages, parameters, sends, micro-batches, activation bytes, sequence and system, the
# key under which they are kept (tests/test_estimate_memo.py checks the list)
MEMORY_FIELDS = ("block_format", "cp", "cross_entropy", "dp", "fp8_params", "fragmentation", "grad_reduce_bf16",
                 "main_param_bytes", "memory_reserve", "micro_batch", "moment_bytes", "offload_activations",
                 "offload_experts", "offload_gradients", "offload_optimizer", "offload_weights", "pp", "precision",
                 "recompute", "schedule", "tp", "vpp", "zero", "zero3_live_params")
memory_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*MEMORY_FIELDS)


def memory_and_optimizer(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, stages: StageLayers,
                          params: StageParams, layers: Layers, sends: PipelineSends, microbatches: Array, e: Array,
                          system: System, mtp: MtpCost | None = None) -> tuple[Array, Array, MemoryBreakdown,
                                                                                 MemoryBreakdown]:
    """(`optimizer_and_offload`, `stage_memories`) of the step: the optimizer step, the offload path's busy time, the
    fullest device's memory per tier."""
    # what one micro-batch leaves stored on the first, middle and last stage, for the offload path and memory
    stored = (stored_bytes(layers, stages.first), stored_bytes(layers, stages.middle),
              stored_bytes(layers, stages.last))
    optimizer, offload_s = optimizer_and_offload(m, w, params, stages, layers, microbatches, st, system, stored)
    hbm, tier2 = stage_memories(m, st, w, stages, params, layers, sends, microbatches, e, system.device.memory_reserve,
                         stored, mtp.activations if mtp is not None else 0.0)
    return optimizer, offload_s, hbm, tier2


def optimizer_and_offload(m: ModelArrays, w: TrainingArrays, params: StageParams, stages: StageLayers,
                           layers: Layers, microbatches: Array, st: StrategyArrays, system: System,
                           stored: tuple[tuple[Array, Array], ...]) -> tuple[Array, Array]:
    """The optimizer step (memory-bound, or over the offload path when offloaded) and the time the offload path
    (`System.offload_path`: the device's second tier, or its share of the memory pool) is busy in the pipeline,
    each access taking latency + bytes / rate (ASTRA-sim's remote memory, astra-memory-analytical @641cce8),
    one access a layer: weights (the device's shard under ZeRO-3; or only the routed experts') fetched before
    each micro-batch's forward and backward, stored activations out and back once per micro-batch, the gradients
    out once per micro-batch (ZeRO-Offload accumulates them off the device: Ren et al. ATC'21 §4.1). LoRA
    updates the adapters only."""
    device, edp = system.device, layers.edp
    adapters = stage_adapters(m, w, st, stages) if uses_lora(w) else 0.0
    if uses_lora(w):
        adam_bytes = (adapters / zero_shards(st, 1)
                      * mem.optimizer_step_bytes(st, mem.adapter_precision(st)))
    else:
        updated = params.dense_local / zero_shards(st, 1) + params.experts_local / zero_shards(st, 1, edp)
        adam_bytes = updated * mem.optimizer_step_bytes(st)
    path = system_shape(system)[2]
    rate, latency = (path.rate, path.latency) if path is not None else (np.inf, 0.0)
    n_layers, moe_layers = stages.most_layers, stages.busiest(1)
    optimizer = where(st.offload_optimizer > 0, adam_bytes / rate + n_layers * latency, stream_time(adam_bytes, device))
    states = sharded_states((params.dense_local, params.experts_local), st, edp, w, adapters)
    expert_weights = routed_expert_weights((params.dense_local, params.experts_local), st, edp, w)
    offload_weights = st.offload_weights * 2 * microbatches * (states.weights / rate + n_layers * latency)
    offload_experts = ((1 - st.offload_weights) * st.offload_experts * 2 * microbatches
                       * (expert_weights / rate + moe_layers * latency))
    offload_grads = st.offload_gradients * microbatches * (states.gradients / rate + n_layers * latency)
    stored_mb = maximum(maximum(stored[0][0], stored[2][0]), stages.has_mid * stored[1][0])
    offload_acts = st.offload_activations * 2 * microbatches * (stored_mb / rate + n_layers * latency)
    return optimizer, offload_weights + offload_experts + offload_grads + offload_acts


def bytes_per_weight(st: StrategyArrays, w: TrainingArrays) -> Array:
    """Bytes of one working weight: the recipe's (`memory.weight_bytes_each`), or a LoRA base's stored bytes."""
    return w.base_bytes if uses_lora(w) else mem.weight_bytes_each(st)


def gathered_bytes(m: ModelArrays, st: StrategyArrays, layer_bytes: Array) -> Array:
    """ZeRO-3 / FSDP parameters gathered at once: two whole layers (the one in use, the prefetched one), or
    DeepSpeed's bound on live parameters (stage3_max_live_parameters; it gathers module by module, so never
    less than the largest weight matrix: QKV, output or an MLP projection, per tensor-parallel rank)."""
    largest = m.hidden * maximum(maximum(m.qkv_width, m.heads * m.value_dim),
                                 maximum((m.mlp_matrices - 1) * m.ffn, m.ffn)) / st.tp
    bounded = maximum(mem.weight_bytes(st.zero3_live_params, st), mem.weight_bytes(largest, st))
    return where(st.zero3_live_params > 0, minimum(2 * layer_bytes, bounded), 2 * layer_bytes)


def stage_memories(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, stages: StageLayers, params: StageParams,
            layers: Layers, sends: PipelineSends, microbatches: Array, e: Array, reserve: float,
            stored: tuple[tuple[Array, Array], ...], mtp: Array = 0.0) -> StageMemory:
    """Memory per tier of every stage kind; the fullest device's is reported. `reserve`: the device's runtime
    reserve (`Device.memory_reserve`), unless the strategy overrides it. `stored`: `stored_bytes` of the first,
    middle and last stage. `mtp`: what the MTP modules keep beyond their layers, on the last stage."""
    t, single = st.tp, stages.single
    moe_working = layers.moe.activations.working if layers.moe is not None else layers.dense.activations.working
    working = maximum(layers.dense.activations.working, moe_working)
    per_weight = bytes_per_weight(st, w)  # taken once for every stage
    weight_bytes = (params.dense_local + params.experts_local) * per_weight
    sharded = st.zero >= 3  # (one configuration without ZeRO-3: where's 0.0, the gathered units not priced)
    unsharded_units = (where(sharded, gathered_bytes(m, st, weight_bytes / stages.most_layers), 0.0)
                       if isinstance(sharded, np.ndarray) or sharded else 0.0)
    buffers = 4 * sends.sent_bytes * (1 - single) + 2 * layers.tp_bytes * where(t > 1, 1.0, 0.0) + unsharded_units
    # the loss's logits on the last stage (`activations.logit_bytes`), with what the MTP modules keep there
    logits = st.micro_batch * rank_queries(w.seq_len, st.cp) * (m.vocab / t) * logit_bytes(st, e) + mtp
    # QLoRA's ends: bitsandbytes quantizes linear layers only, the embedding stays 16-bit (Lightning
    # fabric/plugins/precision/bitsandbytes.py @71aed751 replaces nn.Linear, not nn.Embedding; Dettmers et al.
    # 2023 quantize the linear layers); the LM head, a linear layer, is dequantized whole for each call
    # (bitsandbytes 0.41.1 MatMul4Bit.forward: dequantize_4bit in fp16, then .to(bfloat16)): two 16-bit copies
    # live at the end of the forward, the activation peak
    embedding16: Array = 0.0
    head_copies: Array = 0.0
    if uses_lora(w):  # (the model's counts once per model, as `_stage_params` takes them)
        ends = derived(m, "parameters", lambda: count_parameters(m))
        embedding16 = w.base_dequantize * ends.embedding / t * (2.0 - w.base_bytes)
        head_copies = w.base_dequantize * ends.head / t * 4.0
    ow, oa, oo = st.offload_weights, st.offload_activations, st.offload_optimizer
    og, oe = st.offload_gradients, st.offload_experts * (1 - ow)  # weight offload moves the experts already

    lora, edp, reserved = uses_lora(w), layers.edp, mem.runtime_reserve(st, reserve)
    # what every stage takes alike, once: the working set rebuilt under full recompute, the kept shares of what
    # may be offloaded, and the staging buffer an offloaded share leaves in HBM (TE's cpu offload handler)
    rebuilt, staging = rebuilt_working(st.recompute, working), where(oa > 0, working, 0.0)
    kept_w, kept_g, kept_o, kept_a = 1 - ow, 1 - og, 1 - oo, 1 - oa

    def stage_memory(counts: tuple[Array, Array], stage_params: tuple[Array, Array], stage_stored: tuple[Array, Array],
                     index: Array, extra: Array, extra_weights: Array = 0.0) -> tuple[StageMemory, Array]:
        n_layers = counts[0] + counts[1]
        states = sharded_states(stage_params, st, edp, w, stage_adapters(m, w, st, stages, counts) if lora else 0.0)
        activations, checkpoints = stage_activations(*stage_stored, working, st, microbatches, index, rebuilt)
        activations = activations + extra
        stage_weight_bytes = (stage_params[0] + stage_params[1]) * per_weight
        # offloaded experts / gradients leave two layers' worth in HBM (the one in use, the next one)
        experts = routed_expert_weights(stage_params, st, edp, w)
        staged_experts = 2 * (stage_params[1] * per_weight) / maximum(counts[1], 1)
        weights = (states.weights * kept_w + ow * 2 * stage_weight_bytes / maximum(n_layers, 1)
                   + oe * (staged_experts - experts) + extra_weights)
        gradients = states.gradients * kept_g + og * 2 * states.gradients / maximum(n_layers, 1)
        optimizer_states = states.optimizer_states * kept_o
        kept_activations = activations * kept_a + staging
        kept_checkpoints = checkpoints * kept_a
        # the tensors' total as MemoryBreakdown.total sums them (its runtime 0), the runtime's share added to it;
        # the HBM total is that sum + the runtime, as MemoryBreakdown.total adds them (for `fullest_stage`)
        summed = weights + gradients + optimizer_states + kept_activations + kept_checkpoints + buffers
        runtime = reserved + st.fragmentation * (summed + 0.0)
        hbm = MemoryBreakdown(weights, gradients, optimizer_states, kept_activations, kept_checkpoints, buffers,
                              runtime=runtime)
        tier2 = MemoryBreakdown(
            weights=states.weights * ow + oe * experts, gradients=states.gradients * og,
            optimizer_states=states.optimizer_states * oo,
            activations=activations * oa, checkpoints=checkpoints * oa, comm_buffers=0.0 * oa)
        return (hbm, tier2), summed + runtime

    first, first_total = stage_memory(stages.first, params.first, stored[0], 0.0, single * (logits + head_copies),
                                      embedding16)
    middle, middle_total = stage_memory(stages.middle, params.middle, stored[1], 1.0, 0.0)
    last, last_total = stage_memory(stages.last, params.last, stored[2], st.pp - 1, logits + head_copies,
                                    single * embedding16)
    return fullest_stage(first, middle, last, stages.has_mid, (first_total, middle_total, last_total))
