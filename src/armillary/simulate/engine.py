"""Discrete-event engine: runs a task graph on a heap of integer-nanosecond events.

A task starts when its dependencies have finished and so has the task before it on each stream it
occupies on each of its ranks (program order: `Task.after`). Compute takes its duration. A transfer is
a flow over the links of its tier at each participant (one link per rank, tier and direction: full
duplex); flows in flight share their links max-min fairly (progressive filling, Bertsekas & Gallager,
Data Networks §6.5.2), so a flow alone takes its duration and two on the same link take twice as long.
Rates are recomputed only for the flows connected to one that starts or ends. Ties break by task index,
so a run is deterministic; perturbations (stragglers, jitter) are drawn from a seeded generator.

The graph is turned into flat arrays with numpy (`_run`, `_shared_links`) and the event loop runs
compiled by numba (`_simulate`; compiled on first use, then loaded from numba's on-disk cache).
"""

from __future__ import annotations

import gc
import itertools
import math
import operator
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numba
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


def run(graph: TaskGraph, stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
        seed: int = 0) -> Timeline:
    """Simulate `graph`. `stragglers`: slowdown factor of compute per rank; `jitter`: relative standard
    deviation of every task's duration."""
    with paused_gc():
        return _run(graph, stragglers, jitter, seed)


def compiled_here() -> bool:
    """Whether this process compiled the event loop rather than loading it from numba's cache (the first
    simulation after installing or changing the engine compiles it: about 10 s)."""
    return sum(_simulate.stats.cache_misses.values()) > 0


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
    duration = _durations(graph, stragglers or {}, jitter, seed)
    after = list(map(operator.itemgetter(12), tasks))  # Task.after, at C speed
    pending = np.fromiter(map(len, after), dtype=np.int64, count=n)
    waits_on = np.fromiter(itertools.chain.from_iterable(after), dtype=np.int64, count=int(pending.sum()))
    if len(waits_on) and (waits_on.min() < 0 or waits_on.max() >= n):
        raise ValueError(f"a task waits for a task that is not in the graph (indices must be in 0..{n - 1})")
    # successors as compressed rows: the tasks waiting for task i are successors[first[i]:first[i + 1]]
    successors = np.repeat(np.arange(n, dtype=np.int64), pending)[np.argsort(waits_on, kind="stable")]
    first = _row_starts(np.bincount(waits_on, minlength=n))
    link_first, links, n_links = _shared_links(tasks, duration)
    slot_task = np.repeat(np.arange(n, dtype=np.int64), np.diff(link_first))
    start, end, cause, changes = _simulate(duration, pending, first, successors, link_first, links, slot_task,
                                           n_links)
    if n and end.min() < 0:
        stuck = int(np.argmin(end))
        raise ValueError(f"the task graph deadlocks: task {stuck} ({tasks[stuck].name!r}) never starts "
                         "(a stream's program order contradicts the dependencies)")
    return Timeline(start, end, cause, duration, int(changes) + 2 * n)  # + every task's start and end


def _row_starts(counts: np.ndarray) -> np.ndarray:
    """Where each row starts in compressed rows of these lengths, and where the last ends."""
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts


def _durations(graph: TaskGraph, stragglers: Mapping[int, float], jitter: float, seed: int) -> np.ndarray:
    """Task durations after perturbation: a straggler rank's compute is `factor` times slower; jitter
    multiplies every duration by max(0, 1 + jitter * N(0, 1)), drawn from `seed`."""
    n = len(graph.tasks)
    plain = np.fromiter(map(operator.itemgetter(5), graph.tasks), dtype=np.int64, count=n)  # Task.duration_ns
    if not stragglers and jitter <= 0:
        return plain
    durations = plain.astype(float)
    if stragglers:
        durations *= np.array([max((stragglers.get(r, 1.0) for r in t.ranks), default=1.0)
                               if t.kind is TaskKind.COMPUTE else 1.0 for t in graph.tasks])
    if jitter > 0:
        durations *= np.maximum(0.0, 1.0 + jitter * np.random.default_rng(seed).standard_normal(n))
    return np.rint(durations).astype(np.int64)


