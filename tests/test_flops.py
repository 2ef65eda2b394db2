"""FLOP counts against Narayanan et al. SC'21 Eq. 3 and Korthikanti et al. 2022 App. A."""

import pytest

from armillary import Strategy, Training, estimate
from armillary.estimate.training import model_flop_per_iteration
from armillary.specs.arrays import ModelArrays, TrainingArrays


def test_model_flops_korthikanti(gpt175b):
    B, s, L, h, V = 64, 2048, 96, 12288, 51200
    expected = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    got = model_flop_per_iteration(ModelArrays.of(gpt175b), TrainingArrays(seq_len=s, global_batch=B))
    assert float(got) == pytest.approx(expected, rel=1e-12)


def test_full_recompute_hardware_flops_are_sc21_eq3(gpt175b):
    """With full recomputation the hardware FLOPs are SC'21 Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh)."""
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    r = estimate(gpt175b, "dgx-a100", Strategy(tp=8, pp=8, recompute="full"),
                 Training(seq_len=s, global_batch=B), gpus=1024)
    eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert float(r.hardware_flop) == pytest.approx(eq3, rel=1e-12)


def test_selective_recompute_adds_attention_core(gpt175b):
    """Selective recomputation re-runs QK^T and attention over V: +4 B s^2 h per layer (formulas.md §3.2)."""
    B, s, L, h = 64, 2048, 96, 12288
    r = estimate(gpt175b, "dgx-a100", Strategy(tp=8, pp=8, recompute="selective"),
                 Training(seq_len=s, global_batch=B), gpus=64)
    assert float(r.hardware_flop - r.model_flop) == pytest.approx(4 * B * s * s * h * L, rel=1e-12)


def test_backward_is_twice_forward_per_layer(gpt22b):
    """SC'21 Appendix: backward = 2 x forward FLOPs; weight gradients are one GEMM per weight GEMM."""
    r = estimate(gpt22b, "dgx-a100", Strategy(tp=8), Training(seq_len=2048, global_batch=4), gpus=8)
    lc = r.layer
    b, s, h, t = 1, 2048, 6144, 8  # micro_batch 1
    assert float(lc.forward.flop) == pytest.approx((24 * b * s * h**2 + 4 * b * s * s * h) / t)
    assert float(lc.backward_input.flop + lc.backward_weight.flop) == pytest.approx(2 * float(lc.forward.flop))
    assert float(lc.backward_weight.flop) == pytest.approx(24 * b * s * h**2 / t)
    assert float(lc.recompute.flop) == 0.0
