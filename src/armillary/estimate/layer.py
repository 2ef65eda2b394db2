"""Cost of one transformer layer for one micro-batch on one device, per pass.

Forward runs the kernels of `workload.transformer`. Backward splits into input gradients (one GEMM per
forward GEMM, the element-wise backward kernels and the attention core's backward) and weight gradients
(one GEMM per weight GEMM): the T_B / T_W split of the zero-bubble schedules (Qi et al. 2024 §2).
Recomputation re-runs the forward (full) or the attention core (selective; Korthikanti et al. §5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armillary.comm.collectives import CommCost, all_gather, all_reduce, collective, reduce_scatter, send_recv
from armillary.comm.placement import Placement
from armillary.cost.compute import fused_attention_time, kernel_times
from armillary.estimate.result import CommCall, LayerCost, ParallelDimension, PassCost
from armillary.specs.arrays import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, Array, StrategyArrays, maximum, where
from armillary.specs.communication import Collective
from armillary.specs.system import System
from armillary.workload.transformer import Ends, LayerForward

# Backward element-wise kernels read the output gradient and the saved input and write the input
# gradient: about 1.5x the forward traffic [derived].
BACKWARD_STREAM_FACTOR = 1.5
# FlashAttention's backward recomputes the scores: 2.5x the forward FLOPs (FA2 §4.1; formulas.md §3.5).
FLASH_BACKWARD_FACTOR = 2.5


@dataclass(frozen=True)
class EndsCost:
    """Embedding (first stage) and LM head + loss (last stage), forward + backward, one micro-batch."""

    embedding_s: Array
    head_s: Array
    tp: CommCost  # vocabulary-parallel embedding all-reduce / LM-head input-gradient all-reduce


def recompute_modes(st: StrategyArrays) -> tuple[Array, Array]:
    """(full, selective) recomputation as it applies: selective re-runs the attention core, which
    FlashAttention already recomputes inside its backward, so with it selective recomputes nothing."""
    return st.recompute == RECOMPUTE_FULL, (st.recompute == RECOMPUTE_SELECTIVE) & (st.attention == 0)


def exposed(comm: Array, hidden_behind: Array, overlap: Array) -> Array:
    """Communication left on the critical path: all of it (overlap 0), or what compute cannot hide
    (overlap 1): max(0, T_comm - T_overlappable) (formulas.md §2.3)."""
    return maximum(0.0, comm - overlap * hidden_behind)


def layer_cost(fw: LayerForward, ends: Ends, st: StrategyArrays, n_tp: Array, tp_group: Placement,
               system: System, cp_group: Placement | None = None, kv_block: Array = 0.0,
               a2a_bytes: tuple[Array, Array] = (0.0, 0.0)) -> tuple[LayerCost, EndsCost, tuple[CommCall, ...]]:
    """Per-pass cost of one layer and of the model's ends, and the layer's TP / SP / CP calls per
    micro-batch. `kv_block` is the K and V of one rank's sequence chunk (ring attention); `a2a_bytes` the
    per-rank buffers of the all-to-alls around attention (QKV in, output out; Ulysses)."""
    device, flash, code = system.device, st.attention, st.precision
    kt = kernel_times((*fw.dense_gemms, *fw.dense_streams, ends.embedding, ends.loss), device, code)
    gemm_t, stream_t, embedding_t, loss_t = kt[0:4].sum(axis=0), kt[4:8].sum(axis=0), kt[8], kt[9]
    k16 = kernel_times((*fw.core_gemms, fw.softmax, ends.head_gemm), device, code, sixteen_bit=True)
    core_gemm_t, softmax_t, head_gemm_t = k16[0:2].sum(axis=0), k16[2], k16[3]
    flash_t = fused_attention_time(fw.flash_attention, device, code, flash)

    def total(ops: tuple) -> tuple[Array, Array]:
        return sum(op.flop for op in ops), sum(op.bytes for op in ops)

    gemm_flop, gemm_bytes = total(fw.dense_gemms)
    _, stream_bytes = total(fw.dense_streams)
    core_gemm_flop, core_gemm_bytes = total(fw.core_gemms)
    # attention core: separate GEMMs + softmax kernels, or one fused FlashAttention kernel
    core_f = PassCost(where(flash > 0, fw.flash_attention.flop, core_gemm_flop),
                      where(flash > 0, fw.flash_attention.bytes, core_gemm_bytes + fw.softmax.bytes),
                      where(flash > 0, flash_t, core_gemm_t + softmax_t))
    k = BACKWARD_STREAM_FACTOR
    core_b = PassCost(
        where(flash > 0, FLASH_BACKWARD_FACTOR * fw.flash_attention.flop, 2 * core_gemm_flop),
        where(flash > 0, FLASH_BACKWARD_FACTOR * fw.flash_attention.bytes, 2 * core_gemm_bytes + k * fw.softmax.bytes),
        where(flash > 0, FLASH_BACKWARD_FACTOR * flash_t, 2 * core_gemm_t + k * softmax_t))
    forward = PassCost(gemm_flop + core_f.flop, gemm_bytes + stream_bytes + core_f.bytes,
                       gemm_t + stream_t + core_f.time_s)
    backward_input = PassCost(gemm_flop + core_b.flop, gemm_bytes + k * stream_bytes + core_b.bytes,
                              gemm_t + k * stream_t + core_b.time_s)
    backward_weight = PassCost(gemm_flop, gemm_bytes, gemm_t)
    # selective recomputation re-runs the attention core; FlashAttention already recomputes it inside
    full, selective = recompute_modes(st)
    recompute = PassCost(*(where(full, f, where(selective, c, 0.0)) for f, c in (
        (forward.flop, core_f.flop), (forward.bytes, core_f.bytes), (forward.time_s, core_f.time_s))))

    # collectives per layer and pass (one source for times and call counts): two all-reduces per pass
    # (SC'21 §3.2); with SP each becomes an all-gather before and a reduce-scatter after the block
    # (Korthikanti §4.2.2), and the backward gathers each block's input once more for the weight gradient
    # (Megatron keeps only the 1/t shard)
    sp = st.sequence_parallel
    ar = needed(lambda: all_reduce(n_tp, tp_group, system), sp < 1)
    ag = needed(lambda: all_gather(n_tp, tp_group, system), sp > 0)
    rs = needed(lambda: reduce_scatter(n_tp, tp_group, system), sp > 0)
    costs = (ar, ag, rs)
    forward_calls = (2 * (1 - sp), 2 * sp, 2 * sp)  # per cost above
    backward_calls = (2 * (1 - sp), 4 * sp, 2 * sp)
    tp_f = exposed(sum(n * c.time for c, n in zip(costs, forward_calls, strict=True)), gemm_t, st.overlap_tp)
    tp_b = exposed(sum(n * c.time for c, n in zip(costs, backward_calls, strict=True)), 2 * gemm_t, st.overlap_tp)
    # context parallelism: ring attention passes the K/V blocks around (cp - 1 steps per pass, K/V and
    # their gradients in backward) behind the attention kernels (Liu et al. 2023 §3); Ulysses re-shards
    # QKV and the output with all-to-alls, which nothing hides (Jacobs et al. 2023 §3.2)
    cp = st.cp
    on_a2a: Array
    ring_steps: Array
    cp_f: Array
    cp_b: Array
    if not isinstance(cp, np.ndarray) and cp == 1:  # one configuration without context parallelism
        on_a2a, ring_steps, hop, a2a_in, a2a_out = 0.0, 0.0, NO_COMM, NO_COMM, NO_COMM
        cp_f = cp_b = 0.0
    else:
        on_ring = (cp > 1) & (st.cp_all_to_all == 0)
        on_a2a = (cp > 1) & (st.cp_all_to_all > 0)
        group = cp_group if cp_group is not None else Placement(1.0, 1.0)
        crosses = where(group.per_node < cp, 1.0, 0.0)
        hop = needed(lambda: send_recv(kv_block, crosses, system), on_ring)
        a2a_in = needed(lambda: collective(Collective.ALL_TO_ALL, a2a_bytes[0], group, system).cost, on_a2a)
        a2a_out = needed(lambda: collective(Collective.ALL_TO_ALL, a2a_bytes[1], group, system).cost, on_a2a)
        ring_steps = where(on_ring, cp - 1, 0.0)
        cp_f = exposed(ring_steps * hop.time, core_f.time_s, 1.0) + a2a_in.time + a2a_out.time
        cp_b = exposed(2 * ring_steps * hop.time, core_b.time_s, 1.0) + a2a_in.time + a2a_out.time
    layer = LayerCost(forward, backward_input, backward_weight, recompute, tp_forward_s=tp_f, tp_backward_s=tp_b,
                      tp_recompute_s=where(full, tp_f, 0.0), cp_s=cp_f * (1 + full) + cp_b)
    # the vocabulary-parallel embedding all-reduces its output; the LM head its input gradient
    ends_ar = ar if not isinstance(sp, np.ndarray) and not sp else all_reduce(n_tp, tp_group, system)
    ends_cost = EndsCost(embedding_s=(1 + k) * embedding_t, head_s=3 * head_gemm_t + (1 + k) * loss_t,
                         tp=ends_ar)
    # per layer and micro-batch; full recomputation repeats the forward's collectives
    per_layer = [f * (1 + full) + b for f, b in zip(forward_calls, backward_calls, strict=True)]
    passes = 2 + full  # forward, backward (+ the recomputed forward)
    calls = (
        _call(ParallelDimension.TP, Collective.ALL_REDUCE, per_layer[0], n_tp, ar),
        _call(ParallelDimension.SP, Collective.ALL_GATHER, per_layer[1], n_tp, ag),
        _call(ParallelDimension.SP, Collective.REDUCE_SCATTER, per_layer[2], n_tp, rs),
        _call(ParallelDimension.CP, Collective.SEND_RECV, ring_steps * (3 + full), kv_block, hop),
        _call(ParallelDimension.CP, Collective.ALL_TO_ALL, on_a2a * passes, a2a_bytes[0], a2a_in),
        _call(ParallelDimension.CP, Collective.ALL_TO_ALL, on_a2a * passes, a2a_bytes[1], a2a_out),
    )
    return layer, ends_cost, calls


def _call(dim: ParallelDimension, op: Collective, per_layer: Array, n: Array, cost: CommCost) -> CommCall:
    """A TP / SP call counted per layer and micro-batch (the step composition scales the count)."""
    return CommCall(dim, op, per_layer, n, cost.time, cost.scale_up_bytes, cost.scale_out_bytes)


NO_COMM = CommCost(0.0, 0.0, 0.0)


def needed(cost: Callable[[], CommCost], used: Array) -> CommCost:
    """A collective only where it is used: skipped for a single configuration that does not use it, zeroed
    at the points of a sweep that do not (so callers never add the cost of an unused call)."""
    if isinstance(used, np.ndarray):
        return cost() * np.where(used, 1.0, 0.0)
    return cost() if used else NO_COMM
