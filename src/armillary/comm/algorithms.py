"""Collective algorithms on one network dimension: alpha-beta-gamma costs, protocols, automatic choice.

Costs (docs/formulas.md §1.2; Thakur, Rabenseifner & Gropp 2005; Chan et al. 2007), p ranks, n bytes as defined
per collective (all-reduce: the buffer; reduce-scatter: the input; all-gather: the gathered output;
all-to-all: one rank's send buffer; broadcast / reduce / send-recv: the message):

| algorithm | all-reduce | reduce-scatter / all-gather |
| ring | 2(p-1) a + 2(p-1)/p n b | (p-1) a + (p-1)/p n b |
| tree (double binary, pipelined) | 2 log2(p) a + min(p, 4)/2 n b | - |
| halving-doubling (Rabenseifner) | 2 log2(p) a + 2(p-1)/p n b | log2(p) a + (p-1)/p n b |
| direct (one-shot, needs a switch) | a + (p-1) n b | a + (p-1)/p n b |
| direct, two-shot (ASTRA-sim's direct) | 2 a + 2(p-1)/p n b | a + (p-1)/p n b |
| in-network reduction (switch reduces) | 2 a + n b_inr | 2 a + n b_inr (RS), 2 a + (p-1)/p n b_inr (AG) |

The double binary tree (NCCL Tree; Sanders, Speck & Traeff 2009) splits the buffer over two trees in which
each rank is inner in one and a leaf in the other: an inner rank with two children sends n/2 up and n down
in one tree and n/2 up in the other, 2n in all, so the busiest rank sends n, 1.5 n, 2 n for p = 2, 3, >= 4
(docs/formulas.md §1.2). A mesh is bounded by its corner devices, which have half the links of a torus's.

Plus, for the one-shot all-reduce, a reduction term (p-1) n g ((p-1)/p n g two-shot) after the transfer
(g: 3 bytes moved per byte reduced through HBM); pipelined ring and tree kernels reduce while data streams
through, hidden by the link. Each algorithm runs under a protocol (NCCL's LL, LL128, Simple: `PROTOCOLS`)
that trades latency for bandwidth; the automatic choice takes the fastest (algorithm, protocol) pair for each
size, as NCCL's tuner does (docs/formulas.md §1.3), which gives the size-dependent efficiency of real runs.

The terms per algorithm are in algorithm_steps.py, what can run on a dimension in candidates.py, what a group
sees of it (torus rings, all-to-all hops, bandwidth share) in group_on_dimension.py, the pick of the fastest in
fastest_candidate.py, the protocols and the cost record in cost_types.py, a synthesized schedule as a candidate
in synthesized_choice.py.
"""

from __future__ import annotations

import math

import numpy as np

from armillary.comm.algorithm_steps import bus_factor as bus_factor  # public here too (nccl-tests' factor)
from armillary.comm.algorithm_steps import steps_and_bytes
from armillary.comm.candidates import COLUMN_AXES, candidates_of, derived
from armillary.comm.cost_types import ALGORITHMS, NOTHING, PROTOCOLS, DimensionCost, Rows
from armillary.comm.cost_types import Protocol as Protocol  # public here too (comm/algorithms.py names them)
from armillary.comm.fastest_candidate import Candidates, faster_cost, fastest
from armillary.comm.group_on_dimension import all_to_all_hops, bandwidth_scale, is_scalar, ring_hops
from armillary.comm.synthesized_choice import synthesizable, synthesized
from armillary.numerics import Array, any_true
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_DIRECT,
    ALG_HALVING_DOUBLING,
    ALG_RING,
    ALG_SYNTHESIZED,
    ALG_TREE,
    ALL_REDUCE,
    ALL_TO_ALL,
    Algorithm,
    Collective,
)
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.network import DirectAllReduce, NetworkDimension

__all__ = ["ALGORITHMS", "NOTHING", "PROTOCOLS", "DimensionCost", "Protocol", "bus_factor", "dimension_cost",
           "dimension_options", "ring_protocols", "ring_rows"]

