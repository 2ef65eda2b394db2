"""A system's devices, switches and links as a networkx graph, for inspection and for schedule synthesis.

Nodes are devices ("d{node}.{i}") and switches; edges carry `bandwidth` (bytes/s per direction, per link)
and `latency` (s) and `tier` ("scale_up" / "scale_out"). Scale-out fat-trees are rail-optimized: the i-th
device of every node hangs off leaf switch i, and the leaves meet at a spine whose links are divided by the
oversubscription.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx

from armillary.specs.system import Network, NetworkKind, System


def _device(node: int, i: int) -> str:
    return f"d{node}.{i}"


def _connect(g: nx.Graph, members: list[str], net: Network, tier: str, hub: str) -> None:
    """Join `members` with the network's wiring; `hub` names the switch where there is one."""
    bandwidth = net.bandwidth / net.shared_by
    link: dict[str, object] = {"bandwidth": bandwidth, "latency": net.latency, "tier": tier}
    k = len(members)
    if net.kind in (NetworkKind.SWITCH, NetworkKind.FAT_TREE):
        g.add_node(hub, kind="switch", in_network_reduction=net.in_network_reduction)
        g.add_edges_from(((hub, m) for m in members), **link)
    elif net.kind is NetworkKind.FULLY_CONNECTED:
        per_pair = {**link, "bandwidth": bandwidth / max(k - 1, 1)}
        g.add_edges_from(itertools.combinations(members, 2), **per_pair)
    elif net.kind is NetworkKind.RING:
        per_side = {**link, "bandwidth": bandwidth / 2}
        g.add_edges_from(((members[i], members[(i + 1) % k]) for i in range(k) if k > 1), **per_side)
    else:  # torus / mesh
        shape = list(net.shape) if net.shape else [k]
        if math.prod(shape) != k:
            raise ValueError(f"{net.name}: shape {shape} does not hold {k} members")
        grid = nx.grid_graph(dim=shape, periodic=net.kind is NetworkKind.TORUS)
        index = {coord: members[i] for i, coord in enumerate(sorted(grid.nodes))}
        per_link = {**link, "bandwidth": bandwidth / (2 * len(shape))}
        g.add_edges_from(((index[a], index[b]) for a, b in grid.edges), **per_link)


def topology_graph(system: System) -> nx.Graph:
    g = nx.Graph(name=system.name)
    n, d = system.nodes, system.devices_per_node
    for node in range(n):
        members = [_device(node, i) for i in range(d)]
        g.add_nodes_from(members, kind="device", node=node)
        _connect(g, members, system.scale_up, "scale_up", f"n{node}.switch")
    if n == 1:
        return g
    out = system.scale_out
    if out.kind is NetworkKind.FAT_TREE:  # rail-optimized leaves, one spine layer
        for i in range(d):
            _connect(g, [_device(node, i) for node in range(n)], out, "scale_out", f"leaf{i}")
        spine = {"bandwidth": out.bandwidth * n / out.oversubscription, "latency": out.latency, "tier": "scale_out"}
        g.add_node("spine", kind="switch", in_network_reduction=out.in_network_reduction)
        g.add_edges_from((("spine", f"leaf{i}") for i in range(d)), **spine)
    else:  # one plane per rail: device i of every node on its own switch / ring / torus
        for i in range(d):
            _connect(g, [_device(node, i) for node in range(n)], out, "scale_out", f"rail{i}")
    return g
