"""The strategy space of a search: a product of axes, decoded a chunk of points at a time.

A point's index is a mixed-radix number over the axes (the last axis varies fastest), so any slice of the
space can be materialized as arrays without the rest, and any point rebuilt as a `Strategy`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field, PositiveInt

from armillary.errors import SpecError
from armillary.estimate.flops import model_flop_per_iteration
from armillary.estimate.model_states import lora_states, model_states
from armillary.memo import derived, quick_replace, typed
from armillary.numerics import Array, all_of, minimum
from armillary.plan import rules
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays, recipe_family
from armillary.plan.codes import (
    RECOMPUTE_SELECTIVE,
    SCHEDULE_1F1B,
    SCHEDULE_INTERLEAVED,
    encode,
    with_values,
)
from armillary.plan.layout import data_parallel_degree, fewest_stage_layers, stage_layers
from armillary.specs.base import Spec
from armillary.specs.device import Device, Precision
from armillary.specs.kernels import Attention
from armillary.specs.model import Model, TokenMixer
from armillary.specs.parallelism import RankOrder, ZeroStage
from armillary.specs.recompute import Recompute, RecomputeModule
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.training_precision import BlockFormat
from armillary.specs.workload import Training
from armillary.workload.parameters import count_parameters
from armillary.workload.transformer import layer_forward


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
    recompute_layers: tuple[PositiveInt, ...] = Field(
        (), description="with recompute full, also try re-running only the first N layers of each model chunk "
        "(Megatron's block method) for each N given; empty: every layer")
    zero: tuple[ZeroStage, ...] = (ZeroStage.NONE, ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS, ZeroStage.PARAMETERS)
    overlap_dp: tuple[bool, ...] = (False, True)
    overlap_tp: tuple[bool, ...] = (False, True)
    overlap_param_gather: tuple[bool, ...] = (False, True)
    offload_optimizer: tuple[bool, ...] = (False,)
    offload_activations: tuple[bool, ...] = (False,)
    offload_weights: tuple[bool, ...] | None = Field(
        None, description="weight offload to try (the memory pool where the system has one, else the device's "
        "second tier; docs/memory-pool.md); default: the base strategy's")
    offload_gradients: tuple[bool, ...] | None = Field(
        None, description="gradient offload to try (ZeRO-Offload; only with offload_optimizer: points offloading "
        "the gradients but not the optimizer are invalid); default: the base strategy's")
    offload_experts: tuple[bool, ...] | None = Field(
        None, description="offload of the routed experts' weights to try (MoE); default: the base strategy's")
    offload_activation_layers: tuple[PositiveInt, ...] = Field(
        (), description="with offload_activations, also try offloading only the first N layers of each model "
        "chunk for each N given (Megatron-Core --cpu-offloading-num-layers); empty: every layer")
    ep: tuple[PositiveInt, ...] = (1,)
    overlap_ep: tuple[bool, ...] = Field((False,), description="hide the MoE token exchange behind another "
                                         "micro-batch's compute (1F1B all-to-all overlap, DualPipe)")
    dispatch_dedup: tuple[bool, ...] = Field((False,), description="one copy per node and device (DeepEP, "
                                             "HybridEP) instead of one per routed expert")
    attention: tuple[Attention, ...] | None = Field(
        None, description="default: flash, and flash3 where the device has it (standard and flash1 only when "
                          "listed: they are never faster)")
    rank_order: tuple[RankOrder, ...] = Field((RankOrder.DP_INNER, RankOrder.PP_INNER),
                                              description="mappings of the parallel groups onto network tiers")
    block_format: tuple[BlockFormat, ...] | None = Field(
        None, description="block-scaled GEMM formats to try (none, mxfp8, nvfp4, mxfp4, int8; with a bf16 or fp8 "
        "base precision, on a device that lists their rate: a listed format the device lacks stops the search with "
        "the devices that have it); default: the base strategy's")


_DEFAULT_MODULES = Strategy().recompute_modules  # what a strategy without selective recomputation holds
# axes in index order (the last varies fastest); the first is compound: the model-parallel layout
_LAYOUT = ("tp", "pp", "cp", "vpp")
_AXES = ("attention", "micro_batch", "sequence_parallel", "recompute", "zero", "overlap_dp", "overlap_tp",
         "overlap_param_gather", "offload_optimizer", "offload_activations", "offload_weights",
         "offload_gradients", "offload_experts", "ep", "overlap_ep",
         "dispatch_dedup", "rank_order", "block_format")


@dataclass(frozen=True)
class Axes:
    """The resolved axes of one search, in index order. An axis sets one or more strategy fields (`names`):
    its values are rows of coded field values (as StrategyArrays stores them) and of spec values (for
    rebuilding a Strategy)."""

    names: tuple[tuple[str, ...], ...]
    values: tuple[np.ndarray, ...]  # per axis: (choices x fields), coded
    labels: tuple[tuple[tuple[Any, ...], ...], ...]  # per axis: choices of spec values
    pruned: int = 0  # points of the full product left out before indexing (layouts whose degrees do not divide)

    @property
    def size(self) -> int:
        return int(np.prod([len(v) for v in self.values], dtype=np.int64))

    def decode(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Coded field values of the points start..stop-1."""
        return self._fields(np.arange(start, stop, dtype=np.int64))

    def first_values(self, index: int) -> dict[str, Any]:
        """`decode(index, index + 1)`'s values of its one point (numpy scalars), its digits taken in Python
        integers rather than in arrays of one element (about 10 us an axis)."""
        return self._fields(index)

    def _fields(self, index: Any) -> dict[str, Any]:
        """Coded field values at `index` (an int or an array of point indices): its digit on each axis, the
        last axis fastest (`divmod` is numpy's on an array)."""
        out: dict[str, Any] = {}
        for names, vals in zip(reversed(self.names), reversed(self.values), strict=True):
            index, digit = divmod(index, len(vals))
            for k, name in enumerate(names):
                out[name] = vals[digit, k]
        return out

    def split_axis(self, target: int) -> tuple[int, int]:
        """(axis split by blocks, points per step of it): the trailing axes after the split axis fit in
        `target` whole; the split axis is cut into runs so that a block stays within `target`."""
        count = 1
        for i in range(len(self.values) - 1, -1, -1):
            if count * len(self.values[i]) > target:
                return i, count
            count *= len(self.values[i])
        return 0, count // max(len(self.values[0]), 1)

    def blocks(self, target: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, int]]:
        """Contiguous index ranges of at most `target` points (at least one step of the split axis), each
        an outer product of axis slices (`block`), from `start` to `stop` (on boundaries of passes over
        the split axis), generated one at a time: constant memory whatever the size of the space."""
        if self.size == 0:
            return
        axis, count = self.split_axis(target)
        run = max(1, target // count) * count
        span = len(self.values[axis]) * count  # one pass over the split axis
        for outer in range(start, self.size if stop is None else stop, span):
            for a in range(outer, outer + span, run):
                yield a, min(a + run, outer + span)

    def block(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Coded field values of the points start..stop-1 (a range from `blocks`) as an outer product: the
        leading axes as scalars, the split axis as its slice and each trailing axis as an array, each
        along its own dimension, so that what depends on few axes is computed once per combination of
        them (numpy broadcasting); C-order flattening gives the points in index order."""
        axis, count = 0, 1
        for i in range(len(self.values) - 1, -1, -1):  # the innermost axis the range does not cover whole
            axis = i
            if stop - start <= count * len(self.values[i]):
                break
            count *= len(self.values[i])
        first = (start // count) % len(self.values[axis])
        steps = (stop - start) // count
        dims = list(range(axis, len(self.values)))
        out = self.first_values(start)
        for dim, i in enumerate(dims):
            shape = [1] * len(dims)
            rows = self.values[i][first:first + steps] if i == axis else self.values[i]
            shape[dim] = len(rows)
            names = self.names[i]
            # a field of a compound axis that holds one value along it (cp among the layouts, recompute_layers where
            # no count is tried): that number, as an axis of one value gives it (the same value at every point),
            # while another field of the axis varies along it (the block keeps the axis's dimension)
            same = (rows == rows[:1]).all(axis=0).tolist() if len(names) > 1 else [False]
            if all(same):
                same = [False] * len(names)
            for k, name in enumerate(names):
                out[name] = rows[0, k] if same[k] else rows[:, k].reshape(shape)
        return out

    def point(self, index: int) -> dict[str, Any]:
        """Spec values of one point."""
        out: dict[str, Any] = {}
        for names, labels in zip(reversed(self.names), reversed(self.labels), strict=True):
            index, digit = divmod(index, len(labels))
            out.update(zip(names, labels[digit], strict=True))
        return out


def default_tp(devices_per_node: int, gpus: int) -> tuple[int, ...]:
    """Tensor-parallel degrees tried when a space names none: powers of two within one node."""
    return tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if t <= devices_per_node and t <= gpus)


def _divisors(n: int, limit: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def memory_floor(model: Model, base: Strategy, space: StrategySpace, tp: Array, pp: Array, cp: Array,
                 gpus: int, workload: Training | None = None) -> Array:
    """A lower bound of the HBM a device of layout (tp, pp, cp) needs at any point of `space` (arrays: one
    bound per layout): the model states (`estimate.model_states.model_states`) of a middle stage's replicated
    layer parameters, under the most ZeRO sharding and the most offload the space allows, with no
    activations and no routed experts. Every term the estimator adds is non-negative, so no point of the
    layout needs less. A LoRA `workload` holds only its frozen base weights (`estimate.model_states.lora_states`)."""
    m = ModelArrays.of(model)
    params = derived(m, "parameters", lambda: count_parameters(m))  # once per model (as the estimator takes them)
    mlp = min(float(params.dense_mlp), float(params.moe_shared)) if float(m.experts) > 0 else params.dense_mlp
    stage_params = fewest_stage_layers(model.layers, pp) * (params.attention + mlp) / tp
    st = quick_replace(StrategyArrays.of(base, 1), dp=gpus // (tp * pp * cp), cp=cp,
                 zero=float(max(int(z) for z in space.zero)))
    lora = workload is not None and workload.finetune is not None
    states = (lora_states(stage_params, 0.0, st, TrainingArrays.of(workload)) if lora and workload is not None
              else model_states(stage_params, st))
    weights = 0.0 if any(space.offload_weights or (base.offload.weights,)) else states.weights
    optimizer = 0.0 if any(space.offload_optimizer) else states.optimizer_states
    gradients = 0.0 if any(space.offload_gradients or (base.offload.gradients,)) else states.gradients
    return weights + gradients + optimizer


def time_floor(model: Model, system: System, workload: Training, space: StrategySpace, pp: Array, vpp: Array,
               dp: Array, base: Strategy | None = None) -> Array:
    """A lower bound of the step time of layout (pp, vpp, dp) at any point of `space` (arrays: one bound
    per layout). The pipeline takes m stage_max + (stage_sum - stage_max)/v (`estimate.pipeline`), which
    grows with stage_max >= stage_sum/p, so a step takes at least (stage_sum/p)(m + (p - 1)/v); every
    kernel runs at most at the device's highest matrix peak times its highest efficiency (`cost.compute`:
    the curves interpolate between their points), so stage_sum/p >= F/(devices m peak) for the step's model
    FLOPs F, and the bound F/(devices peak) (1 + (p - 1)/(v m)) falls with m, which is largest
    for the smallest micro-batch. F counts every layer as the cheaper of a dense layer and an MoE layer
    without its routed experts (token dropping may shrink those); MatMul-free models get no bound (their
    kernels are additions, not matrix FLOPs)."""
    m, w = ModelArrays.of(model), TrainingArrays.of(workload)
    if model.token_mixer is TokenMixer.MLGRU or model.bitlinear is not None:
        return np.zeros(np.shape(pp))
    passes = 3.0 - float(workload.finetune is not None)  # LoRA: no weight gradient for the frozen base

    def layer_flop(mlp_width: Array | None) -> Array:  # forward + backward of one layer, whole batch
        return passes * sum(op.flop for op in layer_forward(m, w.global_batch, w.seq_len, 1.0, 0.0, 2.0,
                                                       mlp_width=mlp_width).gemms)

    def flops() -> tuple[Array, Array]:  # (one layer's, the head's): of the model and the workload alone
        return (layer_flop(None) if model.moe is None else minimum(layer_flop(None), layer_flop(m.shared_ffn)),
                model_flop_per_iteration(m, w).head)

    # once per model and workload values (kept on the model's frozen view, `memo.derived`)
    per_layer, head = derived(m, ("time floor flops", w, passes), flops)
    device = system.device
    curves = (device.matrix_efficiency, *device.matrix_efficiency_by_precision.values())
    best_efficiency = max(*(e for c in curves for _, e in c.points), device.flash_attention_efficiency,
                          device.flash3_attention_efficiency or 0.0, device.flash1_attention_efficiency or 0.0)
    peak = max(device.matrix_flops[p] for p in _usable(device, space, base)) * best_efficiency
    microbatches = workload.global_batch / (dp * min(space.micro_batch))
    return (per_layer * model.layers + head) / (system.devices * peak) * (1 + (pp - 1) / (vpp * microbatches))


def _usable(device: Device, space: StrategySpace, base: Strategy | None) -> tuple[Precision, ...]:
    """The device's listed GEMM precisions a point of `space` can run: the block-scaled ones only where the
    space (or the base strategy) tries that format."""
    formats = {f.value for f in space.block_format or ((base or Strategy()).block_format,)}
    return tuple(p for p in device.matrix_flops if not p.block_scaled or p.value in formats)


def layout_checks(model: Model, base: Strategy, gpus: int, tp: Array, pp: Array, cp: Array,
                  vpp: Array) -> tuple[rules.Check, ...]:
    """The rules a (tp, pp, cp, vpp) layout must obey whatever the other axes: the degrees divide the GPUs,
    tp the heads, the layers split into stages (with the base strategy's first/last stage counts) of vpp
    chunks, interleaving needs stages."""
    n_first, n_mid, n_last = stage_layers(model.layers, pp, base.first_stage_layers or 0, base.last_stage_layers or 0)
    return (rules.model_parallel_divides(tp, cp, pp, gpus), rules.tp_divides_heads(tp, model.heads),
            rules.stages_split(model.layers, n_first, n_mid, n_last, pp, vpp), rules.interleaving_needs_stages(vpp, pp))


def resolve_axes(space: StrategySpace, model: Model, gpus: int, devices_per_node: int,
                 base: Strategy | None = None, hbm_bytes: float | None = None, flash3: bool = False,
                 workload: Training | None = None) -> Axes:
    """The axes of `space`. Two exact prunings of whole sub-spaces happen before indexing, counted in
    `pruned`: (tp, pp, cp, vpp) layouts that break a rule of the layout alone (`layout_checks`), and,
    given `hbm_bytes`, layouts whose `memory_floor` already exceeds it."""
    base = base or Strategy()
    tps = space.tp or default_tp(devices_per_node, gpus)
    pps = space.pp or _divisors(model.layers, gpus)
    vpps = space.vpp
    if base.pipeline_layout is not None:  # Megatron's layout names every stage and chunk: pp and vpp are its own
        if set(space.pp or (base.pp,)) != {base.pp} or (space.vpp != StrategySpace().vpp and
                                                       set(space.vpp) != {base.vpp}):
            raise SpecError(f"strategy.pipeline_layout fixes pp {base.pp} and vpp {base.vpp}: search other pipeline "
                            "degrees without a layout (first_stage_layers / last_stage_layers), or list only these")
        pps, vpps = (base.pp,), (base.vpp,)
    every = list(itertools.product(*(dict.fromkeys(values) for values in (tps, pps, space.cp, vpps))))
    layouts: list[tuple[Any, ...]] = []
    # the layouts' degrees as one array, converted once (a row per layout: tp, pp, cp, vpp, each its own code,
    # plan.codes.STRATEGY_FIELDS), its rows kept with the layouts that pass: the axis's coded values below
    rows = np.fromiter(itertools.chain.from_iterable(every), dtype=float, count=len(every) * len(_LAYOUT)).reshape(
        len(every), len(_LAYOUT))
    if every:
        t, p, c, v = rows.T

        def passing() -> np.ndarray:  # the layouts that obey `layout_checks`
            return np.broadcast_to(all_of(*(check.ok for check in layout_checks(model, base, gpus, t, p, c, v))),
                                   t.shape)

        # of the model, the devices, the base's first / last stage layers and the layouts alone: kept on the model's
        # frozen view (`memo.derived`), for searches of the same model and device count
        ok = derived(ModelArrays.of(model), ("layout checks", gpus, *typed(base.first_stage_layers,
                                                                          base.last_stage_layers), tuple(every)),
                     passing)
        layouts, rows = list(itertools.compress(every, ok.tolist())), rows[ok]
    if hbm_bytes is not None and layouts:
        t, p, c = rows[:, 0], rows[:, 1], rows[:, 2]
        fits = np.broadcast_to(memory_floor(model, base, space, t, p, c, gpus, workload) <= hbm_bytes, t.shape)
        layouts, rows = list(itertools.compress(layouts, fits.tolist())), rows[fits]
    attention = space.attention or ((Attention.FLASH, Attention.FLASH3) if flash3 else (Attention.FLASH,))
    space = space.model_copy(update={"attention": attention,
                                     "block_format": space.block_format or (base.block_format,),
                                     **{f"offload_{k}": getattr(space, f"offload_{k}") or (getattr(base.offload, k),)
                                        for k in _BASE_OFFLOAD}})
    others = [_compound_rows(space, a) if a in _COMPOUND else tuple(zip(dict.fromkeys(getattr(space, a))))
              for a in _AXES]  # each value once, a 1-tuple each
    labels = (tuple(layouts), *others)
    names = _NAMES
    # the layout's degrees are their own codes (plan.codes.STRATEGY_FIELDS: tp, pp, cp, vpp code as the number),
    # so its rows are converted at once, not field by field (a space has a few dozen to hundreds of layouts)
    values = (rows.reshape(len(layouts), len(_LAYOUT)),
              *(_encoded(axis_names, choices) for axis_names, choices in zip(names[1:], labels[1:], strict=True)))
    rest = int(np.prod([len(o) for o in others], dtype=np.int64))
    return Axes(names, values, labels, pruned=(len(every) - len(layouts)) * rest)


# the coded values of an axis's choices (`_encoded`), by its fields and choices with their types (True and 1, or
# an enum and its string, are equal keys that might code apart): the same few axes recur in every search
_ENCODED: dict[tuple[object, ...], np.ndarray] = {}
ENCODED_AXES = 1024  # kept at most (past that, coded each time)


def _encoded(axis_names: tuple[str, ...], choices: tuple[tuple[Any, ...], ...]) -> np.ndarray:
    """An axis's values: a row of coded field values (`plan.codes.encode`) per choice, (choices x fields). Kept
    read-only: one array serves every search with that axis."""
    try:
        key = (axis_names, choices, tuple(map(type, itertools.chain.from_iterable(choices))))
        found = _ENCODED.get(key)
    except TypeError:  # a value that does not hash: coded each time
        key, found = None, None
    if found is None:
        found = np.array([[encode(n, v) for n, v in zip(axis_names, row, strict=True)] for row in choices],
                         dtype=float).reshape(len(choices), len(axis_names))
        found.flags.writeable = False
        if key is not None and len(_ENCODED) < ENCODED_AXES:
            _ENCODED[key] = found
    return found


# offload axes whose default is the base strategy's own setting
_BASE_OFFLOAD = ("weights", "gradients", "experts")
# compound axes: a setting and how many of each chunk's first layers it covers (None: every layer), tried
# for each count given where the setting takes the value that has a count
_COMPOUND: dict[str, tuple[str, Any]] = {"recompute": ("recompute_layers", Recompute.FULL),
                                         "offload_activations": ("offload_activation_layers", True)}
# the fields each axis sets, in index order (`Axes.names`)
_NAMES = (_LAYOUT, *((a, _COMPOUND[a][0]) if a in _COMPOUND else (a,) for a in _AXES))


def _compound_rows(space: StrategySpace, axis: str) -> tuple[tuple[Any, int | None], ...]:
    """The recompute axis (each mode over every layer, and full recomputation of the first N layers of each
    model chunk for each N of `space.recompute_layers`) or the activation-offload axis (likewise for
    `space.offload_activation_layers`)."""
    counts_field, counted = _COMPOUND[axis]
    values = tuple(dict.fromkeys(getattr(space, axis)))
    partial = getattr(space, counts_field) if counted in values else ()
    return (*((value, None) for value in values), *((counted, n) for n in dict.fromkeys(partial)))


def chunk_strategy(base: StrategyArrays, c: dict[str, np.ndarray], gpus: int, expert_tp_is_tp: bool,
                   precision: float | None = None) -> StrategyArrays:
    """The base strategy with the chunk's axis values (coded arrays, named as StrategyArrays' fields) in
    place; dp and the schedule follow the degrees (`plan.layout.data_parallel_degree`; interleaved when
    vpp > 1), expert TP follows tp unless the base strategy fixes it, the priced precision follows the block
    format (`plan.arrays.recipe_family`) from the base strategy's own `precision` code (default: base's)."""
    precision_code = recipe_family(base.precision if precision is None else precision,
                                   c.get("block_format", base.block_format))
    fields: dict[str, Array] = dict(c)
    if "recompute" in c:  # the base's recompute modules hold where a point recomputes selectively, else the
        selective = c["recompute"] == RECOMPUTE_SELECTIVE  # default ones, as a Strategy of that point has them
        fields.update({f"recompute_{m.value}": _module_flag(selective, getattr(base, f"recompute_{m.value}"),
                                                            float(m in _DEFAULT_MODULES)) for m in RecomputeModule})
    return quick_replace(  # (dataclasses.replace of its 70 fields costs about 25 us)
        base, **fields, precision=precision_code, dp=data_parallel_degree(gpus, c["tp"], c["cp"], c["pp"]),
        schedule=np.where(c["vpp"] > 1, float(SCHEDULE_INTERLEAVED), float(SCHEDULE_1F1B)),
        etp=c["tp"] if expert_tp_is_tp else base.etp)


def _module_flag(selective: np.ndarray | bool, base: Array, default: float) -> Array:
    """A recompute module's flag at each point of a chunk: the base strategy's where the point recomputes
    selectively, the default's elsewhere; where the two are the same number, that number, as a field outside the
    space is (every point holds it: the estimate's values are the same, without an axis that changes nothing)."""
    if type(base) is float and base == default:
        return base
    return np.where(selective, base, default)


def point_strategy(base: Strategy, values: dict[str, Any]) -> Strategy:
    """One point of the space as a Strategy (what `estimate` takes): the base's recompute modules where the
    point recomputes selectively, the default ones otherwise."""
    if values.get("recompute", base.recompute) is not Recompute.SELECTIVE:
        base = base.model_copy(update={"recompute_modules": _DEFAULT_MODULES})
    return with_values(base, values)
