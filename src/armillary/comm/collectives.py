"""Cost of collectives on a network of any number of dimensions.

Each dimension runs its fastest algorithm and protocol (`algorithms.py`); `compose.py` puts the dimensions
together (flat ring over the rails, phases pipelined across dimensions, or phases one after another). The
estimator takes its communication costs from here; the search and the simulators take them through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from armillary.comm.algorithms import DimensionCost, dimension_cost
from armillary.comm.compose import compose
from armillary.comm.composed import COMPOSITIONS
from armillary.comm.fabrics import all_to_all_slowdown
from armillary.comm.libraries import choose, fastest, library_names
from armillary.memo import IdentityCache, quick_init
from armillary.numerics import Array, is_array
from armillary.plan.placement import Placement
from armillary.specs.communication import (
    ALG_AUTO,
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    ANY_COMPOSITION,
    REDUCE_SCATTER,
    SEND_RECV,
    Algorithm,
    Collective,
    Composition,
)
from armillary.specs.system import System


@quick_init  # a few a collective, and the estimators add and scale them (memo.quick_init)
@dataclass(frozen=True)
class CommCost:
    """Time of a collective and the bytes each device sends inside its scale-up domain (the innermost
    dimension) and beyond it (all outer dimensions)."""

    time: Array
    scale_up_bytes: Array
    scale_out_bytes: Array
    __array_ufunc__ = None  # `array * cost` must call CommCost.__rmul__, not broadcast into an object array

    def __add__(self, other: CommCost) -> CommCost:
        return CommCost(self.time + other.time, self.scale_up_bytes + other.scale_up_bytes,
                        self.scale_out_bytes + other.scale_out_bytes)

    def __mul__(self, k: Array) -> CommCost:
        return CommCost(self.time * k, self.scale_up_bytes * k, self.scale_out_bytes * k)

    __rmul__ = __mul__


NO_COMM = CommCost(0.0, 0.0, 0.0)


def needed(cost: Callable[[], CommCost], used: Array) -> CommCost:
    """A collective only where it is used: skipped for a single configuration that does not use it, zeroed
    at the points of a sweep that do not (so callers never add the cost of an unused call)."""
    if isinstance(used, np.ndarray):
        if not used.any():  # no point uses it: not composed, the zeros cost x 0 gives (a composed cost's times and
            # bytes are finite and non-negative), on the points' shape
            return CommCost(np.zeros(used.shape), np.zeros(used.shape), np.zeros(used.shape))
        return cost() * np.where(used, 1.0, 0.0)
    return cost() if used else NO_COMM


@quick_init  # one a collective (memo.quick_init)
@dataclass(frozen=True)
class CollectiveResult:
    """A collective's cost, how the dimensions were composed and, per dimension, what its phase chose
    (algorithm and protocol) and the bytes each device sends on it."""

    cost: CommCost
    dimensions: tuple[DimensionCost, ...]
    composition: Array  # index into COMPOSITIONS
    library: Array = -1  # index into comm.libraries.library_names(system); -1: the dimensions' own figures

    @property
    def composition_name(self) -> str:
        return COMPOSITIONS[int(np.asarray(self.composition).flat[0])].value


# One configuration's collectives, per system (by identity, as comm/algorithms.py and cost/compute.py keep their
# look-ups): the result of each call's inputs as given, values and types (an int and a float of the same value
# give results of different types). A pure function of frozen inputs, so a repeated call (the estimator's layer
# kinds, a sweep over strategies that sends the same message over the same group) is a look-up; bounded, the
# oldest dropped. A sweep's arrays do not hash and are computed each time (the search has compose_memo).
SCALAR_PER_SYSTEM = 1024
_SCALAR: IdentityCache[System, dict[tuple[object, ...], object]] = IdentityCache(32)


def _table() -> dict[tuple[object, ...], object]:
    return {}


def _kept(system: System, key: tuple[object, ...]) -> tuple[dict[tuple[object, ...], object] | None, object]:
    """The system's table and what it holds under `key` (None); no table where the key does not hash."""
    table = _SCALAR.get(system, lambda _: _table())
    try:
        return table, table.get(key)
    except TypeError:  # an array among the inputs: a sweep
        return None, None


