"""Time of one kernel on one device: a roofline with size-dependent efficiency (formulas.md §12, pitfall 5).

t = max(FLOP / (eta(FLOP) * F_peak), bytes / (eta_mem * BW)) + launch overhead.
The simulator and the estimator both take kernel times from here.
"""

from __future__ import annotations

import numpy as np

from armillary.specs.arrays import PRECISIONS, Array
from armillary.specs.strategy import TrainingPrecision
from armillary.specs.system import Device, Precision
from armillary.workload.transformer import Op

# GEMM precision of each training recipe (fp32 training runs its GEMMs in TF32 where the device has it).
_GEMM_PRECISION = {
    TrainingPrecision.FP32: Precision.TF32,
    TrainingPrecision.BF16: Precision.BF16,
    TrainingPrecision.FP16: Precision.FP16,
    TrainingPrecision.FP8: Precision.FP8,
}


def matrix_peak(device: Device, precision_code: Array) -> Array:
    """Peak GEMM FLOP/s for each precision code (index into PRECISIONS)."""
    peaks = np.array([device.matrix_peak(_GEMM_PRECISION[p]) for p in PRECISIONS])
    return peaks[np.asarray(precision_code, dtype=int)]


def kernel_times(ops: tuple[Op, ...], device: Device, peak: Array) -> np.ndarray:
    """Roofline time of each op on `device` at matrix peak `peak`, stacked along the first axis
    (one vectorized evaluation for all kernels of a layer)."""
    flop, moved = _stacked([op.flop for op in ops]), _stacked([op.bytes for op in ops])
    hbm = device.hbm
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(flop > 0, flop / (device.matrix_efficiency(flop) * peak), 0.0)
    memory = moved / (hbm.efficiency * hbm.bandwidth)
    return np.maximum(compute, memory) + device.kernel_overhead


def stream_time(bytes_moved: Array, device: Device) -> Array:
    """Time to stream `bytes_moved` through HBM (optimizer step, element-wise passes)."""
    return bytes_moved / (device.hbm.efficiency * device.hbm.bandwidth)


def _stacked(values: list[Array]) -> np.ndarray:
    try:  # all scalars, or arrays of one shape: one fast conversion
        return np.array(values, dtype=float)
    except ValueError:  # a sweep mixing scalars and arrays
        return np.stack(np.broadcast_arrays(*values))


def fused_attention_time(op: Op, device: Device, peak: Array) -> Array:
    """FlashAttention kernel: roofline at the device's fused-attention efficiency."""
    hbm = device.hbm
    compute = op.flop / (device.flash_attention_efficiency * peak)
    return np.maximum(compute, op.bytes / (hbm.efficiency * hbm.bandwidth)) + device.kernel_overhead
