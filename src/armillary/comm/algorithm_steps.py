"""Each algorithm's alpha-beta terms on one network dimension: latency steps and bytes sent per rank
(docs/formulas.md §1.2; Thakur, Rabenseifner & Gropp 2005; Chan et al. 2007; the table in comm/algorithms.py),
and nccl-tests' bus bandwidth factor."""

from __future__ import annotations

from armillary.numerics import Array, minimum
from armillary.specs.communication import (
    ALG_DIRECT,
    ALG_HALVING_DOUBLING,
    ALG_IN_NETWORK,
    ALG_RING,
    ALG_SYNTHESIZED,
    ALG_TREE,
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    BROADCAST,
    REDUCE,
    REDUCE_SCATTER,
    Algorithm,
    Collective,
)


def bus_factor(op: Collective, ranks: Array) -> Array:
    """nccl-tests' busbw / algbw factor (doc/PERFORMANCE.md; docs/formulas.md §1.4): the bytes each rank
    sends in a ring over `ranks`, per byte of the message."""
    if op is ALL_REDUCE:
        return 2 * (ranks - 1) / ranks
    if op in (REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL):
        return (ranks - 1) / ranks
    return 1.0 + 0 * ranks


def steps_and_bytes(op: Collective, alg: Algorithm, n: Array, p: Array,
                     log_p: Array, two_shot: bool = False) -> tuple[Array, Array] | None:
    """(latency steps, bytes sent per rank) of `alg` for `op`, or None where it does not apply; `two_shot`:
    a direct all-reduce is a reduce-scatter then an all-gather (ASTRA-sim's direct), not one-shot.
    Works on floats and on arrays alike."""
    steps = p - 1  # (the ring's steps, made once: what every `p - 1` below gives)
    frac = steps / p
    if alg is ALG_SYNTHESIZED:  # costed by comm/synthesized_cost.py when pinned
        return None
    if op is ALL_REDUCE:
        if alg is ALG_RING:
            return 2 * steps, 2 * frac * n
        if alg is ALG_TREE:  # double binary tree: each rank is inner in one tree, a leaf in the other
            return 2 * log_p, minimum(p, 4.0) / 2 * n
        if alg is ALG_HALVING_DOUBLING:
            return 2 * log_p, 2 * frac * n
        if alg is ALG_DIRECT:  # one-shot, or two one-step phases (ASTRA-sim AllToAll.cc)
            return (2.0 + 0 * p, 2 * frac * n) if two_shot else (1.0 + 0 * p, (p - 1) * n)
        return 2.0 + 0 * p, n + 0 * p  # in-network: send n up, receive n reduced
    if op in (REDUCE_SCATTER, ALL_GATHER):
        if alg is ALG_RING:
            return steps, frac * n
        if alg is ALG_HALVING_DOUBLING:
            return log_p, frac * n
        if alg is ALG_DIRECT:
            return 1.0 + 0 * p, frac * n
        if alg is ALG_IN_NETWORK:
            return 2.0 + 0 * p, (n + 0 * p if op is REDUCE_SCATTER else frac * n)
        return None
    if op is ALL_TO_ALL:  # pairwise exchange (ring order) or all at once (direct)
        if alg is ALG_RING:
            return p - 1, frac * n
        return (1.0 + 0 * p, frac * n) if alg is ALG_DIRECT else None
    if op in (BROADCAST, REDUCE):  # pipelined chain, binomial tree, scatter + gather
        if alg is ALG_RING:
            return p - 1, n + 0 * p
        if alg is ALG_TREE:
            return log_p, log_p * n
        return (log_p + p - 1, 2 * frac * n) if alg is ALG_HALVING_DOUBLING else None
    # send / receive
    return (1.0 + 0 * p, n + 0 * p) if alg in (ALG_DIRECT, ALG_RING) else None
