"""Every divisibility and shape rule a configuration must obey, written once, with its message.

Each rule is a predicate over numbers that takes floats (one configuration) or arrays (a search's
points) alike. The Strategy spec's validation, the estimator's feasibility check, the search's masks and
layout pruning, inference and the simulator all call these. This module depends on `numerics` alone, so
every layer may call it, the specs' validators included (choices arrive as flags: "is interleaved").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.numerics import Array, all_of, any_of, divides, maximum, minimum, where, whole


@dataclass(frozen=True)
class Check:
    """A rule's verdict (a boolean, or a boolean array over a search's points) and what it requires."""

    ok: Array
    message: str


# --- degrees against the devices ---------------------------------------------------------------------
def devices_match(tp: Array, cp: Array, pp: Array, dp: Array, devices: int) -> Check:
    return Check(np.abs(tp * cp * pp * dp - devices) < 0.5, f"tp*cp*pp*dp must equal the {devices} devices")


def model_parallel_divides(tp: Array, cp: Array, pp: Array, devices: int) -> Check:
    """A layout that uses every device with whole data-parallel replicas (Megatron's world-size check)."""
    return Check(divides(tp * cp * pp, devices), f"tp x cp x pp must divide the {devices} devices")


def replica_fits(tp: Array, pp: Array, devices: int) -> Check:
    """Inference: one tp x pp model replica needs that many devices."""
    return Check(tp * pp <= devices, f"tp x pp must not exceed the {devices} devices")


# --- degrees against the model's shapes ----------------------------------------------------------------
def tp_divides_heads(tp: Array, heads: Array) -> Check:
    return Check(divides(tp, heads), "tp must divide the attention heads")


def tp_and_kv_heads(tp: Array, kv_heads: Array) -> Check:
    """Each rank holds whole KV heads, or a KV head is replicated over whole groups of ranks."""
    return Check(any_of(divides(tp, kv_heads), divides(kv_heads, tp)), "tp and kv_heads must divide one another")


def tp_divides_ffn(tp: Array, ffn: Array) -> Check:
    return Check(divides(tp, ffn), "tp must divide the MLP size")


def cp_balances_sequence(cp: Array, seq_len: Array) -> Check:
    """Context parallelism cuts each sequence into 2 cp chunks, two per rank, to balance the causal mask
    (Megatron CP's load balancing)."""
    return Check(where(cp > 1, divides(2 * cp, seq_len), True),
                 "2*cp must divide the sequence (context parallelism balances causal chunks)")


def _no_middle_stage(pp: Array, mid: Array) -> Array:
    """Two stages whose counts are both given: `plan.layout.stage_layers` leaves no layer to share."""
    return (pp == 2) & (mid == 0)


def chunk_layers(first: Array, mid: Array, last: Array, pp: Array, vpp: Array) -> Array:
    """Layers of a full model chunk (`plan.layout.stage_layers`' counts): a middle stage's share over its vpp
    chunks; with no middle stage the larger stage's over its chunks, rounded up (Megatron's uneven layouts
    shorten only the first and the last chunk)."""
    return where(_no_middle_stage(pp, mid), np.ceil(maximum(first, last) / vpp), mid / vpp)


def chunk_share(first_layers: Array, chunk: Array) -> Array:
    """The share of a model chunk's layers that a per-layer setting covers when it covers only the chunk's
    first `first_layers` (0: all) of a full chunk's `chunk` layers (`chunk_layers`; a shorter first or last
    chunk is taken at the full chunk's share): full recomputation of some layers (Megatron --recompute-method
    block --recompute-num-layers), activation offload of some (--cpu-offloading-num-layers)."""
    return where(first_layers > 0, minimum(first_layers / maximum(chunk, 1.0), 1.0), 1.0)


def stages_split(layers: Array, first: Array, mid: Array, last: Array, pp: Array, vpp: Array) -> Check:
    """Whole layers on every stage (`plan.layout.stage_layers`), at least one on the middle and last
    stages, the middle stages' layers in vpp whole model chunks, and the first and last stages' shorter
    chunk (Megatron's uneven layouts: only their first / last chunk differs) at least one layer, except that
    with interleaving the last model chunk may hold the loss alone (DeepSeek-V3's `...|mL` layouts: the
    multi-token-prediction head and the loss, no decoder layer). Two stages with both counts given have no
    middle stage (DeepSeek-V3's 61 layers on pp 2 x vpp 4)."""
    no_middle, chunk = _no_middle_stage(pp, mid), chunk_layers(first, mid, last, pp, vpp)
    return Check(all_of(whole(first), whole(mid), whole(last), any_of(mid >= 1, no_middle), last >= 1,
                        any_of(divides(vpp, mid), no_middle),
                        first - (vpp - 1) * chunk >= 1, last - (vpp - 1) * chunk >= where(vpp > 1, 0, 1)),
                 "pp*vpp must divide the layers (or the layers left by first/last_stage_layers, with a layer "
                 "left in the first model chunk and, without interleaving, in the last)")


def stages_hold_layers(layers: Array, pp: Array) -> Check:
    """Inference splits the layers into whole stages as evenly as it can: each needs at least one."""
    return Check(pp <= layers, "pp must not exceed the layers (every pipeline stage holds at least one)")


# --- mixture of experts ----------------------------------------------------------------------------------
def ep_divides_experts(ep: Array, experts: Array) -> Check:
    return Check(where(experts > 0, divides(ep, experts), ep == 1),
                 "ep must divide the routed experts (and needs an MoE model)")


def expert_groups_fit(ep: Array, etp: Array, ranks: Array, what: str = "tp*cp*dp") -> Check:
    """Expert layers regroup `ranks` (training: the tp x cp x dp ranks of a stage; inference: a replica's
    tp ranks) as expert-tp x ep x expert-dp (Megatron-Core's MoE parallel folding)."""
    return Check(divides(ep * etp, ranks), f"ep*expert_tp must divide {what} (expert layers regroup those ranks)")


def attention_dp_divides_tp(attention_dp: Array, tp: Array) -> Check:
    """Attention data parallelism (SGLang --enable-dp-attention) splits a replica's tp ranks into
    attention_dp groups of tp / attention_dp ranks, each with its own requests and KV cache."""
    return Check(divides(attention_dp, tp), "attention_dp must divide tp (each attention group takes "
                 "tp / attention_dp of the ranks)")


def attention_dp_experts_span_tp(attention_dp: Array, ep: Array, etp: Array, tp: Array) -> Check:
    """With data-parallel attention the experts span all tp ranks of the replica, either split whole over
    them (wide expert parallelism, ep = tp: all-to-all dispatch) or each expert sharded over them
    (expert_tp = tp: the tokens gathered to every rank, SGLang 0.4's DP attention)."""
    spans = (np.abs(ep * etp - tp) < 0.5) & ((ep == 1) | (etp == 1))
    return Check(where(attention_dp > 1, spans, True), "with attention_dp > 1 the experts span the tp ranks: "
                 "ep = tp (wide expert parallelism) or expert_tp = tp")


def etp_divides_expert_ffn(etp: Array, experts: Array, expert_ffn: Array) -> Check:
    return Check(where(experts > 0, divides(etp, expert_ffn), True), "expert_tp must divide expert_ffn")


# --- the batch and the pipeline schedule -----------------------------------------------------------------
def batch_divides(micro_batch: Array, dp: Array, global_batch: Array) -> Check:
    return Check(divides(micro_batch * dp, global_batch), "micro_batch*dp must divide the global batch")


def interleaved_microbatches(interleaved: Array, pp: Array, microbatches: Array) -> Check:
    """Megatron's interleaved 1F1B runs micro-batches in groups of pp (SC'21 §2.2.2)."""
    return Check(where(interleaved, divides(pp, microbatches), True),
                 "the interleaved schedule needs the micro-batch count to be a multiple of pp")


def interleaving_needs_stages(vpp: Array, pp: Array) -> Check:
    return Check(any_of(vpp == 1, pp > 1), "vpp > 1 (model chunks per pipeline rank) needs pp > 1")


# --- the strategy's own fields ---------------------------------------------------------------------------
def sequence_parallel_needs_tp(sequence_parallel: Array, tp: Array) -> Check:
    return Check(any_of(sequence_parallel == 0, tp > 1), "sequence_parallel needs tp > 1")


def rank_order_without_ep(pp_inner: Array, ep: Array) -> Check:
    """`pp_inner`: the rank order tp-cp-pp-dp (`RankOrder.PP_INNER`)."""
    return Check(any_of(pp_inner == 0, ep == 1),
                 "rank_order 'tp-cp-pp-dp' is not modeled with expert parallelism (ep > 1): use 'tp-cp-dp-pp'")


def uneven_stages_supported(first: Array, last: Array, pp: Array, vpp: Array) -> Check:
    return Check(any_of(all_of(first == 0, last == 0), pp >= 2), "first_stage_layers/last_stage_layers need pp >= 2")


# --- the 2-D tensor-parallel layout (Optimus, arXiv 2104.05343; Colossal-AI 2-D; docs/tp-layouts.md) ----------
def grid_side(tp: Array) -> Array:
    """q, the side of the q x q grid of a 2-D layout's tp = q^2 ranks."""
    return np.rint(np.sqrt(tp))


def tp_layout_checks(two_d: Array, tp: Array, micro_batch: Array, sequence_parallel: Array, cp: Array, ep: Array,
                     expert_tp: Array, ring_overlap: Array, summa_steps: Array) -> tuple[Check, ...]:
    """What `Strategy.tp_layout` '2d' needs (`two_d` 1): tp a square q^2 of q >= 2; q dividing the micro-batch
    (Colossal-AI splits the batch over the grid's rows: `split_batch_2d` asserts it, so each row holds whole
    sequences and attention stays local); none of sequence parallelism, context parallelism, expert
    parallelism or expert TP (the sources define the 2-D layout for dense layers on whole sequences: its
    activations are already split q x q); the TP overlap of the 1-D layout's collectives (tp_comm_method
    ring) does not apply; `summa_steps` (0: unset) needs 2d and a multiple of q."""
    off = two_d == 0
    q = grid_side(tp)
    square = (np.abs(q * q - tp) < 0.5) & (q >= 2)
    return (
        Check(any_of(off, square), "tp_layout '2d' needs tp = q x q with q >= 2 (4, 9, 16, 25, ...)"),
        Check(any_of(off, ~square, divides(q, micro_batch)),
              "tp_layout '2d' needs q = sqrt(tp) to divide micro_batch (the grid's rows split the batch)"),
        Check(any_of(off, sequence_parallel == 0), "tp_layout '2d' excludes sequence_parallel (its activations "
              "are split over the q x q grid already)"),
        Check(any_of(off, cp == 1), "tp_layout '2d' is not defined with context parallelism (cp > 1)"),
        Check(any_of(off, all_of(ep == 1, expert_tp == 0)),
              "tp_layout '2d' is not defined for expert layers: ep must be 1 and expert_tp unset"),
        Check(any_of(off, ring_overlap == 0), "overlap.tp_comm_method 'ring' applies to tp_layout '1d'; '2d' "
              "overlaps its SUMMA steps (overlap.tp_comm)"),
        Check(any_of(summa_steps == 0, all_of(two_d > 0, any_of(~square, divides(q, summa_steps)))),
              "summa_steps needs tp_layout '2d' and must be a multiple of q = sqrt(tp)"),
    )


def failed(checks: tuple[Check, ...] | list[Check]) -> list[str]:
    """The messages of the checks a single configuration fails."""
    return [c.message for c in checks if not bool(c.ok)]
