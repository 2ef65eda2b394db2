"""Replay a synthesized collective schedule link by link, to verify its time and its validity.

Each link sends its transfers in the schedule's order, one at a time; a transfer of chunk c from u may
start once u has everything of c it needs: every transfer of c into u listed before it has arrived (the
chunk itself in an all-gather; all partial sums in a reduce-scatter). The replay runs every transfer as
soon as its link and its data allow, so it finishes no later than the schedule says; it fails if a
transfer would have to start before its data are there (a broken schedule) or a device ends without a chunk.

`simulate_schedule` runs the same schedule through the event simulator (`simulate.engine.run`): one SEND
task per transfer (ranks: source, destination), depending on the previous transfer on its link (each link
its own resource, in the schedule's order) and on every transfer of its chunk into its source listed before
it. The engine's link model has one link per rank, tier and direction, shared max-min fairly; a mesh or
torus node has one link per neighbour, which that model cannot express, so the transfers carry no tier (plain
time) and the per-link order is the dependency chain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from armillary.comm.synthesis import Schedule
from armillary.simulate.graph import Category, GraphBuilder, TaskGraph, TaskKind
from armillary.specs.communication import Collective


@dataclass(frozen=True)
class Replay:
    time: float
    start: np.ndarray  # replayed start of every transfer, in the schedule's order
    complete: bool  # every device ends with every chunk (all-gather) / its own reduced chunks


@numba.njit(cache=True)
def _replay(src: np.ndarray, dst: np.ndarray, link: np.ndarray, chunk: np.ndarray, duration: np.ndarray,
            links: int, initial: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ready = initial.copy()  # when node v has chunk c (inf: not yet)
    link_free = np.zeros(links)
    start = np.empty(link.shape[0])
    for k in range(link.shape[0]):
        u, v, c, lk = src[k], dst[k], chunk[k], link[k]
        s = max(link_free[lk], ready[u, c])
        start[k] = s
        end = s + duration[k]
        link_free[lk] = end
        if ready[v, c] == np.inf:
            ready[v, c] = end
        else:  # a partial sum joins what v has
            ready[v, c] = max(ready[v, c], end)
    return start, ready, link_free


def replay(schedule: Schedule) -> Replay:
    """Replay `schedule` as soon as each link and each chunk allow, each transfer taking its link's latency
    plus the chunk at its bandwidth (plus the reduction where it reduces)."""
    links = schedule.links
    nodes, chunks = links.nodes, schedule.chunks
    order = np.argsort(schedule.start, kind="stable")
    link = schedule.link[order]
    duration = (links.latency[link] + schedule.chunk_bytes / links.bandwidth[link]
                + np.where(schedule.reducing[order], schedule.reduce_s, 0.0))
    initial = np.full((nodes, chunks), np.inf)
    if schedule.op in (Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        initial[schedule.owner, np.arange(chunks)] = 0.0
    else:  # every device starts with its own contribution to every chunk
        initial[:, :] = 0.0
    src, dst = links.src[link], links.dst[link]
    start, ready, link_free = _replay(src, dst, link, schedule.chunk[order], duration, links.src.shape[0], initial)
    replayed = np.empty_like(start)
    replayed[order] = start
    return Replay(float(link_free.max(initial=0.0)), replayed, _complete(schedule, ready))


def _complete(schedule: Schedule, ready: np.ndarray) -> bool:
    """All-gather: every device holds every chunk. All-to-all: every chunk reaches its target.
    Reduce-scatter: every device but a chunk's owner sends its partial sum of the chunk exactly once (after
    all it received of it, by the replay's order), the owner never, so the partial sums form a tree into the
    owner. All-reduce: both."""
    nodes, chunks = schedule.links.nodes, schedule.chunks
    if schedule.op is Collective.ALL_GATHER:
        return bool(np.all(np.isfinite(ready)))
    if schedule.op is Collective.ALL_TO_ALL:
        return schedule.target is not None and bool(np.all(np.isfinite(ready[schedule.target, np.arange(chunks)])))
    reducing = schedule.reducing
    sends = np.zeros((nodes, chunks), np.int64)
    np.add.at(sends, (schedule.src[reducing], schedule.chunk[reducing]), 1)
    expected = np.ones((nodes, chunks), np.int64)
    expected[schedule.owner, np.arange(chunks)] = 0
    if not np.array_equal(sends, expected):
        return False
    if schedule.op is Collective.REDUCE_SCATTER:
        return True
    got = np.zeros((nodes, chunks), np.int64)
    gathers = ~reducing
    np.add.at(got, (schedule.dst[gathers], schedule.chunk[gathers]), 1)
    return bool(np.array_equal(got, expected))


def schedule_graph(schedule: Schedule) -> TaskGraph:
    """The schedule as a task graph of the event simulator (see the module's docstring)."""
    links = schedule.links
    order = np.argsort(schedule.start, kind="stable")
    link, chunk = schedule.link[order], schedule.chunk[order]
    src, dst = links.src[link], links.dst[link]
    duration = (links.latency[link] + schedule.chunk_bytes / links.bandwidth[link]
                + np.where(schedule.reducing[order], schedule.reduce_s, 0.0))
    builder = GraphBuilder()
    last_on_link: dict[int, int] = {}
    into: dict[tuple[int, int], list[int]] = {}  # (device, chunk) -> the transfers bringing it there
    collective = schedule.op
    for k in range(len(order)):
        u, v, c, lk = int(src[k]), int(dst[k]), int(chunk[k]), int(link[k])
        deps = list(into.get((u, c), ()))
        if lk in last_on_link:
            deps.append(last_on_link[lk])
        task = builder.add(f"{c}:{u}->{v}", TaskKind.SEND, Category.DP, (u, v), None, float(duration[k]),
                           deps, bytes=schedule.chunk_bytes, group=f"link {lk}", collective=collective)
        last_on_link[lk] = task
        into.setdefault((v, c), []).append(task)
    return builder.graph(links.nodes)


def simulate_schedule(schedule: Schedule) -> float:
    """The schedule's time (s) as the event simulator runs it (durations rounded to whole nanoseconds)."""
    from armillary.simulate.engine import run

    return run(schedule_graph(schedule)).makespan_ns * 1e-9
