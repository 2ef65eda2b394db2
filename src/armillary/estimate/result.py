"""Typed results of an estimate. Fields are floats for one configuration, arrays for a sweep."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from armillary import display
from armillary.comm.collectives import CommCost
from armillary.estimate.step_figures import FIGURES, PARTS, Figure
from armillary.memo import quick_init
from armillary.numerics import Array
from armillary.specs.communication import Collective
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Workload


@quick_init
@dataclass(frozen=True)
class PassCost:
    """FLOPs, HBM bytes and kernel time (no communication) of one pass."""

    flop: Array
    bytes: Array
    time_s: Array


@quick_init
@dataclass(frozen=True)
class LayerCost:
    """One layer, one micro-batch, one device. Communication times are what stays exposed."""

    forward: PassCost
    backward_input: PassCost
    backward_weight: PassCost
    recompute: PassCost
    tp_forward_s: Array
    tp_backward_s: Array
    tp_recompute_s: Array
    # context-parallel exchange, and expert-parallel all-to-alls with expert-TP gathers (MoE layers), left
    # exposed per pass (a full recomputation repeats the forward's)
    cp_forward_s: Array = 0.0
    cp_backward_s: Array = 0.0
    cp_recompute_s: Array = 0.0
    ep_forward_s: Array = 0.0
    ep_backward_s: Array = 0.0
    ep_recompute_s: Array = 0.0
    recompute_modules: PassCost = PassCost(0.0, 0.0, 0.0)  # of `recompute`: selective modules beyond core_attn
    attention_core: PassCost = PassCost(0.0, 0.0, 0.0)  # of `forward`: the attention core (scores to output)
    attention_core_backward: PassCost = PassCost(0.0, 0.0, 0.0)  # of `backward_input`: its gradient
    # of `compute_s` and the recomputed forward: the grouped expert GEMMs' wait on per-expert library calls
    # past their roofline (`Strategy.expert_gemm_call`)
    expert_calls_s: Array = 0.0
    # the layer's weight GEMMs in one pass, what TP collectives overlap; None: `backward_weight` (a frozen
    # LoRA base has no weight-gradient GEMMs, yet its forward runs all of them)
    weight_gemms_s: Array | None = None
    # of `backward_weight`: what deferring it takes off the backward (ZB-H1), the communication it hid excluded
    weight_deferrable_s: Array = 0.0

    @property
    def gemms_s(self) -> Array:
        """The layer's weight GEMMs in one pass (the forward's; the backward runs them twice)."""
        return self.backward_weight.time_s if self.weight_gemms_s is None else self.weight_gemms_s

    @property
    def compute_s(self) -> Array:
        return self.forward.time_s + self.backward_input.time_s + self.backward_weight.time_s

    @property
    def tp_s(self) -> Array:
        """TP / SP collectives left exposed per micro-batch: forward, recomputed forward and backward (as
        `cp_s` and `ep_s`)."""
        return self.tp_forward_s + self.tp_recompute_s + self.tp_backward_s

    @property
    def cp_s(self) -> Array:
        return self.cp_forward_s + self.cp_recompute_s + self.cp_backward_s

    @property
    def ep_s(self) -> Array:
        return self.ep_forward_s + self.ep_recompute_s + self.ep_backward_s

    @property
    def total_s(self) -> Array:
        return (self.compute_s + self.recompute.time_s + self.tp_recompute_s + (self.tp_forward_s + self.tp_backward_s)
                + self.cp_s + self.ep_s)


@quick_init
@dataclass(frozen=True)
class EndsCost:
    """Embedding (first stage) and LM head + loss (last stage), forward + backward, one micro-batch."""

    embedding_s: Array
    head_s: Array
    tp: CommCost  # vocabulary-parallel embedding all-reduce / LM-head input-gradient all-reduce
    embedding_forward_s: Array = 0.0  # of `embedding_s`: the forward pass
    head_forward_s: Array = 0.0  # of `head_s`: the forward pass
    # the multi-token-prediction modules on the last stage beyond their transformer layers (estimate/mtp.py):
    # embedding, norms and projection, LM head and loss, all depths; forward + backward, and the forward
    mtp_s: Array = 0.0
    mtp_forward_s: Array = 0.0


@quick_init
@dataclass(frozen=True)
class TimeBreakdown:
    """Where one iteration's time goes, in seconds; the fields add up to the step time."""

    forward_backward: Array  # GEMMs and element-wise kernels of forward and backward passes
    recompute: Array  # extra forward work from activation recomputation
    tp_exposed: Array  # tensor-parallel collectives not hidden behind GEMMs
    cp_exposed: Array  # context-parallel K/V exchange (ring) or all-to-alls (Ulysses) not hidden
    ep_exposed: Array  # MoE token dispatch / combine all-to-alls (and expert-TP gathers) not hidden
    pp_exposed: Array  # pipeline send/receive on the critical path
    bubble: Array  # pipeline fill and drain idle time
    # data-parallel / ZeRO / FSDP communication not hidden behind compute, with the word embedding's gradient
    # all-reduce between the first and last pipeline stage (tied embeddings or MTP; estimate/embedding_sync.py)
    dp_exposed: Array
    optimizer: Array  # optimizer step (memory-bound)
    offload_stall: Array  # waiting on the second memory tier

    @property
    def total(self) -> Array:
        return pipeline_total(self.forward_backward, self.recompute, self.tp_exposed, self.cp_exposed,
                              self.ep_exposed, self.pp_exposed, self.bubble, self.dp_exposed,
                              self.optimizer) + self.offload_stall


