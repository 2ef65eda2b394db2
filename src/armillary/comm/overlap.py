"""How much of a communication stays on the critical path when compute can hide it."""

from __future__ import annotations

import math

import numpy as np

from armillary.numerics import Array, maximum

# arrays from this many elements take `at_least_zero`'s comparison with a buffer of zeros (below, the buffer's view
# costs about what the faster loop saves)
ZEROS_FROM = 2048
_ZEROS = [np.zeros(0)]  # read-only zeros, grown to the largest array asked for (a search block's points)


def zeros_of(shape: tuple[int, ...]) -> np.ndarray:
    """A read-only array of +0.0 of `shape` (a view of a buffer shared by every caller)."""
    size = math.prod(shape)
    buffer = _ZEROS[0]
    if buffer.size < size:
        buffer = np.zeros(size)
        buffer.flags.writeable = False
        _ZEROS[0] = buffer
    return buffer[:size].reshape(shape)


def at_least_zero(x: Array) -> Array:
    """max(0, x) as `numerics.maximum(0.0, x)` gives it, bit for bit (NaN kept, numpy's maximum of +0.0 and -0.0):
    a large array, which its caller made for this and reads no more, compared with an array of zeros and written
    over. numpy's maximum loop runs about 3x faster on two arrays than on a number and an array (numpy 2.x: the
    number is a stride-0 operand), and a block's exposed-time passes run it over every point (issue 47)."""
    if type(x) is np.ndarray and x.size >= ZEROS_FROM and x.dtype == np.float64:
        return np.maximum(zeros_of(x.shape), x, out=x)
    return maximum(0.0, x)


def exposed(comm: Array, hidden_behind: Array, overlap: Array) -> Array:
    """Communication left on the critical path: all of it (overlap 0), or what compute cannot hide
    (overlap 1): max(0, T_comm - T_overlappable) (docs/formulas.md §2.3)."""
    return maximum(0.0, comm - overlap * hidden_behind)


def exposed_fully(comm: Array, hidden_behind: Array) -> Array:
    """`exposed` at overlap 1, without its multiply by 1.0: max(0, T_comm - T_overlappable) (docs/formulas.md
    §2.3), bit for bit exposed(comm, hidden_behind, 1.0) for float64 times (IEEE 754 multiplication by one is
    exact: -0.0, inf and NaN kept); the difference, a new array or number, taken to at least zero in place."""
    return at_least_zero(comm - hidden_behind)


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

