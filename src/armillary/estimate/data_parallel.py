"""Data-parallel communication: gradient all-reduce, ZeRO / distributed-optimizer reduce-scatter and
parameter all-gather, FSDP per-layer gathers, and what of it the backward / forward passes hide.

Volumes: docs/formulas.md §2.2 (ZeRO §7; Megatron distributed optimizer; FSDP, Zhao et al. 2023 §3.2).
ZeRO-2 reduce-scatters every micro-batch; ZeRO-3 / FSDP also gathers parameters for the forward and
the backward of every micro-batch (docs/formulas.md pitfall 8).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armillary.comm.collectives import CommCost, all_gather, all_reduce, needed, reduce_scatter
from armillary.comm.overlap import exposed_fully
from armillary.estimate import memory as mem
from armillary.estimate.result import CommCall, ParallelDimension, over
from armillary.estimate.step_figures import Deferral, Figure
from armillary.memo import quick_init
from armillary.numerics import Array, maximum, where
from armillary.plan.arrays import ModelArrays, StrategyArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from armillary.specs.system import System


@quick_init
@dataclass(frozen=True)
class DataParallelCost:
    """One parameter set's data-parallel traffic, split by where it can hide: `in_line_s` per iteration is
    never hidden; `behind_forward_s` / `behind_backward_s` per micro-batch and `once_forward_s` /
    `once_backward_s` per iteration can hide behind a micro-batch's forward / backward passes
    (`exposed_together`)."""

    in_line_s: Array
    behind_forward_s: Array
    behind_backward_s: Array
    once_forward_s: Array
    once_backward_s: Array
    calls: tuple[CommCall, ...]  # every DP / ZeRO / FSDP collective of the step (one configuration: that it makes)


# a sweep's calls are made when first read (`data_parallel_cost`; set on the class made: a descriptor in the class
# body would be the field's default)
DataParallelCost.calls = Figure("calls")  # type: ignore[assignment]


def exposed_together(costs: tuple[DataParallelCost, ...], forward_s: Array, backward_s: Array,
                     microbatches: Array) -> Array:
    """Exposed data-parallel time per iteration of every parameter set together (the replicated parameters
    and the routed experts): their collectives queue on one all-gather and one reduce-scatter stream
    (PyTorch FSDP2's FSDPCommContext is shared by every parameter group of a root, expert groups included;
    Megatron-Core issues the dense and expert buckets over the same links), so the passes hide their sum
    once, max(0, T_comm - T_overlappable) (docs/formulas.md §2.3): a faster pass exposes at most what it
    saves, never more."""
    # each summed from 0.0 in the order of `costs` (one loop for the five)
    in_line: Array = 0.0
    behind_forward: Array = 0.0
    behind_backward: Array = 0.0
    once_forward: Array = 0.0
    once_backward: Array = 0.0
    for c in costs:
        in_line, behind_forward = in_line + c.in_line_s, behind_forward + c.behind_forward_s
        behind_backward, once_forward = behind_backward + c.behind_backward_s, once_forward + c.once_forward_s
        once_backward = once_backward + c.once_backward_s
    first, second = exposed_fully(behind_forward, forward_s), exposed_fully(behind_backward, backward_s)
    if type(second) is not np.ndarray or not second.ndim:  # one configuration (numpy's 0-d results are scalars)
        return (in_line + microbatches * (first + second) + exposed_fully(once_forward, forward_s)
                + exposed_fully(once_backward, backward_s))
    # a sweep: the same sum in the same order, each step written over the running total (`result.over`), the first
    # over `exposed_fully`'s new array (np.maximum's; never one of the costs' own, which the check keeps so)
    per_mb = (over(np.add, first, second, second) if second is not behind_backward and second is not backward_s
              else first + second)
    total = over(np.multiply, microbatches, per_mb, per_mb)
    total = over(np.add, in_line, total, total)
    total = over(np.add, total, exposed_fully(once_forward, forward_s), total)
    return over(np.add, total, exposed_fully(once_backward, backward_s), total)


# the strategy's fields `data_parallel_cost` reads (with memory.gathered_weight_bytes): the key under which the
# estimator keeps one configuration's cost (training._kept_data_parallel; tests/test_estimate_memo.py checks it)
DATA_PARALLEL_FIELDS = ("block_format", "fp8_params", "grad_reduce_bf16", "overlap_dp", "overlap_param_gather",
                        "precision", "zero", "zero3_gather_rate", "zero3_rank_copy")
data_parallel_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*DATA_PARALLEL_FIELDS)


def parameter_tensors(m: ModelArrays) -> Array:
    """Parameter tensors of a decoder layer as Megatron builds it: fused QKV, output projection, fc1 (gate
    and up fused), fc2, each with its bias where the model has them, and two norms (a scale, and a bias for
    LayerNorm): 12 for GPT-3."""
    return 4 * (1 + m.linear_bias) + 2 * m.norm_params


def grad_reduce_bytes(st: StrategyArrays) -> Array:
    """Bytes per parameter of the data-parallel gradient reduction: the precision's (fp32 main gradients for
    bf16 and fp8, Megatron-Core's default), or 2 with Strategy.grad_reduce_in_bf16 (--grad-reduce-in-bf16)."""
    return where(st.grad_reduce_bf16 > 0, 2.0, mem.per_precision(mem.GRAD_REDUCE_BYTES, st.precision))


