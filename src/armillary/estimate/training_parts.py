"""The parts a training step is composed of: one layer of each kind, the model's layers, the pipeline sends and
the parameters each stage holds (made in `training.py`, read there and in `training_memory.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.comm.collectives import CommCost
from armillary.estimate.activations import LayerActivations
from armillary.estimate.result import CommCall, EndsCost, LayerCost
from armillary.estimate.stages import StageTime
from armillary.memo import quick_init
from armillary.numerics import Array
from armillary.plan.arrays import TrainingArrays
from armillary.plan.placement import Placement
from armillary.workload.transformer import LayerForward


@quick_init
@dataclass(frozen=True)
class LayerKind:
    """One layer of a kind (dense, or MoE) for one micro-batch on one device."""

    cost: LayerCost
    calls: tuple[CommCall, ...]  # its TP / SP / CP / EP calls per micro-batch
    activations: LayerActivations
    forward: LayerForward
    stored: Array  # `activations.stored` and `.checkpointed` under the strategy, taken once for every stage
    checkpointed: Array

    @property
    def time(self) -> StageTime:
        """Per micro-batch, by component; a full recomputation's collectives count as recomputation."""
        c = self.cost
        return StageTime(compute=c.compute_s, recompute=c.recompute.time_s + c.tp_recompute_s,
                         tp=c.tp_forward_s + c.tp_backward_s, cp=c.cp_s, ep=c.ep_s,
                         recomputed_exchange=c.cp_recompute_s + c.ep_recompute_s,
                         deferrable=c.weight_deferrable_s)


@quick_init
@dataclass(frozen=True)
class Layers:
    """The layer kinds of the model and its ends (embedding, LM head), one micro-batch."""

    dense: LayerKind
    moe: LayerKind | None  # None for a dense model
    ends: EndsCost
    tp_bytes: Array  # size of each TP collective
    edp: Array  # expert-data-parallel ranks of the MoE layers
    edp_group: Placement | None


@quick_init
@dataclass(frozen=True)
class PipelineSends:
    """The activation (forward) and gradient (backward) sends between stages, per micro-batch."""

    activation_bytes: Array  # one micro-batch's activation
    sent_bytes: Array  # what crosses to the next stage
    send: CommCost
    regather: CommCost  # the all-gather that rebuilds a scattered activation
    scatter: Array  # t when the activation is scattered over the tp ranks, else 1
    per_step_each_mb: Array  # sends per micro-batch: forward and backward, once per model chunk
    per_mb: Array  # their time on the critical stage


@quick_init
@dataclass(frozen=True)
class StageParams:
    """Parameters of one device of each stage kind: (replicated over dp x cp, routed experts), and those
    of the device that holds the most."""

    first: tuple[Array, Array]
    middle: tuple[Array, Array]
    last: tuple[Array, Array]
    dense_local: Array
    experts_local: Array


def uses_lora(w: TrainingArrays) -> bool:
    """Whether the points fine-tune with LoRA. A sweep carries one workload: all of its points do or none
    (the model states, gradient traffic and optimizer step are LoRA's or full training's for the whole
    sweep; the passes, FLOPs and activations would also price a mix)."""
    rank = w.lora_rank
    if type(rank) is int or type(rank) is float or isinstance(rank, int | float):  # one workload: no array to
        return rank > 0  # check (22 calls an estimate; the exact types first, isinstance for the rest)
    frozen = np.asarray(w.lora_rank) > 0
    if frozen.any() and not frozen.all():
        raise ValueError("TrainingArrays.lora_rank: a sweep fine-tunes all of its points with LoRA or none")
    return bool(frozen.all())
