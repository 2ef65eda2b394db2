"""Search a strategy space: chunks of points through the training estimator as arrays, infeasible points
masked, a running top-k. Chunks are independent, so an executor may run them anywhere; the result does not
depend on which one did (ties break by point index)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from armillary.arguments import whole
from armillary.comm.compose import forget, memoized
from armillary.display import Displayed, Headline, gib, number, percent, seconds
from armillary.errors import SpecError
from armillary.estimate.feasibility import memory_fits, shape_rules
from armillary.estimate.result import ErrorBand
from armillary.estimate.run import estimate_training_run
from armillary.estimate.training import estimate_training
from armillary.numerics import keep_sweep_memory
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.codes import encode
from armillary.plan.layout import data_parallel
from armillary.search.executors import Executor, serial
from armillary.search.layout_cache import LayoutCache, Parts, layout_keys, unbounded
from armillary.search.space import (
    Axes,
    StrategySpace,
    chunk_strategy,
    memory_floor,
    point_strategy,
    resolve_axes,
    time_floor,
)
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training
from armillary.writing import replaced


class Objective(StrEnum):
    TIME = "time"  # shortest step
    MEMORY = "memory"  # least HBM per device


@dataclass(frozen=True)
class Problem:
    """Everything a chunk needs (picklable: it travels to worker processes)."""

    model: Model
    system: System
    base: Strategy
    workload: Training
    space: StrategySpace
    axes: Axes
    objective: Objective
    top_k: int
    cache: LayoutCache | None = None  # blocks' capacity-free results shared with other capacities' searches
    memo: str | None = None  # one search's token: its blocks share their collectives (comm.compose.memoized)

    def evaluate(self, start: int, stop: int) -> ChunkResult:
        """One block of points (`Axes.block`): evaluated as an outer product of its trailing axes, so each
        quantity is computed once per combination of the axes it depends on; divisibility and memory
        are masks on the result."""
        keep_sweep_memory()  # a block's temporaries from freed memory, not fresh pages (numerics.py; once)
        m = ModelArrays.of(self.model)
        gpus = self.system.devices
        coded = self.axes.block(start, stop)
        # (np.broadcast's shape: np.broadcast_shapes's, without its Python-level pass over each value's shape;
        # np.broadcast takes at most 32 operands in numpy 1.x, 64 in 2.x)
        shape = (np.broadcast(*coded.values()).shape if len(coded) <= 32 else
                 np.broadcast_shapes(*(np.shape(v) for v in coded.values())))
        # evaluated with the longest axes innermost (the same elementwise values: points are transposed back
        # before flattening): numpy's loops then run over the layouts, not over the last axis's 2 values; the
        # axes of one value are left out (C order is the same without them), so every array of the estimate
        # has as many dimensions as the block has axes that vary, not one per axis of the space (numpy's
        # per-call cost grows with the dimensions: take_along_axis builds an index per dimension)
        # (among axes of one length, the space's later ones outer: its earlier axes are the layers' own settings,
        # micro-batch, sequence parallelism, recomputation, which most of the estimate's quantities vary with, its
        # later ones the step's, ZeRO, the overlaps, the rank order: the layers' arrays then have fewer dimensions)
        order = [d for d in sorted(range(len(shape)), key=lambda d: (shape[d], -d)) if shape[d] > 1]
        inner = tuple(shape[d] for d in order)
        back = tuple(np.argsort(order).tolist())
        # (a value varying along one axis at most, as `Axes.block` gives each: the same elements in the same
        # order whatever the arrangement of its dimensions, so a reshape, a view, not a transpose). An axis of one
        # value in the block is a number, as the base strategy's fields outside the space are, and the others lose
        # their leading dimensions of length 1 (the same values, elementwise, numpy aligning shapes on their last
        # dimensions: its per-call cost grows with the dimensions of every operand, an operand of 9 dimensions
        # costs about 0.5 us more a call than a number; what depends on the innermost axes alone stays small)
        axes_of = [d for d in range(len(shape)) if shape[d] == 1]
        coded = {name: v if type(v) is not np.ndarray else v.reshape(-1)[0] if v.size == 1 else
                 _leading_ones_dropped(v.reshape([v.shape[d] for d in order])) if v.size == max(v.shape) else
                 np.transpose(v, [*order, *axes_of]).reshape([v.shape[d] for d in order])
                 for name, v in coded.items()}
        st = chunk_strategy(StrategyArrays.of(self.base, 1), coded, gpus, self.base.expert_tp is None,
                            encode("precision", self.base.precision))
        w = TrainingArrays.of(self.workload)
        # every rule of `training_checks`, kept on the point for the estimator's own check (`shape_rules`)
        verdict = shape_rules(m, st, w, gpus)[0]
        keys = None if self.cache is None else layout_keys(self.axes, start, stop)

        def flat(x: Any) -> np.ndarray:  # one value per point, in index order
            return np.broadcast_to(x, inner).transpose(back).ravel()

        memo = nullcontext() if self.memo is None else memoized(self.memo)
        if keys is None or self.cache is None:
            with np.errstate(all="ignore"), memo:  # invalid points (masked below) may divide by zero
                r = estimate_training(m, st, w, self.system)
            # the feasible points (the estimator's feasibility holds the shape rules' verdict: `feasibility.check`
            # takes this one) and their values in the estimate's (transposed) order, not put back in index order:
            # the best are found there and only their indices computed (`_inner_indices`); the same points, values
            # and order as a block of values with inf at the infeasible points, without that block (`_best_of`)
            at = np.flatnonzero(np.broadcast_to(np.asarray(r.feasible, bool), inner))
            objective = r.step_time_s if self.objective is Objective.TIME else r.memory_hbm.total
            values = (objective.reshape(-1)[at] if type(objective) is np.ndarray and objective.shape == inner
                      else np.broadcast_to(objective, inner)[np.unravel_index(at, inner)] if inner
                      else np.broadcast_to(objective, (1,))[at])
            keep, best = _best_of(at, values, self.top_k, None,
                                  lambda positions: _inner_indices(positions, start, shape, order))
            # the valid points counted on the verdict's own shape, times the points each of its values stands for
            valid_points = int(np.count_nonzero(verdict)) * (math.prod(inner) // int(np.size(verdict)))
            return ChunkResult(start, stop, valid_points, len(at),
                               _inner_indices(keep, start, shape, order), best)
        else:
            def estimated() -> Parts:  # with capacities that hold anything: the feasibility apart from memory
                with np.errstate(all="ignore"), memo:
                    r = estimate_training(m, st, w, unbounded(self.system))
                return (flat(r.step_time_s), flat(r.memory_hbm.total), flat(r.memory_tier2.total),
                        flat(np.asarray(r.feasible, bool)))

            valid = np.broadcast_to(verdict, inner)
            step, hbm, tier2, fits = self.cache.parts(keys, estimated)
            hbm_fits, tier2_fits = memory_fits(self.system, hbm, tier2)  # the estimator's own memory check
            feasible = flat(valid) & fits & np.asarray(hbm_fits, bool) & np.asarray(tier2_fits, bool)
            value = np.where(feasible, step if self.objective is Objective.TIME else hbm, np.inf)
        index = np.arange(start, stop, dtype=np.int64)
        keep = _best(index, value, self.top_k)
        return ChunkResult(start, stop, int(np.count_nonzero(valid)), int(np.count_nonzero(feasible)), index[keep],
                           value[keep])


def _leading_ones_dropped(v: np.ndarray) -> np.ndarray:
    """`v` without its leading dimensions of length 1 (numpy aligns shapes on their last dimensions, so `v`
    broadcasts to the same shapes, with the same values, as with them)."""
    shape = v.shape
    k = 0
    while k < len(shape) - 1 and shape[k] == 1:
        k += 1
    return v.reshape(shape[k:]) if k else v


@dataclass(frozen=True)
class ChunkResult:
    start: int
    stop: int
    evaluated: int  # structurally valid points run through the estimator
    feasible: int
    index: np.ndarray  # the chunk's best points
    value: np.ndarray

    @property
    def points(self) -> int:
        return self.stop - self.start


def _best(index: np.ndarray | None, value: np.ndarray, k: int,
          index_of: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Positions of the k best distinct finite values, ordered by (value, index). Points with equal values
    differ only in axes that change nothing (an overlap flag with nothing to hide, a rank order without
    a group it moves): the first of them stands for all. The points' indices are `index`, or, with `index`
    None, `index_of(positions)`, asked only for the few candidates."""
    finite = np.flatnonzero(np.isfinite(value))
    return _best_of(finite, value[finite], k, index, index_of)[0]  # (the finite values gathered once)