def pipeline_total(forward_backward: Array, recompute: Array, tp: Array, cp: Array, ep: Array, pp: Array,
                   bubble: Array, dp: Array, optimizer: Array) -> Array:
    """`TimeBreakdown.total` before its offload stall, summed in its order (so `total` is this + the stall,
    the same additions): the estimator takes it once for the stall and the step."""
    return forward_backward + recompute + tp + cp + ep + pp + bubble + dp + optimizer


def over(ufunc: np.ufunc, a: Array, b: Array, held: np.ndarray) -> np.ndarray:
    """`ufunc(a, b)` of a sweep, written over `held` (an array its caller made for this and reads no more) where that
    has the result's shape, else a new array: the same operands in the same order, so the same values, without
    allocating and filling a new array for a pass over a whole block (issue 47)."""
    try:
        return ufunc(a, b, out=held)  # type: ignore[no-any-return]
    except ValueError:  # `held` is not of the result's shape (numpy checks before it computes)
        return ufunc(a, b)  # type: ignore[no-any-return]


@quick_init
@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device on one memory tier, by category."""

    weights: Array
    gradients: Array
    optimizer_states: Array
    activations: Array  # stored for backward (and one layer's working set under full recompute)
    checkpoints: Array  # layer inputs kept by full recomputation
    comm_buffers: Array  # pipeline, tensor-parallel and parameter-gather buffers
    # outside the model's tensors: the runtime's reserve (CUDA context, workspaces, communicator buffers) and
    # the allocator's fragmentation (`Strategy.memory_reserve`, `Strategy.fragmentation`)
    runtime: Array = 0.0

    @property
    def total(self) -> Array:
        return (self.weights + self.gradients + self.optimizer_states + self.activations + self.checkpoints
                + self.comm_buffers + self.runtime)


@quick_init
@dataclass(frozen=True)
class Traffic:
    """Bytes each device sends per iteration on each network tier."""

    scale_up_bytes: Array
    scale_out_bytes: Array


class ParallelDimension(StrEnum):
    TP = "TP"  # tensor parallelism: all-reduces of the layer outputs
    SP = "SP"  # sequence parallelism: TP's all-reduces become all-gathers and reduce-scatters
    CP = "CP"  # context parallelism: K/V blocks around a ring, or all-to-alls around attention
    PP = "PP"  # pipeline point-to-point, and the embedding gradient's all-reduce between its first and last stage
    DP = "DP"  # data-parallel gradient reduction / ZeRO / FSDP
    EP = "EP"  # expert parallelism: token dispatch and combine all-to-alls
    ETP = "ETP"  # expert tensor parallelism: gathers of the dispatched tokens
    EDP = "EDP"  # expert data parallelism: gradient reduction of the expert weights


# its members as module names, for hot paths to import (as specs/communication.py's ALL_REDUCE ...)
DIM_TP, DIM_SP, DIM_CP, DIM_PP = ParallelDimension.TP, ParallelDimension.SP, ParallelDimension.CP, ParallelDimension.PP
DIM_EP, DIM_ETP, DIM_EDP = ParallelDimension.EP, ParallelDimension.ETP, ParallelDimension.EDP


@quick_init
@dataclass(frozen=True)
class CommCall:
    """One kind of communication call of a step, as one device of the busiest stage sees it."""

    dimension: ParallelDimension
    operation: Collective
    per_step: Array  # calls per iteration
    message_bytes: Array  # size of each call (nccl-tests convention for the operation)
    time_each_s: Array
    scale_up_bytes_each: Array  # bytes this device sends per call on each tier
    scale_out_bytes_each: Array

    @classmethod
    def of(cls, dimension: ParallelDimension, operation: Collective, per_step: Array, message_bytes: Array,
           cost: CommCost) -> CommCall:
        """`per_step` calls of `message_bytes` each, at `cost` per call."""
        return cls(dimension, operation, per_step, message_bytes, cost.time, cost.scale_up_bytes,
                   cost.scale_out_bytes)

    @property
    def time_s(self) -> Array:
        """Total time of these calls per step, before any overlap with compute."""
        return self.per_step * self.time_each_s


@quick_init
@dataclass(frozen=True)
class ErrorBand:
    """How far to trust a prediction: the 80th percentile of |predicted / measured - 1| over the validation
    rows of its regime (device calibrated or not, precision, dense or MoE, sharded or not, scale)."""

    relative: float  # e.g. 0.15: the measured value lies within +-15% in 80% of the regime's rows
    regime: str  # the regime the rows were drawn from (coarsened until it has enough rows)
    rows: int
    sources: int

    @property
    def poorly_validated(self) -> bool:
        """Wider than `POORLY_VALIDATED`, or drawn from uncalibrated devices' rows."""
        return self.relative > POORLY_VALIDATED or "uncalibrated" in self.regime

    def describe(self) -> str:
        return f"+-{self.relative:.0%} (80% of {self.rows} measured rows, {self.regime})"


