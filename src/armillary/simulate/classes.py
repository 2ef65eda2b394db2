"""Rank equivalence classes: ranks with the same program and the same contention share one simulation.

Every lane (rank) of a pipeline stage runs the same program (`training.py` emits each task once per lane);
what can set two lanes apart is the network: which leaf uplinks their transfers cross and what else crosses
them, and, through dependencies, anything that slows a rank they wait for. The partition is found by colour
refinement (1-dimensional Weisfeiler-Leman; Grohe, Kersting, Mladenov & Schweitzer, "Color Refinement and
its Applications", 2021) on the graph of ranks, communication instances (each group's or lane's transfer of
each kind, once: independent of micro-batches and layers) and uplinks, with roles and loads as edge labels.
The stable colouring is an equitable partition: ranks of a class are in instances of the same classes, an
instance's members and uplinks fall in the same classes with the same loads, an uplink carries the same loads
from each class of instance. So the event engine (dependencies, program order, progressive filling) treats
every member of a class alike at every instant, and simulating one representative per class is exact: its
transfers load a representative uplink of each class with the sum of their instances' loads on it, against
that uplink's capacity. Classes are kept consistent across stages (lane i of every stage in one class), so
the pipeline's sends (lane i to lane i) map class to class.

Without a tapered tier nothing sets lanes apart: one class per stage, the symmetric graph.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from armillary.simulate.graph import Category, Routes, Stream, Task, TaskGraph, TaskKind, Tier
from armillary.simulate.routing import Leaves, leaves
from armillary.simulate.training import Layout, layout
from armillary.specs.communication import Collective
from armillary.specs.strategy import Strategy
from armillary.specs.system import System

_DP_STREAMS = (Stream.DP, Stream.DP_GATHER)
# roles of a rank in an instance: a collective's member, a send's source, a send's destination
_MEMBER, _SOURCE, _DESTINATION = 0, 1, 2


class Template(NamedTuple):
    """A kind of communication instance: over each TP x CP group ("tp") or DP group ("dp") of a stage, or a
    send from each lane of a stage to the same lane of `target`; its operation and tier."""

    group: str
    stage: int
    target: int
    collective: Collective | None
    tier: Tier


Key = tuple[Template, tuple[int, ...]]  # a template and the classes of an instance's members


def transfer_key(t: Task, classes: int) -> Key | None:
    """What kind of communication instance task `t` of a class graph (rank = stage x `classes` + class) is, and
    the classes of its members; None for a task that is not a transfer between ranks."""
    if t.kind is TaskKind.SEND:
        (src, dst) = (t.ranks[0], t.ranks[-1])
        return Template("send", src // classes, dst // classes, t.collective, t.tier), (src % classes, dst % classes)
    if t.kind is TaskKind.COLLECTIVE:
        stage = t.ranks[0] // classes
        members = tuple(sorted({r % classes for r in t.ranks}))
        return Template("dp" if t.stream in _DP_STREAMS else "tp", stage, stage, t.collective, t.tier), members
    return None


@dataclass(frozen=True, eq=False)
class RankClasses:
    """Lanes of a stage in classes (the same for every stage), the class graph's layout, and the routed
    load each transfer of the class graph puts on each class of uplink."""

    lane_class: np.ndarray  # per lane (index within a stage), its class; classes numbered by first lane
    sizes: tuple[int, ...]  # lanes per class
    layout: Layout  # the class graph's ranks: stage x classes + class
    devices: np.ndarray  # (stage, lane) -> device
    loads: Mapping[Key, Mapping[int, float]]  # transfer key -> uplink class -> load
    capacity: tuple[float, ...]  # per uplink class, of its representative

    @property
    def count(self) -> int:
        return len(self.sizes)

    def rank_of(self, device: int) -> int:
        """The class-graph rank that simulates `device`."""
        stage, lane = (int(x[0]) for x in np.nonzero(self.devices == device))
        return stage * self.count + int(self.lane_class[lane])

    def routes(self, graph: TaskGraph) -> Routes | None:
        """The class graph's routed uplinks: each scale-out transfer on the uplink classes its instances cross."""
        if not self.capacity:
            return None
        cols = graph.columns
        counts = np.zeros(len(cols), dtype=np.int64)
        links: list[int] = []
        weights: list[float] = []
        crossing = (cols.array("tier") == Tier.SCALE_OUT) & (cols.array("duration_ns") > 0)
        for i in np.flatnonzero(crossing).tolist():
            key = transfer_key(cols[i], self.count)
            if key is None:
                continue
            on = self.loads[key]
            links += on.keys()
            weights += on.values()
            counts[i] = len(on)
        first = np.zeros(len(graph.tasks) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        return Routes(first, np.asarray(links, dtype=np.int64), np.asarray(weights), np.asarray(self.capacity))


class _Pattern:
    """The refinement's graph: ranks (stage x lanes + lane), instances and uplinks, with labelled edges."""

    def __init__(self, full: Layout, stages: int, templates: Sequence[Template], where: Leaves | None) -> None:
        self.lanes = len(full.lanes[0])
        self.devices = np.asarray(full.lanes, dtype=np.int64)
        self.keys: list[tuple[Template, tuple[int, ...]]] = []  # per instance: its template, its lanes
        self.members: list[list[tuple[int, int]]] = []  # per instance: (rank node, role)
        self.on: list[list[tuple[int, float]]] = []  # per instance: (uplink, load)
        self.template: list[int] = []
        number: dict[tuple[int, int, int], int] = {}
        self.capacity: list[float] = []
        self.direction: list[int] = []
        for k, key in enumerate(templates):
            group, s = key.group, key.stage
            instances: list[tuple[list[tuple[int, int]], tuple[int, ...]]]
            if group == "send":
                instances = [([(s * self.lanes + i, _SOURCE), (key.target * self.lanes + i, _DESTINATION)], (i,))
                             for i in range(self.lanes)]
            else:
                instances = [([(s * self.lanes + i, _MEMBER) for i in g], tuple(g))
                             for g in (full.dp_groups if group == "dp" else full.tp_groups)]
            routed = where is not None and key.tier is Tier.SCALE_OUT
            for members, lanes in instances:
                on: list[tuple[int, float]] = []
                if routed and where is not None:
                    send = group == "send"
                    ranks = tuple(int(self.devices[r // self.lanes, r % self.lanes]) for r, _ in members)
                    task = Task("", TaskKind.SEND if send else TaskKind.COLLECTIVE, Category.DP, ranks, None, 1,
                                tier=Tier.SCALE_OUT, collective=key.collective)
                    for uplink, load in where.loads(task).items():
                        if uplink not in number:
                            number[uplink] = len(self.capacity)
                            self.capacity.append(where.capacity(where.dims.index(uplink[0]), uplink[1]))
                            self.direction.append(uplink[2])
                        on.append((number[uplink], load))
                self.keys.append((key, lanes))
                self.members.append(members)
                self.on.append(on)
                self.template.append(k)
        self.ranks = stages * self.lanes
        self.rank_in: list[list[tuple[int, int]]] = [[] for _ in range(self.ranks)]
        self.link_in: list[list[tuple[int, float]]] = [[] for _ in self.capacity]
        for g, members in enumerate(self.members):
            for r, role in members:
                self.rank_in[r].append((g, role))
            for link, load in self.on[g]:
                self.link_in[link].append((g, load))

    def refine(self, ranks: list[Hashable]) -> tuple[list[int], list[int], list[int]]:
        """The stable colouring from rank colours `ranks` (instances by template, uplinks by capacity and
        direction): each round a node's colour becomes its colour with the multiset of its neighbours'
        colours and edge labels, until no class splits."""
        rc = _relabel(ranks)
        ic = _relabel(self.template)
        lc = _relabel(list(zip(self.capacity, self.direction, strict=True)))
        counts = (max(rc, default=-1), max(ic, default=-1), max(lc, default=-1))
        while True:
            rc_new = _relabel([(rc[r], tuple(sorted((ic[g], role) for g, role in self.rank_in[r])))
                               for r in range(self.ranks)])
            ic_new = _relabel([(ic[g], tuple(sorted((rc[r], role) for r, role in self.members[g])),
                                tuple(sorted((lc[k], load) for k, load in self.on[g]))) for g in range(len(ic))])
            lc_new = _relabel([(lc[k], tuple(sorted((ic[g], load) for g, load in self.link_in[k])))
                               for k in range(len(lc))])
            rc, ic, lc = rc_new, ic_new, lc_new
            now = (max(rc, default=-1), max(ic, default=-1), max(lc, default=-1))
            if now == counts:
                return rc, ic, lc
            counts = now


def _relabel(signatures: Sequence[Hashable]) -> list[int]:
    """Colours numbered in order of first appearance."""
    number: dict[Hashable, int] = {}
    return [number.setdefault(s, len(number)) for s in signatures]


def templates_of(graph: TaskGraph) -> list[Template]:
    """The kinds of communication instance in the symmetric graph `graph` (one rank per stage), and a
    membership instance of every stage's TP x CP and DP groups (they tie lanes together even without
    transfers)."""
    found: dict[Template, None] = {}
    for s in range(graph.ranks):
        found[Template("tp", s, s, None, Tier.NONE)] = None
        found[Template("dp", s, s, None, Tier.NONE)] = None
    for t in graph.tasks:
        key = transfer_key(t, 1)
        if key is not None:
            found[key[0]] = None
    return list(found)


def rank_classes(strategy: Strategy, dp: int, system: System, symmetric: TaskGraph,
                 stragglers: Mapping[int, float] | None = None) -> RankClasses:
    """The classes of the every-rank graph of `strategy` on `system`'s devices (`dp` data-parallel ranks),
    the kinds of transfer read from `symmetric` (its one-rank-per-stage graph). A straggler device (compute
    slowdown per device) starts in a class of its own factor, so it and what it slows are set apart."""
    full = layout(strategy, dp, False)
    pattern = _Pattern(full, strategy.pp, templates_of(symmetric), leaves(system))
    lane_class, instance_colours, uplink_colours = _lane_classes(pattern, strategy.pp, stragglers or {})
    count = int(lane_class.max()) + 1
    sizes = tuple(int(n) for n in np.bincount(lane_class, minlength=count))
    class_layout = _class_layout(full, pattern, lane_class, sizes, strategy.pp)
    loads, capacity = _class_loads(pattern, lane_class, instance_colours, uplink_colours)
    return RankClasses(lane_class, sizes, class_layout, pattern.devices, loads, capacity)


def _lane_classes(pattern: _Pattern, stages: int, slow: Mapping[int, float]) -> tuple[np.ndarray, list[int],
                                                                                      list[int]]:
    """(the class of each lane, the colours of the transfer instances, the colours of the uplinks): the
    pattern refined from the stage and straggler factor of each rank until a lane's ranks agree across
    stages."""
    lanes = pattern.lanes
    seed: list[Hashable] = [(r // lanes, slow.get(int(pattern.devices[r // lanes, r % lanes]), 1.0))
                            for r in range(pattern.ranks)]
    while True:
        rc, ic, lc = pattern.refine(seed)
        lane_class = np.asarray(_relabel([tuple(rc[s * lanes + i] for s in range(stages)) for i in range(lanes)]))
        again: list[Hashable] = [(seed[r], int(lane_class[r % lanes])) for r in range(pattern.ranks)]
        if len(set(again)) == len(set(rc)):  # lanes agree across stages already
            return lane_class, ic, lc
        seed = again


def _class_layout(full: Layout, pattern: _Pattern, lane_class: np.ndarray, sizes: tuple[int, ...],
                  stages: int) -> Layout:
    """The layout of one rank per class and stage: its groups the classes of the full layout's, each labelled
    by its first rank and the ranks alike."""
    count = len(sizes)
    first_lane = [int(np.flatnonzero(lane_class == c)[0]) for c in range(count)]

    def grouped(groups: list[list[int]]) -> list[list[int]]:
        by_class: dict[int, tuple[int, ...]] = {}
        for g in groups:
            members = tuple(sorted({int(lane_class[i]) for i in g}))
            for c in members:
                if by_class.setdefault(c, members) != members:
                    raise AssertionError(f"rank classes split a group inconsistently: class {c}")
        return [list(m) for m in dict.fromkeys(by_class[c] for c in range(count))]

    labels = tuple(f"{full.labels[int(pattern.devices[s, first_lane[c]])]}"
                   + (f" (+{sizes[c] - 1} alike)" if sizes[c] > 1 else "")
                   for s in range(stages) for c in range(count))
    return Layout([[s * count + c for c in range(count)] for s in range(stages)],
                  grouped(full.tp_groups), grouped(full.dp_groups), labels,
                  tuple(sizes[c] for _ in range(stages) for c in range(count)))


def _class_loads(pattern: _Pattern, lane_class: np.ndarray, ic: list[int], lc: list[int]
                 ) -> tuple[dict[Key, Mapping[int, float]], tuple[float, ...]]:
    """(the uplink loads of each class of transfer, the capacity of each class of uplink): a representative
    uplink per class, each class of instance loading it with the sum of its instances' loads."""
    representative = dict.fromkeys(range(max(lc, default=-1) + 1), -1)
    for k, colour in enumerate(lc):
        if representative[colour] < 0:
            representative[colour] = k
    totals: defaultdict[tuple[int, int], float] = defaultdict(float)  # (instance colour, uplink) -> load
    for g, crossed in enumerate(pattern.on):
        for k, load in crossed:
            totals[(ic[g], k)] += load
    by_colour: dict[int, dict[int, float]] = defaultdict(dict)
    for (colour, k), load in totals.items():
        known = by_colour[colour].setdefault(lc[k], load)
        if abs(known - load) > 1e-9 * max(1.0, load):
            raise AssertionError("rank classes are not equitable: an uplink class carries unequal loads")
    loads: dict[Key, Mapping[int, float]] = {}
    for g, (key, lane_set) in enumerate(pattern.keys):
        classes = (tuple(int(lane_class[i]) for i in (lane_set * 2)[:2]) if key.group == "send"
                   else tuple(sorted({int(lane_class[i]) for i in lane_set})))
        summed: Mapping[int, float] = by_colour.get(ic[g], {})
        if loads.setdefault((key, classes), summed) != summed:
            raise AssertionError("rank classes are not equitable: one class of transfer loads uplinks unequally")
    return loads, tuple(pattern.capacity[representative[c]] for c in range(len(representative)))
