"""The collective composer's stacked passes (issue 47) give what the loops they replace give, bit for bit: the flat
ring weighing every protocol at once (`flat_ring`, on `Rows`) against the protocol-by-protocol fold it replaced,
the fastest candidate from stacked candidates against the same candidates as lists, and a reduce-scatter kept in
the search's memo as the all-gather of the same bytes only where every dimension costs the two alike."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm import compose_memo
from armillary.comm.algorithm_steps import bus_factor
from armillary.comm.candidates import candidates_of, scatter_is_gather
from armillary.comm.compose import compose, forget, memoized
from armillary.comm.composed import Composed
from armillary.comm.cost_types import PROTOCOLS, DimensionCost
from armillary.comm.fastest_candidate import fastest
from armillary.comm.flat_ring import LL_NET_BUSBW, _step_shares, flat_ring
from armillary.comm.phase_net import PhaseNet, faster
from armillary.numerics import is_array, nan_maximum, where
from armillary.plan.placement import Placement
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_DIRECT,
    ALG_IN_NETWORK,
    ALG_SYNTHESIZED,
    ANY_COMPOSITION,
    Collective,
)
from armillary.specs.loading import load_system

FIELDS = ("time", "sent_bytes", "algorithm", "protocol", "fixed")


def _bits(x: object) -> tuple[str, str, tuple[int, ...], bytes]:
    a = np.asarray(x)
    return type(x).__name__, a.dtype.str, a.shape, a.tobytes()


def _composed_bits(c: Composed) -> list[object]:
    return [_bits(c.time), _bits(c.composition)] + [_bits(getattr(d, f)) for d in c.dimensions for f in FIELDS]


def _protocol_fold(op: Collective, n: object, net: PhaseNet, index: int) -> Composed:
    """The flat ring as it was built before the stacked pass: a composition per protocol, folded by `faster`."""
    group, count, size = net.group, len(net.system.network), net.size
    inner = [group.inner(i) for i in range(count)]
    shares = [where(net.top(i), 1.0 / inner[i], (group.spans[i] - 1) / (inner[i] * group.spans[i]))
              for i in range(count)]
    steps = _step_shares(size, inner)
    across = size / group.spans[0]
    ll_cap = where(across <= 2, LL_NET_BUSBW[0], LL_NET_BUSBW[1])
    per_dimension = [net.ring(i, op, n * shares[i], steps[i]) for i in range(count)]
    ring_bytes = n * bus_factor(op, size)
    best = None
    for k, proto in enumerate(PROTOCOLS):
        dims = tuple(d[k] for d in per_dimension)
        active, fixed = 0, 0
        for d in dims:
            active = active + (np.where(np.asarray(d.time) > 0, 1.0, 0.0) if is_array(d.time) else
                               (1.0 if d.time > 0 else 0.0))
            fixed = fixed + d.fixed
        latency = fixed - nan_maximum(active - 1.0, 0.0) * proto.base_latency_s
        transfer = dims[0].transfer
        for d in dims[1:]:
            transfer = nan_maximum(transfer, d.transfer)
        if proto.name == "LL":
            transfer = where(across > 1, nan_maximum(transfer, ring_bytes / ll_cap), transfer)
        for i, dim in enumerate(net.system.network):
            if dim.channels is not None and dim.channel_bandwidth is not None:
                cap = proto.bandwidth_factor * dim.channels * dim.channel_bandwidth
                transfer = where(group.spans[i] > 1, nan_maximum(transfer, ring_bytes / cap), transfer)
            if proto.name in dim.ring_busbw:
                transfer = where(group.spans[i] > 1, nan_maximum(transfer, ring_bytes / dim.ring_busbw[proto.name]),
                                 transfer)
        time = latency + transfer
        built = Composed(time if is_array(time) else float(time), dims, index)
        best = built if best is None else faster(best, built)
    assert best is not None
    return best


# dgx-h100: a per-channel limit on InfiniBand; gcp-a3-mega: no LL protocol; tpu-v5p-slice: torus rings
@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "gcp-a3-mega", "aws-p5", "tpu-v5p-slice"])
@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                                Collective.BROADCAST])
def test_the_stacked_flat_ring_is_the_protocol_fold(name, op):
    system = load_system(name, 64)
    inside = float(system.network[0].size)
    spans0 = np.array([1.0, 2.0, inside, inside, inside, 2.0, 1.0, inside])
    spans1 = np.array([2.0, 2.0, 2.0, 4.0, 8.0, 1.0, 1.0, 1.0])
    n = np.array([1e3, 4e5, 3e7, 2e9, 6e6, 1e8, 5e4, -0.0])
    rest = (None,) * (len(system.network) - 2)
    extra = tuple(np.ones(len(n)) for _ in rest)
    net = PhaseNet(system, Placement((spans0, spans1, *extra)), ALG_AUTO, (None, None, *rest))
    assert _composed_bits(flat_ring(op, n, net, 0)) == _composed_bits(_protocol_fold(op, n, net, 0))
    for j in range(len(n)):  # one configuration: plain floats, the same fold
        one = PhaseNet(system, Placement((float(spans0[j]), float(spans1[j]), *(1.0 for _ in rest))), ALG_AUTO,
                       (None, None, *rest))
        alone, folded = flat_ring(op, float(n[j]), one, 0), _protocol_fold(op, float(n[j]), one, 0)
        assert _composed_bits(alone) == _composed_bits(folded)
        assert type(alone.time) is float


@pytest.mark.parametrize("shape", [(7,), (3, 1, 7)])
def test_the_fastest_of_stacked_candidates_is_the_fastest_of_their_list(shape):
    """Candidates stacked (times and fixed costs on a first axis, bytes per algorithm) choose what the same
    candidates as lists choose, bit for bit, with groups of one zeroed."""
    rng = np.random.default_rng(5)
    times = [rng.random(shape) for _ in range(6)]
    times[4][..., 2] = times[1][..., 2]  # a tie: the first is taken
    fixeds = [rng.random(shape[-1:]) * 1e-5 for _ in range(6)]
    ring, tree = rng.random(shape) * 1e6, rng.random(shape) * 1e6
    labels = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2))
    p = np.array([1.0, 2.0, 8.0, 1.0, 4.0, 2.0, 16.0])
    listed = fastest(times, [ring] * 3 + [tree] * 3, fixeds, labels, p, False)
    stacked = fastest(np.array(times), [ring, tree], np.array(fixeds), labels, p, False, (0, 0, 0, 1, 1, 1))
    assert [_bits(getattr(listed, f)) for f in FIELDS] == [_bits(getattr(stacked, f)) for f in FIELDS]
    assert not any(np.shares_memory(getattr(stacked, f), x) for f in FIELDS for x in (ring, tree, *times))


def test_scatter_is_gather_only_where_every_algorithm_costs_both_alike():
    """A dimension where a direct algorithm (a reduce-scatter also reduces), in-network reduction or a synthesized
    schedule can run does not cost a reduce-scatter as an all-gather; the ring, halving-doubling and tree do."""
    for name in ("dgx-a100", "dgx-b200", "gb200-nvl72", "astra-3d", "tpu-v5p-pod", "trn2-16"):
        for dim in load_system(name).network:
            odd = {ALG_DIRECT, ALG_IN_NETWORK} & {a for _, a, _ in candidates_of(dim)}
            assert scatter_is_gather(dim) == (not odd and ALG_SYNTHESIZED not in dim.algorithms)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h800", "tpu-v5p-slice", "astra-4d", "aws-p4d"])
def test_a_reduce_scatter_kept_as_the_all_gather_is_the_reduce_scatter(name):
    """Where every dimension costs the two alike, a reduce-scatter and an all-gather of the same bytes over the
    same groups compose to the same bits (so the memo keeps one for both), inside one dimension and across."""
    system = load_system(name, 64)
    count = len(system.network)
    if not all(scatter_is_gather(d) for d in system.network):
        pytest.skip("a dimension costs the two differently")
    n = np.array([2e3, 5e5, 8e7, 3e9])[:, None]
    first = np.array([1.0, 2.0, float(system.network[0].size), 2.0])
    second = np.array([1.0, 1.0, 2.0, 4.0])
    for spans in ((first, *(np.ones(4) for _ in range(count - 1))), (first, second, *(np.ones(4) for _ in range(
            count - 2)))):
        group = Placement(spans)
        scatter = compose(Collective.REDUCE_SCATTER, n, group, system, ALG_AUTO, None, ANY_COMPOSITION)
        gather = compose(Collective.ALL_GATHER, n, group, system, ALG_AUTO, None, ANY_COMPOSITION)
        assert _composed_bits(scatter) == _composed_bits(gather)
        try:
            with memoized(("test", name)):
                kept_gather = compose(Collective.ALL_GATHER, n, group, system, ALG_AUTO, None, ANY_COMPOSITION)
                held = len(compose_memo.MEMO)
                kept_scatter = compose(Collective.REDUCE_SCATTER, n, group, system, ALG_AUTO, None, ANY_COMPOSITION)
                assert len(compose_memo.MEMO) == held == 1  # the reduce-scatter is the all-gather's entry
        finally:
            forget()  # (as a search does when it ends)
        assert _composed_bits(kept_scatter) == _composed_bits(scatter) == _composed_bits(kept_gather)
        assert not np.shares_memory(kept_scatter.time, kept_gather.time)


def test_a_dimension_cost_s_fields_are_new_arrays():
    """What the composer hands out never shares memory with its inputs (the stacked candidates are its own)."""
    system = load_system("dgx-a100", 64)
    n = np.array([1e3, 2e6, 3e9])
    spans = (np.array([2.0, 8.0, 1.0]), np.array([1.0, 2.0, 4.0]))
    c = compose(Collective.ALL_REDUCE, n, Placement(spans), system, ALG_AUTO, None, ANY_COMPOSITION)
    for d in c.dimensions:
        assert isinstance(d, DimensionCost)
        for f in FIELDS:
            x = getattr(d, f)
            assert not any(np.shares_memory(x, y) for y in (n, *spans))
