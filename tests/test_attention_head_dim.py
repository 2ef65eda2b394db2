"""Fused attention's rate by head dimension (Device.attention_nonmatmul_dims, cost.compute.head_dim_factor):
the published d 64 / d 128 ratios reproduced from the field, and d 128 / no field leaving today's times."""

import numpy as np
import pytest

from armillary.cost.compute import fused_attention_time, head_dim_factor
from armillary.plan.arrays import ModelArrays
from armillary.presets.registry import preset_names
from armillary.specs.loading import load_device, load_model
from armillary.workload.attention import fused_attention_op
from armillary.workload.ops import Op

BF16 = 1.0  # plan.codes.PRECISION: fp32, bf16, fp16, fp8
# a long, compute-bound attention call: 1e15 FLOPs over 16K keys per query, few bytes
LONG = dict(flop=1e15, bytes=1e6, depth=16384.0)


def _rate(device, head_dim: float, version: float = 3.0) -> float:
    """FLOP/s of the long call at `head_dim`, without the launch overhead."""
    op = Op(**LONG, head_dim=head_dim)
    return op.flop / (float(fused_attention_time(op, device, BF16, version)) - device.kernel_overhead)


@pytest.mark.parametrize(("device", "d64", "d128"), [
    ("b200", 980, 1428),  # flash-attention PR #2605, cuDNN forward, B200, non-causal 1K tokens
    ("gb200", 980, 1428),  # the same die and kernels
    ("h100-sxm", 413, 595),  # FlashAttention-3 paper Figure 5, cuDNN, H100 SXM5, non-causal 16K tokens
])
def test_published_d64_over_d128_ratio(device, d64, d128):
    dev = load_device(device)
    assert _rate(dev, 64) / _rate(dev, 128) == pytest.approx(d64 / d128, rel=0.005)


def test_hand_calculation():
    # d0 = 108: a d 64 score element costs (64 + 108) MMA units for 64 units of FLOPs, d 128 (128 + 108) for 128
    assert head_dim_factor(64.0, 108.0) == pytest.approx((172 / 64) / (236 / 128))
    assert head_dim_factor(64.0, 108.0) == pytest.approx(1.4576, abs=1e-4)
    assert head_dim_factor(np.array([32.0, 64.0, 96.0]), 108.0) == pytest.approx(
        [(140 / 32) / (236 / 128), (172 / 64) / (236 / 128), (204 / 96) / (236 / 128)])


def test_no_credit_at_or_above_128_and_unknown_head_dim():
    # cuDNN 9.22 on GB200 / GB300: DeepSeek-V3's d 192/128 runs no faster per FLOP than Llama's d 128
    for d in (0.0, 128.0, 160.0, 256.0, 544.0):
        assert head_dim_factor(d, 108.0) == 1.0
    assert list(head_dim_factor(np.array([0.0, 128.0, 192.0, 64.0]), 108.0))[:3] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("name", preset_names("devices"))
def test_d128_and_none_leave_times_bit_for_bit(name):
    dev = load_device(name)
    for version in (1.0, 2.0, 3.0):
        base = fused_attention_time(Op(**LONG), dev, BF16, version)
        assert fused_attention_time(Op(**LONG, head_dim=128.0), dev, BF16, version) == base
        assert fused_attention_time(Op(**LONG, head_dim=160.0), dev, BF16, version) == base
        plain = dev.model_copy(update={"attention_nonmatmul_dims": None})
        assert fused_attention_time(Op(**LONG, head_dim=64.0), plain, BF16, version) == base


def test_only_the_flash3_kernel_and_only_compute():
    dev = load_device("b200")
    assert _rate(dev, 64, version=2.0) == _rate(dev, 128, version=2.0)  # FA2 path: its own d 64 / d 128 ratio
    assert _rate(dev, 64) < _rate(dev, 128)
    # a memory-bound call (decode over a long cache) keeps its time
    decode = Op(flop=1e9, bytes=1e10, depth=1e5, head_dim=64.0)
    assert fused_attention_time(decode, dev, BF16, 3.0) == fused_attention_time(
        Op(flop=1e9, bytes=1e10, depth=1e5), dev, BF16, 3.0)


def test_scalar_and_sweep_agree():
    dev = load_device("h100-sxm")
    dims = np.array([32.0, 64.0, 80.0, 128.0, 192.0])
    swept = fused_attention_time(Op(**LONG, head_dim=dims), dev, BF16, 3.0)
    for d, t in zip(dims, swept, strict=True):
        assert float(fused_attention_time(Op(**LONG, head_dim=float(d)), dev, BF16, 3.0)) == pytest.approx(t, rel=1e-15)


@pytest.mark.parametrize(("model", "head_dim"), [
    ("gpt-oss-120b", 64.0),  # d 64
    ("llama3-70b", 128.0),
    ("deepseek-v3", 160.0),  # MLA in training: scores over d_qk 192, values of d_v 128
])
def test_the_op_carries_the_models_head_dim(model, head_dim):
    m = ModelArrays.of(load_model(model))
    op = fused_attention_op(m, 1.0, 4096.0, 4096.0, 1.0, 2.0)
    assert float(op.head_dim) == head_dim


def _replica(system: str, attention: str):
    from armillary.estimate.inference import replica_model
    from armillary.specs.loading import load_system
    from armillary.specs.strategy import Strategy
    from armillary.specs.workload import Inference

    w = Inference.model_validate({"kind": "inference", "input_len": 4096, "output_len": 64})
    return replica_model(ModelArrays.of(load_model("llama3.2-1b")), Strategy.model_validate(
        {"precision": "bf16", "attention": attention}), w, load_system(system, 1))


def test_serving_iterations_carry_the_head_dim():
    # Llama 3.2 1B: d 64. A long prefill on an H100 with the flash3 kernel: the compiled (roofline) path and
    # the model's own functions agree, and both are slower than with the field removed, by the factor at most
    from armillary.serving.simulate import IterationCost

    cost = IterationCost(_replica("dgx-h100", "flash3"), 8192, 8)
    assert cost.roofline is not None
    new, past = np.array([8192]), np.array([0])
    compiled, evaluated = float(cost(new, past, 1)[0]), float(cost.evaluated(new, past, 1)[0])
    assert compiled == pytest.approx(evaluated, rel=1e-12)
    r = _replica("dgx-h100", "flash3")
    op = r.attention(np.array([8192.0]), np.array([0.0]))
    assert float(np.min(op.head_dim)) == 64.0
    slower = float(np.sum(r.attention_time(op, 0.0)[0]))
    device = r.system.device.model_copy(update={"attention_nonmatmul_dims": None})
    plain = float(np.sum(replace_device(r, device).attention_time(op, 0.0)[0]))
    assert plain < slower <= plain * head_dim_factor(64.0, 101.0) * (1 + 1e-12)
    # the iteration's time (summed over the batch's sequences) pays the same difference
    unfielded = IterationCost(replace_device(r, device), 8192, 8)
    assert float(cost(new, past, 1)[0]) - float(unfielded(new, past, 1)[0]) == pytest.approx(slower - plain, rel=1e-9)


def replace_device(r, device):
    from dataclasses import replace

    return replace(r, system=r.system.model_copy(update={"device": device}))
