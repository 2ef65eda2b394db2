"""Invariants of the collective layer (hypothesis) and closed-form alpha-beta results per algorithm."""

import numpy as np
import pytest
from conftest import on_nodes
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.comm.algorithms import PROTOCOLS, dimension_cost
from armillary.comm.collectives import collective
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.specs.network import NetworkDimension

OPS = [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL,
       Collective.BROADCAST, Collective.REDUCE]
H100 = load_system("dgx-h100", 512)
GROUPS = [on_nodes(8, 8), on_nodes(64, 8), on_nodes(64, 1), on_nodes(512, 8)]


def _scaled(system, bandwidth=1.0, latency=1.0):
    def net(n: NetworkDimension) -> NetworkDimension:
        return n.model_copy(update={"bandwidth": n.bandwidth * bandwidth, "latency": n.latency * latency})
    return system.model_copy(update={"network": tuple(net(d) for d in system.network)})


@settings(max_examples=60, deadline=None)
@given(op=hs.sampled_from(OPS), group=hs.sampled_from(GROUPS), n=hs.floats(1.0, 1e11),
       faster=hs.floats(1.0, 20.0), quicker=hs.floats(0.05, 1.0))
def test_more_bandwidth_or_less_latency_never_slows(op, group, n, faster, quicker):
    base = float(collective(op, n, group, H100).cost.time)
    assert float(collective(op, n, group, _scaled(H100, bandwidth=faster)).cost.time) <= base * (1 + 1e-12)
    assert float(collective(op, n, group, _scaled(H100, latency=quicker)).cost.time) <= base * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(op=hs.sampled_from(OPS), group=hs.sampled_from(GROUPS), n=hs.floats(1.0, 1e11),
       pinned=hs.sampled_from([a for a in Algorithm if a is not Algorithm.AUTO]))
def test_automatic_choice_is_never_slower_than_a_pinned_algorithm(op, group, n, pinned):
    auto = float(collective(op, n, group, H100).cost.time)
    try:
        fixed = float(collective(op, n, group, H100, pinned).cost.time)
    except ValueError:
        return  # the algorithm cannot run this collective on these tiers
    assert auto <= fixed * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(op=hs.sampled_from(OPS), group=hs.sampled_from(GROUPS), n=hs.floats(1.0, 1e10), k=hs.floats(1.0, 100.0))
def test_time_is_non_decreasing_in_size(op, group, n, k):
    assert float(collective(op, n * k, group, H100).cost.time) >= float(collective(op, n, group, H100).cost.time)


def test_array_sizes_match_scalar_sizes():
    sizes = np.geomspace(1e3, 1e10, 15)
    for op in OPS:
        arr = collective(op, sizes, on_nodes(64, 8), H100).cost.time
        one = [float(collective(op, s, on_nodes(64, 8), H100).cost.time) for s in sizes]
        assert np.allclose(arr, one, rtol=1e-12)


SIMPLE = PROTOCOLS[2]
NVLINK = H100.network[0].model_copy(update={
    "size_efficiency": None,
    "algorithms": (Algorithm.RING, Algorithm.HALVING_DOUBLING, Algorithm.DIRECT, Algorithm.TREE)})


@pytest.mark.parametrize(("op", "algorithm", "steps", "volume"), [
    (Collective.ALL_REDUCE, Algorithm.RING, lambda p: 2 * (p - 1), lambda p, n: 2 * (p - 1) / p * n),
    (Collective.ALL_REDUCE, Algorithm.HALVING_DOUBLING, lambda p: 2 * np.log2(p), lambda p, n: 2 * (p - 1) / p * n),
    (Collective.ALL_GATHER, Algorithm.RING, lambda p: p - 1, lambda p, n: (p - 1) / p * n),
    (Collective.REDUCE_SCATTER, Algorithm.HALVING_DOUBLING, lambda p: np.log2(p), lambda p, n: (p - 1) / p * n),
    (Collective.ALL_TO_ALL, Algorithm.RING, lambda p: p - 1, lambda p, n: (p - 1) / p * n),
])
def test_large_messages_follow_the_closed_form(op, algorithm, steps, volume):
    """Thakur et al. 2005 (docs/formulas.md §1.2): for a large message the Simple protocol wins and
    t = base + steps * alpha + volume / (eta B)."""
    p, n = 8, 4e9
    got = dimension_cost(op, n, p, NVLINK, 3e12, algorithm)
    eta_b = NVLINK.efficiency * NVLINK.bandwidth
    expected = SIMPLE.base_latency_s + steps(p) * NVLINK.latency + volume(p, n) / eta_b
    assert float(got.time) == pytest.approx(expected)
    assert float(got.sent_bytes) == pytest.approx(volume(p, n))


def test_ring_all_reduce_meets_the_bandwidth_lower_bound():
    """Patarasuk & Yuan 2009: every rank must send at least 2(p-1)/p n bytes in an all-reduce."""
    for p in (2, 4, 8):
        got = dimension_cost(Collective.ALL_REDUCE, 1e9, p, NVLINK, 3e12, Algorithm.RING)
        assert float(got.sent_bytes) == pytest.approx(2 * (p - 1) / p * 1e9)


def test_in_network_reduction_halves_the_all_reduce_volume():
    got = dimension_cost(Collective.ALL_REDUCE, 1e9, 8, H100.network[0], 3e12, Algorithm.IN_NETWORK)
    assert float(got.sent_bytes) == pytest.approx(1e9)  # vs 2(p-1)/p n for the ring


