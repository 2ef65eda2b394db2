"""`algorithm: synthesized` in the collective model: the time of a schedule synthesized for one network
dimension's topology (`comm/synthesis.py`).

On a dimension whose links are all alike, a synthesized schedule is a number of rounds R, each one chunk
transfer (latency + chunk / link bandwidth), whatever the message size: the schedule is synthesized once per
(topology, ranks, collective) and its R scales to any size, T = R (alpha + n / (p c) / b_link) with c chunks
per rank (TACOS §IV-A's alpha-beta link model). The dimension's topology for p ranks: the dimension's torus
or mesh when the group fills it, else a ring of p (ring, and part of a torus or mesh), or p ranks on one
switch (switch, fully connected, fat-tree: unwound into direct links, `synthesis.from_graph`).
"""

from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np

from armillary.comm.synthesis import SYNTHESIZED_OPS, LinkGraph, from_graph, synthesize_best
from armillary.numerics import Array
from armillary.specs.communication import Collective
from armillary.specs.network import SWITCHED, NetworkDimension, NetworkKind

SEEDS = 8


def chunks_per_rank(kind: NetworkKind) -> int:
    """Two on rings, tori and meshes (each direction carries half of a rank's data); one on a switch (every
    rank sends its chunk straight to every other)."""
    return 1 if kind in SWITCHED else 2


def _links(kind: NetworkKind, shape: tuple[int, ...] | None, p: int) -> tuple[LinkGraph, int]:
    """Unit-bandwidth, zero-latency links of the dimension's topology for p ranks, and links per rank."""
    if kind in (NetworkKind.TORUS, NetworkKind.MESH) and shape is not None and math.prod(shape) == p:
        g = nx.grid_graph(dim=list(shape), periodic=kind is NetworkKind.TORUS)
        return from_graph(g, 1.0, 0.0), 2 * len(shape)
    if kind in SWITCHED:
        return from_graph(nx.complete_graph(p), 1.0, 0.0), max(p - 1, 1)
    return from_graph(nx.cycle_graph(p), 1.0, 0.0), 2


@functools.lru_cache(maxsize=128)
def rounds(op: Collective, kind: NetworkKind, shape: tuple[int, ...] | None, p: int) -> tuple[float, int]:
    """(chunk transfers on the critical path, links per rank) of the best synthesized schedule."""
    links, per_rank = _links(kind, shape, p)
    c = chunks_per_rank(kind)
    s = synthesize_best(op, links, float(p * c), c, SEEDS)
    return s.time, per_rank  # unit chunks over unit links: the time is the count of rounds


def synthesized_time(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension,
                     bandwidth: Array | None = None) -> tuple[Array, Array]:
    """(time, latency part) of `op` of `n_bytes` over p ranks of `net` with a synthesized schedule."""
    if op not in SYNTHESIZED_OPS:
        raise ValueError(f"algorithm 'synthesized' runs {[o.value for o in SYNTHESIZED_OPS]}, not {op.value}")
    if np.ndim(p) != 0:
        raise ValueError("algorithm 'synthesized' is costed for one group size at a time")
    ranks = int(p)
    if ranks <= 1:
        return 0.0 * n_bytes, 0.0 * n_bytes
    per_device = (net.bandwidth if bandwidth is None else bandwidth) * net.efficiency / net.shared_by
    r, per_rank = rounds(op, net.kind, net.shape, ranks)
    link = per_device / per_rank
    chunk = n_bytes / (ranks * chunks_per_rank(net.kind))
    fixed = r * net.latency
    return fixed + r * chunk / link, fixed + 0.0 * chunk
