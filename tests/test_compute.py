"""Kernel times: roofline, efficiency curves per precision, what fp8 recipes keep in 16 bit."""

import numpy as np
import pytest

from armillary.cost.compute import fused_attention_time, kernel_times, matrix_peak
from armillary.plan.codes import PRECISION
from armillary.specs.loading import load_device
from armillary.specs.strategy import TrainingPrecision
from armillary.specs.system import Precision
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
