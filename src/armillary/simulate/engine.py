"""Discrete-event engine: runs a task graph on a heap of integer-nanosecond events.

A task starts when its dependencies have finished and so has the task before it on each stream it
occupies on each of its ranks (program order: `Task.after`). Compute takes its duration. A transfer is
a flow over the links of its tier at each participant (one link per rank, tier and direction: full
duplex); flows in flight share their links max-min fairly (progressive filling, Bertsekas & Gallager,
Data Networks §6.5.2), so a flow alone takes its duration and two on the same link take twice as long.
On a tapered switch tier, transfers also cross the leaves' uplinks, each loaded by what the transfer
really sends across (`TaskGraph.routes`, from `routing.py`), with the uplink's capacity.
Rates are recomputed only for the flows connected to one that starts or ends. Ties break by task index,
so a run is deterministic; perturbations (stragglers, jitter) are drawn from a seeded generator.

The graph is turned into flat arrays with numpy (`_run`; the links in `links.py`) and the event loop runs
compiled by numba (`_simulate`; compiled on first use, then loaded from numba's on-disk cache).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numba
import numpy as np

from armillary.arguments import number, whole
from armillary.errors import SpecError
from armillary.simulate.graph import Columns, TaskGraph, TaskKind
from armillary.simulate.links import row_starts, shared_links
from armillary.simulate.timeline import Timeline

_EPS = 1e-12
# beyond these, durations (integer nanoseconds) overflow and no simulated step means anything
MAX_FACTOR, MAX_JITTER = 1e6, 10.0


def run(graph: TaskGraph, stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
        seed: int = 0) -> Timeline:
    """Simulate `graph`. `stragglers`: slowdown factor of compute per rank; `jitter`: relative standard
    deviation of every task's duration."""
    if stragglers is not None and not isinstance(stragglers, Mapping):
        raise SpecError(f"stragglers: expected a mapping of rank to slowdown factor, got {stragglers!r}")
    for rank, factor in (stragglers or {}).items():
        whole(f"straggler rank (the simulation has ranks 0..{graph.ranks - 1})", rank, 0, graph.ranks - 1)
        number(f"straggler {rank}: the slowdown factor", factor, above=True, high=MAX_FACTOR)
    number("jitter (relative standard deviation)", jitter, high=MAX_JITTER)
    whole("seed", seed)
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
    cols = graph.columns
    n = len(cols)
    duration = _durations(cols, stragglers or {}, jitter, seed)
    after_first = cols.array("after_first")
    pending = np.diff(after_first)
    waits_on = cols.array("after").astype(np.int64)
    if len(waits_on) and (waits_on.min() < 0 or waits_on.max() >= n):
        raise ValueError(f"a task waits for a task that is not in the graph (indices must be in 0..{n - 1})")
    # successors as compressed rows: the tasks waiting for task i are successors[first[i]:first[i + 1]]
    successors = np.repeat(np.arange(n, dtype=np.int64), pending)[np.argsort(waits_on, kind="stable")]
    first = row_starts(np.bincount(waits_on, minlength=n))
    link_first, links, weight, full = shared_links(graph, duration)
    slot_task = np.repeat(np.arange(n, dtype=np.int64), np.diff(link_first))
    start, end, cause, changes = _simulate(duration, pending, first, successors, link_first, links, weight,
                                           slot_task, full)
    if n and end.min() < 0:
        stuck = int(np.argmin(end))
        raise ValueError(f"the task graph deadlocks: task {stuck} ({cols[stuck].name!r}) never starts "
                         "(a stream's program order contradicts the dependencies)")
    return Timeline(start, end, cause, duration, int(changes) + 2 * n)  # + every task's start and end


def _durations(cols: Columns, stragglers: Mapping[int, float], jitter: float, seed: int) -> np.ndarray:
    """Task durations after perturbation: a straggler rank's compute is `factor` times slower; jitter
    multiplies every duration by max(0, 1 + jitter * N(0, 1)), drawn from `seed`."""
    n = len(cols)
    plain = cols.array("duration_ns").copy()
    if not stragglers and jitter <= 0:
        return plain
    durations = plain.astype(float)
    if stragglers:
        computing = np.flatnonzero(cols.array("kind") == TaskKind.COMPUTE).tolist()
        durations[computing] *= [max((stragglers.get(r, 1.0) for r in cols.row("ranks", i)), default=1.0)
                                 for i in computing]
    if jitter > 0:
        durations *= np.maximum(0.0, 1.0 + jitter * np.random.default_rng(seed).standard_normal(n))
    return np.rint(durations).astype(np.int64)


# The event loop, compiled by numba; its state is plain arrays passed by name (a tuple of them costs a
# reference count per access). Per task: `pending`, start, end, cause; a flow's `remaining` work (ns at full
# rate) and `rate` since `updated`. A link's flows form a doubly linked list of link slots (`head`, `nxt`,
# `prv`). The heap holds each started task once by (`key`: its end, task index); `position` locates it.


@numba.njit(cache=True, inline="always")
def _earlier(key: np.ndarray, a: int, b: int) -> bool:
    return key[a] < key[b] or (key[a] == key[b] and a < b)


