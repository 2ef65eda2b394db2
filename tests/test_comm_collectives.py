"""comm/collectives.py and comm/compose.py on a two-dimension system: the sequential composition by hand
from one-dimension costs (formulas.md §1.4: all-reduce = reduce-scatter inside + all-reduce of n / per_node
across + all-gather inside), the message of each dimension's phase, NCCL's flat ring and pinned algorithms,
and point-to-point and non-uniform all-to-all against the uniform collectives."""

import numpy as np
import pytest
from conftest import on_nodes

from armillary.comm.algorithms import PROTOCOLS, dimension_cost, ring_protocols
from armillary.comm.collectives import all_to_all_matrix, collective, send_recv
from armillary.comm.flat_ring import LL_NET_BUSBW
from armillary.comm.phase_net import phase_message
from armillary.plan.placement import Placement, pair_across
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system
from armillary.specs.network import NetworkDimension

# 2 nodes of 8, the rails at their datasheet figures (the preset's are calibrated to nccl-tests sweeps), no
# per-channel limit (tests/test_comm_channels.py)
H100 = load_system("dgx-h100", 16).with_dimension(1, latency=14e-6, efficiency=0.9, tree_efficiency=None,
                                                  size_efficiency=None, channels=None, channel_bandwidth=None)
UP, OUT = H100.network
SEQUENTIAL = Composition.SEQUENTIAL
RATE = H100.device.hbm.efficiency * H100.device.hbm.bandwidth
GiB = 2**30
SHARED = 6.6e-6  # the smallest protocol base latency (NCCL LL), paid once per hierarchical collective
TWO_NODES = on_nodes(16, 8)


def on(tier: NetworkDimension, op: Collective, n, p):
    return dimension_cost(op, n, p, tier, RATE)


def test_hierarchical_all_reduce_over_two_nodes():
    n = GiB
    rs, across, ag = on(UP, Collective.REDUCE_SCATTER, n, 8), on(OUT, Collective.ALL_REDUCE, n / 8, 2), \
        on(UP, Collective.ALL_GATHER, n, 8)
    got = collective(Collective.ALL_REDUCE, n, TWO_NODES, H100, composition=SEQUENTIAL)
    assert float(got.cost.time) == pytest.approx(float(rs.time + across.time + ag.time) - 2 * SHARED)
    assert float(got.cost.scale_up_bytes) == pytest.approx(2 * 7 / 8 * n)  # reduce-scatter + all-gather
    # across: a 2-rank all-reduce of 128 MiB on 400 Gb/s at 90%: 2 steps of 14 us, 128 MiB at 45 GB/s
    assert float(across.time) == pytest.approx(8.4e-6 + 2 * 14e-6 + n / 8 / 45e9)
    assert float(got.cost.scale_out_bytes) == pytest.approx(n / 8)
    assert float(got.dimensions[1].time) == pytest.approx(float(across.time))


def test_all_reduce_inside_one_node_is_the_flat_one():
    n = GiB
    flat = on(UP, Collective.ALL_REDUCE, n, 8)  # in-network reduction may run here
    got = collective(Collective.ALL_REDUCE, n, on_nodes(8, 8), H100)
    assert float(got.cost.time) == pytest.approx(float(flat.time))
    assert float(got.cost.scale_out_bytes) == 0


def test_all_reduce_with_one_rank_per_node_runs_across_only():
    n = GiB
    preset = load_system("dgx-h100", 128)
    got = collective(Collective.ALL_REDUCE, n, on_nodes(16, 1), preset)
    calibrated = float(dimension_cost(Collective.ALL_REDUCE, n, 16, preset.network[1], RATE).time)
    assert float(got.cost.time) == pytest.approx(calibrated)
    got = collective(Collective.ALL_REDUCE, n, on_nodes(16, 1), H100.with_devices(128))
    # a ring over 16 nodes moves 2 x 15/16 n per device at 45 GB/s (no stage inside, nothing shared)
    assert float(got.cost.time) == pytest.approx(float(on(OUT, Collective.ALL_REDUCE, n, 16).time))
    assert float(got.cost.scale_out_bytes) == pytest.approx(2 * 15 / 16 * n)
    assert float(got.cost.scale_up_bytes) == 0


