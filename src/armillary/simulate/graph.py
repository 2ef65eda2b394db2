"""The task graph of a step: per rank, operations with dependencies and the stream each runs on.

An operation is compute (FLOPs, bytes), a collective over a group of ranks, a point-to-point send, or a
copy between memory tiers. Each takes `duration_ns` alone on idle links (from the estimator's cost
functions and the collectives layer: one source of truth); a transfer also names the network tier it
crosses, whose per-rank links it shares with the other transfers in flight (`engine.py`). Streams keep
program order: a rank's tasks on one stream start in the order they were added (CUDA streams, NCCL
communicators); sends have no stream, they wait only on their dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import NamedTuple

import numpy as np

from armillary.specs.communication import Collective


class TaskKind(IntEnum):
    COMPUTE = 0
    COLLECTIVE = 1
    SEND = 2
    MEMORY = 3  # copy between memory tiers (offload)


class Stream(IntEnum):
    """The streams of one rank: compute, one per communicating parallel dimension, and the offload copy."""

    COMPUTE = 0
    TP = 1
    CP = 2
    EP = 3
    PP = 4
    DP = 5  # gradient reductions
    OFFLOAD = 6
    DP_GATHER = 7  # parameter gathers (ZeRO / FSDP run them on their own stream, ahead of use)

    @property
    def category(self) -> Category:
        """The kind of time a communication or copy on this stream is (a compute task says its own:
        compute, recompute or optimizer)."""
        return _STREAM_CATEGORY[self]


_STREAMS = len(Stream)


class Tier(IntEnum):
    """Links a transfer occupies: the scale-up or scale-out network, or the second memory tier's link."""

    NONE = -1
    SCALE_UP = 0
    SCALE_OUT = 1
    MEMORY = 2


class Category(StrEnum):
    """What a task's time is, for breakdowns."""

    COMPUTE = "compute"
    RECOMPUTE = "recompute"
    TP = "tp"
    CP = "cp"
    EP = "ep"
    PP = "pp"
    DP = "dp"
    OPTIMIZER = "optimizer"
    OFFLOAD = "offload"


_STREAM_CATEGORY = {Stream.COMPUTE: Category.COMPUTE, Stream.TP: Category.TP, Stream.CP: Category.CP,
                    Stream.EP: Category.EP, Stream.PP: Category.PP, Stream.DP: Category.DP,
                    Stream.OFFLOAD: Category.OFFLOAD, Stream.DP_GATHER: Category.DP}


class Task(NamedTuple):
    """One operation (a tuple: millions of them are built for an unsymmetric 1,000-GPU step)."""

    name: str
    kind: TaskKind
    category: Category
    ranks: tuple[int, ...]  # participants: one rank (compute), the group (collective), (source, destination)
    stream: Stream | None  # stream occupied on every participant; None: sends (dependencies only)
    duration_ns: int  # alone, on idle links
    deps: tuple[int, ...] = ()
    tier: Tier = Tier.NONE
    bytes: float = 0.0  # message size (collectives: the nccl-tests convention), or bytes moved
    flop: float = 0.0
    group: str = ""  # label of the process group, e.g. "dp" or "pp 3->4"
    collective: Collective | None = None  # the operation of a collective or send
    after: tuple[int, ...] = ()  # every task it waits for: `deps` and its stream predecessors (set by the builder)


@dataclass(frozen=True, eq=False)
class Routes:
    """Links inside the network that transfers cross besides their ranks' own (the uplinks of an
    oversubscribed switch tier, `routing.py`), as compressed rows per task: task i crosses
    `link[first[i]:first[i + 1]]`, loading each by `load` (in units of one rank's link bandwidth) when it runs
    at its full rate; `capacity` of each link in the same units."""

    first: np.ndarray  # int64, one more than there are tasks
    link: np.ndarray  # int64
    load: np.ndarray  # float
    capacity: np.ndarray  # float, per link


@dataclass(frozen=True)
class TaskGraph:
    """Tasks in program order (a stream runs its tasks in index order) and what each rank stands for."""

    tasks: tuple[Task, ...]
    ranks: int
    rank_labels: tuple[str, ...]  # e.g. "stage 3" or "pp3 dp0 tp1"
    rank_weights: tuple[int, ...]  # identical ranks each simulated rank stands for (symmetry)
    routes: Routes | None = None  # links shared inside the network; None: only the ranks' own links

    @property
    def devices(self) -> int:
        return sum(self.rank_weights)


@dataclass
class GraphBuilder:
    """Appends tasks and returns their indices; `graph()` freezes the result."""

    tasks: list[Task] = field(default_factory=list)
    _last: dict[int, int] = field(default_factory=dict)  # (rank, stream) key -> its last task

    def add(self, name: str, kind: TaskKind, category: Category, ranks: tuple[int, ...], stream: Stream | None,
            seconds: float, deps: tuple[int, ...] | list[int] = (), tier: Tier = Tier.NONE, bytes: float = 0.0,
            flop: float = 0.0, group: str = "", collective: Collective | None = None) -> int:
        if not seconds >= 0:
            raise ValueError(f"task {name!r}: duration must be a non-negative number of seconds, not {seconds}")
        if deps and (max(deps) >= len(self.tasks) or min(deps) < 0):
            raise ValueError(f"task {name!r}: dependencies must be tasks added before it")
        index = len(self.tasks)
        after = set(deps)
        if stream is not None:  # a stream runs one task at a time, in program order
            last = self._last
            for r in ranks:
                key = r * _STREAMS + stream
                if key in last:
                    after.add(last[key])
                last[key] = index
        self.tasks.append(Task(name, kind, category, ranks, stream, round(seconds * 1e9), tuple(deps), tier, bytes,
                               flop, group, collective, tuple(after)))
        return index

    def on_lanes(self, name: str, category: Category, stream: Stream, seconds: float, lanes: list[int],
                 deps: list[list[int]], groups: list[list[int]], tier: Tier = Tier.NONE, nbytes: float = 0.0,
                 flop: float = 0.0, collective: Collective | None = None) -> list[list[int]]:
        """A compute task per lane (ranks), or a collective per group of lanes (indices into `lanes`), after
        each lane's `deps`; returns each lane's dependencies for what follows."""
        if stream is Stream.COMPUTE:
            return [[self.add(name, TaskKind.COMPUTE, category, (r,), Stream.COMPUTE, seconds, deps[i], flop=flop)]
                    for i, r in enumerate(lanes)]
        out: list[list[int]] = [[] for _ in lanes]
        for members in groups:
            t = self.add(name, TaskKind.COLLECTIVE, category, tuple(lanes[i] for i in members), stream, seconds,
                         sorted({d for i in members for d in deps[i]}), tier, nbytes, group=category.value,
                         collective=collective)
            for i in members:
                out[i] = [t]
        return out

    def graph(self, ranks: int, labels: tuple[str, ...] | None = None,
              weights: tuple[int, ...] | None = None) -> TaskGraph:
        return TaskGraph(tuple(self.tasks), ranks, labels or tuple(f"rank {r}" for r in range(ranks)),
                         weights or (1,) * ranks)
