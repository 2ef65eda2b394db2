"""How much of a communication stays on the critical path when compute can hide it."""

from __future__ import annotations

from armillary.numerics import Array, maximum


def exposed(comm: Array, hidden_behind: Array, overlap: Array) -> Array:
    """Communication left on the critical path: all of it (overlap 0), or what compute cannot hide
    (overlap 1): max(0, T_comm - T_overlappable) (docs/formulas.md §2.3)."""
    return maximum(0.0, comm - overlap * hidden_behind)


def exposed_fully(comm: Array, hidden_behind: Array) -> Array:
    """`exposed` at overlap 1, without its multiply by 1.0: max(0, T_comm - T_overlappable) (docs/formulas.md
    §2.3), bit for bit exposed(comm, hidden_behind, 1.0) for float64 times (IEEE 754 multiplication by one is
    exact: -0.0, inf and NaN kept)."""
    return maximum(0.0, comm - hidden_behind)


# Tensor-parallel communication overlapped tile by tile with the GEMM it feeds or drains (Wang et al., ASPLOS'23
# "Overlap communication with dependent computation via decomposition"; Transformer Engine's userbuffers). One
# GEMM of `gemm` seconds and its collective of `comm` seconds alone; returns the seconds the pair adds beyond
# the GEMM. `slowdown`: the share of the GEMM's compute units the communication kernels hold meanwhile.


def ring_exchange_exposed(comm: Array, gemm: Array, tiles: Array) -> Array:
    """All-gather into a GEMM in `tiles` steps around the ring (TE `ring_exchange`, num_splits = tp, copy
    engines): each step multiplies the tile in hand while the next arrives, the last tile with nothing left
    to fetch: g + (n - 1) max(g, C / (n - 1)) with g = G / n, so the exposed part is
    max(0, C - (1 - 1/n) G)."""
    n = maximum(tiles, 2.0)
    return maximum(0.0, comm - (1.0 - 1.0 / n) * gemm)


def pipelined_exposed(comm: Array, gemm: Array, splits: Array, slowdown: Array) -> Array:
    """A GEMM whose output is reduce-scattered in `splits` pieces as they are done (TE `pipeline`): the first
    piece computes alone, then each piece's reduce-scatter runs beside the next piece (slowed by `slowdown`),
    and the last reduce-scatter alone: g + (k - 1) max(g / (1 - u), c) + c with g = G / k, c = C / k."""
    g, c = gemm / splits, comm / splits
    return g + (splits - 1.0) * maximum(g / (1.0 - slowdown), c) + c - gemm

