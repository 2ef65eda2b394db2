"""One training step's layers for one micro-batch: one dense layer, one MoE layer (MoE models) and the model's
ends, each from its kernels through the device's roofline, its exposed TP / CP / EP collectives and its stored
activations (`layer.py`, `activations.py`), with Megatron-Core's software passes on the routed experts. Kept per
model under the inputs each part reads (`MODEL_PARTS`, shared with the rest of the step in `training.py`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from armillary.cost.compute import kernel_times
from armillary.estimate import memory as mem
from armillary.estimate.activations import STORED_FIELDS, layer_activations, lora_saved_inputs, stored_fields
from armillary.estimate.feasibility import system_shape
from armillary.estimate.layer import (
    KERNEL_FIELDS,
    LAYER_FIELDS,
    Adapters,
    kernel_fields,
    kernel_passes,
    layer_cost,
    layer_fields,
)
from armillary.estimate.layer_comm import ExpertGroups, LayerExchange, TpCosts, tp_collectives
from armillary.estimate.result import EndsCost, PassCost
from armillary.estimate.token_exchange import Fanout
from armillary.estimate.training_parts import LayerKind, Layers, uses_lora
from armillary.memo import KeyedCache, derived, typed
from armillary.numerics import Array, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import rank_queries
from armillary.plan.placement import Groups, Placement, place_expert_groups
from armillary.specs.system import System
from armillary.workload.adapters import adapter_forward, dequantize
from armillary.workload.attention import ring_kv_block
from armillary.workload.experts import ExpertsForward, experts_forward, rank_load
from armillary.workload.transformer import ends_forward, layer_forward, sequence_shards, tp_message_bytes

# one configuration's parts per model, each under its inputs (memo.KeyedCache): the layers and what they are made
# of (forward, kernel times, activations, layer kinds, the ends' and routed experts' forward), the stages and their
# parameters, the pipeline, the calls, the memory and the model FLOPs. About 3 entries a strategy point of a sweep
# (parts are shared), a few KB each (144 points of one run: 2.3 MB); at most 1,024 a model and 16 models
MODEL_PARTS: KeyedCache[ModelArrays, Any] = KeyedCache(16, 1024)

# the strategy's fields `training_layers` reads, with those of what it calls (`layer.LAYER_FIELDS`, `KERNEL_FIELDS`,
# `activations.STORED_FIELDS`, `memory.saved_input_bytes`): with the activation bytes, the sequence, the system and the
# groups' spans, the key under which the layers are kept per model (tests/test_estimate_memo.py checks the list)
LAYERS_FIELDS = tuple(sorted({*LAYER_FIELDS, *KERNEL_FIELDS, *STORED_FIELDS, "micro_batch", "dp",
                              "redundant_experts", "imbalance", "capacity_factor", "pad_to_capacity", "dispatch_fp8",
                              "precision", "block_format"}))
layers_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*LAYERS_FIELDS)


def training_layers(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System, groups: Groups,
            e: Array) -> Layers:
    """One dense layer, one MoE layer (MoE models) and the ends, for one micro-batch (`_made_layers`): kept per
    model under their inputs for every point that shares them. (The key holds the system, and under LoRA the
    workload, whose adapters the layers read, by identity: the value keeps them alive, so that their ids stay
    their own.)"""
    lora = w if uses_lora(w) else None
    key = ("layers", typed(*layers_fields(st)), typed(e, w.seq_len), id(system), spans_key(groups.tp),
           spans_key(groups.cp), id(lora))
    return MODEL_PARTS.get(m, key, lambda: (system, lora, _made_layers(m, st, w, system, groups, e)))[2]  # type: ignore[no-any-return]


def _made_layers(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System, groups: Groups,
                 e: Array) -> Layers:
    """One dense layer, one MoE layer (MoE models) and the ends, for one micro-batch. With context
    parallelism every rank works on s/cp tokens of each sequence."""
    b, s, t, sp, c = st.micro_batch, w.seq_len, st.tp, st.sequence_parallel, st.cp
    q = rank_queries(s, c)
    n_tp = tp_message_bytes(m, b, q, e)
    tokens = b * q  # a rank's tokens of the micro-batch (taken once: the same product each time)
    kv_block = ring_kv_block(m, tokens, t, e)  # one rank's K and V (ring attention)
    a2a_bytes = (tokens * m.qkv_width / t * e, tokens * m.heads * m.value_dim / t * e)
    ends_key = ("ends", *typed(b, q, t, e))
    ends_fw = MODEL_PARTS.get(m, ends_key, lambda: ends_forward(m, b, q, t, e))
    tp_costs: list[TpCosts] = []  # the same for every layer kind: taken once, where a layer's cost is made
    device, lora = system.device, uses_lora(w)
    g = mem.saved_input_bytes(st)
    # the kernels' strategy inputs (`layer_kernels`), and the activations' (`activations.layer_activations`)
    kernel_inputs = typed(*kernel_fields(st))
    saved = typed(st.attention, g)
    # a layer's cost (`layer_cost`) beyond its kernels: the strategy's fields it reads, the system, the
    # messages and the groups' spans (the TP collectives follow from them); its stored activations' fields
    cost_inputs = (typed(*layer_fields(st)), id(system), typed(n_tp, kv_block, *a2a_bytes),
                   spans_key(groups.tp), spans_key(groups.cp))
    stored_inputs = typed(*stored_fields(st))

    def kind(mlp_width: Array | None, experts: ExpertsForward | None = None,
             expert_groups: ExpertGroups | None = None, experts_key: tuple[object, ...] | None = None
             ) -> tuple[LayerKind, EndsCost]:
        # the layer's forward, kernel times, cost and stored activations: pure functions of the model and the
        # inputs in their keys, kept per model (`MODEL_PARTS`), so the points of a sweep that share them take them once
        forward_key = ("forward", *typed(b, s, t, sp, e, c, mlp_width))
        kernels_key = ("kernels", forward_key, ends_key, experts_key, id(device), kernel_inputs)
        if lora:
            return made(mlp_width, experts, expert_groups, experts_key, forward_key, kernels_key)[1:]
        # (the keys hold the device and the system by identity: the values keep them alive, so that their ids
        # stay their own)
        groups_key = None if expert_groups is None else (spans_key(expert_groups.ep), spans_key(expert_groups.etp))
        return MODEL_PARTS.get(m, ("kind", kernels_key, cost_inputs, groups_key, saved, stored_inputs),
                          lambda: made(mlp_width, experts, expert_groups, experts_key, forward_key, kernels_key))[1:]

    def made(mlp_width: Array | None, experts: ExpertsForward | None, expert_groups: ExpertGroups | None,
             experts_key: tuple[object, ...] | None, forward_key: tuple[object, ...],
             kernels_key: tuple[object, ...]) -> tuple[System, LayerKind, EndsCost]:
        # a YaRN model's rotary embedding op by op, as Megatron-Bridge runs it (`layer_forward`), for every
        # training stack as the expert biases below
        fw = MODEL_PARTS.get(m, forward_key, lambda: layer_forward(m, b, s, t, sp, e, c, mlp_width, eager_yarn=1.0))
        kernels = MODEL_PARTS.get(m, kernels_key, lambda: (device, kernel_passes(fw, ends_fw, experts, st, device)))[1]
        if not tp_costs:  # the TP collectives, once for every layer kind
            tp_costs.append(tp_collectives(st, system, n_tp, groups.tp))
        exchange = LayerExchange(n_tp, groups.tp, groups.cp, kv_block, a2a_bytes, expert_groups, tp_costs[0])
        adapters = _adapters(m, w, system, st, tokens, e, mlp_width) if lora else None
        cost, ends, calls = layer_cost(fw, ends_fw, st, system, exchange, experts, adapters, kernels)
        if lora:
            acts = layer_activations(m, b, s, t, sp, e, st.attention, c, mlp_width, experts, g,
                                         lora_saved_inputs(w, e, g))
        else:
            acts = MODEL_PARTS.get(m, ("activations", forward_key, experts_key, saved),
                              lambda: layer_activations(m, b, s, t, sp, e, st.attention, c, mlp_width, experts, g))
        return system, LayerKind(cost, calls, acts, fw, acts.stored(st), acts.checkpointed(st)), ends

    dense, ends = kind(None)
    edp = t * c * st.dp / (st.etp * st.ep)  # expert layers regroup the tp x cp x dp ranks as etp x ep x edp
    if not (isinstance(m.experts, np.ndarray) or m.experts > 0):
        return Layers(dense, None, ends, n_tp, edp, None)
    sizes = system_shape(system)[0]
    etp_group, ep_group, edp_group = derived(st, ("expert groups", edp, sizes),  # once per point and network
                                             lambda: place_expert_groups(st.etp, st.ep, edp, sizes))
    experts, experts_key = _routed_experts(m, st, tokens / sequence_shards(t, sp), e)
    moe, _ = kind(m.shared_ffn, experts, ExpertGroups(ep_group, etp_group, Fanout.of(m, ep_group)), experts_key)
    return Layers(dense, moe, ends, n_tp, edp, edp_group)


def _routed_experts(m: ModelArrays, st: StrategyArrays, tokens: Array, e: Array
                    ) -> tuple[ExpertsForward, tuple[object, ...]]:
    """The routed experts of one MoE layer for the `tokens` a device routes (`experts_forward`), kept per model
    under their key, with Megatron-Core's software passes taken for every training stack:
    - the expert biases (GPT-OSS) added expert by expert after the grouped GEMM, as its TEGroupedMLP does: the
      validated MoE training rows with expert biases are all Megatron-Core's (a stack without that pass needs a
      strategy field);
    - an fp8 recipe's padding copies around the grouped GEMMs, where the counts are dropless and the alltoall
      dispatcher delivers them: the flex dispatcher with HybridEP pads inside its dispatch (token_dispatcher.py
      _HybridEPManager `pad_multiple`, core_v0.16.0; DeepEP without router padding would pay the copies, but
      `dispatch_dedup` does not tell the two apart: not charged), and padding to capacity leaves nothing to
      align; the router's own padding (moe_router_padding_for_fp8) is off in the validated recipes
      (Megatron-Bridge v0.2.0 never sets it; v0.4.2 recipes/qwen/qwen3_moe.py sets it False);
    - the alltoall dispatcher's regrouping of the received tokens by local expert and back (`sort_pass`, where
      a rank holds more than one expert), which the flex dispatcher does not run (it permutes the received
      tokens once, the permutes counted already)."""
    redundant = st.redundant_experts  # EPLB replicas per rank
    load = rank_load(m.experts, st.ep, st.imbalance, st.capacity_factor, st.pad_to_capacity, redundant)
    dispatch_e = where(st.dispatch_fp8 > 0, 1.0, e)
    fp8_pad = mem.fp8_family(st) * where(st.pad_to_capacity > 0, 0.0, 1.0) * where(st.dispatch_dedup > 0, 0.0, 1.0)
    sort_pass = where(st.dispatch_dedup > 0, 0.0, 1.0)
    key = ("experts", *typed(tokens, st.ep, st.etp, load, e, dispatch_e, redundant, fp8_pad, sort_pass))
    return MODEL_PARTS.get(m, key, lambda: experts_forward(m, tokens, st.ep, st.etp, load, e, dispatch_e,
                                                      redundant=redundant, bias_pass=1.0, fp8_pad=fp8_pad,
                                                      sort_pass=sort_pass)), key


def spans_key(group: Placement) -> tuple[object, ...]:
    """A group's spans and their types (a key of `MODEL_PARTS`; Placement's own hash is a Python call)."""
    return typed(*group.spans)


def _adapters(m: ModelArrays, w: TrainingArrays, system: System, st: StrategyArrays, tokens: Array, e: Array,
              mlp_width: Array | None) -> Adapters:
    """One layer's LoRA adapters and QLoRA dequantization on one device, through the roofline: the
    adapters at 16 bits (they stay bf16 under fp8 recipes), the dequantization as a stream."""
    op, dq = adapter_forward(m, w, tokens, st.tp, e, mlp_width), dequantize(m, w, st.tp, mlp_width)
    adapter_t = kernel_times((op,), system.device, st.precision, sixteen_bit=True)[0]
    dequantize_t = kernel_times((dq,), system.device, st.precision)[0]
    return Adapters(PassCost(op.flop, op.bytes, adapter_t), PassCost(dq.flop, dq.bytes, dequantize_t),
                    where(w.frozen, 1.0, 0.0))
