"""Pipeline schedules: iteration time from per-stage, per-micro-batch times (docs/formulas.md §5).

With stage times t_i (forward + backward of one micro-batch) and m micro-batches, 1F1B and GPipe take
m * max_i t_i + (sum_i t_i - max_i t_i): for equal stages (m + p - 1) * t, i.e. the bubble (p - 1) t of
Narayanan et al. SC'21 §2.2.1 / Eq. 1. Interleaving v chunks per rank divides the fill and drain by v
(§2.2.2): m * max + (sum - max) / v. Zero-bubble ZB-H1 runs the weight gradients W of the drain in its
idle slots: its bubble is (p - 1)(t_F + t_B - t_W) instead of (p - 1)(t_F + t_B + t_W) (Qi et al.
ICLR'24 §3.1, t_B the input gradient), so the fill and drain shrink by 2 t_W / t. Unequal stages
(embedding, LM head, uneven splits) make the slowest stage set the steady state.
"""

from __future__ import annotations

from armillary.numerics import Array, maximum, minimum, where
from armillary.plan.codes import SCHEDULE_INTERLEAVED, SCHEDULE_ZB_H1


def pipeline_time(stage_max: Array, stage_sum: Array, microbatches: Array, vpp: Array,
                  schedule: Array, weight_share: Array, stages: Array | None = None) -> Array:
    """Time from the first forward to the last backward of one iteration. `weight_share`: the weight
    gradients' share t_W / t of a stage's time per micro-batch, t_W being what deferring them takes off the
    backward: their time less the communication they hid that the input-gradient pass alone exposes (a
    communication-bound backward gains nothing; priced at their compute, a faster GEMM that shrinks t_W while
    the stage stays communication-bound would lengthen the iteration). `stages` (p): ZB-H1 fills the drain with
    the weight passes there are: 2 (p - 1) t_W with m >= p micro-batches, (p - 1) t_W with one (each stage's
    W runs while the backward walks on to the earlier stages: p (t_F + t_B) + t_W), in between
    m + p - 2 of them [derived], so a shorter weight pass never lengthens the iteration."""
    fill_drain = stage_sum - stage_max
    saved: Array = 2.0
    if stages is not None:
        saved = minimum(2.0, (microbatches + stages - 2) / maximum(stages - 1, 1))
    fill_drain = where(schedule == SCHEDULE_INTERLEAVED, fill_drain / vpp,
                       where(schedule == SCHEDULE_ZB_H1, fill_drain * (1 - saved * weight_share), fill_drain))
    return microbatches * stage_max + fill_drain


def bubble_fraction(pp: Array, microbatches: Array, vpp: Array) -> Array:
    """Idle fraction of the ideal time for equal stages: (p - 1) / (v m) (SC'21 §2.2)."""
    return (pp - 1) / (vpp * microbatches)


