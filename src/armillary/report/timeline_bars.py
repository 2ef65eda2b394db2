"""A simulated step as bars a browser can draw: every task on every rank it occupies, with tasks of one kind
on one rank that lie closer together than a pixel's worth of the step joined into one bar (which counts
them). The whole step is drawn, however many tasks it has; the report says how many were joined."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.simulate.graph import Category, TaskGraph
from armillary.simulate.timeline import Timeline

RESOLUTION = 2000  # bars per row at most: about one per pixel of a page-wide chart
COMMUNICATION = frozenset({Category.TP, Category.CP, Category.EP, Category.PP, Category.DP})


@dataclass(frozen=True)
class Bars:
    """The bars of one kind of work: row (rank label), start and end (s), tasks joined and their busy time."""

    category: Category
    rows: tuple[str, ...]
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    tasks: tuple[int, ...]
    busy_s: tuple[float, ...]  # sum of the joined tasks' durations (less than end - start where they left gaps)


@dataclass(frozen=True)
class TimelineBars:
    bars: tuple[Bars, ...]
    tasks: int  # (task, rank) pairs drawn: a collective counts once per participant
    joined_below_s: float  # tasks of one kind on one rank less than this apart share a bar
    makespan_s: float

    @property
    def drawn(self) -> int:
        return sum(len(b.rows) for b in self.bars)


def timeline_bars(graph: TaskGraph, timeline: Timeline, resolution: int = RESOLUTION) -> TimelineBars:
    """The bars of `timeline` (tasks that take no time, and sends that hold no stream, left out)."""
    categories = list(Category)
    rank, category, index = [], [], []
    for i, task in enumerate(graph.tasks):
        if task.stream is None:
            continue
        for r in task.ranks:
            rank.append(r)
            category.append(categories.index(task.category))
            index.append(i)
    idx = np.asarray(index, dtype=np.int64)
    start = timeline.start_ns[idx].astype(np.float64) / 1e9 if len(idx) else np.zeros(0)
    end = timeline.end_ns[idx].astype(np.float64) / 1e9 if len(idx) else np.zeros(0)
    keep = end > start
    key = (np.asarray(rank, dtype=np.int64) * len(categories) + np.asarray(category, dtype=np.int64))[keep]
    start, end = start[keep], end[keep]
    makespan = timeline.makespan_ns / 1e9
    gap = makespan / resolution
    order = np.lexsort((start, key))
    key, start, end = key[order], start[order], end[order]
    # a bar begins at a new (rank, category) or where a task starts later than `gap` after every earlier
    # task of its bar ended (the running maximum of the ends, per group)
    reach = np.empty_like(end)
    groups = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)
    for a, b in zip(groups, np.r_[groups[1:], len(key)], strict=True):
        reach[a:b] = np.maximum.accumulate(end[a:b])
    begins = np.r_[True, (key[1:] != key[:-1]) | (start[1:] > reach[:-1] + gap)] if len(key) else np.zeros(0, bool)
    first = np.flatnonzero(begins)
    bar_key, bar_start = key[first], start[first]
    bar_end = np.maximum.reduceat(end, first) if len(first) else end
    count = np.diff(np.r_[first, len(key)])
    busy = np.add.reduceat(end - start, first) if len(first) else end
    out = []
    for c, cat in enumerate(categories):
        mine = np.flatnonzero(bar_key % len(categories) == c)
        if not len(mine):
            continue
        out.append(Bars(cat, tuple(graph.rank_labels[int(k) // len(categories)] for k in bar_key[mine]),
                        tuple(bar_start[mine].tolist()), tuple(bar_end[mine].tolist()), tuple(count[mine].tolist()),
                        tuple(busy[mine].tolist())))
    return TimelineBars(tuple(out), len(key), gap, makespan)