FEW_BEST = 16  # `_best_of` finds up to this many best values by passes, more by partitions


def _best_of(positions: np.ndarray, values: np.ndarray, k: int, index: np.ndarray | None,
             index_of: Callable[[np.ndarray], np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """`_best` of the points at `positions` (ascending) with `values`, the rest left out: (the positions of the
    k best, their values); the values that are not finite left out here."""
    finite = np.isfinite(values)
    if not finite.all():
        positions, values = positions[finite], values[finite]
    # only the points with the k smallest distinct values are sorted (ties are common: the first of them stands for
    # all), those up to the k-th smallest distinct value (or the largest, where fewer): the answer depends on that
    # value alone, not on how it is found
    if len(values) > k and k <= FEW_BEST:
        # a few: found one after another, each the least of the (finite) values above the one before, a pass or two
        # each (numpy's partition of a block's values costs about as much as forty)
        threshold = values.min()
        for _ in range(k - 1):
            above = values.min(where=values > threshold, initial=np.inf)
            if above == np.inf:  # no value above: fewer than k distinct values
                break
            threshold = above
        kept = values <= threshold
        positions, values = positions[kept], values[kept]
    elif len(values) > k:
        # more: those up to the k-th distinct value of the m smallest, for the least m of k, 4k, 16k, ... whose m
        # smallest hold k distinct values. The m smallest come from partitions of the values not yet among the
        # smallest (one pass over the rest for each m tried), so a block costs about a pass over its values per m,
        # not a sort of its points
        part, m, lo = values.copy(), k, 0
        while True:
            if m < len(part):
                part[lo:].partition(m - 1 - lo)  # (in place: part[:m] now holds the m smallest)
            head = np.sort(part[:m])
            distinct = head[np.flatnonzero(np.concatenate(([True], head[1:] != head[:-1])))]
            if len(distinct) >= k or m >= len(part):
                kept = values <= distinct[min(k, len(distinct)) - 1]
                positions, values = positions[kept], values[kept]
                break
            lo, m = m, 4 * m
    at = index[positions] if index is not None else index_of(positions)  # type: ignore[misc]
    by = np.lexsort((at, values))
    order, ordered = positions[by], values[by]
    first = np.ones(len(order), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return order[first][:k], ordered[first][:k]


def _inner_indices(at: np.ndarray, start: int, shape: tuple[int, ...], order: list[int]) -> np.ndarray:
    """The point indices of positions `at` of a block's values in the estimate's order (`Problem.evaluate`:
    the block's axes that vary, reordered by `order`, C order): start + the position's coordinates on those
    axes times their strides in the block's own C order."""
    if not order:  # a block of one point
        return np.full(len(at), start, dtype=np.int64)
    # (the block's axes of one value have stride 1 x ... in C order: the others' strides are those of the block
    # without them, so the coordinates on the axes that vary, in the block's order, ravel to the offset)
    coordinates = dict(zip(order, np.unravel_index(at, tuple(shape[d] for d in order)), strict=True))
    varying = sorted(order)
    return np.ravel_multi_index(tuple(coordinates[d] for d in varying), tuple(shape[d] for d in varying)) + start


@dataclass(frozen=True, repr=False)
class Candidate(Displayed):
    rank: int
    index: int
    strategy: Strategy
    dp: int  # data-parallel degree: the devices over tp x cp x pp
    step_time_s: float
    tokens_per_s: float
    mfu: float
    memory_bytes: float
    error_band: ErrorBand | None = None  # from validation residuals (set by armillary.api for the top)

    def headline(self) -> Headline:
        s = self.strategy
        return [("rank", str(self.rank)), ("layout", f"tp {s.tp} pp {s.pp} dp {self.dp} cp {s.cp} ep {s.ep}"),
                ("step_time", seconds(self.step_time_s)), ("mfu", percent(self.mfu)),
                ("memory", gib(self.memory_bytes))]


@dataclass(frozen=True, repr=False)
class SearchResult(Displayed):
    top: tuple[Candidate, ...]
    points: int  # size of the space (the product of the axes)
    evaluated: int  # structurally valid points, run through the estimator
    pruned: int  # not evaluated: degrees that do not divide or memory floor over HBM, and `bounded`
    bounded: int  # of those, points of blocks skipped because their lower bound exceeded the k-th best
    feasible: int
    elapsed_s: float

    @property
    def points_per_s(self) -> float:
        return self.points / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def headline(self) -> Headline:
        best = self.top[0] if self.top else None
        return [("points", number(self.points)), ("evaluated", number(self.evaluated)),
                ("feasible", number(self.feasible)),
                ("best", f"{seconds(best.step_time_s)} (tp {best.strategy.tp} pp {best.strategy.pp})" if best
                 else "nothing fits")]


# Blocks run in waves of this many; the lower bound is checked between waves, so what is skipped (and the
# answer) does not depend on the executor or the number of workers.
WAVE = 16
MAX_TOP = 100_000  # the running top-k is held in memory and re-estimated one by one at the end
def layout_bounds(problem: Problem) -> np.ndarray:
    """Per layout of the space (the first axis), a lower bound of the objective at any of its points:
    `time_floor` or `memory_floor`."""
    rows = np.array(problem.axes.labels[0], dtype=float).reshape(-1, 4)
    tp, pp, cp, vpp = rows.T
    gpus = problem.system.devices
    if problem.objective is Objective.TIME:
        return np.broadcast_to(time_floor(problem.model, problem.system, problem.workload, problem.space, pp, vpp,
                                          gpus // (tp * pp * cp), problem.base), tp.shape)
    return np.broadcast_to(memory_floor(problem.model, problem.base, problem.space, tp, pp, cp, gpus,
                                        problem.workload), tp.shape)


def search(model: Model, system: System, workload: Training, base: Strategy | None = None,
           space: StrategySpace | None = None, objective: Objective = Objective.TIME, top_k: int = 10,
           chunk: int = 262144, executor: Executor = serial,
           progress: Callable[[int, int], None] | None = None,
           checkpoint: Path | None = None, cache: LayoutCache | None = None) -> SearchResult:
    """The top_k strategies of `space` (default: everything valid) for `model` on `system` (all its
    devices) and `workload`; fields outside the space come from `base`.

    Blocks run in order of a lower bound of the objective over their layouts (`layout_bounds`); once the
    top_k are full, blocks whose bound exceeds the k-th best are skipped (exact: none of their points
    could enter). `progress(points_done, points)` is called as blocks finish or are skipped. With
    `checkpoint`, every finished block is appended to that file and a rerun of the same search skips the
    blocks it holds (resume after an interruption; the answer is the same). A `cache` (serial executor only)
    is shared with searches of the same model, workload, base and space on systems that differ only in
    their memory capacities: each block is estimated once for all of them (`LayoutCache`)."""
    whole("top_k (the number of strategies to keep)", top_k, 1, MAX_TOP)
    base = base or Strategy()
    space = space or StrategySpace()
    axes = resolve_axes(space, model, system.devices, system.devices_per_node, base, system.device.hbm.capacity,
                        system.device.flash3_attention_efficiency is not None, workload)
    if cache is not None:
        cache.bind((model, unbounded(system), workload, base, space))
    problem = Problem(model, system, base, workload, space, axes, objective, top_k,
                      cache if executor is serial else None, uuid.uuid4().hex)
    started = time.perf_counter()
    done = _resume(checkpoint, problem, chunk) if checkpoint is not None else []
    finished = {(p.start, p.stop) for p in done}
    todo = (block for block in _ordered_blocks(axes, layout_bounds(problem), chunk)
            if (block[1], block[2]) not in finished)
    best = _Best(top_k)
    skipped = 0

    def waves() -> Iterator[list[tuple[int, int]]]:
        nonlocal skipped
        while batch := list(itertools.islice(todo, WAVE)):
            wave = [(a, b) for bound, a, b in batch if not bound > best.kth]
            skipped += sum(b - a for bound, a, b in batch if bound > best.kth)
            if progress is not None:
                progress(best.points + skipped, axes.size)
            if wave:
                yield wave

    # unbuffered appends, one write per block: lines of concurrent runs on one file never interleave
    log = checkpoint.open("ab", buffering=0) if checkpoint is not None else None
    try:
        for part in itertools.chain(done, executor(problem.evaluate, waves())):  # memory: chunk size + k
            if log is not None and (part.start, part.stop) not in finished:
                log.write((json.dumps({"start": part.start, "stop": part.stop, "evaluated": part.evaluated,
                                       "feasible": part.feasible, "index": part.index.tolist(),
                                       "value": part.value.tolist()}) + "\n").encode())
            best.merge(part)
            if progress is not None:
                progress(best.points + skipped, axes.size)
    finally:
        forget()  # the blocks' shared collectives (comm.compose.memoized)
        if log is not None:
            log.close()
    elapsed = time.perf_counter() - started
    top = tuple(_candidate(rank, int(i), problem) for rank, i in enumerate(best.index))
    points = axes.size + axes.pruned
    return SearchResult(top, points, best.evaluated, points - best.evaluated, skipped, best.feasible, elapsed)


def _ordered_blocks(axes: Axes, bounds: np.ndarray, chunk: int) -> Iterator[tuple[float, int, int]]:
    """The blocks of the space as (lower bound, start, stop), lowest bound first (ties in index order).
    Blocks within one layout are generated layout by layout in the order of their bounds, so memory does
    not grow with the space; blocks that span several layouts (few points per layout) are sorted."""
    layouts = len(axes.labels[0])
    per_layout = axes.size // max(layouts, 1)
    if axes.split_axis(chunk)[0] > 0:  # the split axis is inside a layout
        for layout in np.argsort(bounds, kind="stable").tolist():
            for a, b in axes.blocks(chunk, layout * per_layout, (layout + 1) * per_layout):
                yield float(bounds[layout]), a, b
        return
    yield from sorted((float(bounds[a // per_layout:(b - 1) // per_layout + 1].min()), a, b)
                      for a, b in axes.blocks(chunk))


class _Best:
    """The running top-k of a search and its counts."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.index, self.value = np.zeros(0, np.int64), np.zeros(0)
        self.points = self.evaluated = self.feasible = 0

    @property
    def kth(self) -> float:
        """The value a point must beat to enter (inf until k points are held)."""
        return float(self.value[-1]) if len(self.value) == self.k else np.inf

    def merge(self, part: ChunkResult) -> None:
        index, value = np.concatenate((self.index, part.index)), np.concatenate((self.value, part.value))
        keep = _best(index, value, self.k)
        self.index, self.value = index[keep], value[keep]
        self.points += part.points
        self.evaluated += part.evaluated
        self.feasible += part.feasible


def _signature(problem: Problem, chunk: int) -> str:
    """What makes two searches the same (a checkpoint may only resume its own search)."""
    parts = [problem.model.model_dump_json(), problem.system.model_dump_json(), problem.base.model_dump_json(),
             problem.workload.model_dump_json(), repr(problem.axes.labels), problem.objective.value,
             str(problem.top_k), str(chunk)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _resume(path: Path, problem: Problem, chunk: int) -> list[ChunkResult]:
    """The blocks a checkpoint holds; a new checkpoint starts with the search's signature."""
    signature = _signature(problem, chunk)
    if not path.exists() or path.stat().st_size == 0:
        with replaced(path) as temporary:
            temporary.write_text(json.dumps({"search": signature}) + "\n")
        return []
    text = path.read_text()
    lines = text.splitlines()
    if not text.endswith("\n"):  # the last block was cut mid-line: drop it, it runs again
        lines = lines[:-1]
        with replaced(path) as temporary:
            temporary.write_text("".join(line + "\n" for line in lines))
    try:
        header = json.loads(lines[0])
    except (json.JSONDecodeError, IndexError):
        raise SpecError(f"checkpoint {path}: not a search checkpoint") from None
    if header.get("search") != signature:
        raise SpecError(f"checkpoint {path} belongs to another search (model, system, space or options differ)")
    done: dict[tuple[int, int], ChunkResult] = {}  # one per block: concurrent runs may both have logged it
    for line in lines[1:]:
        try:
            d = json.loads(line)
            part = ChunkResult(int(d["start"]), int(d["stop"]), int(d["evaluated"]), int(d["feasible"]),
                               np.array(d["index"], np.int64), np.array(d["value"], float))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):  # a cut or foreign line: the block reruns
            continue
        done.setdefault((part.start, part.stop), part)
    return list(done.values())


def _candidate(rank: int, index: int, problem: Problem) -> Candidate:
    """Re-estimate one winner as a single configuration (its full, explained result)."""
    strategy = point_strategy(problem.base, problem.axes.point(index))
    r = estimate_training_run(problem.model, problem.system, strategy, problem.workload)
    return Candidate(rank, index, strategy, data_parallel(strategy, problem.system), float(r.step_time_s),
                     float(r.tokens_per_s), float(r.mfu), float(r.memory_hbm.total))


def candidate_row(c: Candidate) -> dict[str, Any]:
    s = c.strategy
    return {"rank": c.rank, "tp": s.tp, "pp": s.pp, "dp": c.dp, "cp": s.cp, "vpp": s.vpp, "ep": s.ep,
            "micro_batch": s.micro_batch, "attention": s.attention.value,
            "sequence_parallel": s.sequence_parallel, "recompute": s.recompute.value,
            "recompute_layers": s.recompute_layers, "zero": int(s.zero),
            "overlap": s.overlap.model_dump(), "offload": ", ".join(offloaded(s)),
            "rank_order": s.rank_order.value, "block_format": s.block_format.value, "step_time_s": c.step_time_s,
            "tokens_per_s": c.tokens_per_s, "mfu": c.mfu, "memory_gib": c.memory_bytes / 2**30,
            "error_band": None if c.error_band is None else {"relative": c.error_band.relative,
                                                             "regime": c.error_band.regime,
                                                             "poorly_validated": c.error_band.poorly_validated}}


def offloaded(s: Strategy) -> list[str]:
    """What a strategy keeps off the device (`Strategy.offload`), in words: weights, experts, gradients,
    optimizer, activations (with the layers of each chunk where only the first N are)."""
    o = s.offload
    layers = f" (first {o.activation_layers} layers)" if o.activation_layers is not None else ""
    return [name for on, name in ((o.weights, "weights"), (o.experts and not o.weights, "experts"),
                                  (o.gradients, "gradients"), (o.optimizer, "optimizer"),
                                  (o.activations, f"activations{layers}")) if on]