# a band wider than this marks a prediction as poorly validated: twice the median error of the shared
# training rows (9.2%, README Validation), about the 75th percentile of all of them
POORLY_VALIDATED = 0.2


@quick_init
@dataclass(frozen=True)
class RunConfig:
    """The inputs a result was computed from (set by `armillary.api`): `to_frame` adds them as columns."""

    model: Model
    system: System
    strategy: Strategy
    workload: Workload

    def columns(self) -> dict[str, Any]:
        """model, system, devices, then every strategy and workload field as `strategy.tp`,
        `workload.serving.max_batch`, ... (enums as their values, tuples as lists)."""
        def flat(data: dict[str, Any], prefix: str) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, value in data.items():
                out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
            return out

        return {"model": self.model.name, "system": self.system.name, "devices": self.system.devices,
                **flat(self.strategy.model_dump(mode="json"), "strategy."),
                **flat(self.workload.model_dump(mode="json"), "workload.")}


@quick_init
@dataclass(frozen=True)
class StepEstimate:
    """One training iteration: time, its breakdown, throughput, utilization, memory and traffic. A sweep's
    model FLOPs and the figures that follow from the step time (`FIGURES`), and its calls and traffic (`PARTS`),
    are made when first read (`step_figures.Deferral`)."""

    step_time_s: Array
    breakdown: TimeBreakdown
    tokens_per_s: Array
    model_flop: Array  # model FLOPs of the iteration (no recomputation), whole cluster
    hardware_flop: Array  # model FLOPs + recomputation
    mfu: Array  # model FLOPs / (step time x devices x peak)
    hfu: Array  # hardware FLOPs / (step time x devices x peak)
    memory_hbm: MemoryBreakdown
    memory_tier2: MemoryBreakdown
    hbm_capacity_bytes: Array
    tier2_capacity_bytes: Array
    traffic: Traffic
    communication: tuple[CommCall, ...]  # every collective / transfer of the step (its sum is `traffic`)
    microbatches: Array
    layer: LayerCost  # one dense layer, one micro-batch, per pass: FLOPs, bytes, time, exposed TP
    moe_layer: LayerCost | None  # one MoE layer (None for a dense model)
    feasible: Array  # boolean
    infeasible_reasons: tuple[str, ...] = ()
    ends: EndsCost | None = None  # embedding and LM head, one micro-batch (for the step's simulation)
    error_band: ErrorBand | None = None  # from validation residuals (set by armillary.api for one configuration)
    offload_s: Array = 0.0  # the second tier's transfers, alongside the whole step (`breakdown.offload_stall`)
    config: RunConfig | None = None  # the inputs (set by armillary.api)
    advice: tuple[str, ...] = ()  # out of memory: its largest categories, what makes it fit (`estimate.fit`)

    def headline(self) -> display.Headline:
        """The figures a repr shows: step time, throughput, MFU, memory against capacity, feasibility."""
        fits = bool(np.all(self.feasible))
        return [("step_time", display.seconds(self.step_time_s)),
                ("tokens_per_s", display.number(self.tokens_per_s)), ("mfu", display.percent(self.mfu)),
                ("memory", f"{display.gib(self.memory_hbm.total)} of {display.gib(self.hbm_capacity_bytes)}"),
                ("feasible", str(fits) if fits or np.ndim(self.feasible) else f"False: {self.infeasible_reasons[0]}"
                 if self.infeasible_reasons else "False"),
                *(("advice", a) for a in self.advice)]

    def __repr__(self) -> str:
        return display.short_repr(type(self).__name__, self.headline())

    def _repr_html_(self) -> str:
        return display.html_table(type(self).__name__, self.headline())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (floats for a single configuration, lists for a sweep)."""
        d = asdict(self)
        d.pop("config")
        d["memory"] = {"hbm": d.pop("memory_hbm"), "tier2": d.pop("memory_tier2")}
        d["memory"]["hbm"]["total"] = self.memory_hbm.total
        d["memory"]["tier2"]["total"] = self.memory_tier2.total
        d["memory"]["hbm_capacity_bytes"] = d.pop("hbm_capacity_bytes")
        d["memory"]["tier2_capacity_bytes"] = d.pop("tier2_capacity_bytes")
        d["breakdown"]["total"] = self.breakdown.total
        d["infeasible_reasons"] = list(self.infeasible_reasons)
        return plain(d)


for _name in (*FIGURES, *PARTS):  # (set on the class made: a descriptor in the class body would be the fields' default)
    setattr(StepEstimate, _name, Figure(_name, getattr(StepEstimate, _name, dataclasses.MISSING)))


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.item() if value.ndim == 0 else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
