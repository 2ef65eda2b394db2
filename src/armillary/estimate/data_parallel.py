"""Data-parallel communication: gradient all-reduce, ZeRO / distributed-optimizer reduce-scatter and
parameter all-gather, FSDP per-layer gathers, and what of it the backward / forward passes hide.

Volumes: docs/formulas.md §2.2 (ZeRO §7; Megatron distributed optimizer; FSDP, Zhao et al. 2023 §3.2).
ZeRO-2 reduce-scatters every micro-batch; ZeRO-3 / FSDP also gathers parameters for the forward and
the backward of every micro-batch (docs/formulas.md pitfall 8).
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.comm.collectives import CommCost, all_gather, all_reduce, needed, reduce_scatter
from armillary.comm.overlap import exposed
from armillary.estimate import memory as mem
from armillary.estimate.result import CommCall, ParallelDimension
from armillary.numerics import Array, maximum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import Collective
from armillary.specs.system import System


@dataclass(frozen=True)
class DataParallelCost:
    exposed_s: Array  # per iteration, on the critical path
    calls: tuple[CommCall, ...]  # every DP / ZeRO / FSDP collective of the step


def parameter_tensors(m: ModelArrays) -> Array:
    """Parameter tensors of a decoder layer as Megatron builds it: fused QKV, output projection, fc1 (gate
    and up fused), fc2, each with its bias where the model has them, and two norms (a scale, and a bias for
    LayerNorm): 12 for GPT-3."""
    return 4 * (1 + m.linear_bias) + 2 * m.norm_params


def grad_reduce_bytes(st: StrategyArrays) -> Array:
    """Bytes per parameter of the data-parallel gradient reduction: the precision's (fp32 main gradients for
    bf16 and fp8, Megatron-Core's default), or 2 with Strategy.grad_reduce_in_bf16 (--grad-reduce-in-bf16)."""
    return where(st.grad_reduce_bf16 > 0, 2.0, mem.per_precision(mem.GRAD_REDUCE_BYTES, st.precision))


