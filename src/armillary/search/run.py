"""Search a strategy space: chunks of points through the training estimator as arrays, infeasible points
masked, a running top-k. Chunks are independent, so an executor may run them anywhere; the result does not
depend on which one did (ties break by point index)."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from armillary.api import estimate
from armillary.estimate.training import estimate_training
from armillary.search.space import (
    Axes,
    StrategySpace,
    chunk_strategy,
    point_strategy,
    resolve_axes,
    structurally_valid,
)
from armillary.specs.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.specs.loading import SpecError
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training


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
    axes: Axes
    objective: Objective
    top_k: int

    def evaluate(self, start: int, stop: int) -> ChunkResult:
        """One block of points (`Axes.block`): evaluated as an outer product of its trailing axes, so each
        quantity is computed once per combination of the axes it depends on; divisibility and memory
        are masks on the result."""
        m = ModelArrays.of(self.model)
        gpus = self.system.devices
        coded = self.axes.block(start, stop)
        shape = np.broadcast_shapes(*(np.shape(v) for v in coded.values()))
        st = chunk_strategy(StrategyArrays.of(self.base, 1), coded, gpus, self.base.expert_tp is None)
        with np.errstate(all="ignore"):  # invalid points (masked below) may divide by zero
            r = estimate_training(m, st, TrainingArrays.of(self.workload), self.system)
        valid = np.broadcast_to(structurally_valid(coded, m, gpus, self.workload.global_batch), shape).ravel()
        feasible = valid & np.broadcast_to(np.asarray(r.feasible, bool), shape).ravel()
        value = np.broadcast_to(np.asarray(
            r.step_time_s if self.objective is Objective.TIME else r.memory_hbm.total, float), shape).ravel()
        value = np.where(feasible, value, np.inf)
        index = np.arange(start, stop, dtype=np.int64)
        keep = _best(index, value, self.top_k)
        return ChunkResult(start, stop, stop - start, int(valid.sum()), int(feasible.sum()), index[keep], value[keep])


@dataclass(frozen=True)
class ChunkResult:
    start: int
    stop: int
    points: int
    evaluated: int  # structurally valid points run through the estimator
    feasible: int
    index: np.ndarray  # the chunk's best points
    value: np.ndarray


def _best(index: np.ndarray, value: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best finite values, ordered by (value, index)."""
    finite = np.flatnonzero(np.isfinite(value))
    order = np.lexsort((index[finite], value[finite]))
    return finite[order[:k]]


@dataclass(frozen=True)
class Candidate:
    rank: int
    index: int
    strategy: Strategy
    step_time_s: float
    tokens_per_s: float
    mfu: float
    memory_bytes: float


@dataclass(frozen=True)
class SearchResult:
    top: tuple[Candidate, ...]
    points: int  # size of the space (the product of the axes)
    evaluated: int  # structurally valid points, run through the estimator
    pruned: int  # left out because degrees do not divide: whole layouts before indexing, the rest by mask
    feasible: int
    elapsed_s: float

    @property
    def points_per_s(self) -> float:
        return self.points / self.elapsed_s if self.elapsed_s > 0 else float("inf")


Executor = Callable[[Callable[[int, int], ChunkResult], list[tuple[int, int]]], Iterator[ChunkResult]]


def serial(fn: Callable[[int, int], ChunkResult], ranges: list[tuple[int, int]]) -> Iterator[ChunkResult]:
    return (fn(a, b) for a, b in ranges)


def process_pool(workers: int | None = None) -> Executor:
    """Chunks over local processes (results in submission order)."""

    def run(fn: Callable[[int, int], ChunkResult], ranges: list[tuple[int, int]]) -> Iterator[ChunkResult]:
        with ProcessPoolExecutor(workers) as pool:
            yield from pool.map(fn, *zip(*ranges, strict=True)) if ranges else iter(())

    return run


