"""Kernel times: roofline, efficiency curves per precision, what fp8 recipes keep in 16 bit."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from armillary.cost.compute import fused_attention_time, kernel_times, matrix_peak
from armillary.plan.codes import PRECISION
from armillary.specs.device import Precision
from armillary.specs.loading import load_device
from armillary.specs.strategy import TrainingPrecision
from armillary.workload.ops import Op, gemm

H100 = load_device("h100-sxm")
FP8, BF16 = PRECISION.members.index(TrainingPrecision.FP8), PRECISION.members.index(TrainingPrecision.BF16)


def test_large_gemm_is_compute_bound_at_curve_efficiency():
    op = gemm(8192, 8192, 8192, 1, 2.0)
    t = float(kernel_times((op,), H100, BF16)[0])
    expected = op.flop / (H100.matrix_efficiency(op.flop) * 989e12) + H100.kernel_overhead
    assert t == pytest.approx(float(expected))


def test_streaming_kernel_is_memory_bound():
    op = Op(flop=0.0, bytes=1e9)
    t = float(kernel_times((op,), H100, BF16)[0])
    assert t == pytest.approx(1e9 / (H100.hbm.efficiency * H100.hbm.bandwidth) + H100.kernel_overhead)


def test_fp8_gemms_use_their_own_curve_and_peak():
    op = gemm(8192, 8192, 8192, 1, 1.0)
    t = float(kernel_times((op,), H100, FP8)[0])
    curve = H100.gemm_efficiency(Precision.FP8)
    assert curve is not H100.matrix_efficiency
    assert t == pytest.approx(float(op.flop / (curve(op.flop) * 1979e12) + H100.kernel_overhead))


def test_fp8_recipes_keep_attention_in_16_bit():
    assert float(matrix_peak(H100, FP8, sixteen_bit=True)) == pytest.approx(989e12)
    op = Op(flop=1e13, bytes=1e6)
    assert float(fused_attention_time(op, H100, FP8)) == pytest.approx(float(fused_attention_time(op, H100, BF16)))


def test_precision_codes_broadcast():
    op = gemm(4096, 4096, 4096, 1, 2.0)
    codes = np.array([BF16, FP8])
    both = kernel_times((op,), H100, codes)[0]
    assert both[0] == pytest.approx(float(kernel_times((op,), H100, BF16)[0]))
    assert both[1] == pytest.approx(float(kernel_times((op,), H100, FP8)[0]))


def test_each_flash_attention_version_uses_its_own_efficiency():
    """FlashAttention-3 (cuDNN fused attention on Hopper) has its own efficiency; without one it falls back
    to the FlashAttention-2 figure. FlashAttention-1 defaults to half of FlashAttention-2's (Dao 2023: 2x)."""
    op = Op(flop=1e13, bytes=1e6)
    fa1, fa2, fa3 = (float(fused_attention_time(op, H100, BF16, v)) for v in (1.0, 2.0, 3.0))
    assert H100.flash3_attention_efficiency is not None
    assert fa2 / fa3 == pytest.approx(H100.flash3_attention_efficiency / H100.flash_attention_efficiency, rel=1e-3)
    assert fa1 / fa2 == pytest.approx(2.0, rel=1e-3)
    plain = H100.model_copy(update={"flash3_attention_efficiency": None})
    assert float(fused_attention_time(op, plain, BF16, 3.0)) == pytest.approx(fa2)
    swept = fused_attention_time(op, H100, BF16, np.array([1.0, 2.0, 3.0]))
    assert swept == pytest.approx([fa1, fa2, fa3])


def test_fused_attention_pays_a_query_blocks_fixed_work_in_keys():
    """Over d keys per query a fused attention kernel takes the time of d + overhead keys (the fixed work of
    a query block): by hand, and unchanged for an op without a depth."""
    h = H100.flash_attention_overhead_keys
    assert h > 0
    flop, d = 1e13, 1024.0
    peak = H100.flash_attention_efficiency * 989e12
    t = float(fused_attention_time(Op(flop=flop, bytes=1e6, depth=d), H100, BF16))
    assert t == pytest.approx(flop * (d + h) / d / peak + H100.kernel_overhead)
    assert float(fused_attention_time(Op(flop=flop, bytes=1e6), H100, BF16)) == pytest.approx(
        flop / peak + H100.kernel_overhead)


# Published FlashAttention benchmark output: TFLOP/s by sequence length s (keys per query: s non-causal,
# s / 2 causal), forward + backward or forward only as the source ran it
FA4_B200_CAUSAL = {1024: 829, 2048: 1172, 4096: 1431}  # fwd, d 128, causal (flash-attention PR #2605)
FA4_B200 = {1024: 1540, 2048: 1706, 4096: 1796, 8192: 1837, 16384: 1882}  # the same, non-causal
FA2_H100 = {512: 204.34, 1024: 252.46, 2048: 275.03, 4096: 288.30, 8192: 302.28}  # fwd+bwd, d 64 (PR #2688)
FA3_H100_PCIE = {512: 433.25, 1024: 538.23, 2048: 605.27, 4224: 618.83, 8448: 618.05}  # fwd, d 128 (PR #1075)
FA2_A5000 = {512: 59.15, 1024: 66.90, 2048: 72.95, 4096: 76.64, 8192: 78.64}  # fwd+bwd, d 64 (ring-attention #10)


