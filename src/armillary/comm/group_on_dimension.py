"""What a group of p ranks sees of one network dimension: the steps of a ring on a torus or mesh it fills, the
mean hops of an all-to-all share on a direct network, and its share of the dimension's bandwidth (a small
fully connected group, an oversubscribed fat tree) (docs/formulas.md §1.2)."""

from __future__ import annotations

import numpy as np

from armillary.numerics import Array
from armillary.specs.network import NetworkDimension, NetworkKind

# the network enums' members read once, as Collective's are (specs/communication.py says why)
_FAT_TREE = NetworkKind.FAT_TREE
_FULLY_CONNECTED = NetworkKind.FULLY_CONNECTED
_MESH = NetworkKind.MESH
_RAIL_OPTIMIZED = NetworkKind.RAIL_OPTIMIZED
_RING_NETWORK = NetworkKind.RING
_TORUS = NetworkKind.TORUS


def is_scalar(x: Array) -> bool:
    """One value (a number or a 0-d array), not a sweep."""
    return not isinstance(x, np.ndarray) or x.ndim == 0


def ring_hops(net: NetworkDimension, p: Array) -> Array | None:
    """Steps of one ring pass on a torus or mesh that the group fills: the ring runs dimension by dimension,
    sum(s_k - 1) steps instead of p - 1 (docs/formulas.md §1.2, multi-dimensional row)."""
    if net.shape is None or net.kind not in (_TORUS, _MESH):
        return None
    size = float(np.prod(net.shape))
    hops = float(sum(k - 1 for k in net.shape))
    if is_scalar(p):
        return hops if float(p) == size and p > 1 else None
    return np.where(np.asarray(p) == size, hops, np.maximum(np.asarray(p) - 1.0, 1.0))


def _line_distance(s: Array, wrap: bool) -> Array:
    """Summed hop distance from one position to all others of a line of s positions, averaged over the
    positions: a ring, shortest way round, floor(s^2 / 4); an open line (s^2 - 1) / 3 [derived]."""
    return np.floor(s * s / 4.0) if wrap else (s * s - 1.0) / 3.0


def all_to_all_hops(net: NetworkDimension, p: Array) -> Array:
    """Mean hops of an all-to-all share on a direct network: each rank's p - 1 shares travel shortest paths
    over the device's links (a ring, or a torus / mesh the group fills, dimension-order distances summed
    over the axes), so the bytes its links carry are the bytes it sends times the mean distance [derived:
    link load of shortest-path routing; the bound comm/all_to_all.bounds calls "link load"]. 1 on switched
    networks, where every share is one hop."""
    ranks = np.asarray(p, float)
    ring = np.maximum(_line_distance(ranks, True), 1.0) / np.maximum(ranks - 1.0, 1.0)
    if net.kind is _RING_NETWORK:
        return ring
    if net.kind in (_TORUS, _MESH) and net.shape is not None:
        size = float(np.prod(net.shape))
        wrap = net.kind is _TORUS
        filled = sum(size / k * _line_distance(float(k), wrap) for k in net.shape) / (size - 1.0)
        return np.where(ranks == size, filled, ring)  # a smaller group: a ring through the axes
    return 1.0


def bandwidth_scale(net: NetworkDimension, p: Array, bandwidth: Array | None, scalar: bool) -> Array:
    """The dimension's per-device bandwidth as a group of `p` ranks sees it, relative to `net.bandwidth`:
    `bandwidth` when swept; a small fully connected group reaches only its peers' links; a group beyond
    one leaf of an oversubscribed fat tree crosses the spines."""
    scale: Array = 1.0 if bandwidth is None else bandwidth / net.bandwidth
    if net.kind is _FULLY_CONNECTED and net.links:
        scale = scale * (min(max(p - 1, 1), net.links) if scalar else np.clip(p - 1, 1, net.links)) / net.links
    if net.kind in (_FAT_TREE, _RAIL_OPTIMIZED) and net.oversubscription > 1:
        beyond = 1.0 if net.leaf_size is None else (p > net.leaf_size)
        scale = scale / (1.0 + (net.oversubscription - 1.0) * (beyond if scalar else np.asarray(beyond, float)))
    return scale