def dask_cluster(address: str = "local", workers: int = 2) -> Executor:
    """Chunks over a Dask cluster: a scheduler address (tcp://host:8786), or "local" for a LocalCluster of
    `workers` processes started for the search and closed after it. Needs the optional `dask` extra."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - depends on the installation
        raise SpecError("the Dask executor needs dask[distributed]: pip install 'armillary[dask]'") from None

    def run(fn: Callable[[int, int], ChunkResult], ranges: list[tuple[int, int]]) -> Iterator[ChunkResult]:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None) if address == "local" else None
        client = Client(cluster if cluster is not None else address)
        try:
            futures = client.map(fn, *zip(*ranges, strict=True), pure=False) if ranges else []
            for future in as_completed(futures):  # any order: the top-k merge does not depend on it
                yield future.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    return run


def search(model: Model, system: System, workload: Training, base: Strategy | None = None,
           space: StrategySpace | None = None, objective: Objective = Objective.TIME, top_k: int = 10,
           chunk: int = 262144, executor: Executor = serial,
           progress: Callable[[Iterable[ChunkResult], int], Iterable[ChunkResult]] | None = None,
           checkpoint: Path | None = None) -> SearchResult:
    """The top_k strategies of `space` (default: everything valid) for `model` on `system` (all its
    devices) and `workload`; fields outside the space come from `base`. With `checkpoint`, every finished
    block is appended to that file and a rerun of the same search skips the blocks it holds (resume after
    an interruption; the answer is the same)."""
    base = base or Strategy()
    axes = resolve_axes(space or StrategySpace(), model, system.devices, system.devices_per_node, base,
                        system.device.hbm.capacity)
    problem = Problem(model, system, base, workload, axes, objective, top_k)
    ranges = axes.blocks(chunk)
    started = time.perf_counter()
    done = _resume(checkpoint, problem, chunk) if checkpoint is not None else []
    finished = {(p.start, p.stop) for p in done}
    results: Iterable[ChunkResult] = executor(problem.evaluate, [r for r in ranges if r not in finished])
    if progress is not None:
        results = progress(results, len(ranges) - len(finished))
    index, value = np.zeros(0, np.int64), np.zeros(0)
    evaluated = feasible = 0
    log = checkpoint.open("a") if checkpoint is not None else None
    try:
        for part in itertools.chain(done, results):  # running top-k: memory bounded by chunk size + k
            if log is not None and (part.start, part.stop) not in finished:
                log.write(json.dumps({"start": part.start, "stop": part.stop, "evaluated": part.evaluated,
                                      "feasible": part.feasible, "index": part.index.tolist(),
                                      "value": part.value.tolist()}) + "\n")
                log.flush()
            index, value = np.concatenate((index, part.index)), np.concatenate((value, part.value))
            keep = _best(index, value, top_k)
            index, value = index[keep], value[keep]
            evaluated += part.evaluated
            feasible += part.feasible
    finally:
        if log is not None:
            log.close()
    elapsed = time.perf_counter() - started
    top = tuple(_candidate(rank, int(i), problem) for rank, i in enumerate(index))
    return SearchResult(top, axes.size + axes.pruned, evaluated, axes.size + axes.pruned - evaluated, feasible,
                        elapsed)


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
        path.write_text(json.dumps({"search": signature}) + "\n")
        return []
    text = path.read_text()
    lines = text.splitlines()
    if not text.endswith("\n"):  # the last block was cut mid-line: drop it, it runs again
        lines = lines[:-1]
        path.write_text("".join(line + "\n" for line in lines))
    try:
        header = json.loads(lines[0])
    except (json.JSONDecodeError, IndexError):
        raise SpecError(f"checkpoint {path}: not a search checkpoint") from None
    if header.get("search") != signature:
        raise SpecError(f"checkpoint {path} belongs to another search (model, system, space or options differ)")
    done = []
    for line in lines[1:]:
        try:
            d = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the interruption: that block runs again
            continue
        done.append(ChunkResult(d["start"], d["stop"], d["stop"] - d["start"], d["evaluated"], d["feasible"],
                                np.array(d["index"], np.int64), np.array(d["value"], float)))
    return done


def _candidate(rank: int, index: int, problem: Problem) -> Candidate:
    """Re-estimate one winner as a single configuration (its full, explained result)."""
    strategy = point_strategy(problem.base, problem.axes.point(index))
    r = estimate(problem.model, problem.system, strategy, problem.workload)
    return Candidate(rank, index, strategy, float(r.step_time_s), float(r.tokens_per_s), float(r.mfu),
                     float(r.memory_hbm.total))


def candidate_row(c: Candidate) -> dict[str, Any]:
    s = c.strategy
    return {"rank": c.rank, "tp": s.tp, "pp": s.pp, "cp": s.cp, "vpp": s.vpp, "micro_batch": s.micro_batch,
            "sequence_parallel": s.sequence_parallel, "recompute": s.recompute.value, "zero": int(s.zero),
            "overlap": s.overlap.model_dump(), "ep": s.ep,
            "rank_order": s.rank_order.value, "step_time_s": c.step_time_s,
            "tokens_per_s": c.tokens_per_s, "mfu": c.mfu, "memory_gib": c.memory_bytes / 2**30}
