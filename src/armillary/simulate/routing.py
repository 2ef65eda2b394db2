"""Routed flows: which switch uplinks a transfer crosses, and how much it loads them.

A fat-tree or rail-optimized dimension with `leaf_size` below its size and an oversubscription above 1 joins
its leaves through spines with less bandwidth than the leaves' ports: a leaf of k ports has k / o ports'
worth of uplink per direction (`comm/topology.py` wires the same graph). The analytical model charges every
group that leaves a leaf the full 1 / o (`comm/algorithms._bandwidth_scale`: every port of the leaf busy
at once). Here the simulator is told what each transfer really puts on each uplink at its full rate, in
units of one rank's link, and shares the uplinks max-min with whatever else crosses them
(`engine._fill`), so a lone ring is not slowed and eight concurrent cross-leaf streams are:
- all-to-all: each member sends (p - 1) equal shares, those to members on other leaves cross;
- a send between leaves: one rank's link, up at the source's leaf and down at the destination's;
- ring-based collectives (all-reduce, all-gather, reduce-scatter, broadcast, reduce): each ring edge
  between two leaves carries one rank's link bandwidth (the ring in group order, as placed).
Ranks are devices in the placement's order (rank r on device r, coordinates innermost first).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from armillary.simulate.graph import Columns, Routes, Task, TaskKind, Tier
from armillary.specs.communication import Collective
from armillary.specs.network import NetworkDimension, NetworkKind
from armillary.specs.system import System

UP, DOWN = 0, 1


def _oversubscribed(net: NetworkDimension) -> bool:
    return net.kind in (NetworkKind.FAT_TREE, NetworkKind.RAIL_OPTIMIZED) and net.oversubscription > 1


def tapered(net: NetworkDimension, size: int) -> bool:
    """Whether a dimension's leaves have less uplink than port bandwidth (without `leaf_size`, each member
    hangs off the oversubscribed spines on its own, as the analytical model reads it)."""
    return _oversubscribed(net) and (net.leaf_size or 1) < size


def untapered(system: System) -> System:
    """`system` with every oversubscribed dimension's oversubscription set to 1 (at any size: the system
    may be resized later): the durations of transfers whose sharing of the uplinks the simulator routes
    (else the analytical share would be counted twice)."""
    for d, net in enumerate(system.network):
        if _oversubscribed(net):
            system = system.with_dimension(d, oversubscription=1.0)
    return system


@dataclass(frozen=True)
class Leaves:
    """The leaves of `system`'s tapered dimensions: per dimension (`dims`), each device's leaf number and
    its block along the dimension, and how many ports its leaf has."""

    dims: tuple[int, ...]
    leaf: tuple[np.ndarray, ...]
    block: tuple[np.ndarray, ...]
    ports: tuple[np.ndarray, ...]
    oversubscription: tuple[float, ...]

    def capacity(self, k: int, leaf: int) -> float:
        """Uplink capacity of leaf `leaf` of the k-th tapered dimension, per direction, in rank links."""
        member = int(np.flatnonzero(self.leaf[k] == leaf)[0])
        return float(self.ports[k][member]) / self.oversubscription[k]

    def loads(self, t: Task) -> dict[tuple[int, int, int], float]:
        """(dimension, leaf, direction) -> the load transfer `t` puts on that uplink at its full rate."""
        return {(d, where, direction): load for k, d in enumerate(self.dims)
                for (where, direction), load in _loads(t, self.leaf[k], self.block[k]).items()}


def leaves(system: System) -> Leaves | None:
    """The leaves of the tapered dimensions of `system` (ranks placed on devices in order); None without any."""
    sizes = system.sizes
    dims = [d for d, (net, size) in enumerate(zip(system.network, sizes, strict=True)) if tapered(net, size)]
    if not dims:
        return None
    devices = np.arange(system.devices)
    leaf, blocks, ports = [], [], []
    for d in dims:
        stride, leaf_size = int(np.prod(sizes[:d])), system.network[d].leaf_size or 1
        along = (devices // stride) % sizes[d]
        block = along // leaf_size
        # a leaf: the devices sharing every other coordinate and the block of `leaf_size` along d
        leaf.append((devices - along * stride) * (-(-sizes[d] // leaf_size)) + block)
        blocks.append(block)
        ports.append(np.minimum(leaf_size, sizes[d] - block * leaf_size))
    return Leaves(tuple(dims), tuple(leaf), tuple(blocks), tuple(ports),
                  tuple(system.network[d].oversubscription for d in dims))


def routes(tasks: Sequence[Task], system: System) -> Routes | None:
    """The uplinks each scale-out transfer crosses on `system`'s tapered dimensions; None without any."""
    where = leaves(system)
    if where is None:
        return None
    number: dict[tuple[int, int, int], int] = {}  # (dimension, leaf, direction) -> link
    capacity: list[float] = []
    counts = np.zeros(len(tasks), dtype=np.int64)
    links: list[int] = []
    loads: list[float] = []
    cols = Columns.of(tasks)
    crossing = np.flatnonzero((cols.array("tier") == Tier.SCALE_OUT) & (cols.array("duration_ns") > 0)).tolist()
    for i in crossing:
        for key, load in where.loads(cols[i]).items():
            if key not in number:
                number[key] = len(capacity)
                capacity.append(where.capacity(where.dims.index(key[0]), key[1]))
            links.append(number[key])
            loads.append(load)
            counts[i] += 1
    if not links:
        return None
    first = np.zeros(len(tasks) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    return Routes(first, np.asarray(links, dtype=np.int64), np.asarray(loads), np.asarray(capacity))


def _loads(t: Task, leaf: np.ndarray, block: np.ndarray) -> dict[tuple[int, int], float]:
    """(leaf, direction) -> the load transfer `t` puts on that leaf's uplink at its full rate; traffic
    between members in the same block of the dimension stays below its spines."""
    at = block[list(t.ranks)].tolist()
    if len(set(at)) < 2:
        return {}
    on = leaf[list(t.ranks)].tolist()
    out: defaultdict[tuple[int, int], float] = defaultdict(float)
    if t.kind is TaskKind.SEND or t.collective is Collective.SEND_RECV:
        out[(on[0], UP)] += 1.0
        out[(on[-1], DOWN)] += 1.0
    elif t.collective is Collective.ALL_TO_ALL:
        p, per_block = len(at), Counter(at)
        for where, b in zip(on, at, strict=True):  # each member sends its p - 1 equal shares, some across
            out[(where, UP)] += (p - per_block[b]) / (p - 1)
            out[(where, DOWN)] += (p - per_block[b]) / (p - 1)
    else:  # a ring in group order
        for k in range(len(at)):
            n = (k + 1) % len(at)
            if at[k] != at[n]:
                out[(on[k], UP)] += 1.0
                out[(on[n], DOWN)] += 1.0
    return dict(out)