@pytest.mark.parametrize("op", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER])
def test_gather_and_scatter_compose_two_stages(op):
    n = GiB
    across, inside = on(OUT, op, n / 8, 2), on(UP, op, n, 8)
    got = collective(op, n, TWO_NODES, H100, composition=SEQUENTIAL)
    assert float(got.cost.time) == pytest.approx(float(across.time + inside.time) - SHARED)
    assert float(got.cost.scale_out_bytes) == pytest.approx(n / 16)  # half of each device's n/8 rail share
    assert float(got.cost.scale_up_bytes) == pytest.approx(7 / 8 * n)


def test_broadcast_moves_the_whole_message_on_both_tiers():
    n = 2**24
    got = collective(Collective.BROADCAST, n, TWO_NODES, H100, composition=SEQUENTIAL)
    expected = on(OUT, Collective.BROADCAST, n, 2).time + on(UP, Collective.BROADCAST, n, 8).time - SHARED
    assert float(got.cost.time) == pytest.approx(float(expected))


def test_all_to_all_runs_both_tiers_at_once():
    """Each of 16 ranks sends n/16 to every rank: 7 n/16 to its node's peers, 8 n/16 to the other node."""
    n = 2**28
    got = collective(Collective.ALL_TO_ALL, n, TWO_NODES, H100)
    assert float(got.cost.scale_up_bytes) == pytest.approx(7 * n / 16)
    assert float(got.cost.scale_out_bytes) == pytest.approx(8 * n / 16)
    assert float(got.cost.time) == pytest.approx(max(float(d.time) for d in got.dimensions))


@pytest.mark.parametrize(("op", "group", "expected"), [
    (Collective.ALL_REDUCE, on_nodes(16, 8), (1600, 200)),  # n / per_node on each device's rail
    (Collective.ALL_GATHER, on_nodes(16, 8), (1600, 200)),
    (Collective.REDUCE_SCATTER, on_nodes(64, 4), (1600, 400)),
    (Collective.BROADCAST, on_nodes(16, 8), (1600, 1600)),
    (Collective.REDUCE, on_nodes(64, 8), (1600, 1600)),
    # all-to-all: 1/nodes of the buffer stays in the node (8/16, 8/64); the uniform all-to-all over the
    # nodes of a 1600-byte buffer sends (nodes-1)/nodes of it: 800 = 8 x 100, 1400 = 56 x 25 bytes
    (Collective.ALL_TO_ALL, on_nodes(16, 8), (800, 1600)),
    (Collective.ALL_TO_ALL, on_nodes(64, 8), (200, 1600)),
])
def test_phase_messages_by_hand(op, group, expected):
    assert tuple(float(phase_message(op, 1600.0, group, i)) for i in range(2)) == pytest.approx(expected)


def test_phase_messages_over_arrays():
    group = on_nodes(np.array([16.0, 64.0]), np.array([8.0, 4.0]))
    inside, across = (phase_message(Collective.ALL_REDUCE, 1600.0, group, i) for i in range(2))
    assert np.broadcast_to(inside, 2).tolist() == [1600, 1600] and across.tolist() == [200, 400]
    inside, across = (phase_message(Collective.ALL_TO_ALL, 1600.0, group, i) for i in range(2))
    assert inside.tolist() == [800, 100] and across.tolist() == [1600, 1600]


def test_send_recv_uses_the_tier_it_crosses():
    n = GiB
    across = send_recv(n, pair_across(1, 2), H100)
    assert float(across.time) == pytest.approx(8.4e-6 + 14e-6 + n / 45e9)  # one step on InfiniBand
    assert (float(across.scale_up_bytes), float(across.scale_out_bytes)) == (0, n)
    inside = send_recv(n, pair_across(0, 2), H100)
    assert float(inside.time) == pytest.approx(float(on(UP, Collective.SEND_RECV, n, 2).time))
    assert (float(inside.scale_up_bytes), float(inside.scale_out_bytes)) == (n, 0)
    both = send_recv(n, Placement((np.array([2.0, 1.0]), np.array([1.0, 2.0]))), H100)
    assert both.time.tolist() == pytest.approx([float(inside.time), float(across.time)])