def _keep(table: dict[tuple[object, ...], object], key: tuple[object, ...], n_bytes: Array, value: object) -> None:
    if n_bytes == 0:  # -0.0 equals 0.0 as a key, not as a result: zero messages are not kept
        return
    if len(table) >= SCALAR_PER_SYSTEM:
        table.pop(next(iter(table)), None)  # the oldest (None: another thread took it)
    table[key] = value


def collective(op: Collective, n_bytes: Array, group: Placement, system: System,
               algorithm: Algorithm = ALG_AUTO, bandwidths: tuple[Array | None, ...] | None = None,
               composition: Composition = ANY_COMPOSITION) -> CollectiveResult:
    """Cost of `op` over `group` (its ranks spread over the dimensions, `group.spans`): the fastest
    composition the system's library offers (or the pinned one), each dimension's phase with its fastest
    algorithm (or the pinned one, where it can run). The per-device bandwidths of the dimensions may be given
    as arrays to sweep them (None keeps a dimension's own). One configuration's result is kept (`_SCALAR`)."""
    spans = group.spans  # (the members, which live as long as the program, by identity: Enum's __hash__ is slower)
    if bandwidths is not None or type(op) is not Collective or type(algorithm) is not Algorithm or (
            type(composition) is not Composition) or type(n_bytes) is np.ndarray or is_array(*spans):
        # swept or given bandwidths, names not the members, or a sweep (its arrays do not hash): not kept
        return _collective(op, n_bytes, group, system, algorithm, bandwidths, composition)
    key = (id(op), id(algorithm), id(composition), n_bytes, type(n_bytes), spans, *map(type, spans))
    table, held = _kept(system, key)
    if held is not None:
        return held  # type: ignore[return-value]
    result = _collective(op, n_bytes, group, system, algorithm, bandwidths, composition)
    if table is not None:
        _keep(table, key, n_bytes, result)
    return result


def _collective(op: Collective, n_bytes: Array, group: Placement, system: System, algorithm: Algorithm,
                bandwidths: tuple[Array | None, ...] | None, composition: Composition) -> CollectiveResult:
    """`collective`, computed."""
    if op is SEND_RECV:
        raise ValueError(f"{op.value} is point-to-point: use send_recv")
    if library_names(system):  # several libraries: the fastest per call (comm/libraries.py)
        best, index = fastest(lambda view: _collective(op, n_bytes, group, view, algorithm, bandwidths, composition),
                              lambda r: r.cost.time, system, _pick_result, op)
        return replace(best, library=index)
    composed = compose(op, n_bytes, group, system, algorithm, bandwidths, composition)
    sent = composed.dimensions
    # the outer dimensions' bytes; of one outer dimension, what sum() gives without its generator (0 + x)
    outer = 0.0 if len(sent) < 2 else 0 + sent[1].sent_bytes if len(sent) == 2 else sum(d.sent_bytes for d in sent[1:])
    return CollectiveResult(CommCost(composed.time, sent[0].sent_bytes, outer), sent, composed.composition)


def _pick_cost(costs: Sequence[CommCost], k: Array) -> CommCost:
    return CommCost(choose(k, [c.time for c in costs]), choose(k, [c.scale_up_bytes for c in costs]),
                    choose(k, [c.scale_out_bytes for c in costs]))


def _pick_result(results: Sequence[CollectiveResult], k: Array) -> CollectiveResult:
    """Per point, the result of library k (for sweeps, where the fastest library varies by point)."""
    dims = tuple(DimensionCost(*(choose(k, [getattr(r.dimensions[i], f) for r in results])
                                 for f in ("time", "sent_bytes", "algorithm", "protocol", "fixed")))
                 for i in range(len(results[0].dimensions)))
    return CollectiveResult(_pick_cost([r.cost for r in results], k), dims,
                            choose(k, [r.composition for r in results]))


