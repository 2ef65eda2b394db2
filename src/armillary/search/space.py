"""The strategy space of a search: a product of axes, decoded a chunk of points at a time.

A point's index is a mixed-radix number over the axes (the last axis varies fastest), so any slice of the
space can be materialized as arrays without the rest, and any point rebuilt as a `Strategy`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import Field, PositiveInt

from armillary.specs.arrays import _RECOMPUTE_CODE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, ModelArrays, StrategyArrays
from armillary.specs.base import Spec
from armillary.specs.model import Model
from armillary.specs.strategy import Recompute, Strategy, ZeroStage


class StrategySpace(Spec):
    """Values to try per strategy field; None = every value that can be valid for the model and GPU count.
    Fields not listed here come from the base strategy of the search."""

    tp: tuple[PositiveInt, ...] | None = Field(None, description="default: powers of two up to a node")
    pp: tuple[PositiveInt, ...] | None = Field(None, description="default: divisors of the layer count")
    cp: tuple[PositiveInt, ...] = (1,)
    vpp: tuple[PositiveInt, ...] = (1, 2, 4)
    micro_batch: tuple[PositiveInt, ...] = (1, 2, 4, 8)
    sequence_parallel: tuple[bool, ...] = (False, True)
    recompute: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    zero: tuple[ZeroStage, ...] = (ZeroStage.NONE, ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS, ZeroStage.PARAMETERS)
    overlap_dp: tuple[bool, ...] = (False, True)
    overlap_tp: tuple[bool, ...] = (False, True)
    overlap_param_gather: tuple[bool, ...] = (False, True)
    offload_optimizer: tuple[bool, ...] = (False,)
    offload_activations: tuple[bool, ...] = (False,)
    ep: tuple[PositiveInt, ...] = (1,)


# axis name -> StrategyArrays field it sets (and how a value is coded)
_AXES = ("tp", "pp", "cp", "vpp", "micro_batch", "sequence_parallel", "recompute", "zero", "overlap_dp",
         "overlap_tp", "overlap_param_gather", "offload_optimizer", "offload_activations", "ep")


def _code(axis: str, value: Any) -> float:
    if axis == "recompute":
        return float(_RECOMPUTE_CODE[value])
    return float(int(value)) if isinstance(value, ZeroStage) else float(value)


@dataclass(frozen=True)
class Axes:
    """The resolved axes of one search: names and coded values, in index order."""

    names: tuple[str, ...]
    values: tuple[np.ndarray, ...]  # coded as StrategyArrays stores them
    labels: tuple[tuple[Any, ...], ...]  # the spec values, for rebuilding a Strategy

    @property
    def size(self) -> int:
        return int(np.prod([len(v) for v in self.values], dtype=np.int64))

    def decode(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Coded axis values of the points start..stop-1."""
        index = np.arange(start, stop, dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        for name, vals in zip(reversed(self.names), reversed(self.values), strict=True):
            index, digit = np.divmod(index, len(vals))
            out[name] = vals[digit]
        return out

    def point(self, index: int) -> dict[str, Any]:
        """Spec values of one point."""
        out: dict[str, Any] = {}
        for name, labels in zip(reversed(self.names), reversed(self.labels), strict=True):
            index, digit = divmod(index, len(labels))
            out[name] = labels[digit]
        return out


def _divisors(n: int, limit: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def resolve_axes(space: StrategySpace, model: Model, gpus: int, devices_per_node: int) -> Axes:
    tp = space.tp or tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if t <= devices_per_node and t <= gpus)
    pp = space.pp or _divisors(model.layers, gpus)
    chosen = {**{a: getattr(space, a) for a in _AXES}, "tp": tp, "pp": pp}
    labels = tuple(tuple(chosen[a]) for a in _AXES)
    return Axes(_AXES, tuple(np.array([_code(a, v) for v in vals]) for a, vals in zip(_AXES, labels, strict=True)),
                labels)


def structurally_valid(c: dict[str, np.ndarray], m: ModelArrays, gpus: int, global_batch: int) -> np.ndarray:
    """Points whose degrees divide (Megatron's checks): tp x cp x pp | gpus, heads % tp, pp x vpp | layers
    with vpp > 1 only under pp > 1, sequence parallelism only with tp > 1, dp x micro_batch | global batch,
    ep | experts and ep | dp x cp x tp."""
    model_parallel = c["tp"] * c["cp"] * c["pp"]
    dp = gpus / model_parallel
    ok = (np.mod(gpus, model_parallel) == 0) & (np.mod(m.heads, c["tp"]) == 0)
    ok &= np.where(c["vpp"] > 1, (c["pp"] > 1) & (np.mod(m.layers, c["pp"] * c["vpp"]) == 0), True)
    ok &= (c["sequence_parallel"] == 0) | (c["tp"] > 1)
    ok &= np.mod(global_batch, np.maximum(dp, 1) * c["micro_batch"]) == 0
    experts = float(m.experts)
    ok &= np.where(c["ep"] > 1, (experts > 0) & (np.mod(experts, c["ep"]) == 0)
                   & (np.mod(np.maximum(dp, 1) * c["cp"] * c["tp"], c["ep"]) == 0), True)
    return np.asarray(ok)


def chunk_strategy(base: StrategyArrays, c: dict[str, np.ndarray], gpus: int, expert_tp_is_tp: bool) -> StrategyArrays:
    """The base strategy with the chunk's axis values (arrays) in place."""
    model_parallel = c["tp"] * c["cp"] * c["pp"]
    return replace(
        base, tp=c["tp"], pp=c["pp"], cp=c["cp"], dp=np.maximum(gpus // model_parallel, 1), vpp=c["vpp"],
        schedule=np.where(c["vpp"] > 1, float(SCHEDULE_INTERLEAVED), float(SCHEDULE_1F1B)),
        micro_batch=c["micro_batch"], sequence_parallel=c["sequence_parallel"], recompute=c["recompute"],
        zero=c["zero"], overlap_dp=c["overlap_dp"], overlap_tp=c["overlap_tp"],
        overlap_param_gather=c["overlap_param_gather"], offload_optimizer=c["offload_optimizer"],
        offload_activations=c["offload_activations"], ep=c["ep"], etp=c["tp"] if expert_tp_is_tp else base.etp)


def point_strategy(base: Strategy, values: dict[str, Any]) -> Strategy:
    """One point of the space as a Strategy (what `estimate` takes)."""
    data = base.model_dump()
    overlap = dict(data["overlap"])
    offload = dict(data["offload"])
    for name, value in values.items():
        if name.startswith("overlap_"):
            overlap[{"overlap_dp": "dp_grad_reduce", "overlap_tp": "tp_comm",
                     "overlap_param_gather": "param_gather"}[name]] = value
        elif name.startswith("offload_"):
            offload[name.removeprefix("offload_")] = value
        else:
            data[name] = value
    data.update(overlap=overlap, offload=offload, dp=None, schedule=None)
    return Strategy.model_validate(data)