def data_parallel_cost(params_local: Array, layers_local: Array, microbatches: Array, st: StrategyArrays,
                       dp_group: Placement, system: System, dimension: ParallelDimension = ParallelDimension.DP,
                       tensors_per_layer: Array = 0.0,
                       lora: tuple[Array, Array] | None = None) -> DataParallelCost:
    """`params_local` parameters per model-parallel rank in `layers_local` layers of `tensors_per_layer`
    parameter tensors, replicated over the ranks of `dp_group` (dp x cp; for routed experts the expert-dp
    group, `dimension` EDP), over `microbatches` micro-batches. `lora`: (adapter parameters, bytes of the
    frozen base weights) of a LoRA run: only the adapters' gradients are reduced and their weights gathered
    after the optimizer step (Hu et al. 2021 §4.1: the base has no gradient); ZeRO-3 / FSDP gathers the base
    with them.
    """
    grad_bytes = params_local * grad_reduce_bytes(st)
    weight_bytes = mem.gathered_weight_bytes(params_local, st)
    unit_bytes = weight_bytes
    if lora is not None:
        adapters, base_bytes = lora
        code = mem.adapter_precision(st)
        grad_bytes = adapters * mem.per_precision(mem.GRAD_REDUCE_BYTES, code)
        weight_bytes = adapters * mem.per_precision(mem.WEIGHT_BYTES, code)
        unit_bytes = base_bytes + weight_bytes
    # gradients are reduced over the ranks holding a replica (none to reduce on a stage without experts)
    zero, active = st.zero, (dp_group.size > 1) & (params_local > 0)

    unit = layers_local
    reduce_grads = needed(lambda: all_reduce(grad_bytes, dp_group, system), active & (zero == 0))
    staged, unit_staged = active & (zero >= 1) & (zero <= 2), active & (zero == 3)
    # the reduce-scatters (whole gradients, one unit's) and all-gathers (whole weights, one unit's) on the group
    swept = isinstance(staged, np.ndarray)
    scatter_whole, scatter_one = _whole_and_unit(reduce_scatter, grad_bytes, grad_bytes, unit, dp_group, system, swept)
    gather_whole, gather_one = _whole_and_unit(all_gather, weight_bytes, unit_bytes, unit, dp_group, system, swept)
    scatter_grads = needed(scatter_whole, staged)
    gather_params = needed(gather_whole, staged)

    def gather_unit() -> CommCost:
        # an implementation slower than its network gathers at its own rate (DeepSpeed before v0.5.5: weight
        # by weight, the device synchronised before each; ~24 GB/s on one NVLink node, DeepSpeed issue #1174),
        # and its list-based all_gather copies each tensor's result out rank by rank (PyTorch
        # ProcessGroupNCCL::allgather): host time that grows with the ranks
        g = gather_one()
        copies = tensors_per_layer * dp_group.size * st.zero3_rank_copy
        return CommCost(maximum(g.time, unit_bytes / unit / st.zero3_gather_rate) + copies, g.scale_up_bytes,
                        g.scale_out_bytes)

    unit_gather = needed(gather_unit, unit_staged)
    unit_scatter = needed(scatter_one, unit_staged)

    # once per iteration (ZeRO 0/1): the reduction of all buckets but the last overlaps the last
    # micro-batch's backward, the last bucket (one layer's) follows it; the distributed optimizer's
    # parameter gather (ZeRO 1, 2) overlaps the next forward. What does not overlap runs in line.
    overlap_dp, overlap_gather = st.overlap_dp, st.overlap_param_gather
    grad_reduction = where(zero >= 1, scatter_grads.time, reduce_grads.time)
    last_bucket = where(zero <= 1, grad_reduction / layers_local * overlap_dp, 0.0)
    reduce_once = where(zero <= 1, grad_reduction, 0.0) - last_bucket
    gather_once = where((zero >= 1) & (zero <= 2), gather_params.time, 0.0)
    # every micro-batch: ZeRO-2 reduce-scatters; ZeRO-3 / FSDP move one layer (unit) at a time, a latency
    # term each. The first unit's gather opens each forward and the last unit's reduce-scatter closes each
    # backward with nothing to hide behind; each unit's prefetch hides behind the compute of the one before
    # it (PyTorch FSDP, Zhao et al. 2023 §3.3.2 forward / backward prefetch; DeepSpeed ZeRO-3 prefetch), and
    # the reduce-scatters behind the backward when gradient reduction overlaps. Gathers not prefetched run in
    # line, in the forward and again in the backward.
    z2, z3 = where(zero == 2, 1.0, 0.0), where(zero == 3, 1.0, 0.0)
    gathers, scatters = unit_gather.time * layers_local, unit_scatter.time * layers_local
    first, last = unit_gather.time * overlap_gather, unit_scatter.time * overlap_dp
    behind_forward = z3 * overlap_gather * (gathers - first)
    behind_backward = z2 * overlap_dp * scatter_grads.time + z3 * (overlap_gather * gathers
                                                                    + overlap_dp * (scatters - last))
    in_line_per_mb = (z2 * (1 - overlap_dp) * scatter_grads.time
                      + z3 * (first + last + 2 * (1 - overlap_gather) * gathers + (1 - overlap_dp) * (scatters - last)))
    on_any = where(active, 1.0, 0.0)
    in_line = last_bucket + (1 - overlap_dp) * reduce_once + (1 - overlap_gather) * gather_once

    # the calls: a sweep's when first read (a search reads none: `step_figures.Deferral`)
    inputs = (dimension, st.zero, active, microbatches, layers_local, grad_bytes, weight_bytes, unit_bytes,
              reduce_grads, scatter_grads, gather_params, unit_gather, unit_scatter)
    calls = Deferral(_calls, *inputs).deferred(1)[0] if swept else _calls(*inputs)[0]
    return DataParallelCost(in_line_s=on_any * (in_line + microbatches * in_line_per_mb),
                            behind_forward_s=on_any * behind_forward, behind_backward_s=on_any * behind_backward,
                            once_forward_s=on_any * overlap_gather * gather_once,
                            once_backward_s=on_any * overlap_dp * reduce_once, calls=calls)