@numba.njit(cache=True, inline="always")
def _sift_up(heap: np.ndarray, key: np.ndarray, position: np.ndarray, k: int) -> None:
    t = heap[k]
    while k > 0 and _earlier(key, t, heap[(k - 1) >> 1]):
        heap[k] = heap[(k - 1) >> 1]
        position[heap[k]] = k
        k = (k - 1) >> 1
    heap[k], position[t] = t, k


@numba.njit(cache=True, inline="always")
def _sift_down(heap: np.ndarray, key: np.ndarray, position: np.ndarray, size: int, k: int) -> None:
    t = heap[k]
    while 2 * k + 1 < size:
        c = 2 * k + 1
        if c + 1 < size and _earlier(key, heap[c + 1], heap[c]):
            c += 1
        if not _earlier(key, heap[c], t):
            break
        heap[k] = heap[c]
        position[heap[k]] = k
        k = c
    heap[k], position[t] = t, k


@numba.njit(cache=True, inline="always")
def _schedule(heap: np.ndarray, key: np.ndarray, position: np.ndarray, counters: np.ndarray, t: int,
              at: int) -> None:
    """Task t ends at `at`: put it on the heap, or move it there."""
    if position[t] < 0:
        heap[counters[2]], key[t] = t, at
        counters[2] += 1
        _sift_up(heap, key, position, counters[2] - 1)
    elif at < key[t]:
        key[t] = at
        _sift_up(heap, key, position, position[t])
    else:
        key[t] = at
        _sift_down(heap, key, position, counters[2], position[t])


@numba.njit(cache=True, inline="always")
def _pop(heap: np.ndarray, key: np.ndarray, position: np.ndarray, counters: np.ndarray) -> int:
    """The task that ends next, taken off the heap."""
    i = heap[0]
    counters[2] -= 1
    position[i] = -1
    if counters[2]:
        heap[0] = heap[counters[2]]
        _sift_down(heap, key, position, counters[2], 0)
    return i


@numba.njit(cache=True, inline="always")
def _push_flows(head: np.ndarray, nxt: np.ndarray, slot_task: np.ndarray, link: int, stamp: int,
                mark: np.ndarray, stack: np.ndarray, size: int) -> int:
    """Push on `stack` the flows on `link` not yet marked with `stamp` (marking them); returns its size."""
    q = head[link]
    while q >= 0:
        f = slot_task[q]
        if mark[f] != stamp:
            mark[f] = stamp
            stack[size] = f
            size += 1
        q = nxt[q]
    return size


@numba.njit(cache=True, inline="always")
def _connected(link_first: np.ndarray, links: np.ndarray, slot_task: np.ndarray, head: np.ndarray,
               nxt: np.ndarray, seeds: int, stamp: int, mark: np.ndarray, link_mark: np.ndarray,
               stack: np.ndarray, component: np.ndarray, touched: np.ndarray,
               capacity: np.ndarray, full: np.ndarray) -> tuple[int, int]:
    """The flows connected through shared links to the `seeds` flows on `stack`, depth first (flows are
    marked with the round's `stamp` when pushed), into `component`; their links, at `full` capacity, into
    `touched`. Returns how many of each."""
    size, members, n_touched = seeds, 0, 0
    for k in range(seeds):
        mark[stack[k]] = stamp
    while size:
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
                capacity[link] = full[link]
            size = _push_flows(head, nxt, slot_task, link, stamp, mark, stack, size)
    return members, n_touched


@numba.njit(cache=True, inline="always")
def _fill(link_first: np.ndarray, links: np.ndarray, weight: np.ndarray, component: np.ndarray, members: int,
          touched: np.ndarray, n_touched: int, capacity: np.ndarray, full: np.ndarray, users: np.ndarray,
          frozen: np.ndarray, rate: np.ndarray, changed: np.ndarray) -> None:
    """Progressive filling (Bertsekas & Gallager, Data Networks §6.5.2) of the flows in `component`: all
    unfrozen flows rise together until a link is full (a flow at rate r loads a link by r x its `weight`
    there; a rank's link has capacity 1, so a flow alone runs at rate 1), and the flows on full links freeze
    at that level (all start unfrozen). Sets `rate`, and `changed` for the flows whose rate changed."""
    level, left = 0.0, members
    while left:
        for k in range(n_touched):
            users[touched[k]] = 0
        for k in range(members):
            f = component[k]
            if not frozen[f]:
                for p in range(link_first[f], link_first[f + 1]):
                    users[links[p]] += weight[p]
        step = 1.0 - level
        for k in range(n_touched):
            if users[touched[k]] > 0:
                step = min(step, capacity[touched[k]] / users[touched[k]])
        level += step
        for k in range(n_touched):
            capacity[touched[k]] -= step * users[touched[k]]
        for k in range(members):
            f = component[k]
            if frozen[f]:
                continue
            saturated = level >= 1.0 - _EPS
            for p in range(link_first[f], link_first[f + 1]):
                saturated = saturated or capacity[links[p]] <= _EPS * full[links[p]]
            if saturated:
                frozen[f] = True
                left -= 1
                changed[f] = level != rate[f]
                rate[f] = level


