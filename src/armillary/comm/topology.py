"""A system's devices, switches and links as a networkx graph, for inspection, for schedule synthesis and for
routing flows in the simulator.

Devices are named by their coordinates, outermost first ("d{node}.{i}" on a two-dimension system). Along
each dimension, the devices that differ only in that coordinate (a node's devices; one rail across nodes)
are wired by the dimension's kind: a switch, direct links, a ring, a torus or mesh, or leaf switches of
`leaf_size` ports joined by one spine per dimension whose links are divided by the oversubscription (a
rail-optimized fat-tree: device i of every node on rail i). Edges carry `bandwidth` (bytes/s per direction,
per link), `latency` (s) and `dimension` (its index).
"""

from __future__ import annotations

import itertools
import math

import networkx as nx

from armillary.specs.network import NetworkDimension, NetworkKind
from armillary.specs.system import System


def device_name(coords: tuple[int, ...]) -> str:
    """`coords` innermost first, named outermost first."""
    return "d" + ".".join(str(c) for c in reversed(coords))


def _connect(g: nx.Graph, members: list[str], dim: NetworkDimension, index: int, hub: str) -> None:
    """Join `members` with the dimension's wiring; `hub` names its switches where it has them."""
    bandwidth = dim.bandwidth / dim.shared_by
    link: dict[str, object] = {"bandwidth": bandwidth, "latency": dim.latency, "dimension": index}
    k = len(members)
    if dim.kind is NetworkKind.SWITCH:
        g.add_node(hub, kind="switch", in_network_reduction=dim.in_network_reduction)
        g.add_edges_from(((hub, m) for m in members), **link)
    elif dim.kind in (NetworkKind.FAT_TREE, NetworkKind.RAIL_OPTIMIZED):
        leaf = dim.leaf_size or k
        spine = f"spine{index}"
        g.add_node(spine, kind="switch", in_network_reduction=dim.in_network_reduction)
        for j in range(0, k, leaf):
            name = f"{hub}.leaf{j // leaf}"
            g.add_node(name, kind="switch", in_network_reduction=dim.in_network_reduction)
            g.add_edges_from(((name, m) for m in members[j: j + leaf]), **link)
            if k > leaf:  # the leaf's uplinks carry its ports' bandwidth divided by the oversubscription
                uplink = {**link, "bandwidth": bandwidth * len(members[j: j + leaf]) / dim.oversubscription}
                g.add_edge(name, spine, **uplink)
    elif dim.kind is NetworkKind.FULLY_CONNECTED:
        per_pair = {**link, "bandwidth": bandwidth / max(k - 1, 1)}
        g.add_edges_from(itertools.combinations(members, 2), **per_pair)
    elif dim.kind is NetworkKind.RING:
        per_side = {**link, "bandwidth": bandwidth / 2}
        g.add_edges_from(((members[i], members[(i + 1) % k]) for i in range(k) if k > 1), **per_side)
    else:  # torus / mesh
        shape = list(dim.shape) if dim.shape else [k]
        if math.prod(shape) != k:
            raise ValueError(f"{dim.name}: shape {shape} does not hold {k} members")
        grid = nx.grid_graph(dim=shape, periodic=dim.kind is NetworkKind.TORUS)
        index_of = {coord: members[i] for i, coord in enumerate(sorted(grid.nodes))}
        per_link = {**link, "bandwidth": bandwidth / (2 * len(shape))}  # the injection over 2 links per axis
        g.add_edges_from(((index_of[a], index_of[b]) for a, b in grid.edges), **per_link)


def topology_graph(system: System) -> nx.Graph:
    g = nx.Graph(name=system.name)
    sizes = system.sizes
    coords = list(itertools.product(*(range(k) for k in reversed(sizes))))
    for c in coords:  # outermost first: the node is the position among the blocks of the innermost dimension
        node = 0
        for x, k in zip(c[:-1], reversed(sizes[1:]), strict=True):
            node = node * k + x
        g.add_node(device_name(c[::-1]), kind="device", node=node)
    for i, dim in enumerate(system.network):
        if sizes[i] <= 1:
            continue
        others = [range(k) for j, k in enumerate(sizes) if j != i]
        for rest in itertools.product(*others):
            line = []
            for position in range(sizes[i]):
                line.append(device_name((*rest[:i], position, *rest[i:])))
            tag = ".".join(str(x) for x in reversed(rest))
            hub = f"n{tag}.switch" if i == 0 else f"dim{i}.{tag}"
            _connect(g, line, dim, i, hub)
    return g
