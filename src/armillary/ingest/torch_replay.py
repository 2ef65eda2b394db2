"""Replay measured torch.profiler traces on a system: compute as measured, communication re-costed.

Each rank's step becomes a chain of compute segments on the compute stream, cut where it issues a
collective and where it waits for one (an idle gap of the main thread that ends as one of its collectives
finishes). Collectives join all ranks, free to overlap each other as the backend's worker threads run them,
each costed by the comm layer on the
target network (`comm/collectives.py`); a segment after a wait depends on the collective it waited for.
Compute keeps its measured time (host overheads included), so a faster network changes only the
communication, and what of it was exposed.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from armillary.comm.calibration import fitted_dimension
from armillary.cost.compute import kernel_times
from armillary.errors import SpecError
from armillary.ingest.hlo_cost import comm_seconds
from armillary.ingest.torch_trace import RankTrace, TorchTraces
from armillary.plan.codes import PRECISION
from armillary.simulate.engine import Timeline, run
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective
from armillary.specs.strategy import TrainingPrecision
from armillary.specs.system import System
from armillary.workload.ops import Op

WAIT_US = 500.0  # an idle gap of the main thread at least this long, ending as a collective ends, is a wait


@dataclass(frozen=True)
class Replay:
    traces: TorchTraces
    system: System
    graph: TaskGraph
    timeline: Timeline
    compute_s: float  # rank 0's measured compute (sum of its segments)
    communication_s: float  # rank 0's collectives as re-costed

    @property
    def step_time_s(self) -> float:
        return self.timeline.makespan_s

    @property
    def measured_step_s(self) -> float:
        return self.traces.measured_step_s


def replay(traces: TorchTraces, system: System, source: System | None = None) -> Replay:
    """The traced step on `system`. Compute keeps its measured time; with `source` (the system the trace
    was recorded on), each recorded GEMM's time is scaled by the device model's ratio of its time on the
    two devices (`cost/compute.kernel_times`), the rest kept as measured."""
    world = len(traces.ranks)
    counts = {len(r.collectives) for r in traces.ranks}
    if len(counts) != 1:
        raise SpecError(f"--torch-trace: the ranks ran different numbers of collectives ({sorted(counts)})")
    if system.devices < world:
        raise SpecError(f"--torch-trace: {world} ranks but system {system.name!r} has {system.devices} devices")
    sized = system.with_devices(world) if system.devices != world else system
    plans = [_rescaled(_segments(r), r, source, sized) for r in traces.ranks]
    b = GraphBuilder()
    last: list[int | None] = [None] * world
    done: list[int] = []
    position = [0] * world
    collectives = traces.ranks[0].collectives
    everyone = tuple(range(world))
    costed: dict[tuple[Collective, float], tuple[float, int]] = {}  # one costing per op and size
    for k in range(len(collectives) + 1):
        for r, plan in enumerate(plans):  # each rank's segments up to its k-th issue (or its end)
            while position[r] < len(plan) and plan[position[r]][2] <= k:
                seconds, wait, _, _ = plan[position[r]]
                if not 0 <= seconds < math.inf:
                    raise SpecError(f"--torch-trace: rank {traces.ranks[r].rank}: a compute segment of {seconds:g} s "
                                    "(its operators and the collectives they issue do not line up in time)")
                if wait is not None and wait >= len(done):
                    raise SpecError(f"--torch-trace: rank {traces.ranks[r].rank} waits on collective {wait} before it "
                                    "issues it (the main thread's operators and the collectives do not line up)")
                deps = [d for d in (last[r], done[wait] if wait is not None else None) if d is not None]
                last[r] = b.add(f"compute {position[r]}", TaskKind.COMPUTE, Category.COMPUTE, (r,), Stream.COMPUTE,
                                seconds, deps)
                position[r] += 1
        if k < len(collectives):
            c = collectives[k]
            if (c.op, c.bytes) not in costed:
                costed[c.op, c.bytes] = comm_seconds(c.op, c.bytes, (everyone,), sized, {})
            seconds, outer = costed[c.op, c.bytes]
            # no stream: the backend runs collectives on worker threads, several at once (gloo's two per
            # process group in the traces here), sharing the links while they overlap
            done.append(b.add(f"{c.op.value} {k}", TaskKind.COLLECTIVE, Category.DP, everyone, None,
                              seconds, [d for d in last if d is not None],
                              Tier.SCALE_UP if outer == 0 else Tier.SCALE_OUT, c.bytes,
                              group=f"world x{world}", collective=c.op))
    graph = b.graph(world, tuple(f"rank {r.rank}" for r in traces.ranks))
    timeline = run(graph)
    mine = [t for t in graph.tasks if 0 in t.ranks]
    compute = sum(t.duration_ns for t in mine if t.kind is TaskKind.COMPUTE) / 1e9
    comm = sum(t.duration_ns for t in mine if t.kind is TaskKind.COLLECTIVE) / 1e9
    return Replay(traces, sized, graph, timeline, compute, comm)


Segment = tuple[float, int | None, int, float]


def _segments(rank: RankTrace) -> list[Segment]:
    """(seconds, the collective waited for before it or None, collectives issued before it, start in us) of
    each compute segment of the rank's step."""
    ends = _EndIndex.of([c.end_us for c in rank.collectives])
    issued = [c.issued_us for c in rank.collectives]
    out: list[Segment] = []
    start, wait, k = rank.step_start_us, None, 0
    previous_end = rank.step_start_us
    for op in rank.ops:
        waited = _waited(previous_end, op.start_us, ends)
        if waited is not None:  # the main thread sat idle until a collective finished
            out.append(((previous_end - start) / 1e6, wait, k, start))
            start, wait = op.start_us, waited
        while k < len(issued) and issued[k] <= op.end_us:  # it issues the next collective
            out.append(((issued[k] - start) / 1e6, wait, k, start))
            start, wait, k = issued[k], None, k + 1
        previous_end = max(previous_end, op.end_us)
    waited = _waited(previous_end, rank.step_end_us, ends)
    end = previous_end if waited is not None else rank.step_end_us
    out.append(((end - start) / 1e6, wait, k, start))
    if waited is not None:
        out.append((0.0, waited, k, rank.step_end_us))
    return out