@numba.njit(cache=True, inline="always")
def _leave(link_first: np.ndarray, links: np.ndarray, slot_task: np.ndarray, head: np.ndarray, nxt: np.ndarray,
           prv: np.ndarray, i: int, stamp: int, seed_mark: np.ndarray, stack: np.ndarray) -> int:
    """Flow i leaves its links; the flows left on them are marked with the round's `stamp` and pushed on
    `stack` as seeds of its rebalance. Returns how many."""
    seeds = 0
    for p in range(link_first[i], link_first[i + 1]):
        if prv[p] >= 0:
            nxt[prv[p]] = nxt[p]
        else:
            head[links[p]] = nxt[p]
        if nxt[p] >= 0:
            prv[nxt[p]] = prv[p]
        seeds = _push_flows(head, nxt, slot_task, links[p], stamp, seed_mark, stack, seeds)
    return seeds


@numba.njit(cache=True, inline="always")
def _join(link_first: np.ndarray, links: np.ndarray, weight: np.ndarray, full: np.ndarray, head: np.ndarray,
          nxt: np.ndarray, prv: np.ndarray, i: int) -> bool:
    """Flow i's slot goes to the front of each of its links' lists; returns whether it shares one, or
    alone would load one beyond its capacity (it cannot run at full rate either way)."""
    shares = False
    for p in range(link_first[i], link_first[i + 1]):
        nxt[p], prv[p] = head[links[p]], -1
        if head[links[p]] >= 0:
            prv[head[links[p]]] = p
            shares = True
        head[links[p]] = p
        shares = shares or weight[p] > full[links[p]]
    return shares


@numba.njit(cache=True)
def _simulate(duration: np.ndarray, pending: np.ndarray, first: np.ndarray, successors: np.ndarray,
              link_first: np.ndarray, links: np.ndarray, weight: np.ndarray, slot_task: np.ndarray,
              full: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The event loop. Returns start, end and cause per task, and the number of flow rate changes.

    A task starts when all it waits for (`successors[first[i]:first[i+1]]` wait for task i) have ended. A
    flow (on shared links `links[link_first[i]:link_first[i+1]]`) joins at full rate; when a flow connected
    to it starts or ends, its component's rates are filled again (once per instant: rates depend only on
    the flows in flight) and the flows whose rate changed, or that started, are rescheduled."""
    n, n_links = len(duration), len(full)
    pending = pending.copy()
    start, end, cause = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    remaining, rate, updated = np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)
    head = np.full(n_links, -1, dtype=np.int64)
    nxt, prv = np.full(len(links), -1, dtype=np.int64), np.full(len(links), -1, dtype=np.int64)
    heap, key, position = np.empty(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    # a rebalance's scratch: flows and links are marked with its round's stamp (no clearing between uses)
    mark, seed_mark, link_mark = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n_links, np.int64)
    stack, component = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    frozen, changed = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
    touched, capacity, users = np.empty(n_links, dtype=np.int64), np.zeros(n_links), np.zeros(n_links)
    counters = np.array([1, 0, 0], dtype=np.int64)  # the round's stamp (from 1: scratch starts at 0), rate
    # changes, tasks on the heap
    now, i = 0, -1
    while True:
        seeds, lo, hi = 0, 0, n  # at time 0, every task that waits for nothing starts
        if i >= 0:  # task i ends: it leaves its links (the flows left there are seeds); its successors may start
            seeds = _leave(link_first, links, slot_task, head, nxt, prv, i, counters[0], seed_mark, stack)
            end[i] = now
            lo, hi = first[i], first[i + 1]
        for k in range(lo, hi):
            s = k if i < 0 else successors[k]
            if i >= 0:
                pending[s] -= 1
            if pending[s]:
                continue
            start[s], cause[s] = now, i
            _schedule(heap, key, position, counters, s, now + duration[s])  # its end if nothing changes
            if link_first[s + 1] > link_first[s]:  # a flow: at full rate until the rebalance
                remaining[s], rate[s], updated[s] = duration[s], 1.0, now
                if _join(link_first, links, weight, full, head, nxt, prv, s):
                    seed_mark[s] = counters[0]
                    stack[seeds] = s
                    seeds += 1
        if seeds:
            members, n_touched = _connected(link_first, links, slot_task, head, nxt, seeds, counters[0], mark,
                                            link_mark, stack, component, touched, capacity, full)
            for k in range(members):  # progress so far at the old rates
                f = component[k]
                remaining[f] -= rate[f] * (now - updated[f])
                updated[f], frozen[f] = now, False
            _fill(link_first, links, weight, component, members, touched, n_touched, capacity, full, users, frozen,
                  rate, changed)
            for k in range(members):
                f = component[k]
                if changed[f] or seed_mark[f] == counters[0]:
                    counters[1] += 1
                    _schedule(heap, key, position, counters, f,
                              now + math.ceil(max(remaining[f], 0.0) / rate[f] - 1e-6))
        if not counters[2]:
            return start, end, cause, counters[1]
        i = _pop(heap, key, position, counters)
        now = key[i]
        counters[0] += 1