def test_pinning_an_algorithm_the_network_lacks_names_what_it_offers():
    with pytest.raises(ValueError, match="offers"):
        dimension_cost(Collective.ALL_REDUCE, 1e6, 8, load_system("dgx-a100").network[0], 3e12, Algorithm.IN_NETWORK)


def test_uniform_matrix_all_to_all_matches_the_uniform_collective():
    from armillary.comm.collectives import all_to_all_matrix

    p, n = 16, 64e6  # each rank sends n/p to every rank
    matrix = np.full((p, p), n / p)
    group = on_nodes(16, 8)
    uniform = collective(Collective.ALL_TO_ALL, n, group, H100).cost
    skewed = matrix.copy()
    skewed[:, 3] *= 4  # rank 3 is a hot expert
    got = all_to_all_matrix(matrix, group, H100)
    assert got.time == pytest.approx(float(uniform.time), rel=1e-9)
    assert all_to_all_matrix(skewed, group, H100).time > got.time


def test_shared_links_divide_the_bandwidth():
    shared = H100.with_dimension(1, shared_by=2)
    n, group = 1e9, on_nodes(64, 8)
    t1 = float(collective(Collective.ALL_REDUCE, n, group, H100).cost.time)
    t2 = float(collective(Collective.ALL_REDUCE, n, group, shared).cost.time)
    assert t2 > 1.5 * (t1 - float(collective(Collective.ALL_REDUCE, n, on_nodes(8, 8), H100).cost.time))


def test_torus_ring_runs_dimension_by_dimension():
    """A 4x4x4 torus: one ring pass takes 3 + 3 + 3 steps instead of 63 (docs/formulas.md §1.2)."""
    torus = NetworkDimension(name="ICI 3D torus", kind="torus", shape=(4, 4, 4), bandwidth="100 GB/s", latency="1 us",
                    efficiency=0.8, algorithms=["ring"])
    small = dimension_cost(Collective.ALL_GATHER, 64.0, 64, torus, 1e12)
    flat = dimension_cost(Collective.ALL_GATHER, 64.0, 64, torus.model_copy(update={"shape": None}), 1e12)
    assert float(flat.time) - float(small.time) == pytest.approx((63 - 9) * 1e-6 * PROTOCOLS[0].hop_latency_factor)


def test_topology_graph_of_a_dgx_cluster():
    import networkx as nx

    from armillary.comm.topology import topology_graph

    g = topology_graph(load_system("dgx-h100", 32))
    devices = [v for v, k in g.nodes(data="kind") if k == "device"]
    assert len(devices) == 32 and nx.is_connected(g)
    assert g.degree["n0.switch"] == 8  # NVSwitch star inside each node
    assert nx.shortest_path_length(g, "d0.0", "d1.0") == 2  # same rail: device - rail switch - device


def test_topology_graph_of_a_torus():
    import networkx as nx

    from armillary.comm.topology import topology_graph
    from armillary.specs.system import System

    ici = NetworkDimension(name="ICI", kind="torus", shape=(2, 2), bandwidth="100 GB/s", latency="1 us", efficiency=0.8)
    system = System(name="pod", device=H100.device, devices_per_node=4, scale_up=ici, scale_out=H100.network[-1])
    g = topology_graph(system)
    assert nx.is_connected(g) and all(deg == 2 for _, deg in g.degree)  # a 2x2 torus is a 4-ring


def test_bandwidth_sweep_matches_respecified_networks():
    """A search sweeps tier bandwidths as arrays; each element equals a network re-specified with it."""
    bandwidths = np.array([100e9, 400e9, 900e9])
    group = on_nodes(64, 8)
    swept = collective(Collective.ALL_REDUCE, 1e9, group, H100, bandwidths=(None, bandwidths)).cost.time
    for b, t in zip(bandwidths, swept, strict=True):
        one = H100.with_dimension(1, bandwidth=b)
        assert t == pytest.approx(float(collective(Collective.ALL_REDUCE, 1e9, group, one).cost.time))


def test_uneven_group_layouts_are_costed_by_their_even_sub_layout():
    """6 data-parallel ranks at stride 2 on 8-GPU nodes sit as 4 + 2: costed as 3 nodes of 2."""
    from armillary.plan.placement import place_groups

    _, dp, _, _ = place_groups(2, 6, 4, (8, 4096))
    assert (float(dp.size), float(dp.per_node), float(dp.nodes)) == (6.0, 2.0, 3.0)


def test_direct_reduce_scatter_reduces_only_its_share():
    net = NVLINK
    rs = dimension_cost(Collective.REDUCE_SCATTER, 2**28, 8, net, 3e12, Algorithm.DIRECT)
    ag = dimension_cost(Collective.ALL_GATHER, 2**28, 8, net, 3e12, Algorithm.DIRECT)
    assert float(rs.time) - float(ag.time) == pytest.approx(7 / 8 * 2**28 * 3 / 3e12)


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-a100", "dgx-b200"])
def test_time_is_non_decreasing_on_a_dense_size_grid(preset):
    """Protocol and algorithm switches, calibrated ramps and the fixed cost shared by hierarchical stages
    must never make a larger message faster (4,000 sizes from 1 B to 100 GB)."""
    system = load_system(preset, 512)
    sizes = np.geomspace(1, 1e11, 4000)
    for op in OPS:
        for group in (on_nodes(8, 8), on_nodes(16, 2), on_nodes(64, 8), on_nodes(64, 1), on_nodes(512, 8)):
            times = collective(op, sizes, group, system).cost.time
            assert np.all(np.diff(times) >= -1e-15), (op, group)
