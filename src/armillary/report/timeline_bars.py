"""A simulated step as bars a browser can draw, however many tasks it has: the step cut into `resolution`
time slices (about a pixel each); on each rank, a compute lane and a communication lane; each slice of a lane
takes the colour of the kind of work that fills most of it and a shade for how busy the lane was in it, and
runs of equal slices become one bar. The whole step is drawn; the report says how it was sliced."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.simulate.graph import Category, TaskGraph
from armillary.simulate.timeline import Timeline

RESOLUTION = 1000  # slices per step: about one per pixel of the plot area of a page-wide chart
LEVELS = 2  # shades of busy: up to half of the slice (pale), more than half (solid)
EMPTY = 1e-6  # a slice busy for less than this share is idle: below the rounding of the prefix sums
COMMUNICATION = frozenset({Category.TP, Category.CP, Category.EP, Category.PP, Category.DP})


@dataclass(frozen=True)
class Bars:
    """The bars of one kind of work: rank (its row), lane (0 compute, 1 communication), start and end (s),
    and how busy the lane was in them (a share rounded up to a step of 1 / LEVELS)."""

    category: Category
    rows: tuple[str, ...]
    lanes: tuple[int, ...]
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    busy: tuple[float, ...]


@dataclass(frozen=True)
class TimelineBars:
    bars: tuple[Bars, ...]
    tasks: int  # (task, rank) pairs that took time: a collective counts once per participant
    slice_s: float
    makespan_s: float

    @property
    def drawn(self) -> int:
        return sum(len(b.rows) for b in self.bars)


def occupancy(edges: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Seconds of the intervals [start, end) inside each slice between consecutive `edges`: the difference of
    busy(t) = sum over intervals of clip(t - start, 0, end - start), by prefix sums of the sorted bounds."""
    def until(bounds: np.ndarray) -> np.ndarray:
        b = np.sort(bounds)
        k = np.searchsorted(b, edges, side="left")
        return k * edges - np.r_[0.0, np.cumsum(b)][k]

    return np.diff(until(start) - until(end))


def timeline_bars(graph: TaskGraph, timeline: Timeline, resolution: int = RESOLUTION) -> TimelineBars:
    """The bars of `timeline` (sends, which hold no stream, and tasks that take no time left out)."""
    categories = list(Category)
    number = {c: i for i, c in enumerate(categories)}
    pairs = [(r, number[t.category], i) for i, t in enumerate(graph.tasks) if t.stream is not None for r in t.ranks]
    rank, category, index = (np.asarray(v, dtype=np.int64) for v in zip(*pairs, strict=True)) if pairs else (
        np.zeros(0, dtype=np.int64),) * 3
    start, end = timeline.start_ns[index] / 1e9, timeline.end_ns[index] / 1e9
    keep = end > start
    rank, category, start, end = rank[keep], category[keep], start[keep], end[keep]
    makespan = timeline.makespan_s
    edges = np.linspace(0.0, makespan, resolution + 1)
    width = makespan / resolution if makespan > 0 else 1.0
    lane = np.isin(category, [categories.index(c) for c in COMMUNICATION]).astype(np.int64)
    found: dict[int, list[tuple[str, int, float, float, float]]] = {}
    for r, ln in sorted(set(zip(rank.tolist(), lane.tolist(), strict=True))):
        mine = (rank == r) & (lane == ln)
        kinds = sorted(set(category[mine].tolist()))
        busy = np.array([occupancy(edges, start[mine & (category == c)], end[mine & (category == c)]) for c in kinds])
        top = busy.argmax(axis=0)
        share = np.minimum(busy.sum(axis=0) / width, 1.0)
        level = np.where(share > EMPTY, np.ceil(share * LEVELS - 1e-9), 0).clip(0, LEVELS)
        key = np.where(level > 0, top * (LEVELS + 1) + level, -1)
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        for a, b in zip(first, np.r_[first[1:], resolution], strict=True):
            if key[a] >= 0:
                found.setdefault(kinds[int(top[a])], []).append(
                    (graph.rank_labels[r], ln, float(edges[a]), float(edges[b]), float(level[a]) / LEVELS))
    bars = tuple(Bars(categories[c], *(tuple(v) for v in zip(*found[c], strict=True)))  # type: ignore[arg-type]
                 for c in sorted(found))
    return TimelineBars(bars, len(start), makespan / resolution, makespan)


def shade(busy: float) -> float:
    """Opacity of a bar whose lane is `busy` (a share, in steps of 1 / LEVELS): pale to solid."""
    return round(0.35 + 0.65 * (busy * LEVELS - 1) / max(LEVELS - 1, 1), 3)