_TWO_SHOT = DirectAllReduce.TWO_SHOT  # read once, as Collective's members are (specs/communication.py says why)
# the collectives that reduce (`Collective.reduces`, a property that reads three members: ~0.9 us a call)
_REDUCING = frozenset(op for op in Collective if op.reduces)
# the algorithms whose steps or bytes read log2(p) (algorithm_steps.steps_and_bytes)
_READ_LOG_P = frozenset((ALG_TREE, ALG_HALVING_DOUBLING))
# bytes moved through HBM per byte reduced: read two operands, write one
_REDUCE_TRAFFIC = 3.0


def dimension_cost(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                   algorithm: Algorithm = ALG_AUTO, bandwidth: Array | None = None,
                   exclude: tuple[Algorithm, ...] = (), latency_scale: Array = 1.0) -> DimensionCost:
    """Fastest (algorithm, protocol) for `op` of `n_bytes` over `p` ranks of one dimension, or the pinned
    algorithm (still with its fastest protocol), leaving out `exclude`. Broadcasts over n_bytes, p and
    `bandwidth` (which replaces the dimension's per-device bandwidth, so a search can sweep it).
    `latency_scale` multiplies the per-step latency: the share of a flat ring's steps on this dimension."""
    scalar = ((type(n_bytes) is float and type(p) is float and bandwidth is None and type(latency_scale) is float)
              or (is_scalar(n_bytes) and is_scalar(p) and (bandwidth is None or is_scalar(bandwidth))
                  and is_scalar(latency_scale)))  # the common one configuration tested first
    if scalar and p <= 1 and algorithm is ALG_AUTO:
        return NOTHING  # a group of one does nothing
    if algorithm is ALG_SYNTHESIZED:
        if ALG_SYNTHESIZED not in net.algorithms:
            raise ValueError(f"algorithm 'synthesized' is not offered on the network {net.name!r}; list it in the "
                             f"dimension's algorithms (offered: {[a.value for a in net.algorithms]})")
        return synthesized(op, n_bytes, p, net, bandwidth)
    if synthesizable(op, p, net, algorithm, exclude):  # offered here: auto weighs it against the rest
        other = dimension_cost(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth,
                               (*exclude, ALG_SYNTHESIZED), latency_scale)
        return faster_cost(synthesized(op, n_bytes, p, net, bandwidth), other)
    return fastest(*_candidate_costs(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth, exclude,
                                     latency_scale, scalar))


def dimension_options(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                      algorithm: Algorithm = ALG_AUTO, bandwidth: Array | None = None,
                      exclude: tuple[Algorithm, ...] = ()) -> tuple[DimensionCost, ...]:
    """Every (algorithm, protocol) that `dimension_cost` weighs, each costed as it costs the fastest: what a
    tuner compares when the part's own fastest is not the whole collective's (comm/phases.py: the pipelined
    phases). A group of one does nothing under each. Raises where none can run."""
    scalar = is_scalar(n_bytes) and is_scalar(p) and (bandwidth is None or is_scalar(bandwidth))
    if scalar and p <= 1 and algorithm is ALG_AUTO:
        return (NOTHING,)
    if algorithm is ALG_SYNTHESIZED:
        return (dimension_cost(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth, exclude),)
    found = []
    if synthesizable(op, p, net, algorithm, exclude):
        found.append(synthesized(op, n_bytes, p, net, bandwidth))
        exclude = (*exclude, ALG_SYNTHESIZED)
    return (*found, *_each_alone(_candidate_costs(op, n_bytes, p, net, reduce_bytes_per_s, algorithm, bandwidth,
                                                  exclude, 1.0, scalar)))


def ring_protocols(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                   bandwidth: Array | None = None, latency_scale: Array = 1.0,
                   curve: Array = True) -> tuple[DimensionCost, ...]:
    """The ring's cost on this dimension under each protocol (in PROTOCOLS order): a ring that spans
    several dimensions runs one protocol on all of them (comm/compose.py). `curve`: where the dimension's
    size curve is read (elsewhere the ring runs at its full rate). A protocol the dimension does not offer
    (`NetworkDimension.protocols`) is infinite wherever the ring takes steps across it (`latency_scale` > 0),
    so no ring through it runs that protocol. Raises where no ring runs. (`ring_rows`, one by one.)"""
    scalar = (is_scalar(n_bytes) and is_scalar(p) and (bandwidth is None or is_scalar(bandwidth))
              and is_scalar(latency_scale) and is_scalar(curve))
    return ring_rows(op, n_bytes, p, net, reduce_bytes_per_s, bandwidth, latency_scale, curve).costs(scalar)


