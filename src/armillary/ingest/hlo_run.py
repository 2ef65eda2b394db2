"""Simulate an HLO module on a system: parse, cost, build the task graph, run the event engine."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from armillary.errors import SpecError
from armillary.ingest.hlo_cost import UNROLL_LIMIT, ModuleCost, cost_module
from armillary.ingest.hlo_graph import HloGraph, hlo_graph
from armillary.ingest.hlo_parse import HloModule, read_hlo
from armillary.ingest.hlo_work import OpKind
from armillary.simulate.engine import Timeline, run
from armillary.simulate.graph import TaskGraph
from armillary.specs.system import System


@dataclass(frozen=True)
class KindTime:
    kind: OpKind
    count: int  # executions in one step (loop iterations counted)
    busy_s: float  # summed task durations of one simulated rank
    critical_s: float  # time on the critical path
    flop: float
    bytes: float


@dataclass(frozen=True)
class HloSimulation:
    cost: ModuleCost
    graph: TaskGraph
    timeline: Timeline
    kinds: tuple[KindTime, ...]
    wall_s: float

    @property
    def step_time_s(self) -> float:
        return self.timeline.makespan_s

    @property
    def compute_s(self) -> float:
        return sum(k.busy_s for k in self.kinds if not k.kind.communicates)

    @property
    def communication_s(self) -> float:
        return sum(k.busy_s for k in self.kinds if k.kind.communicates)


def simulate_hlo(module: HloModule | Path | str, system: System, replicas: int = 1,
                 unroll_limit: float = UNROLL_LIMIT) -> HloSimulation:
    """One execution of the module's entry computation on `system` (sized to the module's devices); loops of
    more than `unroll_limit` instructions unrolled are simulated symbolically (`hlo_graph`)."""
    started = time.perf_counter()
    mod = module if isinstance(module, HloModule) else read_hlo(module)
    devices = mod.num_partitions * mod.replica_count
    if system.devices < devices:
        raise SpecError(f"the module runs on {devices} devices but system {system.name!r} has {system.devices}")
    sized = system.with_devices(devices) if system.devices != devices else system
    cost = cost_module(mod, sized)
    built = hlo_graph(cost, replicas, unroll_limit)
    timeline = run(built.graph)
    kinds = _per_kind(cost, built, timeline)
    return HloSimulation(cost, built.graph, timeline, kinds, time.perf_counter() - started)


def _per_kind(cost: ModuleCost, built: HloGraph, timeline: Timeline) -> tuple[KindTime, ...]:
    """Busy and critical-path seconds per op kind; a symbolic loop's repeated block counts the busy seconds
    of the iterations it stands for, and splits its critical time over their kinds in the same shares."""
    def shares(i: int, seconds: float) -> tuple[tuple[OpKind, float], ...]:
        parts = built.repeats.get(i)
        if parts is None:
            return ((built.kinds[i], seconds),)
        total = sum(s for _, s in parts)
        return tuple((k, seconds * s / total) for k, s in parts) if total > 0 else ((built.kinds[i], seconds),)

    busy: dict[OpKind, float] = {}
    for i, task in enumerate(built.graph.tasks):
        if task.ranks[0] == 0:  # a repeated block: the busy time of the iterations it stands for
            for kind, seconds in built.repeats.get(i, ((built.kinds[i], task.duration_ns / 1e9),)):
                busy[kind] = busy.get(kind, 0.0) + seconds
    critical: dict[OpKind, float] = {}
    for i in timeline.critical_path():
        for kind, seconds in shares(int(i), (timeline.end_ns[i] - timeline.start_ns[i]) / 1e9):
            critical[kind] = critical.get(kind, 0.0) + seconds
    return tuple(KindTime(k, t.count, busy.get(k, 0.0), float(critical.get(k, 0.0)), t.flop, t.bytes)
                 for k, t in cost.by_kind.items())