def _shared_links(tasks: tuple[Task, ...], duration: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per task, the links it may share with another transfer in flight, as compressed rows of dense link
    numbers, and how many links there are. A link (one per rank, tier and direction: full duplex) that only
    tasks of one stream use is left out: they all occupy that stream on the link's rank, so they never
    overlap on it (e.g. a TP group's collectives on its scale-up links); a task left with none runs as
    plain time."""
    n = len(tasks)
    tier = np.fromiter(map(operator.itemgetter(7), tasks), dtype=np.int64, count=n)  # Task.tier
    transfers = np.flatnonzero((tier >= 0) & (duration > 0)).tolist()  # transfers that take time
    keys = list(map(operator.itemgetter(3, 7, 1, 4), map(tasks.__getitem__, transfers)))  # ranks, tier, kind, stream
    mixed = -2
    owner: dict[tuple[int, Tier, int], int] = {}  # link -> the one stream using it, or mixed (several, or sends)
    every: dict[tuple[tuple[int, ...], Tier, TaskKind, Stream | None], tuple[tuple[int, Tier, int], ...]] = {}
    for key in dict.fromkeys(keys):
        ranks, on_tier, kind, on = key
        send = kind is TaskKind.SEND
        stream = -1 if send or on is None else int(on)
        every[key] = ((ranks[0], on_tier, 0), (ranks[-1], on_tier, 1)) if send else tuple(
            (r, on_tier, d) for r in ranks for d in (0, 1))
        for link in every[key]:
            owner[link] = stream if owner.get(link, stream) == stream and stream >= 0 else mixed
    number: dict[tuple[int, Tier, int], int] = {}
    shared = {key: tuple(number.setdefault(link, len(number)) for link in links if owner[link] == mixed)
              for key, links in every.items()}
    per_transfer = list(map(shared.__getitem__, keys))
    counts = np.zeros(n, dtype=np.int64)
    counts[transfers] = np.fromiter(map(len, per_transfer), dtype=np.int64, count=len(transfers))
    first = _row_starts(counts)
    flat = np.fromiter(itertools.chain.from_iterable(per_transfer), dtype=np.int64, count=int(first[-1]))
    return first, flat, len(number)


@numba.njit(cache=True)
def _simulate(duration: np.ndarray, pending: np.ndarray, first: np.ndarray, successors: np.ndarray,
              link_first: np.ndarray, links: np.ndarray, slot_task: np.ndarray, n_links: int) -> tuple[
                  np.ndarray, np.ndarray, np.ndarray, int]:
    """The event loop, compiled. Returns start, end and cause per task, and the number of flow rate changes.

    A task starts when all it waits for (`pending` counts them; `successors[first[i]:first[i+1]]` wait for
    task i) have ended. A task on no shared link takes its duration. A flow (a task on the shared links
    `links[link_first[i]:link_first[i+1]]`; `slot_task[p]`: whose slot p is) has `remaining` work (ns at
    full rate) and progresses at its max-min fair `rate` since `updated`; its end is rescheduled whenever a
    flow connected to it starts or ends. The flows on a link form a doubly linked list through their link
    slots (`head`, `nxt`, `prv`). The heap holds each started task once, ordered by (end, task index),
    so ties break by task index; `position` locates a task in it (a flow's end moves)."""
    n = len(duration)
    pending = pending.copy()
    start = np.zeros(n, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    cause = np.full(n, -1, dtype=np.int64)
    remaining = np.zeros(n)
    rate = np.zeros(n)
    updated = np.zeros(n, dtype=np.int64)
    head = np.full(n_links, -1, dtype=np.int64)
    nxt = np.full(len(links), -1, dtype=np.int64)
    prv = np.full(len(links), -1, dtype=np.int64)
    heap = np.empty(n, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)  # a started task's end
    position = np.full(n, -1, dtype=np.int64)
    # scratch of a rebalance: flows and links are marked with its round's stamp (no clearing between uses)
    mark = np.zeros(n, dtype=np.int64)
    seed_mark = np.zeros(n, dtype=np.int64)
    link_mark = np.zeros(n_links, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    component = np.empty(n, dtype=np.int64)
    frozen = np.zeros(n, dtype=np.bool_)
    touched = np.empty(n_links, dtype=np.int64)
    capacity = np.zeros(n_links)
    users = np.zeros(n_links, dtype=np.int64)
    counters = np.zeros(3, dtype=np.int64)  # the round's stamp, rate changes, tasks on the heap

    def before(a: int, b: int) -> bool:
        return key[a] < key[b] or (key[a] == key[b] and a < b)

    def sift_up(k: int) -> None:
        t = heap[k]
        while k > 0 and before(t, heap[(k - 1) >> 1]):
            heap[k] = heap[(k - 1) >> 1]
            position[heap[k]] = k
            k = (k - 1) >> 1
        heap[k], position[t] = t, k

    def sift_down(k: int) -> None:
        t, size = heap[k], counters[2]
        while 2 * k + 1 < size:
            c = 2 * k + 1
            if c + 1 < size and before(heap[c + 1], heap[c]):
                c += 1
            if not before(heap[c], t):
                break
            heap[k] = heap[c]
            position[heap[k]] = k
            k = c
        heap[k], position[t] = t, k

    def schedule(t: int, at: int) -> None:
        """Task t ends at `at`: put it on the heap, or move it there."""
        if position[t] < 0:
            heap[counters[2]], key[t] = t, at
            counters[2] += 1
            sift_up(counters[2] - 1)
        elif at < key[t]:
            key[t] = at
            sift_up(position[t])
        else:
            key[t] = at
            sift_down(position[t])

    def rebalance(seeds: int, now: int) -> None:
        """Max-min fair rates for the flows connected through shared links to the `seeds` flows on
        `stack` (marked with this round's stamp in `seed_mark`), by progressive filling (Bertsekas &
        Gallager, Data Networks §6.5.2): all unfrozen flows rise together until a link is full (capacity
        1; a flow alone runs at rate 1), and the flows on full links freeze at that level. A flow whose
        rate changes, or a seed, is rescheduled."""
        stamp = counters[0]
        size, members, n_touched = seeds, 0, 0
        for k in range(seeds):
            mark[stack[k]] = stamp
        while size:  # the connected component, depth first; flows are marked when pushed
            size -= 1
            f = stack[size]
            component[members] = f
            members += 1
            for p in range(link_first[f], link_first[f + 1]):
                link = links[p]
                if link_mark[link] != stamp:
                    link_mark[link] = stamp
                    touched[n_touched] = link
                    n_touched += 1
                    capacity[link] = 1.0
                q = head[link]
                while q >= 0:
                    g = slot_task[q]
                    if mark[g] != stamp:
                        mark[g] = stamp
                        stack[size] = g
                        size += 1
                    q = nxt[q]
        for k in range(members):  # progress so far at the old rates
            f = component[k]
            remaining[f] -= rate[f] * (now - updated[f])
            updated[f] = now
            frozen[f] = False
        level = 0.0
        left = members
        while left:
            for k in range(n_touched):
                users[touched[k]] = 0
            for k in range(members):
                f = component[k]
                if not frozen[f]:
                    for p in range(link_first[f], link_first[f + 1]):
                        users[links[p]] += 1
            step = 1.0 - level
            for k in range(n_touched):
                link = touched[k]
                if users[link]:
                    step = min(step, capacity[link] / users[link])
            level += step
            for k in range(n_touched):
                capacity[touched[k]] -= step * users[touched[k]]
            for k in range(members):
                f = component[k]
                if frozen[f]:
                    continue
                full = level >= 1.0 - _EPS
                for p in range(link_first[f], link_first[f + 1]):
                    full = full or capacity[links[p]] <= _EPS
                if full:
                    frozen[f] = True
                    left -= 1
                    if level != rate[f] or seed_mark[f] == stamp:
                        rate[f] = level
                        schedule(f, now + math.ceil(max(remaining[f], 0.0) / level - 1e-6))
                        counters[1] += 1

    def begin(i: int, now: int, seeds: int) -> int:
        """Start task i: it ends after its duration if nothing changes; a flow joins its links at full
        rate, and if it shares one, it becomes a seed of this round's rebalance. Returns the seeds."""
        schedule(i, now + duration[i])
        if link_first[i + 1] == link_first[i]:
            return seeds
        remaining[i], rate[i], updated[i] = duration[i], 1.0, now
        alone = True
        for p in range(link_first[i], link_first[i + 1]):  # its slot goes to the front of each link's list
            link = links[p]
            nxt[p], prv[p] = head[link], -1
            if head[link] >= 0:
                prv[head[link]] = p
                alone = False
            head[link] = p
        if alone:
            return seeds
        seed_mark[i] = counters[0]
        stack[seeds] = i
        return seeds + 1

    # each round: the next task to end, the tasks that then start, and one rebalance for all the flows
    # that started or lost a neighbour (rates depend only on the flows in flight, so one rebalance after
    # all of an instant's changes gives the rates that one per change would)
    counters[0] = 1
    seeds = 0
    for i in range(n):
        if pending[i] == 0:
            seeds = begin(i, 0, seeds)
    if seeds:
        rebalance(seeds, 0)
    while counters[2]:
        i = heap[0]
        now = key[i]
        counters[2] -= 1
        position[i] = -1
        if counters[2]:
            heap[0] = heap[counters[2]]
            sift_down(0)
        counters[0] += 1
        seeds = 0
        for p in range(link_first[i], link_first[i + 1]):  # a flow leaves its links; the flows left are seeds
            if prv[p] >= 0:
                nxt[prv[p]] = nxt[p]
            else:
                head[links[p]] = nxt[p]
            if nxt[p] >= 0:
                prv[nxt[p]] = prv[p]
            q = head[links[p]]
            while q >= 0:
                f = slot_task[q]
                if seed_mark[f] != counters[0]:
                    seed_mark[f] = counters[0]
                    stack[seeds] = f
                    seeds += 1
                q = nxt[q]
        end[i] = now
        for k in range(first[i], first[i + 1]):
            s = successors[k]
            pending[s] -= 1
            if pending[s] == 0:
                start[s], cause[s] = now, i
                seeds = begin(s, now, seeds)
        if seeds:
            rebalance(seeds, now)
    return start, end, cause, counters[1]