def ring_rows(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
              bandwidth: Array | None = None, latency_scale: Array = 1.0, curve: Array = True) -> Rows:
    """`ring_protocols`, stacked (`Rows`): each protocol costed as `fastest` gives it alone (nothing for a group
    of one), the protocols not offered in their places."""
    scalar = (is_scalar(n_bytes) and is_scalar(p) and (bandwidth is None or is_scalar(bandwidth))
              and is_scalar(latency_scale) and is_scalar(curve))
    c = _candidate_costs(op, n_bytes, p, net, reduce_bytes_per_s, ALG_RING, bandwidth, (), latency_scale, scalar,
                         curve)
    p, time, fixed, sent = c.p, c.times, c.fixeds, c.sents[0]  # (the ring alone: one bytes sent for every protocol)
    if scalar:
        if not p > 1:
            time = fixed = np.zeros(len(c.labels))
            sent = 0.0
    else:  # np.where(active, x, 0.0), as `_each_alone` gives each protocol (where every point is active and x
        # has the mask's shape, x itself: what the candidates made is new; the bytes are copied when split)
        active = np.asarray(p) > 1
        every = np.count_nonzero(active) == active.size  # (np.all, without its Python-level wrapper)
        if not (every and time.shape[1:] == active.shape):
            time = np.where(active, time, 0.0)
        if not (every and fixed.shape[1:] == active.shape):
            fixed = np.where(active, fixed, 0.0)
        if not (every and type(sent) is np.ndarray and sent.shape == active.shape and sent.dtype == np.float64):
            sent = np.where(active, sent, 0.0)
    rows = Rows(time, (sent,) * len(c.labels), fixed, tuple(a for a, _ in c.labels), tuple(k for _, k in c.labels))
    if len(c.labels) == len(PROTOCOLS):
        return rows
    return Rows.of(_with_unoffered(rows.costs(scalar), p, latency_scale, scalar))


def _each_alone(c: Candidates) -> tuple[DimensionCost, ...]:
    """Every candidate costed as `fastest` gives it alone (over a sweep without its argmin over one); a group of
    one does nothing."""
    p, labels = c.p, c.labels
    sents = [c.sents[g] for g in c.groups]
    if c.scalar:
        times, fixeds = c.times.tolist(), c.fixeds.tolist()  # (plain floats, as `fastest` gives them)
        return tuple(fastest([t], [s], [f], [label], p, True)
                     for t, s, f, label in zip(times, sents, fixeds, labels, strict=True))
    active = np.asarray(p) > 1
    if np.count_nonzero(active) == active.size:  # every point a group of two or more (np.all, without its
        # Python-level wrapper): np.where(active, x, 0.0) is a copy of x where x is a
        # float array of the mask's shape (the same bits, a new array), done as a copy
        def kept(x: Array) -> Array:
            return x.copy() if type(x) is np.ndarray and x.shape == active.shape and x.dtype == np.float64 else (
                np.where(active, x, 0.0))
        return tuple(DimensionCost(kept(t), kept(s), a, k, kept(f))
                     for t, s, f, (a, k) in zip(c.times, sents, c.fixeds, labels, strict=True))
    return tuple(DimensionCost(np.where(active, t, 0.0), np.where(active, s, 0.0), a, k, np.where(active, f, 0.0))
                 for t, s, f, (a, k) in zip(c.times, sents, c.fixeds, labels, strict=True))


def _with_unoffered(costs: tuple[DimensionCost, ...], p: Array, latency_scale: Array,
                    scalar: bool) -> tuple[DimensionCost, ...]:
    """`costs` of the offered protocols, in PROTOCOLS order with each protocol not offered put in its place:
    infinite where the ring crosses the dimension (a group of two or more, steps across it), nothing elsewhere."""
    crossing = (p > 1 and latency_scale > 0) if scalar else (np.asarray(p) > 1) & (np.asarray(latency_scale) > 0)
    blocked: Array = (math.inf if crossing else 0.0) if scalar else np.where(crossing, np.inf, 0.0)
    by_protocol = {int(c.protocol): c for c in costs}
    ring = ALGORITHMS.index(ALG_RING)
    return tuple(by_protocol.get(k, DimensionCost(blocked, 0.0, ring, k, 0.0)) for k in range(len(PROTOCOLS)))