def all_gather(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """All-gather of an n-byte result (each rank holds n/p)."""
    return collective(ALL_GATHER, n_bytes, group, system).cost


def reduce_scatter(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """Reduce-scatter of an n-byte input."""
    return collective(REDUCE_SCATTER, n_bytes, group, system).cost


def all_reduce(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """All-reduce of an n-byte buffer."""
    return collective(ALL_REDUCE, n_bytes, group, system).cost


def send_recv(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """Point-to-point transfer between neighbours of `group` (pipeline stages, context-parallel ring) on the
    outermost dimension the group spans, whose link paces the exchange (docs/formulas.md §1.1), with its
    best protocol (and, where the network lists libraries, the fastest library)."""
    spans = group.spans
    key = (id(SEND_RECV), n_bytes, type(n_bytes), spans, *map(type, spans))  # (SEND_RECV: a member, as above)
    table, held = _kept(system, key)
    if held is not None:
        return held  # type: ignore[return-value]
    cost = _send_recv(n_bytes, group, system)
    if table is not None:
        _keep(table, key, n_bytes, cost)
    return cost


def _send_recv(n_bytes: Array, group: Placement, system: System) -> CommCost:
    """`send_recv`, computed."""
    if library_names(system):
        return fastest(lambda view: _send_recv(n_bytes, group, view), lambda c: c.time, system, _pick_cost,
                       SEND_RECV)[0]
    rate = system.device.hbm.rate
    outermost = group.outermost
    if not isinstance(outermost, np.ndarray):
        time = dimension_cost(SEND_RECV, n_bytes, 2.0, system.network[int(outermost)], rate).time
    else:
        time = sum(np.where(outermost == i, dimension_cost(SEND_RECV, n_bytes, 2.0, dim, rate).time, 0.0)
                   for i, dim in enumerate(system.network))
    inside = np.where(outermost == 0, 1.0, 0.0) if isinstance(outermost, np.ndarray) else float(outermost == 0)
    return CommCost(time, inside * n_bytes, (1 - inside) * n_bytes)


def all_to_all_matrix(matrix: np.ndarray, group: Placement, system: System) -> CommCost:
    """Non-uniform all-to-all (MoE dispatch with uneven routing): `matrix[i, j]` bytes go from rank i to
    rank j; ranks number mixed-radix over the group's spans, innermost first. A pair's bytes travel on the
    outermost dimension where the two ranks differ; every dimension carries its share at once. On each
    dimension a rank's time is the uniform all-to-all with the same busiest direction, and the slowest rank
    sets the time (docs/formulas.md pitfall 12). Where the network lists libraries, the fastest one."""
    if library_names(system):
        return fastest(lambda view: all_to_all_matrix(matrix, group, view), lambda c: c.time, system,
                       _pick_cost, ALL_TO_ALL)[0]
    m = np.asarray(matrix, dtype=float)
    p = m.shape[0]
    spans = [round(float(s)) for s in group.spans]
    if m.shape != (p, p) or p != math.prod(spans):
        raise ValueError(f"matrix must be {math.prod(spans)} x {math.prod(spans)}, got {m.shape}")
    rate = system.device.hbm.rate
    ranks = np.arange(p)
    # the outermost dimension on which ranks i and j differ: the highest block they do not share
    level = np.zeros((p, p), dtype=int)
    block = 1
    for i, s in enumerate(spans):
        block *= s
        level = np.where((ranks[:, None] // (block // s)) != (ranks[None, :] // (block // s)), i, level)
    np.fill_diagonal(level, -1)  # a rank's bytes to itself stay put
    times, sent = np.zeros(p), np.zeros((len(spans), p))
    for i, (s, dim) in enumerate(zip(spans, system.network, strict=True)):
        if s <= 1:
            continue
        on = level == i
        busiest = np.maximum((m * on).sum(axis=1), (m * on).sum(axis=0))
        # a uniform all-to-all of n bytes over the group sends (p - inner_{i+1})/p n on dimension i, of which
        # the dimension's phase carries (s - 1)/s: find the phase message with this busiest load
        slowdown = all_to_all_slowdown(system, tuple(float(x) for x in spans), i)  # incast (comm/fabrics.py)
        cost = dimension_cost(ALL_TO_ALL, busiest * s / (s - 1), float(s), dim, rate,
                              bandwidth=dim.bandwidth / slowdown)
        times = np.maximum(times, cost.time)
        sent[i] = busiest
    slowest = int(np.argmax(times))
    return CommCost(float(times[slowest]), float(sent[0, slowest]), float(sent[1:, slowest].sum()))