def data_parallel_cost(params_local: Array, layers_local: Array, forward_s: Array, backward_s: Array,
                       microbatches: Array, st: StrategyArrays, dp_group: Placement,
                       system: System, dimension: ParallelDimension = ParallelDimension.DP,
                       tensors_per_layer: Array = 0.0,
                       lora: tuple[Array, Array] | None = None) -> DataParallelCost:
    """`params_local` parameters per model-parallel rank in `layers_local` layers of `tensors_per_layer`
    parameter tensors, replicated over the ranks of `dp_group` (dp x cp; for routed experts the expert-dp
    group, `dimension` EDP); `forward_s` and `backward_s` are one micro-batch's compute on the critical stage
    (what communication can hide behind). `lora`: (adapter parameters, bytes of the frozen base weights) of
    a LoRA run: only the adapters' gradients are reduced and their weights gathered after the optimizer
    step (Hu et al. 2021 §4.1: the base has no gradient); ZeRO-3 / FSDP gathers the base with them.
    """
    grad_bytes = params_local * grad_reduce_bytes(st)
    weight_bytes = mem.weight_bytes(params_local, st)
    unit_bytes = weight_bytes
    if lora is not None:
        adapters, base_bytes = lora
        code = mem.adapter_precision(st)
        grad_bytes = adapters * mem.per_precision(mem.GRAD_REDUCE_BYTES, code)
        weight_bytes = adapters * mem.per_precision(mem.WEIGHT_BYTES, code)
        unit_bytes = base_bytes + weight_bytes
    # gradients are reduced over the ranks holding a replica (none to reduce on a stage without experts)
    zero, active = st.zero, (dp_group.size > 1) & (params_local > 0)

    reduce_grads = needed(lambda: all_reduce(grad_bytes, dp_group, system), active & (zero == 0))
    scatter_grads = needed(lambda: reduce_scatter(grad_bytes, dp_group, system), active & (zero >= 1) & (zero <= 2))
    gather_params = needed(lambda: all_gather(weight_bytes, dp_group, system), active & (zero >= 1) & (zero <= 2))
    unit = layers_local

    def gather_unit() -> CommCost:
        # an implementation slower than its network gathers at its own rate (DeepSpeed before v0.5.5: weight
        # by weight, the device synchronised before each; ~24 GB/s on one NVLink node, DeepSpeed issue #1174),
        # and its list-based all_gather copies each tensor's result out rank by rank (PyTorch
        # ProcessGroupNCCL::allgather): host time that grows with the ranks
        g = all_gather(unit_bytes / unit, dp_group, system)
        copies = tensors_per_layer * dp_group.size * st.zero3_rank_copy
        return CommCost(maximum(g.time, unit_bytes / unit / st.zero3_gather_rate) + copies, g.scale_up_bytes,
                        g.scale_out_bytes)

    unit_gather = needed(gather_unit, active & (zero == 3))
    unit_scatter = needed(lambda: reduce_scatter(grad_bytes / unit, dp_group, system), active & (zero == 3))

    # once per iteration (ZeRO 0/1): the reduction of all buckets but the last overlaps the last
    # micro-batch's backward, the last bucket (one layer's) follows it; the distributed optimizer's
    # parameter gather overlaps the next forward
    grad_reduction = where(st.zero >= 1, scatter_grads.time, reduce_grads.time)
    last_bucket = grad_reduction / layers_local * st.overlap_dp
    gather_once = exposed(gather_params.time, forward_s, st.overlap_param_gather)
    once = where(st.zero <= 1, exposed(grad_reduction - last_bucket, backward_s, st.overlap_dp) + last_bucket
                 + where(st.zero == 1, gather_once, 0.0), where(st.zero == 2, gather_once, 0.0))
    # every micro-batch (ZeRO 2, 3); ZeRO-3 / FSDP move one layer (unit) at a time: a latency term each
    per_mb_zero2 = exposed(scatter_grads.time, backward_s, st.overlap_dp)
    gathers, scatters = unit_gather.time * layers_local, unit_scatter.time * layers_local
    # the first unit's gather opens each forward and the last unit's reduce-scatter closes each backward
    # with nothing to hide behind; each unit's prefetch hides behind the compute of the one before it
    # (PyTorch FSDP, Zhao et al. 2023 §3.3.2 forward / backward prefetch; DeepSpeed ZeRO-3 prefetch), and
    # the reduce-scatters behind the backward when gradient reduction overlaps. On a network-bound step the
    # exposed time is what the serial transfers exceed the compute by; gathers not prefetched run in line.
    prefetch, reduce_along = st.overlap_param_gather, st.overlap_dp
    first, last = unit_gather.time * prefetch, unit_scatter.time * reduce_along
    hidden_in_backward = prefetch * gathers + reduce_along * (scatters - last)
    in_line_in_backward = (1 - prefetch) * gathers + (1 - reduce_along) * (scatters - last)
    per_mb_zero3 = (first + exposed(gathers - first, forward_s, prefetch)
                    + exposed(hidden_in_backward, backward_s, 1.0) + in_line_in_backward + last)
    per_mb = where(st.zero == 2, per_mb_zero2, where(st.zero == 3, per_mb_zero3, 0.0))
    exposed_s = where(active, once + microbatches * per_mb, 0.0)

    on = [where(active & (st.zero == z), 1.0, 0.0) for z in range(4)]
    m, units = microbatches, layers_local
    calls = (
        CommCall.of(dimension, Collective.ALL_REDUCE, on[0], grad_bytes, reduce_grads),
        CommCall.of(dimension, Collective.REDUCE_SCATTER, on[1] + on[2] * m, grad_bytes, scatter_grads),
        CommCall.of(dimension, Collective.ALL_GATHER, on[1] + on[2], weight_bytes, gather_params),
        CommCall.of(dimension, Collective.ALL_GATHER, on[3] * 2 * units * m, unit_bytes / units, unit_gather),
        CommCall.of(dimension, Collective.REDUCE_SCATTER, on[3] * units * m, grad_bytes / units, unit_scatter),
    )
    return DataParallelCost(exposed_s=exposed_s, calls=calls)