def _candidate_costs(op: Collective, n_bytes: Array, p: Array, net: NetworkDimension, reduce_bytes_per_s: float,
                     algorithm: Algorithm, bandwidth: Array | None, exclude: tuple[Algorithm, ...],
                     latency_scale: Array, scalar: bool, curve: Array = True) -> Candidates:
    """Every candidate that can run, stacked (`Candidates`): each algorithm's protocols costed together, one array
    pass over its protocols' columns (candidates.derived), the same IEEE operations per element as one
    protocol's formula: fixed = base + steps x step latency (x latency_scale), time = fixed + bytes / (rate x
    scale x ramp) (+ the one-shot's reduction)."""
    scale = bandwidth_scale(net, p, bandwidth, scalar)
    if scalar:
        n_bytes, p = float(n_bytes), float(p)
        log_p: Array = float(math.ceil(math.log2(max(p, 1.0))))
    else:
        log_p = 0.0  # (made below where an algorithm reads it: the ring, direct and in-network ones do not)
    times: list[np.ndarray] = []
    fixeds: list[np.ndarray] = []
    sents: list[Array] = []
    groups: list[int] = []
    labels: tuple[tuple[int, int], ...] = ()
    reduces = op in _REDUCING
    torus_hops = ring_hops(net, p)
    a2a_hops = all_to_all_hops(net, p) if op is ALL_TO_ALL else 1.0
    if scalar:
        a2a_hops = float(a2a_hops)
    ramp, tree_ramp = _ramps(net, n_bytes, curve, scalar)
    two_shot = net.direct == _TWO_SHOT
    unit_scale = type(latency_scale) is float and latency_scale == 1.0
    scale_axes = _axes(scale)
    for alg, alg_labels, columns in derived(net)[3]:
        if (algorithm is not ALG_AUTO and alg is not algorithm) or alg in exclude:
            continue
        if not scalar and alg in _READ_LOG_P and type(log_p) is float:
            log_p = np.ceil(np.log2(np.maximum(p, 1)))
        steps_bytes = steps_and_bytes(op, alg, n_bytes, p, log_p, two_shot)
        if steps_bytes is None:
            continue
        steps, sent = steps_bytes
        if op is ALL_TO_ALL:
            sent = sent * a2a_hops
        if alg is ALG_RING and torus_hops is not None:
            steps = steps * torus_hops / (p - 1)
        reduce_time: Array = 0.0
        if reduces and alg is ALG_DIRECT:  # one-shot reduces the p received buffers afterwards
            one_shot = op is ALL_REDUCE and not two_shot  # two-shot: the reduce-scatter's share
            reduced = (p - 1) * n_bytes if one_shot else (p - 1) / p * n_bytes
            reduce_time = reduced * _REDUCE_TRAFFIC / reduce_bytes_per_s
        time, fixed = _protocol_rows(columns, steps, sent, reduce_time, tree_ramp if alg is ALG_TREE else ramp,
                                     scale, scale_axes, latency_scale, unit_scale)
        times.append(time)
        fixeds.append(fixed)
        groups.extend((len(sents),) * len(alg_labels))
        sents.append(sent)
        labels += alg_labels
    if not times:
        raise ValueError(f"algorithm {algorithm.value!r} cannot run {op.value} on the {net.kind.value} network "
                         f"{net.name!r}; it offers {[a.value for _, a, _ in candidates_of(net) if a not in exclude]}")
    return Candidates(_rows(times), sents, _rows(fixeds), labels, p, scalar, tuple(groups))


def _ramps(net: NetworkDimension, n_bytes: Array, curve: Array, scalar: bool) -> tuple[Array, Array]:
    """The share of the link's rate a message of n_bytes reaches (the dimension's size curve, read where `curve`
    holds; 1 elsewhere), for every algorithm and for the tree (its own curve where the dimension has one)."""
    everywhere = curve is True  # (the common call: the curve read at every point)
    size_curve = net.size_efficiency  # (read where the curve applies anywhere: tested only where there is one)
    ramp = _ramp(size_curve if size_curve is not None and (everywhere or any_true(curve)) else None, n_bytes, scalar)
    if not (everywhere or is_scalar(curve) or (curve.all() if type(curve) is np.ndarray else np.all(curve))):
        ramp = np.where(curve, ramp, 1.0)
    tree_ramp = ramp if net.tree_size_efficiency is None else _ramp(net.tree_size_efficiency, n_bytes, scalar)
    return ramp, tree_ramp