def test_uniform_matrix_on_four_nodes_is_the_uniform_all_to_all():
    p, share = 32, 2**20  # every rank sends 1 MiB to every rank
    group = on_nodes(32, 8)
    system = load_system("dgx-h100", 32)
    got = all_to_all_matrix(np.full((p, p), float(share)), group, system)
    uniform = collective(Collective.ALL_TO_ALL, p * share, group, system).cost
    assert got.time == pytest.approx(float(uniform.time))
    assert (got.scale_up_bytes, got.scale_out_bytes) == (7 * share, 24 * share)


def test_cross_node_pairs_are_a_point_to_point_exchange():
    """Rank i sends only to rank i + 8 (mod 16): 64 MiB each over the rails, nothing inside a node."""
    n = 2**26
    matrix = np.zeros((16, 16))
    matrix[np.arange(16), (np.arange(16) + 8) % 16] = n
    got = all_to_all_matrix(matrix, TWO_NODES, H100)
    assert got.time == pytest.approx(float(send_recv(n, pair_across(1, 2), H100).time))
    assert (got.scale_up_bytes, got.scale_out_bytes) == (0, n)


def test_matrix_must_match_the_group():
    with pytest.raises(ValueError, match="16 x 16"):
        all_to_all_matrix(np.ones((8, 8)), TWO_NODES, H100)


def test_pinned_ring_is_the_flat_ring():
    """NCCL_ALGO=Ring over 2 nodes: one ring of 16 ranks; 7 of each 8 of its edges run on NVLink, 1 on the
    rails (f = 7/8, 1/8: the bytes each dimension carries). NCCL's ring model (tuning.cc): one protocol for
    the whole ring, latency = base + 28 intra-node steps x NVLink latency + 2(nNodes-1) = 2 network steps x
    network latency, plus the bytes at the slower dimension's rate."""
    n = GiB
    ring = collective(Collective.ALL_REDUCE, n, TWO_NODES, H100, Algorithm.RING)
    simple = PROTOCOLS[-1]
    k = len(PROTOCOLS) - 1
    inside = ring_protocols(Collective.ALL_REDUCE, n * 7 / 8, 16, UP, RATE)[k]
    across = ring_protocols(Collective.ALL_REDUCE, n / 8, 16, OUT, RATE)[k]
    latency = simple.base_latency_s + 28 * UP.latency + 2 * OUT.latency
    transfer = max(float(inside.transfer), float(across.transfer))
    assert float(ring.cost.time) == pytest.approx(latency + transfer)
    assert int(ring.dimensions[1].protocol) == k  # 1 GiB runs the Simple protocol
    assert float(ring.cost.scale_out_bytes) == pytest.approx(2 * 15 / 16 * n / 8)
    assert ring.composition_name == "flat_ring"


def test_ring_across_nodes_caps_ll_bandwidth():
    """LL across 2 nodes runs at most at NCCL's llMaxBw bus bandwidth (39 GB/s on x86 Intel hosts,
    tuning.cc): a 1 MiB ring all-reduce over 2 nodes is never faster than 2(p-1)/p x 1 MiB / 39 GB/s."""
    n = 2.0**20
    ring = collective(Collective.ALL_REDUCE, n, TWO_NODES, H100, Algorithm.RING)
    assert float(ring.cost.time) >= 2 * 15 / 16 * n / LL_NET_BUSBW[0]


def test_pinned_algorithm_applies_where_it_runs():
    n = GiB
    # NVLink SHARP runs inside only; across, InfiniBand runs a non-ring phase (a tree), in the protocol that makes
    # the whole pipelined collective fastest (NCCL's tuner scores whole configurations), which need not be that
    # phase's own fastest: never faster than it
    inn = collective(Collective.ALL_REDUCE, n, TWO_NODES, H100, Algorithm.IN_NETWORK)
    tree = dimension_cost(Collective.ALL_REDUCE, n / 8, 2, OUT, RATE, exclude=(Algorithm.RING,))
    assert int(inn.dimensions[1].algorithm) == int(tree.algorithm)
    assert float(inn.dimensions[1].time) >= float(tree.time) * (1 - 1e-12)
    assert inn.composition_name == "pipelined"
    with pytest.raises(ValueError, match="cannot run"):
        collective(Collective.ALL_REDUCE, n, TWO_NODES, H100, Algorithm.DIRECT)
