"""fp8 GEMMs read the 16-bit curve at equal kernel time where a device has no fp8 curve of its own
(`Device.gemm_efficiency`; docs/hardware.md "fp8 at equal kernel time")."""

from __future__ import annotations

import pytest

from armillary.specs.device import Precision
from armillary.specs.loading import load_device


def _seconds(device, precision: Precision, flop: float) -> float:
    return flop / (device.gemm_efficiency(precision)(flop) * device.matrix_peak(precision))


@pytest.mark.parametrize("name", ["b200", "gb200", "b300", "gb300"])
def test_blackwell_fp8_is_the_16bit_curve_at_equal_kernel_time(name: str) -> None:
    device = load_device(name)
    assert Precision.FP8 not in device.matrix_efficiency_by_precision
    ratio = device.matrix_peak(Precision.FP8) / device.matrix_peak(Precision.BF16)
    assert ratio == 2.0
    assert device.gemm_efficiency(Precision.FP8).points == tuple(
        (size * ratio, e) for size, e in device.matrix_efficiency.points)
    # a GEMM of 2F FLOP at the fp8 peak takes as long as one of F at the bf16 peak
    for flop in (1e9, 3e9, 1e10, 5e10, 1e11, 1e12):
        assert _seconds(device, Precision.FP8, 2 * flop) == pytest.approx(_seconds(device, Precision.BF16, flop))


def test_fp8_speedup_below_2x_for_small_gemms_and_2x_for_large() -> None:
    b200 = load_device("b200")
    speedup = {f: _seconds(b200, Precision.BF16, f) / _seconds(b200, Precision.FP8, f) for f in (1e10, 5e10, 1e13)}
    assert speedup[1e13] == pytest.approx(2.0)  # beyond the curve's last point: both flat
    assert 1.2 < speedup[1e10] < 1.8  # the fixed costs of a small GEMM do not halve
    assert 1.2 < speedup[5e10] < 1.8
    # never slower than the 16-bit GEMM (the curve rises with size)
    for flop in (1e8, 1e9, 2e9, 7e9, 3e10, 2e11, 4e12):
        assert _seconds(b200, Precision.FP8, flop) <= _seconds(b200, Precision.BF16, flop) * (1 + 1e-12)


def test_block_scaled_formats_chain_through_fp8() -> None:
    b200 = load_device("b200")
    fp8 = b200.gemm_efficiency(Precision.FP8)
    assert b200.gemm_efficiency(Precision.MXFP8).points == fp8.points  # mxfp8 runs at the fp8 peak
    assert b200.gemm_efficiency(Precision.NVFP4).points == tuple((2 * s, e) for s, e in fp8.points)
    assert b200.gemm_efficiency(Precision.NVFP4).points == tuple((4 * s, e) for s, e in b200.matrix_efficiency.points)


def test_own_fp8_curves_are_kept() -> None:
    for name in ("h100-sxm", "h200-sxm", "mi300x"):
        device = load_device(name)
        assert device.gemm_efficiency(Precision.FP8) is device.matrix_efficiency_by_precision[Precision.FP8]


def test_equal_peaks_or_no_fp8_peak_keep_the_16bit_curve() -> None:
    gaudi3 = load_device("gaudi3")  # fp8 at the bf16 peak: ratio 1
    assert gaudi3.gemm_efficiency(Precision.FP8) is gaudi3.matrix_efficiency
    a100 = load_device("a100-sxm4-80gb")  # no fp8 peak: fp8 GEMMs fall back to bf16's peak and curve
    assert a100.gemm_efficiency(Precision.FP8) is a100.matrix_efficiency
    for precision in (Precision.BF16, Precision.FP16, Precision.TF32):
        assert load_device("b200").gemm_efficiency(precision) is load_device("b200").matrix_efficiency