def _protocol_rows(columns: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...], steps: Array, sent: Array,
                   reduce_time: Array, ramped: Array, scale: Array, scale_axes: int, latency_scale: Array,
                   unit_scale: bool) -> tuple[np.ndarray, np.ndarray]:
    """(times, fixed latencies) of one algorithm's protocols, a row each with the sweep's axes after it (the
    columns carry as many axes as what they meet): fixed = base + steps x step latency (x latency_scale), time =
    fixed + bytes / (rate x scale x ramp) (+ the one-shot's reduction)."""
    reduce_free = type(reduce_time) is float and reduce_time == 0.0
    fixed_axes = steps.ndim if type(steps) is np.ndarray else 0  # (`_axes`, inline: a few calls a candidate)
    if not unit_scale:
        fixed_axes = max(fixed_axes, _axes(latency_scale))
    transfer_axes = sent.ndim if type(sent) is np.ndarray else 0
    if scale_axes > transfer_axes or type(ramped) is np.ndarray:
        transfer_axes = max(transfer_axes, scale_axes, _axes(ramped))
    base, hop, _ = columns[fixed_axes] if fixed_axes <= COLUMN_AXES else _column_set(columns, fixed_axes)
    rate = (columns[transfer_axes] if transfer_axes <= COLUMN_AXES else _column_set(columns, transfer_axes))[2]
    # (x * 1.0 is x and x + 0.0 is x for x > 0 or NaN, IEEE 754: the common call skips those array ops,
    # the same bits; fixed >= the protocol's base latency > 0)
    fixed = base + (steps * hop if unit_scale else steps * hop * latency_scale)
    # (x * 1.0 is x: a dimension's own bandwidth, without a size curve, divides by the rates as they are)
    transfer = sent / (rate if type(scale) is float and scale == 1.0 and type(ramped) is float and ramped == 1.0
                       else rate * scale * ramped)
    if fixed_axes == transfer_axes and reduce_free:
        time = fixed + transfer  # (rows of one shape: nothing to lift)
    else:
        axes = max(fixed_axes, transfer_axes) if reduce_free else max(fixed_axes, transfer_axes, _axes(reduce_time))
        time = _lifted(fixed, axes) + _lifted(transfer, axes)
    return (time if reduce_free else time + reduce_time), fixed


def _axes(x: Array) -> int:
    """A value's number of axes (0 for a number)."""
    return x.ndim if type(x) is np.ndarray else 0


def _column_set(columns: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...], axes: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The protocols' columns shaped to meet values of `axes` axes."""
    if axes < len(columns):
        return columns[axes]
    return tuple(c.reshape((len(c),) + (1,) * axes) for c in columns[0])  # type: ignore[return-value]


def _lifted(x: np.ndarray, axes: int) -> np.ndarray:
    """Rows of values of fewer axes given `axes` axes after the row's (ones inserted: numpy's broadcasting of the
    values themselves, which aligns their last axes)."""
    missing = axes + 1 - x.ndim
    return x if not missing else x.reshape((x.shape[0],) + (1,) * missing + x.shape[1:])


def _rows(parts: list[np.ndarray]) -> np.ndarray:
    """Each algorithm's protocol rows, one array (broadcast to one shape where they differ)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    for x in parts:
        if x.shape[1:] != first.shape[1:]:
            break
    else:
        return np.concatenate(parts)
    axes = max(x.ndim for x in parts) - 1
    lifted = [_lifted(x, axes) for x in parts]
    shape = np.broadcast_shapes(*(x.shape[1:] for x in lifted))
    return np.concatenate([x if x.shape[1:] == shape else np.broadcast_to(x, (len(x), *shape)) for x in lifted])


def _ramp(curve: EfficiencyCurve | None, n_bytes: Array, scalar: bool) -> Array:
    """A size-efficiency curve read at the message (1 where the dimension has none)."""
    if curve is None:
        return 1.0
    value = curve(n_bytes)
    return float(value) if scalar else value