def _fitted_overhead(table: dict[int, float], causal: bool) -> tuple[float, float]:
    """(overhead in keys, rms relative misfit) of speed = scale x k / (k + overhead) over the table's keys per
    query k, by least squares on a grid (the scale solved for each overhead)."""
    keys = np.array(sorted(table), dtype=float) / (2 if causal else 1)
    measured = np.array([table[n] for n in sorted(table)])
    best = (np.inf, 0.0)
    for overhead in np.arange(1.0, 2000.0, 1.0):
        x = keys / (keys + overhead)
        misfit = float(np.sqrt(np.mean(((x @ measured) / (x @ x) * x / measured - 1) ** 2)))
        best = min(best, (misfit, float(overhead)))
    return best[1], best[0]


def test_the_attention_overhead_constants_follow_their_sources():
    """The presets' causal overhead is the FA4 causal sweep's (B200; Hopper copies it, its non-causal
    overhead measured like Blackwell's); the A100's is Ampere's non-causal one times the FA4 causal /
    non-causal ratio. Each fit reproduces its table within 2.5% rms."""
    causal, rms = _fitted_overhead(FA4_B200_CAUSAL, causal=True)
    plain, rms_plain = _fitted_overhead(FA4_B200, causal=False)
    assert max(rms, rms_plain) < 0.01
    assert load_device("b200").flash_attention_overhead_keys == pytest.approx(causal, abs=1)
    assert load_device("h100-sxm").flash_attention_overhead_keys == load_device("b200").flash_attention_overhead_keys
    for table in (FA2_H100, FA3_H100_PCIE):  # Hopper's non-causal overhead within 10% of Blackwell's
        hopper, rms_hopper = _fitted_overhead(table, causal=False)
        assert rms_hopper < 0.025 and hopper == pytest.approx(plain, rel=0.1)
    ampere, rms_ampere = _fitted_overhead(FA2_A5000, causal=False)
    assert rms_ampere < 0.01
    assert load_device("a100-sxm4-80gb").flash_attention_overhead_keys == pytest.approx(ampere * causal / plain, abs=1)


# aiter's asm fused attention on MI300X (ROCm/aiter op_tests/cpp/mha/README.md, PR #1270): bf16, d 128, causal,
# batch 4, 64 q / 8 kv heads; forward and backward TFLOP/s by sequence length
AITER_MI300X_FWD = {1024: 326.51, 2048: 425.735, 4096: 513.79, 8192: 540.515, 10240: 557.475}
AITER_MI300X_BWD = {1024: 311.005, 2048: 377.225, 4096: 449, 8192: 482.505, 10240: 493.745}


def test_mi300x_takes_its_kernels_published_speeds():
    """The MI300X preset from kernel benchmarks, not from validation rows: the fused attention's overhead and
    long-sequence speed are the aiter causal sweep's (forward and backward weighed 1 : 2.5, as the kernels'
    FLOPs are); its bf16 GEMMs run at AMD's Max-Achievable FLOPs (708 TFLOP/s at 4096 x 4864 x 32896) and at
    PyTorch's 4096^3 (548 TFLOP/s); fp8 at aiter's tuned kernels' 0.37 of peak at 1e12 FLOPs."""
    mi300x = load_device("mi300x")
    both = {s: 3.5 / (1 / AITER_MI300X_FWD[s] + 2.5 / AITER_MI300X_BWD[s]) for s in AITER_MI300X_FWD}
    overhead, rms = _fitted_overhead(both, causal=True)
    assert rms < 0.015 and mi300x.flash_attention_overhead_keys == pytest.approx(overhead, abs=1)
    keys = np.array([s / 2 for s in both])
    x = keys / (keys + overhead)
    speed = (x @ np.array(list(both.values()))) / (x @ x)
    assert mi300x.flash3_attention_efficiency == pytest.approx(speed / 1307.4, abs=0.005)
    bf16 = mi300x.gemm_efficiency(Precision.BF16)
    assert float(bf16(2 * 4096 * 4864 * 32896)) * 1307.4 == pytest.approx(708, rel=0.02)
    assert float(bf16(2 * 4096**3)) * 1307.4 == pytest.approx(548, rel=0.02)
    assert float(mi300x.gemm_efficiency(Precision.FP8)(1e12)) == pytest.approx(0.37)
    assert mi300x.hbm.efficiency == pytest.approx(4.11 / 5.3, abs=0.01)  # BabelStream Copy, 4.11 TB/s


def test_a_causal_kernel_speeds_up_with_length_as_published():
    """With the preset's overhead the model's causal attention speed follows the FA4 causal sweep: scaled to
    the table (the one free factor: the efficiency is calibrated on training rows), within 1.5%."""
    dev = load_device("b200")
    lengths = np.array(sorted(FA4_B200_CAUSAL), dtype=float)
    measured = np.array([FA4_B200_CAUSAL[n] for n in sorted(FA4_B200_CAUSAL)])
    op = Op(flop=np.full(len(lengths), 1e15), bytes=0.0, depth=lengths / 2)
    speed = 1e15 / (fused_attention_time(op, dev, BF16) - dev.kernel_overhead)
    assert (speed @ measured) / (speed @ speed) * speed == pytest.approx(measured, rel=0.015)
    assert (speed[:-1] < speed[1:]).all()


@given(st.floats(1.0, 1e6), st.floats(1.0, 1e6), st.floats(1e3, 1e12))
def test_more_keys_per_query_is_more_time_at_no_lower_efficiency(d1, d2, per_key):
    """Walking more keys per query (the same FLOPs per key) never takes less time, and never runs at a lower
    efficiency (the query block's fixed work spreads over more keys)."""
    short, long = sorted((d1, d2))
    t_short, t_long = (float(fused_attention_time(Op(flop=per_key * d, bytes=0.0, depth=d), H100, BF16))
                       - H100.kernel_overhead for d in (short, long))
    assert t_long >= t_short * (1 - 1e-12)
    assert per_key * long / t_long >= per_key * short / t_short * (1 - 1e-12)
