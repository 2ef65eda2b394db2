"""Typed results of an estimate. Fields are floats for one configuration, arrays for a sweep."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from armillary.estimate.layer import LayerCost
from armillary.specs.arrays import Array


@dataclass(frozen=True)
class TimeBreakdown:
    """Where one iteration's time goes, in seconds; the fields add up to the step time."""

    forward_backward: Array  # GEMMs and element-wise kernels of forward and backward passes
    recompute: Array  # extra forward work from activation recomputation
    tp_exposed: Array  # tensor-parallel collectives not hidden behind GEMMs
    pp_exposed: Array  # pipeline send/receive on the critical path
    bubble: Array  # pipeline fill and drain idle time
    dp_exposed: Array  # data-parallel / ZeRO / FSDP communication not hidden behind compute
    optimizer: Array  # optimizer step (memory-bound)
    offload_stall: Array  # waiting on the second memory tier

    @property
    def total(self) -> Array:
        return sum(getattr(self, f.name) for f in fields(self))


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device on one memory tier, by category."""

    weights: Array
    gradients: Array
    optimizer_states: Array
    activations: Array  # stored for backward (and one layer's working set under full recompute)
    checkpoints: Array  # layer inputs kept by full recomputation
    comm_buffers: Array  # pipeline, tensor-parallel and parameter-gather buffers

    @property
    def total(self) -> Array:
        return sum(getattr(self, f.name) for f in fields(self))


@dataclass(frozen=True)
class Traffic:
    """Bytes each device sends per iteration on each network tier."""

    scale_up_bytes: Array
    scale_out_bytes: Array


@dataclass(frozen=True)
class StepEstimate:
    """One training iteration: time, its breakdown, throughput, utilization, memory and traffic."""

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
    microbatches: Array
    layer: LayerCost  # one layer, one micro-batch, per pass: FLOPs, bytes, time, exposed TP
    feasible: Array  # boolean
    infeasible_reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (floats for a single configuration, lists for a sweep)."""
        d = asdict(self)
        d["memory"] = {"hbm": d.pop("memory_hbm"), "tier2": d.pop("memory_tier2")}
        d["memory"]["hbm"]["total"] = self.memory_hbm.total
        d["memory"]["tier2"]["total"] = self.memory_tier2.total
        d["memory"]["hbm_capacity_bytes"] = d.pop("hbm_capacity_bytes")
        d["memory"]["tier2_capacity_bytes"] = d.pop("tier2_capacity_bytes")
        d["breakdown"]["total"] = self.breakdown.total
        d["infeasible_reasons"] = list(self.infeasible_reasons)
        return _plain(d)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.item() if value.ndim == 0 else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