def _rescaled(segments: list[Segment], rank: RankTrace, source: System | None, target: System) -> list[Segment]:
    """Segments with their GEMMs' measured times scaled by the device model (target time / source time)."""
    if source is None or not rank.gemms:
        return segments
    ops = tuple(Op(g.flop, g.bytes) for g in rank.gemms)
    code = PRECISION.code(TrainingPrecision.FP32)
    ratio = kernel_times(ops, target.device, code) / kernel_times(ops, source.device, code)
    starts = [s[3] for s in segments]
    change = [0.0] * len(segments)
    for g, r in zip(rank.gemms, ratio.tolist(), strict=True):
        i = max(bisect.bisect_right(starts, g.start_us) - 1, 0)
        change[i] += g.dur_us / 1e6 * (r - 1)
    return [(max(s[0] + c, 0.0), s[1], s[2], s[3]) for s, c in zip(segments, change, strict=True)]


@dataclass(frozen=True)
class _EndIndex:
    """A rank's collective end times sorted, for the wait lookup in O(log n) per idle gap (the scan of every
    collective per gap made the replay grow as events^1.6: 640K events in 220 s, issue 47)."""

    ends: tuple[float, ...]  # ascending
    index: tuple[int, ...]  # the collective of each: ties in end time in issue order

    @staticmethod
    def of(ends: list[float]) -> _EndIndex:
        order = sorted(range(len(ends)), key=lambda i: (ends[i], i))
        return _EndIndex(tuple(ends[i] for i in order), tuple(order))


def _waited(gap_start: float, gap_end: float, ends: _EndIndex) -> int | None:
    """The collective a main-thread idle gap waited for: the last one to end inside it (or just after); of
    several ending at that same time, the first issued."""
    if gap_end - gap_start < WAIT_US:
        return None
    last = bisect.bisect_right(ends.ends, gap_end + WAIT_US) - 1  # the latest end in (gap_start, gap_end + WAIT]
    if last < 0 or not ends.ends[last] > gap_start:
        return None
    return ends.index[bisect.bisect_left(ends.ends, ends.ends[last])]


def measured_network(traces: TorchTraces, system: System) -> System:
    """`system` with the efficiency of the network dimension its collectives cross set so that the comm
    layer reproduces the trace's median collective (by bytes per second). Each one's transfer time runs from
    the last rank starting it to its end (waits for late ranks are left to the replay's dependencies). On a
    host, collectives that run while the ranks compute share the cores with them and take several times
    longer (32 ms against 5 ms for 1 MB in one trace here); the median is the rate they typically ran at in
    this job, contention included. The fastest one (the rate alone) made replays of 2-rank CPU traces 3%
    short on average and up to 11% on a 2-core machine; the median, +0.8% mean and 5% at most over ten
    3-step recordings. One number is fitted, not a size curve (`comm/calibration.fit_tier`): per-message
    host timings are too noisy for that."""
    world = len(traces.ranks)
    sized = system.with_devices(world)
    points: list[tuple[Collective, float, float]] = []
    for k, c in enumerate(traces.ranks[0].collectives):
        start = max(r.collectives[k].start_us for r in traces.ranks)
        end = max(r.collectives[k].end_us for r in traces.ranks)
        points.append((c.op, c.bytes, max(end - start, 1.0) / 1e6))
    if not points:
        raise SpecError("--torch-trace: no collective in the trace to fit the network on")
    op, size, measured = sorted(points, key=lambda p: p[1] / p[2])[len(points) // 2]
    tier = fitted_dimension(sized, world)
    efficiency = 1.0
    group = (tuple(range(world)),)
    for _ in range(8):  # the latency part does not scale with the efficiency: a few fixed-point steps
        trial = sized.with_dimension(tier, efficiency=efficiency, size_efficiency=None)
        efficiency = min(max(efficiency * comm_seconds(op, size, group, trial, {})[0] / measured, 1e-6), 1.0)
    return sized.with_dimension(tier, efficiency=efficiency, size_efficiency=None)
