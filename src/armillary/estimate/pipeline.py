"""Pipeline schedules: iteration time from per-stage, per-micro-batch times (formulas.md §5).

With stage times t_i (forward + backward of one micro-batch) and m micro-batches, 1F1B and GPipe take
m * max_i t_i + (sum_i t_i - max_i t_i): for equal stages (m + p - 1) * t, i.e. the bubble (p - 1) t of
Narayanan et al. SC'21 §2.2.1 / Eq. 1. Interleaving v chunks per rank divides the fill and drain by v
(§2.2.2): m * max + (sum - max) / v. Unequal stages (embedding, LM head, uneven splits) make the
slowest stage set the steady state.
"""

from __future__ import annotations

from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.codes import SCHEDULE_INTERLEAVED


def pipeline_time(stage_max: Array, stage_sum: Array, microbatches: Array, vpp: Array,
                  schedule: Array) -> Array:
    """Time from the first forward to the last backward of one iteration."""
    fill_drain = stage_sum - stage_max
    fill_drain = where(schedule == SCHEDULE_INTERLEAVED, fill_drain / vpp, fill_drain)
    return microbatches * stage_max + fill_drain


def bubble_fraction(pp: Array, microbatches: Array, vpp: Array) -> Array:
    """Idle fraction of the ideal time for equal stages: (p - 1) / (v m) (SC'21 §2.2)."""
    return (pp - 1) / (vpp * microbatches)


def microbatch_count(global_batch: Array, micro_batch: Array, dp: Array) -> Array:
    """Micro-batches each pipeline runs per iteration: m = B / (b d) (SC'21 §3.4)."""
    return global_batch / (micro_batch * dp)


def stage_layers(layers: Array, pp: Array, first: Array, last: Array) -> tuple[Array, Array, Array]:
    """(first, middle, last) stage layer counts. `first` / `last` = 0 means not given: the stages without
    a given count share the remaining layers evenly (Megatron's --decoder-first/last-pipeline-num-layers)."""
    given_first, given_last = first > 0, last > 0
    others = pp - given_first * 1.0 - given_last * 1.0
    share = (layers - first - last) / maximum(others, 1)
    return where(given_first, first, share), share, where(given_last, last, share)


def stage_dense_layers(dense: Array, pp: Array, n_first: Array, n_mid: Array, n_last: Array) -> tuple[
        Array, Array, Array]:
    """How many of the leading `dense` layers (MoE models' first-k-dense layers; all layers of a dense
    model) each stage kind holds: the first stage takes them first; the middle stage reported is the last
    one, with the fewest; the last stage takes what reaches it."""
    first = minimum(dense, n_first)
    middle = minimum(maximum(dense - n_first - maximum(pp - 3, 0) * n_mid, 0), n_mid)
    last = minimum(maximum(dense - n_first - maximum(pp - 2, 0) * n_mid, 0), n_last)
    return first, middle, last
