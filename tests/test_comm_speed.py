"""The collective composer's shortcuts for search speed (issue 47) give what the computations they replace give, bit
for bit: a candidate's fields copied where every point is a group of two or more (`algorithms._each_alone`), log2(p)
made only for the algorithms that read it (`algorithms._candidate_costs`), a composition's group size and tops
made once (`PhaseNet.size`, `PhaseNet.tops`), the flat ring's step shares from the inner products made once
(`flat_ring._step_shares`, against NCCL's count by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm import algorithms
from armillary.comm.flat_ring import _step_shares
from armillary.comm.phase_net import PhaseNet
from armillary.plan.placement import Placement
from armillary.specs.communication import ALG_AUTO, Collective
from armillary.specs.loading import load_system


def _bits(x: object) -> tuple[str, tuple[int, ...], bytes]:
    a = np.asarray(x)
    return a.dtype.str, a.shape, a.tobytes()


def _fields(costs: tuple[algorithms.DimensionCost, ...]) -> list[list[tuple[str, tuple[int, ...], bytes]]]:
    return [[_bits(getattr(c, f)) for f in ("time", "sent_bytes", "algorithm", "protocol", "fixed")] for c in costs]


@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                                Collective.ALL_TO_ALL, Collective.BROADCAST])
def test_each_candidate_alone_at_groups_of_two_or_more_is_the_masked_cost(op):
    """Where every point is a group of two or more, np.where(p > 1, x, 0.0) is x: the copies are its bits, and new
    arrays (a candidate's bytes are shared by its protocols: no field is another's array)."""
    net = load_system("dgx-a100", 64).network[1]
    n = np.array([1e3, 3.3e5, 7e6, 2.1e8, 5e9, -0.0])
    p = np.array([2.0, 4.0, 8.0, 16.0, 2.0, 3.0])
    candidates = algorithms._candidate_costs(op, n, p, net, 1.5e12, ALG_AUTO, None, (), 1.0, False)
    costs = algorithms._each_alone(candidates)
    times, fixeds, labels, p = candidates.times, candidates.fixeds, candidates.labels, candidates.p
    sents = [candidates.sents[g] for g in candidates.groups]  # (each algorithm's bytes, for its protocols)
    active = p > 1
    masked = tuple(algorithms.DimensionCost(np.where(active, t, 0.0), np.where(active, s, 0.0), a, k,
                                            np.where(active, f, 0.0))
                   for t, s, f, (a, k) in zip(times, sents, fixeds, labels, strict=True))
    assert _fields(costs) == _fields(masked)
    inputs = [*times, *sents, *fixeds]
    arrays = [x for c in costs for x in (c.time, c.sent_bytes, c.fixed)]
    assert not any(np.shares_memory(x, y) for x in arrays for y in inputs)
    assert len({id(x) for x in arrays}) == len(arrays)


@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.BROADCAST])
def test_log2_of_the_group_only_where_an_algorithm_reads_it(monkeypatch, op):
    """Every candidate costs the same whether log2(p) is made for every algorithm or only for the tree and
    halving-doubling (the others' steps and bytes do not read it); and it is read: the tree's steps follow it."""
    net = load_system("dgx-h100", 64).network[1]  # ring and tree
    n = np.array([4e3, 2e6, 9e8, 4e3])
    p = np.array([2.0, 3.0, 8.0, 5.0])
    lazy = algorithms._candidate_costs(op, n, p, net, 3e12, ALG_AUTO, None, (), 1.0, False)
    monkeypatch.setattr(algorithms, "_READ_LOG_P", frozenset(algorithms.ALGORITHMS))
    eager = algorithms._candidate_costs(op, n, p, net, 3e12, ALG_AUTO, None, (), 1.0, False)
    for xs, ys in zip(lazy[:3], eager[:3], strict=True):
        assert [_bits(x) for x in xs] == [_bits(y) for y in ys]
    assert lazy[3] == eager[3]
    if op is Collective.ALL_REDUCE:  # the tree's all-reduce takes 2 ceil(log2 p) steps: 2, 4, 6, 6 here
        tree = [k for k, (a, _) in enumerate(lazy[3]) if algorithms.ALGORITHMS[a] is algorithms.ALG_TREE]
        assert tree
        hop = net.protocol_latency.get("Simple", net.latency)
        simple = next(k for k in tree if algorithms.PROTOCOLS[lazy[3][k][1]].name == "Simple")
        np.testing.assert_allclose(lazy[2][simple], algorithms.PROTOCOLS[-1].base_latency_s
                                   + np.array([2.0, 4.0, 6.0, 6.0]) * hop, rtol=1e-12)


def test_a_composition_s_size_and_tops_are_the_group_s():
    spans = (np.array([1.0, 2.0, 8.0, 8.0, 4.0]), np.array([1.0, 1.0, 2.0, 1.0, 4.0]))
    net = PhaseNet(load_system("dgx-a100", 64), Placement(spans), ALG_AUTO, (None, None))
    assert _bits(net.size) == _bits(Placement(spans).size)
    for i in range(2):
        assert _bits(net.top(i)) == _bits(Placement(spans).outermost == i)
    assert net.tops is net.tops  # made once
    one = PhaseNet(load_system("dgx-a100", 64), Placement((8.0, 2.0)), ALG_AUTO, (None, None))
    assert one.size == 16.0 and one.tops == (False, True)


def test_the_flat_ring_s_step_shares_by_hand():
    """NCCL counts 2(N - 1) of an all-reduce ring's 2(p - 1) steps as inter-node on N nodes (tuning.cc): 16
    ranks as 2 nodes of 8 cross the network on 1/15 of the steps, NVLink on 14/15; a group of one takes none."""
    inner = [1.0, 8.0]
    shares = _step_shares(16.0, inner)
    assert shares == pytest.approx([14 / 15, 1 / 15], rel=1e-15)
    swept = _step_shares(np.array([16.0, 8.0, 1.0]), [1.0, np.array([8.0, 8.0, 1.0])])
    np.testing.assert_allclose(swept[0], [14 / 15, 1.0, 0.0], rtol=1e-15)
    np.testing.assert_allclose(swept[1], [1 / 15, 0.0, 0.0], rtol=1e-15)


def test_the_fastest_candidate_with_one_shared_byte_count_is_the_chosen_one():
    """One algorithm's protocols share their bytes (one array): taken as it is, the fastest candidate's fields are
    what choosing among the candidates gives, bit for bit (and its bytes a new array)."""
    from armillary.comm import fastest_candidate

    rng = np.random.default_rng(3)
    sent = rng.random(9) * 1e6
    times = [rng.random(9) for _ in range(3)]
    fixeds = [rng.random(9) * 1e-5 for _ in range(3)]
    labels = [(0, 0), (0, 1), (0, 2)]
    p = np.array([1.0, 2.0, 8.0, 1.0, 4.0, 2.0, 2.0, 8.0, 16.0])
    shared = fastest_candidate.fastest(times, [sent] * 3, fixeds, labels, p, False)
    copies = fastest_candidate.fastest(times, [sent.copy() for _ in range(3)], fixeds, labels, p, False)
    assert _fields((shared,)) == _fields((copies,))
    assert not np.shares_memory(shared.sent_bytes, sent)
    k = np.array(times).argmin(axis=0)
    assert _bits(shared.protocol) == _bits(k)
    np.testing.assert_array_equal(shared.sent_bytes, np.where(p > 1, sent, 0.0))
