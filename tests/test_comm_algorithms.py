"""comm/algorithms.py: one network dimension against the alpha-beta closed forms of Thakur, Rabenseifner &
Gropp 2005 (the table in the module docstring), worked out with numbers, and invariants of the choice.

The test network: a 50 GB/s switch at 80% efficiency (40 GB/s achievable, 30 GB/s for in-network
reduction at 60%), alpha = 2 us per step for the Simple protocol; NCCL's protocols (tuning.cc): base
latency LL 6.6 / LL128 14 / Simple 8.4 us, per-step latency x0.6/3.4, x1.9/3.4, x1 and bandwidth x0.5,
x0.92, x1.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.comm.algorithms import ALGORITHMS, PROTOCOLS, dimension_cost
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.network import NetworkDimension, NetworkKind

NET = NetworkDimension(name="test switch", kind="switch", bandwidth=50e9, latency=2e-6, efficiency=0.8,
              in_network_reduction=True, in_network_efficiency=0.6,
              algorithms=["ring", "tree", "halving_doubling", "direct", "in_network"])
REDUCE = 2e12  # bytes/s through HBM for the one-shot reduction
GiB, MiB = 2**30, 2**20
OPS = list(Collective)
PINNED = [a for a in Algorithm if a is not Algorithm.AUTO]


def cost(op, n, p, algorithm=Algorithm.AUTO, net=NET, bandwidth=None):
    return dimension_cost(op, n, p, net, REDUCE, algorithm, bandwidth)


def protocol(c) -> str:
    return PROTOCOLS[int(c.protocol)].name


def test_ring_all_reduce_of_1_gib_on_16_ranks():
    """2(p-1) alpha + 2(p-1)/p n / B: 30 steps, 1.875 GiB sent; a large message runs the Simple protocol."""
    c = cost(Collective.ALL_REDUCE, GiB, 16, Algorithm.RING)
    assert float(c.time) == pytest.approx(8.4e-6 + 30 * 2e-6 + 1.875 * GiB / 40e9)  # 0.0504000 s
    assert float(c.sent_bytes) == 1.875 * GiB and protocol(c) == "Simple"


def test_ring_all_reduce_of_1_kib_on_16_ranks_runs_the_low_latency_protocol():
    ll = 6.6e-6 + 30 * 0.6 / 3.4 * 2e-6 + 1920 / (0.5 * 40e9)  # 17.28 us
    ll128 = 14e-6 + 30 * 1.9 / 3.4 * 2e-6 + 1920 / (0.92 * 40e9)  # 47.58 us
    simple = 8.4e-6 + 30 * 2e-6 + 1920 / 40e9  # 68.45 us
    c = cost(Collective.ALL_REDUCE, 1024, 16, Algorithm.RING)
    assert float(c.time) == pytest.approx(min(ll, ll128, simple)) and protocol(c) == "LL"


def test_logarithmic_all_reduce():
    """Halving-doubling: 2 log2(p) alpha + 2(p-1)/p n / B; a group of 12 takes ceil(log2 12) = 4 rounds
    each way."""
    assert float(cost(Collective.ALL_REDUCE, GiB, 16, Algorithm.HALVING_DOUBLING).time) == pytest.approx(
        8.4e-6 + 8 * 2e-6 + 1.875 * GiB / 40e9)
    assert float(cost(Collective.ALL_REDUCE, GiB, 12, Algorithm.HALVING_DOUBLING).time) == pytest.approx(
        8.4e-6 + 8 * 2e-6 + 22 / 12 * GiB / 40e9)


@pytest.mark.parametrize(("p", "busiest"), [(2, 1.0), (3, 1.5), (4, 2.0), (16, 2.0)])
def test_double_binary_tree_busiest_rank(p, busiest):
    """Two trees, each rank inner in one and a leaf in the other: with two children it sends n/2 up and
    n down in one tree and n/2 up in the other (2 n); 2 ranks: root and leaf of each, n; 3 ranks: 1.5 n."""
    got = cost(Collective.ALL_REDUCE, GiB, p, Algorithm.TREE)
    rounds = 2 * np.ceil(np.log2(p))
    assert float(got.sent_bytes) == pytest.approx(busiest * GiB)
    assert float(got.time) == pytest.approx(8.4e-6 + rounds * 2e-6 + busiest * GiB / 40e9)


def test_halving_doubling_reduce_scatter_and_ring_all_gather():
    rs = cost(Collective.REDUCE_SCATTER, GiB, 16, Algorithm.HALVING_DOUBLING)
    assert float(rs.time) == pytest.approx(8.4e-6 + 4 * 2e-6 + 15 / 16 * GiB / 40e9)
    ag = cost(Collective.ALL_GATHER, GiB, 16, Algorithm.RING)
    assert float(ag.time) == pytest.approx(8.4e-6 + 15 * 2e-6 + 15 / 16 * GiB / 40e9)


def test_one_shot_all_reduce_sends_every_buffer_and_reduces_them():
    """alpha + (p-1) n / B + (p-1) n 3 / R: 1 MiB on 16 ranks sends 15 MiB (393.2 us at 40 GB/s) and reads
    two operands / writes one per reduced byte (23.6 us at 2 TB/s)."""
    c = cost(Collective.ALL_REDUCE, MiB, 16, Algorithm.DIRECT)
    assert float(c.time) == pytest.approx(8.4e-6 + 2e-6 + 15 * MiB / 40e9 + 15 * MiB * 3 / 2e12)  # 427.2 us
    assert float(c.sent_bytes) == 15 * MiB


def test_in_network_all_reduce_sends_the_buffer_once():
    """The switch reduces: each rank sends n up and receives n reduced, two hops, at the in-network rate;
    Simple protocol only (NVLS / CollNet)."""
    c = cost(Collective.ALL_REDUCE, GiB, 16, Algorithm.IN_NETWORK)
    assert float(c.time) == pytest.approx(8.4e-6 + 2 * 2e-6 + GiB / 30e9)  # 35.80 ms
    assert protocol(c) == "Simple"
    small = cost(Collective.ALL_REDUCE, 64, 16, Algorithm.IN_NETWORK)
    assert protocol(small) == "Simple"  # even where LL would win
    # reduce-scatter sends its whole input up, all-gather receives (p-1)/p of the output
    assert float(cost(Collective.REDUCE_SCATTER, GiB, 16, Algorithm.IN_NETWORK).sent_bytes) == GiB
    assert float(cost(Collective.ALL_GATHER, GiB, 16, Algorithm.IN_NETWORK).sent_bytes) == 15 / 16 * GiB


def test_in_network_reduction_wins_a_large_all_reduce_and_cannot_run_an_all_to_all():
    assert ALGORITHMS[int(cost(Collective.ALL_REDUCE, GiB, 16).algorithm)] is Algorithm.IN_NETWORK  # 35.8 < 50.4 ms
    with pytest.raises(ValueError, match="offers"):
        cost(Collective.ALL_TO_ALL, GiB, 16, Algorithm.IN_NETWORK)


def test_oversubscribed_fat_tree_divides_the_bandwidth():
    tree = NET.model_copy(update={"kind": NetworkKind.FAT_TREE, "oversubscription": 2.0})
    extra = cost(Collective.ALL_REDUCE, GiB, 16, Algorithm.RING, tree).time - \
        cost(Collective.ALL_REDUCE, GiB, 16, Algorithm.RING).time
    assert float(extra) == pytest.approx(1.875 * GiB / 40e9)  # the bandwidth term once more


def test_a_ring_network_runs_the_ring_only():
    ring = NET.model_copy(update={"kind": NetworkKind.RING, "in_network_reduction": False})
    assert ALGORITHMS[int(cost(Collective.ALL_REDUCE, MiB, 8, net=ring).algorithm)] is Algorithm.RING
    for algorithm in (Algorithm.DIRECT, Algorithm.HALVING_DOUBLING, Algorithm.TREE):
        with pytest.raises(ValueError, match="offers"):
            cost(Collective.ALL_REDUCE, MiB, 8, algorithm, ring)


def test_a_pair_on_a_fully_connected_node_uses_one_of_its_links():
    """8 devices, 7 links of 64 GB/s each (448 GB/s per device): two ranks reach one link (51.2 GB/s at
    80%), eight ranks all seven, so the larger group is faster: ranks are not monotone here."""
    mesh = NET.model_copy(update={"kind": NetworkKind.FULLY_CONNECTED, "links": 7, "bandwidth": 448e9})
    pair = cost(Collective.ALL_REDUCE, GiB, 2, Algorithm.RING, mesh)
    eight = cost(Collective.ALL_REDUCE, GiB, 8, Algorithm.RING, mesh)
    assert float(pair.time) == pytest.approx(8.4e-6 + 2 * 2e-6 + GiB / 51.2e9)  # 20.98 ms
    assert float(eight.time) == pytest.approx(8.4e-6 + 14 * 2e-6 + 1.75 * GiB / 358.4e9)  # 5.28 ms


@pytest.mark.parametrize("op", OPS)
def test_a_group_of_one_costs_nothing(op):
    for algorithm in (Algorithm.AUTO, Algorithm.RING):
        c = cost(op, GiB, 1, algorithm)
        assert (float(c.time), float(c.sent_bytes)) == (0.0, 0.0)
    arrays = cost(op, GiB, np.array([1.0, 2.0]))
    assert arrays.time[0] == 0 and arrays.time[1] > 0


@settings(max_examples=80, deadline=None)
@given(op=hs.sampled_from(OPS), n=hs.floats(1.0, 1e10), p=hs.integers(2, 256))
def test_auto_takes_the_fastest_pinned_algorithm(op, n, p):
    pinned = {}
    for algorithm in PINNED:
        try:
            pinned[algorithm] = float(cost(op, n, p, algorithm).time)
        except ValueError:
            continue  # the algorithm does not run this collective
    auto = cost(op, n, p)
    assert float(auto.time) == pytest.approx(min(pinned.values()), rel=1e-12)
    assert pinned[ALGORITHMS[int(auto.algorithm)]] == pytest.approx(float(auto.time), rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(op=hs.sampled_from(OPS), n=hs.floats(1.0, 1e10), k=hs.floats(1.0, 1e3), p=hs.integers(1, 256),
       pinned=hs.sampled_from([Algorithm.AUTO, Algorithm.RING]))
def test_time_is_non_decreasing_in_size(op, n, k, p, pinned):
    assert float(cost(op, n * k, p, pinned).time) >= float(cost(op, n, p, pinned).time)


@settings(max_examples=80, deadline=None)
@given(op=hs.sampled_from(OPS), n=hs.floats(1.0, 1e10), k=hs.floats(1.0, 1e3), p=hs.integers(1, 256))
def test_more_bandwidth_is_never_slower(op, n, k, p):
    assert float(cost(op, n, p, bandwidth=k * 50e9).time) <= float(cost(op, n, p).time) * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(op=hs.sampled_from(OPS), n=hs.floats(1.0, 1e10), p=hs.integers(1, 256), more=hs.integers(0, 256),
       pinned=hs.sampled_from([Algorithm.AUTO, Algorithm.RING]))
def test_more_ranks_are_never_faster_on_a_switch(op, n, p, more, pinned):
    """At a fixed per-rank buffer every term grows with p on a switch (not on a fully connected node,
    above, nor on a torus, whose ring is shorter when the group fills it)."""
    assert float(cost(op, n, p + more, pinned).time) >= float(cost(op, n, p, pinned).time) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(sizes=hs.lists(hs.floats(1.0, 1e10), min_size=1, max_size=5), data=hs.data(),
       net=hs.sampled_from(["switch", "fully_connected", "torus"]), op=hs.sampled_from(OPS))
def test_arrays_give_the_scalar_costs(sizes, data, net, op):
    network = {"switch": NET,
               "fully_connected": NET.model_copy(update={"kind": NetworkKind.FULLY_CONNECTED, "links": 7}),
               "torus": NET.model_copy(update={"kind": NetworkKind.TORUS, "shape": (4, 4),
                                            "in_network_reduction": False, "algorithms": (Algorithm.RING,)})}[net]
    ranks = data.draw(hs.lists(hs.sampled_from([2, 3, 8, 16, 64]), min_size=len(sizes), max_size=len(sizes)))
    at_once = cost(op, np.array(sizes), np.array(ranks, dtype=float), net=network)
    for i, (n, p) in enumerate(zip(sizes, ranks, strict=True)):
        one = cost(op, n, p, net=network)
        assert at_once.time[i] == pytest.approx(float(one.time), rel=1e-12)
        assert at_once.algorithm[i] == one.algorithm and at_once.protocol[i] == one.protocol


def test_the_tree_reads_its_own_size_curve_and_the_ring_the_dimension_s():
    """`tree_size_efficiency` (fitted on a sweep that ran the tree) slows the tree only: at 4 MiB a curve of
    0.5 doubles the tree's transfer time; the ring keeps `size_efficiency` (none here: full rate)."""
    half = EfficiencyCurve(points=((1.0, 0.5), (1e12, 0.5)))
    net = NET.model_copy(update={"algorithms": (Algorithm.RING, Algorithm.TREE), "tree_size_efficiency": half})
    n, p = 4 * 2.0**20, 8
    for alg in (Algorithm.RING, Algorithm.TREE):
        plain, curved = cost(Collective.ALL_REDUCE, n, p, alg), cost(Collective.ALL_REDUCE, n, p, alg, net=net)
        factor = 2.0 if alg is Algorithm.TREE else 1.0
        assert float(curved.transfer) == pytest.approx(factor * float(plain.transfer))
