"""A synthesized schedule as one candidate of a dimension's automatic choice (comm/synthesized_cost.py costs
it; imported only when asked for)."""

from __future__ import annotations

import numpy as np

from armillary.comm.algorithm_steps import steps_and_bytes
from armillary.comm.cost_types import ALGORITHMS, PROTOCOLS, SIMPLE, DimensionCost
from armillary.numerics import Array
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_RING,
    ALG_SYNTHESIZED,
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    Algorithm,
    Collective,
)
from armillary.specs.network import NetworkDimension


def synthesizable(op: Collective, p: Array, net: NetworkDimension, algorithm: Algorithm,
                   exclude: tuple[Algorithm, ...]) -> bool:
    """Whether auto should weigh a synthesized schedule: offered on the dimension, one collective it
    synthesizes, one group size (a synthesis per size), not excluded."""
    return (algorithm is ALG_AUTO and ALG_SYNTHESIZED in net.algorithms and SIMPLE in net.protocols
            and ALG_SYNTHESIZED not in exclude and np.ndim(p) == 0 and float(p) > 1
            and op in (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE))


def synthesized(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension,
                 bandwidth: Array | None) -> DimensionCost:
    """A synthesized schedule (comm/synthesized_cost.py; imported here only when asked for), run by a
    Simple-protocol kernel: its base cost is added."""
    from armillary.comm.synthesized_cost import synthesized_time

    if SIMPLE not in net.protocols:
        raise ValueError(f"algorithm 'synthesized' runs the Simple protocol, which the network {net.name!r} does not "
                         f"offer (protocols: {list(net.protocols)})")

    time, fixed = synthesized_time(op, n_bytes, p, net, bandwidth)
    time, fixed = time + PROTOCOLS[-1].base_latency_s, fixed + PROTOCOLS[-1].base_latency_s
    ring = steps_and_bytes(op, ALG_RING, n_bytes, p, 0.0)
    sent = 0.0 if ring is None else ring[1]
    return DimensionCost(time, sent, ALGORITHMS.index(ALG_SYNTHESIZED), len(PROTOCOLS) - 1, fixed)
