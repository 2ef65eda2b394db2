"""Simulate one training iteration: build its task graph from the estimate, run it, explain the result."""

from __future__ import annotations

import dataclasses
import itertools
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from armillary.display import Displayed, Headline, number, seconds
from armillary.errors import SpecError
from armillary.estimate.result import StepEstimate
from armillary.estimate.run import estimate_training_run
from armillary.plan import rules
from armillary.simulate.engine import paused_gc, run
from armillary.simulate.graph import Category, TaskGraph
from armillary.simulate.routing import routes, untapered
from armillary.simulate.timeline import Timeline
from armillary.simulate.training import training_graph
from armillary.specs.loading import load_strategy
from armillary.specs.model import Model
from armillary.specs.strategy import Schedule, Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training


@dataclass(frozen=True)
class CategoryTimes:
    """Seconds per kind of work (a field per `Category`)."""

    compute: float = 0.0
    recompute: float = 0.0
    tp: float = 0.0
    cp: float = 0.0
    ep: float = 0.0
    pp: float = 0.0
    dp: float = 0.0
    optimizer: float = 0.0
    offload: float = 0.0


@dataclass(frozen=True, repr=False)
class SimulationResult(Displayed):
    graph: TaskGraph
    timeline: Timeline
    estimate: StepEstimate  # the analytical estimate of the same configuration
    schedule: Schedule
    critical_path: tuple[int, ...]  # task indices, first to last
    on_critical_path: CategoryTimes  # time of the critical path by kind of work (sums to the step time)
    busiest_rank: int
    busiest_compute_s: float  # compute and recompute of the busiest rank
    wall_s: float  # time the simulation took (estimate, graph and run)
    engine_s: float  # of which the event engine (from the graph to the timeline)

    @property
    def step_time_s(self) -> float:
        return self.timeline.makespan_ns / 1e9

    @property
    def difference(self) -> float:
        """Relative difference to the analytical step time."""
        return self.step_time_s / float(self.estimate.step_time_s) - 1

    def headline(self) -> Headline:
        return [("step_time", seconds(self.step_time_s)),
                ("analytical", f"{seconds(self.estimate.step_time_s)} ({self.difference:+.1%})"),
                ("tasks", number(len(self.graph.tasks))), ("wall", seconds(self.wall_s))]


# memory of one task in a graph and its run (the task, its dependency tuples, the engine's arrays), measured
# on Llama 3 405B at 1,024 GPUs without symmetry (328,416 tasks, about 375 MB peak)
BYTES_PER_TASK = 1200
MEMORY_LIMIT_BYTES = 8 * 2**30


def _check_memory(tasks: int) -> None:
    """Refuse before building a graph that would not fit the memory limit, with the estimate made."""
    need = tasks * BYTES_PER_TASK
    if need > MEMORY_LIMIT_BYTES:
        raise SpecError(f"simulate: every rank would take about {tasks:,} tasks and {need / 2**30:.1f} GiB "
                        f"(limit {MEMORY_LIMIT_BYTES / 2**30:.0f} GiB); simulate symmetrically (one rank per "
                        "stage) or fewer GPUs")


def simulate_training(model: Model, system: System, strategy: Strategy, workload: Training,
                      schedule: Schedule | None = None, symmetric: bool = True,
                      stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
                      seed: int = 0) -> SimulationResult:
    """One iteration as a task graph on the event engine. `schedule` replaces the strategy's (in the
    analytical estimate too); `stragglers`: compute slowdown per simulated rank; `jitter`: relative standard
    deviation of every task's duration, drawn from `seed`."""
    started = time.perf_counter()
    if not rules.model_parallel_divides(strategy.tp, strategy.cp, strategy.pp, system.devices).ok:
        raise SpecError(f"simulate: tp x cp x pp = {strategy.tp * strategy.cp * strategy.pp} does not divide the "
                        f"{system.devices} devices")
    if schedule is not None and schedule is not strategy.pipeline_schedule:  # the estimate runs it too
        strategy = load_strategy({**strategy.model_dump(mode="json", exclude_none=True), "schedule": schedule.value})
    est = estimate_training_run(model, system, strategy, workload)
    chosen = strategy.pipeline_schedule
    with paused_gc():
        graph = training_graph(model, system, strategy, workload, est, chosen, True)
        if not symmetric:
            _check_memory(len(graph.tasks) * graph.devices // graph.ranks)  # each stage's rank stands for its peers
            graph = _every_rank(model, system, strategy, workload, est)
    engine_started = time.perf_counter()
    timeline = run(graph, stragglers, jitter, seed)
    engine_s = time.perf_counter() - engine_started
    path = timeline.critical_path()
    per_category = dict.fromkeys(Category, 0.0)
    for i in path:
        per_category[graph.tasks[i].category] += (timeline.end_ns[i] - timeline.start_ns[i]) / 1e9
    n = len(graph.tasks)
    computing = np.fromiter(map({Category.COMPUTE, Category.RECOMPUTE}.__contains__,
                                map(operator.itemgetter(2), graph.tasks)), dtype=bool, count=n)  # Task.category
    rank = np.fromiter(map(operator.itemgetter(0), map(operator.itemgetter(3), itertools.compress(
        graph.tasks, computing.tolist()))), dtype=np.int64)  # Task.ranks[0] of the compute tasks
    busy = np.bincount(rank, weights=timeline.duration_ns[computing] / 1e9, minlength=graph.ranks)
    busiest = int(np.argmax(busy))
    return SimulationResult(graph, timeline, est, chosen, path,
                            CategoryTimes(**{c.value: t for c, t in per_category.items()}), busiest,
                            float(busy[busiest]), time.perf_counter() - started, engine_s)


def _every_rank(model: Model, system: System, strategy: Strategy, workload: Training,
                est: StepEstimate) -> TaskGraph:
    """Every rank's graph. On a system with tapered switch tiers its transfers are costed as if the uplinks
    were not tapered and routed over them instead (`routing.py`): they slow down only as much as the
    traffic that really crosses them at the same time."""
    flat = untapered(system)
    if flat is system:
        return training_graph(model, system, strategy, workload, est, strategy.pipeline_schedule, False)
    flat_est = estimate_training_run(model, flat, strategy, workload)
    graph = training_graph(model, flat, strategy, workload, flat_est, strategy.pipeline_schedule, False)
    return dataclasses.replace(graph, routes=routes(graph.tasks, system))


def every_rank_graph(model: Model, system: System, strategy: Strategy, workload: Training,
                     result: SimulationResult) -> TaskGraph:
    """`result`'s task graph with every rank in it (as `symmetric=False` builds it), its collectives over
    their real groups: what a Chakra export for ASTRA-sim needs. The graph itself when it already has them."""
    if all(w == 1 for w in result.graph.rank_weights):
        return result.graph
    if result.schedule is not strategy.pipeline_schedule:
        strategy = load_strategy({**strategy.model_dump(mode="json", exclude_none=True),
                                  "schedule": result.schedule.value})
    _check_memory(len(result.graph.tasks) * result.graph.devices // result.graph.ranks)
    with paused_gc():
        return _every_rank(model, system, strategy, workload, result.estimate)
