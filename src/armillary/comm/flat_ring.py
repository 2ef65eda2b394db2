"""The flat ring (NCCL Ring) over a group that spans several network dimensions (docs/formulas.md §1.5): one
ring through all p ranks, its channels spread over the rails; of the ring's edges a share f_i runs on
dimension i, f_i = (s_i - 1) / (s_i inner_i) below the group's top and 1 / inner_top at the top, and the
slowest dimension paces the ring."""

from __future__ import annotations

import numpy as np

from armillary.comm.algorithm_steps import bus_factor
from armillary.comm.composed import Composed
from armillary.comm.cost_types import PROTOCOLS
from armillary.comm.phase_net import PhaseNet
from armillary.numerics import Array, nan_maximum, where
from armillary.specs.communication import ALL_GATHER, ALL_REDUCE, BROADCAST, REDUCE, REDUCE_SCATTER, Collective

# the collectives a ring runs
RINGS = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE)
# NCCL tuning.cc (llMaxBws, x86 Intel hosts, as in the shipped GPU presets): the LL ring's bus bandwidth across
# 2 nodes and across 3 or more (the network proxy moves LL's flagged 8-byte lines); bytes/s
LL_NET_BUSBW = (39.0e9, 20.4e9)
_BASES = np.array([proto.base_latency_s for proto in PROTOCOLS])  # (read-only: shared)
_BASES.flags.writeable = False


def flat_ring(op: Collective, n: Array, net: PhaseNet, index: int) -> Composed | None:
    """One ring through all ranks, run with one protocol (the fastest); dimension i carries the share f_i
    of its edges. NCCL's ring model (src/graph/tuning.cc, ncclTopoTuneModel): time = latency + bytes /
    bandwidth, where the latency adds up the ring's steps, each at the latency of the link it crosses
    (base + intra-node steps x intra latency + inter-node steps x network latency: `_step_shares`) and the
    slowest link sets the bandwidth. Across nodes, LL's bus bandwidth is capped (`LL_NET_BUSBW`), and on a
    dimension with a per-channel limit every protocol's bus bandwidth is at most its share of channels x
    channel_bandwidth (each channel carries 1/channels of the message round the ring: comm/channels.py)."""
    if op not in RINGS:
        return None
    group, count, size = net.group, len(net.system.network), net.size
    inner = [group.inner(i) for i in range(count)]  # (each product once)
    shares = [where(net.top(i), 1.0 / inner[i], (group.spans[i] - 1) / (inner[i] * group.spans[i]))
              for i in range(count)]
    steps = _step_shares(size, inner)
    across = size / group.spans[0]  # blocks of the innermost dimension the ring visits (NCCL's nodes)
    ll_cap = where(across <= 2, LL_NET_BUSBW[0], LL_NET_BUSBW[1])
    ring_bytes = n * bus_factor(op, size)  # what each rank sends round the ring
    rows = [net.ring_rows(i, op, n * shares[i], steps[i]) for i in range(count)]
    # every protocol at once (a row each, `Rows`): the same operations per element as one protocol's ring.
    # The active dimensions and the fixed costs added in a loop as sum() adds them, from 0 (no generators)
    active: Array = 0
    fixed: Array = 0
    for r in rows:
        active = active + np.where(r.time > 0, 1.0, 0.0)
        fixed = fixed + r.fixed
    latency = fixed - np.maximum(active - 1.0, 0.0) * _BASES.reshape((len(PROTOCOLS),) + (1,) * (np.ndim(fixed) - 1))
    transfer = rows[0].time - rows[0].fixed
    for r in rows[1:]:
        transfer = np.maximum(transfer, r.time - r.fixed)
    if transfer.shape[1:] != np.shape(ring_bytes) and np.ndim(ring_bytes) >= transfer.ndim - 1:  # (rows of
        # nothing on every dimension: each protocol's row set in place below, so of the sweep's shape)
        transfer = np.broadcast_to(transfer, transfer.shape[:1] + np.broadcast_shapes(transfer.shape[1:],
                                                                                        np.shape(ring_bytes))).copy()
    for k, proto in enumerate(PROTOCOLS):
        if proto.name == "LL":
            transfer[k] = where(across > 1, nan_maximum(transfer[k], ring_bytes / ll_cap), transfer[k])
        for i, dim in enumerate(net.system.network):  # each channel moves its share of the ring (comm/channels.py)
            if dim.channels is not None and dim.channel_bandwidth is not None:
                cap = proto.bandwidth_factor * dim.channels * dim.channel_bandwidth
                transfer[k] = where(group.spans[i] > 1, nan_maximum(transfer[k], ring_bytes / cap), transfer[k])
            if proto.name in dim.ring_busbw:  # the protocol's own ceiling there (tuning.cc llMaxBws, LL128 caps)
                ceiling = ring_bytes / dim.ring_busbw[proto.name]
                transfer[k] = where(group.spans[i] > 1, nan_maximum(transfer[k], ceiling), transfer[k])
    time = latency + transfer
    # the fastest protocol, as `faster` folds them in order: the earlier kept where at most the later's time
    best: Array = time[0]
    pick: Array = 0
    for k in range(1, len(PROTOCOLS)):
        take = best <= time[k]
        best, pick = where(take, best, time[k]), where(take, pick, k)
    if not isinstance(pick, np.ndarray):  # one configuration: the protocol's costs as plain floats
        return Composed(float(best), tuple(r.cost(int(pick), True) for r in rows), index)
    points = np.arange(pick.size) if pick.ndim == 1 else None
    return Composed(best, tuple(r.chosen(pick, points) for r in rows), np.full(pick.shape, index))


def _step_shares(p: Array, inner: list[Array]) -> list[Array]:
    """The share of a flat ring's steps that cross dimension i (its latency counts that often): NCCL counts
    2(N-1) of an all-reduce's 2(p-1) steps as inter-node on N nodes (tuning.cc), the rest intra-node; in
    general c_i = (p / inner_i - 1) / (p - 1) of the steps leave a block of the dimensions below i, and
    dimension i takes c_i - c_(i+1)."""
    count = len(inner)  # (p: the group's size; inner[i]: its `Placement.inner(i)`)
    several, steps = p > 1, nan_maximum(p - 1, 1.0)  # (the same for every dimension: made once)
    left = [where(several, (p / inner[i] - 1) / steps, 0.0) for i in range(count)] + [0.0]
    return [left[i] - left[i + 1] for i in range(count)]

