"""Pipeline schedules (SC'21 §2.2) and collective costs (Thakur et al. 2005) against hand calculations."""

import numpy as np
import pytest
from conftest import on_nodes, with_bandwidth_scaled
from hypothesis import given
from hypothesis import strategies as hs

from armillary.comm.collectives import all_gather, all_reduce, collective, send_recv
from armillary.estimate.pipeline import bubble_fraction, pipeline_time
from armillary.plan.codes import SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, SCHEDULE_ZB_H1
from armillary.plan.placement import pair_across, place_groups
from armillary.specs.communication import Collective, Composition
from armillary.specs.loading import load_system


@pytest.mark.parametrize(("p", "m", "v"), [(8, 64, 1), (4, 16, 1), (8, 64, 3), (35, 280, 3)])
def test_equal_stages(p, m, v):
    t = 0.1  # forward + backward of one micro-batch on one stage
    sched = SCHEDULE_INTERLEAVED if v > 1 else SCHEDULE_1F1B
    got = pipeline_time(t, p * t, m, v, sched, 1 / 3)
    assert float(got) == pytest.approx((m + (p - 1) / v) * t)  # SC'21 §2.2.1-2.2.2
    assert float(got) / (m * t) - 1 == pytest.approx(bubble_fraction(p, m, v))


def test_slowest_stage_sets_steady_state():
    stages = np.array([0.1, 0.1, 0.12, 0.1])
    got = pipeline_time(stages.max(), stages.sum(), 10, 1, SCHEDULE_1F1B, 1 / 3)
    assert float(got) == pytest.approx(10 * 0.12 + 0.3)


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 64)])
def test_zero_bubble_h1_bubble(p, m):
    """ZB-H1's bubble is (p - 1)(t_F + t_B - t_W) (Qi et al. ICLR'24; docs/formulas.md §5): with
    t_F = t_B = t_W = 1 a third of 1F1B's (p - 1)(t_F + t_B + t_W)."""
    got = pipeline_time(3.0, 3.0 * p, m, 1, SCHEDULE_ZB_H1, 1 / 3)
    assert float(got) == pytest.approx(3 * m + (p - 1) * (1 + 1 - 1))


def test_ring_all_reduce_in_one_node():
    """Large all-reduce on NVLink3 (no in-network reduction): the ring with the Simple protocol,
    base + 2(p-1) alpha + 2(p-1)/p n / (eta B) (Thakur et al. 2005; NCCL base latency 8.4 us)."""
    sys8 = load_system("dgx-a100", 8)
    n, p = 1e9, 8
    up = sys8.network[0]
    expected = 8.4e-6 + 2 * (p - 1) * up.latency + 2 * (p - 1) / p * n / (up.efficiency * up.bandwidth)
    assert float(all_reduce(n, on_nodes(8, 8), sys8).time) == pytest.approx(expected)


def test_hierarchical_all_reduce_moves_1_over_g_across_nodes():
    system = load_system("dgx-a100", 64)
    n = 8e9
    cost = collective(Collective.ALL_REDUCE, n, on_nodes(64, 8), system, composition=Composition.SEQUENTIAL).cost
    assert float(cost.scale_out_bytes) == pytest.approx(2 * 7 / 8 * n / 8)  # 8 nodes, n/8 per device
    assert float(cost.scale_up_bytes) == pytest.approx(2 * 7 / 8 * n)


def test_megatron_rank_order():
    tp, dp, pp, _ = place_groups(8, 4, 2, (8, 4096))
    assert (tp.per_node, dp.per_node, pp.per_node) == (8, 1, 1)
    tp, dp, pp, _ = place_groups(2, 4, 2, (8, 4096))
    assert (float(tp.per_node), float(dp.per_node), float(pp.per_node)) == (2, 4, 1)


def test_pipeline_inner_rank_order():
    """tp-cp-pp-dp: ranks tp2 x pp4 share a node, data-parallel groups stride 8 ranks (one per node)."""
    tp, dp, pp, _ = place_groups(2, 4, 4, (8, 4096), rank_order=1.0)
    assert (float(tp.per_node), float(dp.per_node), float(pp.per_node)) == (2, 1, 4)
    # with cp: the gradient group is cp2 (inside the node) x dp4 (across nodes)
    _, grad, pp, cp = place_groups(2, 4, 2, (8, 4096), cp=2.0, rank_order=1.0)
    assert (float(grad.size), float(grad.per_node), float(pp.per_node), float(cp.per_node)) == (8, 2, 2, 2)
    arrays = place_groups(np.array([2.0, 2.0]), 4, 4, (8, 4096), rank_order=np.array([0.0, 1.0]))
    assert arrays[1].per_node.tolist() == [4, 1] and arrays[2].per_node.tolist() == [1, 4]


@given(n=hs.floats(1e3, 1e11), scale=hs.floats(1.0, 100.0), ranks=hs.sampled_from([2, 8, 16, 64, 512]))
def test_more_bandwidth_never_slows_a_collective(n, scale, ranks):
    system = load_system("dgx-a100", max(ranks, 8))
    faster = with_bandwidth_scaled(system, scale)
    group = on_nodes(ranks, min(ranks, 8))
    for op in (all_reduce, all_gather):
        assert float(op(n, group, faster).time) <= float(op(n, group, system).time) * (1 + 1e-12)
    apart = pair_across(1, 2)
    assert float(send_recv(n, apart, faster).time) <= float(send_recv(n, apart, system).time) * (1 + 1e-12)


@pytest.mark.parametrize(("model", "strategy", "layer"), [
    # sequence-parallel TP overlap: the input gradients' reduce-scatters run beside the weight-gradient GEMMs
    ("llama3.2-1b", {"tp": 8, "pp": 2, "sequence_parallel": True, "overlap": {"tp_comm": True}}, "layer"),
    # the overlapped expert exchange hides behind the whole backward, the weight pass included
    ("qwen3-30b-a3b", {"tp": 8, "pp": 4, "ep": 2, "attention": "flash",
                       "overlap": {"tp_comm": True, "ep_comm": True}}, "moe_layer"),
])
def test_deferring_the_weight_pass_saves_less_than_it_hid(model, strategy, layer):
    """ZB-H1 saves what deferring the weight pass takes off the backward (Qi et al. ICLR'24 §3.1): its
    compute when nothing hid behind it, less where the backward's overlapped communication did."""
    import armillary

    system = load_system("trn2-16", 64)
    workload = {"kind": "training", "seq_len": 2048, "global_batch": 8}
    zb = dict(strategy, schedule="zb-h1")
    hid = getattr(armillary.estimate(model, system, zb, workload), layer)
    assert 0.0 <= float(hid.weight_deferrable_s) < float(hid.backward_weight.time_s)
    plain = dict(zb, overlap={"tp_comm": False, "ep_comm": False})
    alone = getattr(armillary.estimate(model, system, plain, workload), layer)
    assert float(alone.weight_deferrable_s) == pytest.approx(float(alone.backward_weight.time_s))
