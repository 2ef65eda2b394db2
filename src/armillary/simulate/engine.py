"""Discrete-event engine: runs a task graph on a heap of integer-nanosecond events.

A task starts when its dependencies have finished and so has the task before it on each stream it
occupies on each of its ranks (program order: `Task.after`). Compute takes its duration. A transfer is
a flow over the links of its tier at each participant (one link per rank, tier and direction: full
duplex); flows in flight share their links max-min fairly (progressive filling, Bertsekas & Gallager,
Data Networks §6.5.2), so a flow alone takes its duration and two on the same link take twice as long.
Rates are recomputed only for the flows connected to one that starts or ends. Ties break by task index,
so a run is deterministic; perturbations (stragglers, jitter) are drawn from a seeded generator.
"""

from __future__ import annotations

import gc
import heapq
import math
import operator
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from armillary.simulate.graph import Stream, Task, TaskGraph, TaskKind, Tier

_EPS = 1e-12


@dataclass(frozen=True)
class Timeline:
    """When every task ran. `cause[i]`: the task whose end let task i start (-1: it started at time 0)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    cause: np.ndarray
    duration_ns: np.ndarray  # as run: after perturbations, before link sharing
    events: int  # task starts and ends, and rate changes of flows

    @property
    def makespan_ns(self) -> int:
        return int(self.end_ns.max()) if len(self.end_ns) else 0

    def critical_path(self) -> tuple[int, ...]:
        """The chain of tasks, first to last, that ends with the last task to finish."""
        if not len(self.end_ns):
            return ()
        chain = [int(np.argmax(self.end_ns))]
        while self.cause[chain[-1]] >= 0:
            chain.append(int(self.cause[chain[-1]]))
        return tuple(reversed(chain))


def _durations(graph: TaskGraph, stragglers: Mapping[int, float], jitter: float, seed: int) -> list[int]:
    """Task durations after perturbation: a straggler rank's compute is `factor` times slower; jitter
    multiplies every duration by max(0, 1 + jitter * N(0, 1)), drawn from `seed`."""
    if not stragglers and jitter <= 0:
        return [t.duration_ns for t in graph.tasks]
    durations = np.array([t.duration_ns for t in graph.tasks], dtype=float)
    if stragglers:
        durations *= np.array([max((stragglers.get(r, 1.0) for r in t.ranks), default=1.0)
                               if t.kind is TaskKind.COMPUTE else 1.0 for t in graph.tasks])
    if jitter > 0:
        durations *= np.maximum(0.0, 1.0 + jitter * np.random.default_rng(seed).standard_normal(len(durations)))
    return [int(d) for d in np.rint(durations).astype(np.int64).tolist()]


_SHIFT = 26  # heap entries are (time << _SHIFT) | task: one int each, ties broken by task index
_MASK = (1 << _SHIFT) - 1


def run(graph: TaskGraph, stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
        seed: int = 0) -> Timeline:
    """Simulate `graph`. `stragglers`: slowdown factor of compute per rank; `jitter`: relative standard
    deviation of every task's duration."""
    with paused_gc():
        return _run(graph, stragglers, jitter, seed)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building and running a graph allocates millions of small
    acyclic objects, and each collection would rescan them all (several times the simulation's own cost)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run(graph: TaskGraph, stragglers: Mapping[int, float] | None, jitter: float, seed: int) -> Timeline:
    tasks = graph.tasks
    n = len(tasks)
    if n > _MASK:
        raise ValueError(f"the task graph has {n:,} tasks; the engine takes at most {_MASK:,}")
    duration = _durations(graph, stragglers or {}, jitter, seed)
    pending = [len(t.after) for t in tasks]
    successors: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(tasks):
        for d in t.after:
            successors[d].append(i)
    links = _shared_links(tasks, duration)

    start = [0] * n
    end = [-1] * n
    cause = [-1] * n
    heap: list[int] = []
    events = 0
    # flows in flight: remaining work (ns at full rate), rate, time of the last update, scheduled end
    remaining = [0.0] * n
    rate = [0.0] * n
    updated = [0] * n
    due = [-1] * n  # -1: not in flight
    on_link: list[set[int]] = [set() for _ in range(6 * graph.ranks)]
    push = heapq.heappush

    def rebalance(seeds: list[int], now: int) -> None:
        """Max-min fair rates for the flows connected (through shared links) to `seeds`."""
        nonlocal events
        component: set[int] = set()
        stack = list(seeds)
        while stack:
            f = stack.pop()
            if f in component or due[f] < 0:
                continue
            component.add(f)
            for link in links[f]:
                stack.extend(on_link[link])
        for f in component:  # progress so far at the old rates
            remaining[f] -= rate[f] * (now - updated[f])
            updated[f] = now
        new_rate = _fair_rates(component, links) if len(component) > 1 else dict.fromkeys(component, 1.0)
        for f in component:
            if new_rate[f] != rate[f] or f in seeds:
                rate[f] = new_rate[f]
                due[f] = now + math.ceil(max(remaining[f], 0.0) / rate[f] - 1e-6)
                push(heap, (due[f] << _SHIFT) | f)
                events += 1

    def begin_flow(i: int, now: int) -> None:
        remaining[i], rate[i], updated[i] = float(duration[i]), 1.0, now
        alone = True
        for link in links[i]:
            flows = on_link[link]
            if flows:
                alone = False
            flows.add(i)
        due[i] = now + duration[i]
        if alone:  # nothing shares its links: full rate, no one else changes
            push(heap, (due[i] << _SHIFT) | i)
        else:
            rebalance([i], now)

    for i in range(n):
        if not pending[i]:
            if links[i]:
                begin_flow(i, 0)
            else:
                push(heap, (duration[i] << _SHIFT) | i)
    pop = heapq.heappop
    while heap:
        entry = pop(heap)
        now, i = entry >> _SHIFT, entry & _MASK
        if links[i]:  # a flow: skip entries its rate changes made stale
            if end[i] >= 0 or due[i] != now:
                continue
            due[i] = -1
            neighbours: list[int] = []
            for link in links[i]:
                flows = on_link[link]
                flows.discard(i)
                if flows:
                    neighbours.extend(flows)
            if neighbours:
                rebalance(neighbours, now)
        end[i] = now
        for s in successors[i]:
            left = pending[s] - 1
            pending[s] = left
            if not left:
                start[s] = now
                cause[s] = i
                if links[s]:
                    begin_flow(s, now)
                else:
                    push(heap, ((now + duration[s]) << _SHIFT) | s)
    if min(end, default=0) < 0:
        stuck = end.index(-1)
        raise ValueError(f"the task graph deadlocks: task {stuck} ({tasks[stuck].name!r}) never starts "
                         "(a stream's program order contradicts the dependencies)")
    return Timeline(np.array(start, dtype=np.int64), np.array(end, dtype=np.int64), np.array(cause, dtype=np.int64),
                    np.array(duration, dtype=np.int64), events + 2 * n)  # + every task's start and end


def _shared_links(tasks: tuple[Task, ...], duration: list[int]) -> list[tuple[int, ...]]:
    """Per task, the links it may share with another transfer in flight. A link that only tasks of one
    stream use is left out: they all occupy that stream on the link's rank, so they never overlap on it
    (e.g. a TP group's collectives on its scale-up links); a task left with none runs as plain time."""
    kinds: dict[tuple[tuple[int, ...], Tier, TaskKind, Stream | None], list[int]] = {}
    fields = operator.itemgetter(3, 7, 1, 4)  # (ranks, tier, kind, stream) of a Task, at C speed
    for i, t in enumerate(tasks):
        if t.tier >= 0 and duration[i] > 0:
            kinds.setdefault(fields(t), []).append(i)
    mixed = -2
    owner: dict[int, int] = {}  # link -> the one stream using it, or mixed (several, or sends)
    every: dict[tuple[tuple[int, ...], Tier, TaskKind, Stream | None], tuple[int, ...]] = {}
    for key in kinds:
        ranks, tier, kind, on = key
        send = kind is TaskKind.SEND
        stream = -1 if send or on is None else int(on)
        every[key] = ((_link(ranks[0], tier, 0), _link(ranks[-1], tier, 1)) if send
                      else tuple(_link(r, tier, d) for r in ranks for d in (0, 1)))
        for link in every[key]:
            owner[link] = stream if owner.get(link, stream) == stream and stream >= 0 else mixed
    links: list[tuple[int, ...]] = [()] * len(tasks)
    for key, members in kinds.items():
        shared = tuple(link for link in every[key] if owner[link] == mixed)
        for i in members:
            links[i] = shared
    return links


def _link(rank: int, tier: Tier, direction: int) -> int:
    return (rank * 3 + int(tier)) * 2 + direction


def _fair_rates(flows: set[int], links: list[tuple[int, ...]]) -> dict[int, float]:
    """Progressive filling: all unfrozen flows rise together until a link is full (capacity 1 per link;
    a flow alone runs at rate 1); the flows on full links freeze at that level."""
    capacity: dict[int, float] = {}
    for f in flows:
        for link in links[f]:
            capacity[link] = 1.0
    rates: dict[int, float] = {}
    level = 0.0
    unfrozen = set(flows)
    while unfrozen:
        users: dict[int, int] = {}
        for f in unfrozen:
            for link in links[f]:
                users[link] = users.get(link, 0) + 1
        step = min(min(capacity[link] / c for link, c in users.items()), 1.0 - level)
        level += step
        for link, c in users.items():
            capacity[link] -= step * c
        full = {link for link, c in users.items() if capacity[link] <= _EPS}
        done = {f for f in unfrozen if level >= 1.0 - _EPS or any(link in full for link in links[f])}
        for f in done:
            rates[f] = level
        unfrozen -= done
    return rates
