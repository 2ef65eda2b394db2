"""What a collective's cost on one network dimension is made of and labelled by: the transfer protocols
(NCCL's LL, LL128, Simple), the algorithms in label order, and one dimension's cost (`DimensionCost`)
(docs/formulas.md §1.2, §1.3). comm/algorithms.py computes them."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from armillary.memo import quick_init
from armillary.numerics import Array
from armillary.specs.communication import (
    ALG_DIRECT,
    ALG_HALVING_DOUBLING,
    ALG_IN_NETWORK,
    ALG_RING,
    ALG_SYNTHESIZED,
    ALG_TREE,
)

SIMPLE = "Simple"  # the protocol NVLS, CollNet and synthesized schedules run


@dataclass(frozen=True)
class Protocol:
    """A transfer protocol: fixed cost per collective, latency per step and bandwidth, relative to the
    network's Simple-protocol figures. NCCL defaults (src/graph/tuning.cc; docs/formulas.md §1.3): base
    latency 6.6 / 14 / 8.4 us; per NVLink hop 0.6 / 1.9 / 3.4 us; bandwidth x0.5 (LL, half of each word
    is a flag) / x0.92 (LL128, 120 of 128 bytes) / x1."""

    name: str
    base_latency_s: float
    hop_latency_factor: float
    bandwidth_factor: float


PROTOCOLS = (
    Protocol("LL", 6.6e-6, 0.6 / 3.4, 0.5),
    Protocol("LL128", 14e-6, 1.9 / 3.4, 0.92),
    Protocol("Simple", 8.4e-6, 1.0, 1.0),
)


@quick_init  # a dozen a collective (memo.quick_init: the same frozen dataclass, built faster)
@dataclass(frozen=True)
class DimensionCost:
    """Cost of a collective on one dimension: time (of which `fixed` is the latency part: the protocol's
    base cost and the per-step latencies), bytes sent per rank, and what was chosen."""

    time: Array
    sent_bytes: Array
    algorithm: Array  # index into ALGORITHMS
    protocol: Array  # index into PROTOCOLS
    fixed: Array = 0.0

    @property
    def transfer(self) -> Array:
        """The time that scales with the bytes: what pipelining across dimensions overlaps."""
        return self.time - self.fixed


NOTHING = DimensionCost(0.0, 0.0, 0, 0)
ALGORITHMS = (ALG_RING, ALG_TREE, ALG_HALVING_DOUBLING, ALG_DIRECT, ALG_IN_NETWORK, ALG_SYNTHESIZED)


class Rows(NamedTuple):
    """One dimension's costs under each protocol (in PROTOCOLS order), stacked: the times and the fixed costs with
    the protocol on a first axis (the sweep's axes after it; one configuration: one value a row), and per
    protocol the bytes sent and the (algorithm, protocol) labels. A flat ring weighs its protocols on these in one
    array pass (comm/flat_ring.py); `costs` gives them one by one."""

    time: np.ndarray
    sent: tuple[Array, ...]
    fixed: np.ndarray
    algorithm: tuple[int, ...]
    protocol: tuple[int, ...]

    def cost(self, k: int, scalar: bool) -> DimensionCost:
        """Protocol k's cost (one configuration's as plain floats; a sweep's as arrays of its own)."""
        if scalar:
            return DimensionCost(float(self.time[k]), self.sent[k], self.algorithm[k], self.protocol[k],
                                 float(self.fixed[k]))
        sent = self.sent[k]
        return DimensionCost(self.time[k].copy(), sent.copy() if isinstance(sent, np.ndarray) else sent,
                             self.algorithm[k], self.protocol[k], np.array(self.fixed[k]))

    def chosen(self, pick: np.ndarray, points: np.ndarray | None) -> DimensionCost:
        """Over a sweep, protocol `pick` at each point: what choosing each field by `pick` gives (np.choose), bit
        for bit, through cheaper gathers (`points`: np.arange over a flat `pick`, or None)."""
        sent = self.sent[0]
        if not all(x is sent for x in self.sent):
            sent = pick.choose(self.sent)  # type: ignore[arg-type]  # (numbers or arrays: choose takes either)
        elif type(sent) is np.ndarray and sent.shape == pick.shape:
            sent = sent.copy()  # (every protocol's: choose copies it)
        elif type(sent) is float:
            sent = np.full(pick.shape, sent)
        else:
            sent = pick.choose(self.sent)  # type: ignore[arg-type]
        return DimensionCost(_gathered(self.time, pick, points), sent, _labels(self.algorithm).take(pick),
                             _labels(self.protocol).take(pick), _gathered(self.fixed, pick, points))

    def costs(self, scalar: bool) -> tuple[DimensionCost, ...]:
        return tuple(self.cost(k, scalar) for k in range(len(self.algorithm)))

    @staticmethod
    def of(costs: tuple[DimensionCost, ...]) -> Rows:
        """Costs one by one, stacked (broadcast to one shape)."""
        return Rows(_stacked_values([c.time for c in costs]), tuple(c.sent_bytes for c in costs),
                    _stacked_values([c.fixed for c in costs]), tuple(int(c.algorithm) for c in costs),
                    tuple(int(c.protocol) for c in costs))


def _gathered(rows: np.ndarray, pick: np.ndarray, points: np.ndarray | None) -> np.ndarray:
    """rows[pick[j], j] at each point j: pick.choose(rows), as one fancy index where the rows are flat and full."""
    if points is not None and rows.ndim == 2 and rows.shape[1] == len(points):
        return rows[pick, points]
    return pick.choose(rows)


@functools.lru_cache(maxsize=256)
def _labels(labels: tuple[int, ...]) -> np.ndarray:
    """Labels as an array (read-only: shared) that `take` indexes: np.choose of the numbers, without converting
    each on every call."""
    column = np.array(labels)
    column.flags.writeable = False
    return column


def _stacked_values(values: list[Array]) -> np.ndarray:
    return np.stack(np.broadcast_arrays(*values)).astype(float, copy=False)
