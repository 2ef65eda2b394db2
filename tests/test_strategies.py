"""Offload, uneven pipeline splits, ZeRO communication and overlap: behaviour a user relies on."""

import pytest
from conftest import gpt

from armillary import Strategy, Training, estimate

MODEL = gpt(32, 4096, 32)
W = Training(seq_len=2048, global_batch=256)


def run(gpus=64, **strategy):
    return estimate(MODEL, "dgx-a100", Strategy(**strategy), W, gpus=gpus)


def test_optimizer_offload_moves_states_to_tier2_and_costs_time():
    base, off = run(tp=8, zero=1), run(tp=8, zero=1, offload={"optimizer": True})
    assert float(off.memory_hbm.optimizer_states) == 0.0
    assert float(off.memory_tier2.optimizer_states) == pytest.approx(float(base.memory_hbm.optimizer_states))
    assert float(off.breakdown.optimizer) > float(base.breakdown.optimizer)  # PCIe is slower than HBM


def test_activation_offload_frees_hbm():
    base, off = run(tp=2, pp=4), run(tp=2, pp=4, offload={"activations": True})
    assert float(off.memory_hbm.total) < float(base.memory_hbm.total)
    assert float(off.memory_tier2.activations) == pytest.approx(float(base.memory_hbm.activations))


def test_explicit_even_split_equals_default_split():
    a = run(tp=2, pp=4)
    b = run(tp=2, pp=4, first_stage_layers=8, last_stage_layers=8)
    assert float(a.step_time_s) == pytest.approx(float(b.step_time_s), rel=1e-12)


def test_uneven_split_slowest_stage_sets_the_steady_state():
    """31 layers on 4 stages as 8 | 8 | 8 | 7: the last stage's LM head (about one layer of work for this
    vocabulary) balances its missing layer, so the steady state is about 8 layers per micro-batch."""
    r = estimate(gpt(31, 4096, 32), "dgx-a100", Strategy(tp=2, pp=4, first_stage_layers=8, last_stage_layers=7),
                 W, gpus=64)
    assert bool(r.feasible)
    per_mb = float(r.breakdown.forward_backward + r.breakdown.recompute + r.breakdown.tp_exposed) / float(
        r.microbatches)
    layer = float(r.layer.total_s)
    assert 8 * layer <= per_mb < 8.5 * layer


def test_zero3_moves_one_and_a_half_times_the_bytes_of_dp():
    """ZeRO §7.2: P_os+g+p moves 3 Psi per step against 2 Psi for plain data parallelism (m = 1)."""
    w = Training(seq_len=2048, global_batch=64)  # 64 GPUs x micro-batch 1 -> one micro-batch
    dp = estimate(MODEL, "dgx-a100", Strategy(zero=0, precision="fp16"), w, gpus=64)
    z3 = estimate(MODEL, "dgx-a100", Strategy(zero=3, precision="fp16"), w, gpus=64)
    ratio = float(z3.traffic.scale_out_bytes) / float(dp.traffic.scale_out_bytes)
    assert ratio == pytest.approx(1.5, rel=1e-9)


def test_overlap_only_ever_helps():
    plain = run(tp=8, zero=1, overlap={"dp_grad_reduce": False, "param_gather": False, "tp_comm": False})
    overlapped = run(tp=8, zero=1, overlap={"dp_grad_reduce": True, "param_gather": True, "tp_comm": True})
    assert float(overlapped.step_time_s) < float(plain.step_time_s)
    assert float(overlapped.breakdown.tp_exposed) < float(plain.breakdown.tp_exposed)


def test_interleaving_shrinks_the_bubble():
    one, inter = run(tp=2, pp=4), run(tp=2, pp=4, vpp=2)
    assert float(inter.breakdown.bubble) < float(one.breakdown.bubble)
    assert float(inter.breakdown.pp_exposed) > float(one.breakdown.pp_exposed)  # v x more p2p (SC'21 §2.2.2)


def test_first_stage_layers_alone_spreads_the_rest_over_the_other_stages():
    """80 layers, pp 4, first stage 2: the other three stages hold 26 each (Megatron's semantics)."""
    from armillary.plan.layout import stage_layers

    assert [float(x) for x in stage_layers(80, 4, 2, 0)] == [2, 26, 26]
    assert [float(x) for x in stage_layers(80, 4, 2, 2)] == [2, 38, 2]
    one = estimate(gpt(80, 4096, 32), "dgx-a100", Strategy(tp=2, pp=4, first_stage_layers=2), W, gpus=64)
    both = estimate(gpt(80, 4096, 32), "dgx-a100", Strategy(tp=2, pp=4, first_stage_layers=2, last_stage_layers=26),
                    W, gpus=64)
    assert float(one.step_time_s) == pytest.approx(float(both.step_time_s), rel=1e-12)
    bad = estimate(gpt(80, 4096, 32), "dgx-a100", Strategy(tp=2, pp=4, first_stage_layers=4), W, gpus=64)
    assert not bool(bad.feasible)  # 76 layers do not split over 3 stages


def test_memory_follows_the_fullest_stage():
    """Shrinking the end stages piles layers onto the middle ones: memory per device must not drop."""
    model = gpt(80, 4096, 32)
    even = estimate(model, "dgx-a100", Strategy(tp=8, pp=4), W, gpus=64)
    squeezed = estimate(model, "dgx-a100", Strategy(tp=8, pp=4, first_stage_layers=2, last_stage_layers=2),
                        W, gpus=64)
    assert float(squeezed.memory_hbm.weights) > float(even.memory_hbm.weights)


def test_offloading_the_first_layers_of_each_chunk():
    """Megatron-Core --cpu-offloading-num-layers 3 of a stage's 8 layers (32 layers, pp 4): 3/8 of the stored
    activations move to the second tier and over its link, the rest stay, with one layer's staging buffer."""
    base, whole = run(tp=2, pp=4), run(tp=2, pp=4, offload={"activations": True})
    part = run(tp=2, pp=4, offload={"activations": True, "activation_layers": 3})
    stored, staging = float(base.memory_hbm.activations), float(whole.memory_hbm.activations)
    assert float(part.memory_tier2.activations) == pytest.approx(3 / 8 * stored, rel=1e-12)
    assert float(part.memory_hbm.activations) == pytest.approx(5 / 8 * stored + staging, rel=1e-12)
    assert float(part.offload_s) == pytest.approx(3 / 8 * float(whole.offload_s), rel=1e-12)
    for n in range(1, 8):  # one more offloaded layer never needs more HBM nor moves fewer bytes
        fewer = run(tp=2, pp=4, offload={"activations": True, "activation_layers": n})
        more = run(tp=2, pp=4, offload={"activations": True, "activation_layers": n + 1})
        assert float(more.memory_hbm.total) <= float(fewer.memory_hbm.total)
        assert float(more.offload_s) >= float(fewer.offload_s)
    with pytest.raises(ValueError, match=r"activation_layers needs offload\.activations"):
        run(tp=2, pp=4, offload={"activation_layers": 3})
