"""Simulate one training iteration: build its task graph from the estimate, run it, explain the result."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from armillary.arguments import whole
from armillary.display import Displayed, Headline, number, seconds
from armillary.errors import SpecError
from armillary.estimate.result import StepEstimate
from armillary.estimate.run import estimate_training_run
from armillary.plan import rules
from armillary.plan.layout import data_parallel
from armillary.simulate.classes import rank_classes
from armillary.simulate.engine import paused_gc, run
from armillary.simulate.graph import Category, Stream, TaskGraph, TaskKind
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
        return self.timeline.makespan_s

    @property
    def difference(self) -> float:
        """Relative difference to the analytical step time."""
        return self.step_time_s / float(self.estimate.step_time_s) - 1

    def headline(self) -> Headline:
        return [("step_time", seconds(self.step_time_s)),
                ("analytical", f"{seconds(self.estimate.step_time_s)} ({self.difference:+.1%})"),
                ("tasks", number(len(self.graph.tasks))), ("wall", seconds(self.wall_s))]


# memory of the every-rank graph and its run, per task and per rank a task names (the graph's columns,
# about 90 B a task, `graph.Columns`; the engine's arrays; shared links), fitted on the peak RSS of Llama 3.1
# 405B every-rank runs: 302 B a task at 1,024 GPUs, 338 B at 16,384 with routed uplinks (docs/simulation.md)
BYTES_PER_TASK = 300
BYTES_PER_RANK_ENTRY = 16
# beyond this many tasks the every-rank graph takes minutes to build and run (about 45,000 tasks a second on
# a 2-core machine: 5.2 million in 117 s), where the class graph gives every rank the same timeline in seconds
MAX_TASKS = 10_000_000
MEMORY_LIMIT_BYTES = 8 * 2**30


@dataclass(frozen=True)
class GraphSize:
    """How big the every-rank graph of a symmetric graph is: tasks, and ranks named by them."""

    tasks: int
    rank_entries: int

    @property
    def bytes(self) -> int:
        return self.tasks * BYTES_PER_TASK + self.rank_entries * BYTES_PER_RANK_ENTRY


def every_rank_size(symmetric: TaskGraph, strategy: Strategy) -> GraphSize:
    """The size of the every-rank graph that `symmetric` (one rank per stage) stands for, counted exactly as
    `training.layout` expands it: a compute task, copy or send once per lane of its stage (tp x cp x dp), a
    collective once per group (dp TP x CP groups; tp DP groups), each naming every lane once."""
    lanes = symmetric.devices // symmetric.ranks
    groups = {False: lanes // (strategy.tp * strategy.cp), True: strategy.tp}  # per stage: TP x CP groups, DP
    cols = symmetric.columns
    kind = cols.array("kind")
    dp_stream = np.isin(cols.array("stream"), [Stream.DP, Stream.DP_GATHER])
    collective = kind == TaskKind.COLLECTIVE
    per_lane = int((~collective).sum())
    tasks = per_lane * lanes + int((collective & ~dp_stream).sum()) * groups[False] + int(
        (collective & dp_stream).sum()) * groups[True]
    sends = int((kind == TaskKind.SEND).sum())
    return GraphSize(tasks, (per_lane + sends + int(collective.sum())) * lanes)


def _check_memory(size: GraphSize, strategy: Strategy, workload: Training) -> None:
    """Refuse before building an every-rank graph beyond the memory limit or `MAX_TASKS`, saying what would
    fit."""
    need = size.bytes
    if need > MEMORY_LIMIT_BYTES or size.tasks > MAX_TASKS:
        share = min(MEMORY_LIMIT_BYTES / need, MAX_TASKS / size.tasks)
        raise SpecError(f"simulate: every rank would take about {size.tasks:,} tasks and {need / 2**30:.1f} GiB "
                        f"(limits {MEMORY_LIMIT_BYTES / 2**30:.0f} GiB and {MAX_TASKS:,} tasks; tasks grow with the "
                        f"micro-batches: a global batch of about {int(workload.global_batch * share):,} would fit); "
                        "let equivalent ranks share a simulation (classes=True: exact, without jitter), simulate "
                        "symmetrically (one rank per stage) or on fewer GPUs")


def simulate_training(model: Model, system: System, strategy: Strategy, workload: Training,
                      schedule: Schedule | None = None, symmetric: bool = True,
                      stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
                      seed: int = 0, classes: bool = False) -> SimulationResult:
    """One iteration as a task graph on the event engine. `schedule` replaces the strategy's (in the
    analytical estimate too); `stragglers`: compute slowdown per simulated rank (per device without
    symmetry); `jitter`: relative standard deviation of every task's duration, drawn from `seed`. Without
    `symmetric`, every rank is simulated; with `classes` too, ranks with the same program and the same
    contention share one simulation (`classes.py`: exact; jitter, drawn per task, needs every rank)."""
    started = time.perf_counter()
    if not rules.model_parallel_divides(strategy.tp, strategy.cp, strategy.pp, system.devices).ok:
        raise SpecError(f"simulate: tp x cp x pp = {strategy.tp * strategy.cp * strategy.pp} does not divide the "
                        f"{system.devices} devices")
    if not isinstance(classes, bool):
        raise SpecError(f"classes: expected True or False, got {classes!r}")
    if classes and symmetric:
        raise SpecError("classes: rank classes simulate every rank (one per class); set symmetric=False with it")
    if schedule is not None and schedule is not strategy.pipeline_schedule:  # the estimate runs it too
        strategy = load_strategy({**strategy.model_dump(mode="json", exclude_none=True), "schedule": schedule.value})
    est = estimate_training_run(model, system, strategy, workload)
    chosen = strategy.pipeline_schedule
    with paused_gc():
        graph = training_graph(model, system, strategy, workload, est, chosen, True)
        if not symmetric and classes and jitter <= 0:
            graph, stragglers = _by_classes(model, system, strategy, workload, est, graph, stragglers)
        elif not symmetric:
            _check_memory(every_rank_size(graph, strategy), strategy, workload)
            graph = _every_rank(model, system, strategy, workload, est)
    engine_started = time.perf_counter()
    timeline = run(graph, stragglers, jitter, seed)
    engine_s = time.perf_counter() - engine_started
    path = timeline.critical_path()
    per_category = dict.fromkeys(Category, 0.0)
    for i in path:
        per_category[graph.tasks[i].category] += (timeline.end_ns[i] - timeline.start_ns[i]) / 1e9
    cols = graph.columns
    computing = cols.of_category(Category.COMPUTE, Category.RECOMPUTE)
    rank = cols.array("ranks")[cols.array("ranks_first")[:-1][computing]]  # the compute tasks' rank
    busy = np.bincount(rank, weights=timeline.duration_ns[computing] / 1e9, minlength=graph.ranks)
    busiest = int(np.argmax(busy))
    return SimulationResult(graph, timeline, est, chosen, path,
                            CategoryTimes(**{c.value: t for c, t in per_category.items()}), busiest,
                            float(busy[busiest]), time.perf_counter() - started, engine_s)


def _flat(model: Model, system: System, strategy: Strategy, workload: Training,
          est: StepEstimate) -> tuple[System, StepEstimate]:
    """The system whose costs routed transfers take (tapered tiers untapered, `routing.untapered`), and its
    estimate."""
    flat = untapered(system)
    return (system, est) if flat is system else (flat, estimate_training_run(model, flat, strategy, workload))


def _every_rank(model: Model, system: System, strategy: Strategy, workload: Training,
                est: StepEstimate) -> TaskGraph:
    """Every rank's graph. On a system with tapered switch tiers its transfers are costed as if the uplinks
    were not tapered and routed over them instead (`routing.py`): they slow down only as much as the
    traffic that really crosses them at the same time."""
    flat, flat_est = _flat(model, system, strategy, workload, est)
    graph = training_graph(model, flat, strategy, workload, flat_est, strategy.pipeline_schedule, False)
    return graph if flat is system else dataclasses.replace(graph, routes=routes(graph.tasks, system))


def _by_classes(model: Model, system: System, strategy: Strategy, workload: Training, est: StepEstimate,
                symmetric: TaskGraph, stragglers: Mapping[int, float] | None
                ) -> tuple[TaskGraph, dict[int, float] | None]:
    """The graph of one rank per class of equivalent ranks (`classes.py`), routed as `_every_rank` routes,
    and the stragglers (per device) on its ranks."""
    if stragglers is not None and not isinstance(stragglers, Mapping):
        raise SpecError(f"stragglers: expected a mapping of device rank to slowdown factor, got {stragglers!r}")
    for device in stragglers or {}:
        whole(f"straggler rank (the system has devices 0..{system.devices - 1})", device, 0, system.devices - 1)
    found = rank_classes(strategy, data_parallel(strategy, system), system, symmetric, stragglers)
    flat, flat_est = _flat(model, system, strategy, workload, est)
    graph = training_graph(model, flat, strategy, workload, flat_est, strategy.pipeline_schedule, False, found.layout)
    slow = {found.rank_of(d): f for d, f in stragglers.items()} if stragglers else None
    return dataclasses.replace(graph, routes=found.routes(graph)), slow


def every_rank_graph(model: Model, system: System, strategy: Strategy, workload: Training,
                     result: SimulationResult) -> TaskGraph:
    """`result`'s task graph with every rank in it (as `symmetric=False` builds it), its collectives over
    their real groups: what a Chakra export for ASTRA-sim needs. The graph itself when it already has them."""
    if all(w == 1 for w in result.graph.rank_weights):
        return result.graph
    if result.schedule is not strategy.pipeline_schedule:
        strategy = load_strategy({**strategy.model_dump(mode="json", exclude_none=True),
                                  "schedule": result.schedule.value})
    with paused_gc():
        symmetric = training_graph(model, system, strategy, workload, result.estimate, result.schedule, True)
        _check_memory(every_rank_size(symmetric, strategy), strategy, workload)
        return _every_rank(model, system, strategy, workload, result.estimate)