def _calls(dimension: ParallelDimension, zero: Array, active: np.ndarray | bool, m: Array, units: Array,
           grad_bytes: Array, weight_bytes: Array, unit_bytes: Array, reduce_grads: CommCost, scatter_grads: CommCost,
           gather_params: CommCost, unit_gather: CommCost, unit_scatter: CommCost) -> tuple[tuple[CommCall, ...]]:
    """`data_parallel_cost`'s calls per step (alone in a 1-tuple, as `Deferral` makes values): the gradient
    all-reduce (ZeRO 0), the reduce-scatters (ZeRO 1 once, ZeRO 2 every micro-batch) and parameter all-gathers
    (ZeRO 1, 2), and ZeRO-3's per-unit gathers (forward and backward) and reduce-scatters, every micro-batch."""
    on = [where(active & (zero == z), 1.0, 0.0) for z in range(4)]
    # (one configuration: only the calls it makes, the step's calls leave a count of 0 out; a sweep keeps all)
    return (tuple(CommCall.of(dimension, op, count, size, cost) for op, count, size, cost in (
        (ALL_REDUCE, on[0], grad_bytes, reduce_grads),
        (REDUCE_SCATTER, on[1] + on[2] * m, grad_bytes, scatter_grads),
        (ALL_GATHER, on[1] + on[2], weight_bytes, gather_params),
        (ALL_GATHER, on[3] * 2 * units * m, unit_bytes / units, unit_gather),
        (REDUCE_SCATTER, on[3] * units * m, grad_bytes / units, unit_scatter),
    ) if isinstance(count, np.ndarray) or count != 0),)


def _whole_and_unit(collective: Callable[[Array, Placement, System], CommCost], whole: Array, unit_whole: Array,
                    unit: Array, group: Placement, system: System,
                    swept: bool) -> tuple[Callable[[], CommCost], Callable[[], CommCost]]:
    """`collective` of `whole` bytes and of one unit's (`unit_whole` / `unit`) over `group`, each made when asked: a
    sweep's two composed in one call (`paired`: the composer's cost is per call, not per point)."""
    if swept:
        pair = paired(collective, whole, unit_whole / unit, group, system)
        return (lambda: pair[0]), (lambda: pair[1])
    return (lambda: collective(whole, group, system)), (lambda: collective(unit_whole / unit, group, system))


def paired(collective: Callable[[Array, Placement, System], CommCost], first: Array, second: Array,
            group: Placement, system: System) -> tuple[CommCost, CommCost]:
    """`collective` of `first` and of `second` bytes over `group` in one call: the two messages stacked on a new
    leading axis and the result split, each point's value what its own call gives (the composer is elementwise
    in the points: every time and byte count of a point follows from that point's bytes and spans alone)."""
    both = _stacked(first, second, group)
    cost = collective(both, group, system)
    # each result split on the new axis (broadcast to it first where it does not vary there)
    parts = [x if isinstance(x, np.ndarray) and x.ndim == both.ndim and x.shape[0] == 2 else
             np.broadcast_to(x, np.broadcast_shapes(np.shape(x), both.shape))
             for x in (cost.time, cost.scale_up_bytes, cost.scale_out_bytes)]
    return CommCost(parts[0][0], parts[1][0], parts[2][0]), CommCost(parts[0][1], parts[1][1], parts[2][1])


def _stacked(first: Array, second: Array, group: Placement) -> np.ndarray:
    """`paired`'s messages: `first` and `second` on a new leading axis, which leads every axis of the points, the
    group's spans' included (numpy aligns trailing axes). The values of np.stack of np.broadcast_arrays, without
    their Python-level passes: the two written into one new array."""
    both = np.empty((2, *np.broadcast(first, second).shape), dtype=np.result_type(first, second))
    both[0], both[1] = first, second
    dims = max(both.ndim - 1, *(np.ndim(span) for span in group.spans))
    return both.reshape(2, *(1,) * (dims - both.ndim + 1), *both.shape[1:])
