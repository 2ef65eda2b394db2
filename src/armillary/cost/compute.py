"""Time of one kernel on one device: a roofline with size-dependent efficiency (docs/formulas.md §12, pitfall 5).

t = max(FLOP / (eta(FLOP) * F_peak), bytes / (eta_mem * BW)) + launch overhead.
The estimator takes kernel times from here; the search and the simulators take them through it.
"""

from __future__ import annotations

import functools

import numpy as np

from armillary.memo import IdentityCache
from armillary.numerics import Array, maximum, where
from armillary.plan.codes import PRECISION
from armillary.specs.device import Device, Precision
from armillary.specs.efficiency import CurveTable, EfficiencyCurve, interpolate
from armillary.specs.strategy import TrainingPrecision
from armillary.workload.ops import Op

# GEMM precision of each training recipe (fp32 training runs its GEMMs in TF32 where the device has it).
_GEMM_PRECISION = {
    TrainingPrecision.FP32: Precision.TF32,
    TrainingPrecision.BF16: Precision.BF16,
    TrainingPrecision.FP16: Precision.FP16,
    TrainingPrecision.FP8: Precision.FP8,
}
# fp8 recipes run only the linear layers in fp8: attention and the LM head stay in bf16 (Transformer
# Engine recipes as used by Megatron-Core / NeMo; DeepSeek-V3 report §3.3.1 keeps the same split).
_KEPT_16BIT = {**_GEMM_PRECISION, TrainingPrecision.FP8: Precision.BF16}
# the block-scaled formats of plan.codes.BLOCK_FORMAT (code 1, 2, 3, 4), after the four recipe families
_BLOCK_FORMATS = (Precision.MXFP8, Precision.NVFP4, Precision.MXFP4, Precision.INT8)


@functools.cache
def _precisions(sixteen_bit: bool) -> tuple[Precision, ...]:
    """The GEMM precision of each combined code (`_combined`): the recipe families, then the block formats
    (kept at 16 bits where `sixteen_bit`). A constant of the flag: built once for each."""
    table = _KEPT_16BIT if sixteen_bit else _GEMM_PRECISION
    formats = [Precision.BF16] * len(_BLOCK_FORMATS) if sixteen_bit else list(_BLOCK_FORMATS)
    return tuple([table[p] for p in PRECISION.members] + formats)


def _combined(precision_code: Array, block_format: Array) -> Array:
    """One code for a recipe family (`plan.codes.PRECISION`) and a block format (`plan.codes.BLOCK_FORMAT`):
    the family's below 4, 3 + the format's above."""
    if not isinstance(block_format, np.ndarray) and block_format == 0:
        return precision_code
    if not isinstance(block_format, np.ndarray) and not isinstance(precision_code, np.ndarray):
        return len(PRECISION.members) - 1 + float(block_format)
    return np.where(np.asarray(block_format) > 0, len(PRECISION.members) - 1 + np.asarray(block_format),
                    precision_code)


# per device: its matrix peak and GEMM efficiency curve at each precision asked for, looked up (or, for a
# block-scaled format, derived) once; bounded, a search over devices builds many
_DEVICES: IdentityCache[Device, tuple[dict[Precision, float], dict[Precision, EfficiencyCurve]]] = IdentityCache(256)


def _looked_up(device: Device) -> tuple[dict[Precision, float], dict[Precision, EfficiencyCurve]]:
    return _DEVICES.get(device, lambda _: ({}, {}))


def _peak(device: Device, precision: Precision) -> float:
    """`device.matrix_peak(precision)`, looked up once (a precision without a peak raises each time)."""
    peaks = _looked_up(device)[0]
    peak = peaks.get(precision)
    if peak is None:
        peak = peaks[precision] = device.matrix_peak(precision)
    return peak


def _curve(device: Device, precision: Precision) -> EfficiencyCurve:
    """`device.gemm_efficiency(precision)`, built once."""
    curves = _looked_up(device)[1]
    curve = curves.get(precision)
    if curve is None:
        curve = curves[precision] = device.gemm_efficiency(precision)
    return curve


def matrix_peak(device: Device, precision_code: Array, sixteen_bit: bool = False, block_format: Array = 0.0) -> Array:
    """Peak GEMM FLOP/s for each precision code (`plan.codes.PRECISION`) and block format
    (`plan.codes.BLOCK_FORMAT`). Only the precisions in use are looked up (a device without fp4 matrix units
    prices every other point of a sweep)."""
    precisions = _precisions(sixteen_bit)
    code = _combined(precision_code, block_format)
    if not isinstance(code, np.ndarray):
        return _peak(device, precisions[int(code)])
    index = code.astype(int)
    used = set(np.unique(index).tolist())
    return np.array([_peak(device, p) if i in used else np.nan for i, p in enumerate(precisions)])[index]


def _efficiency(device: Device, code: Array, sixteen_bit: bool, flop: np.ndarray) -> np.ndarray:
    precisions = _precisions(sixteen_bit)
    if np.ndim(code) == 0:
        return np.asarray(_curve(device, precisions[int(code)])(flop))
    index = np.asarray(code, dtype=int)
    used = set(np.unique(index).tolist())
    if len(used) == 1:  # one precision at every point (a search's sweep): its curve, as the choice below gives
        curve = np.asarray(_curve(device, precisions[used.pop()])(flop))
        shape = np.broadcast_shapes(index.shape, curve.shape)
        return curve if curve.shape == shape else np.broadcast_to(curve, shape)
    curves = np.stack([_curve(device, p)(flop) if i in used else np.zeros(np.shape(flop))
                       for i, p in enumerate(precisions)])
    return np.take_along_axis(curves, np.broadcast_to(index, np.broadcast_shapes(index.shape, flop.shape))[None],
                              axis=0)[0]


def kernel_times(ops: tuple[Op, ...], device: Device, precision_code: Array, sixteen_bit: bool = False,
                 ceiling: float | None = None, stream_efficiency: float | None = None,
                 block_format: Array = 0.0) -> np.ndarray:
    """Roofline time of each op on `device`, stacked along the first axis (one vectorized evaluation for
    all kernels of a layer). `sixteen_bit`: the ops that fp8 recipes keep in bf16. `ceiling`: the kernels'
    highest share of the matrix peak; `stream_efficiency`: the share of the HBM bandwidth they stream at
    (kernels slower than the device's own: an engine's fused MoE). `block_format`: the GEMMs run in that
    block-scaled format (`plan.codes.BLOCK_FORMAT`; 0: the recipe family's precision)."""
    precision_code = _combined(precision_code, 0.0 if sixteen_bit else block_format)
    if type(precision_code) in _ONE and device.fp8_gemm_latency is None:
        one = _point_times(ops, device, float(precision_code), sixteen_bit, ceiling, stream_efficiency)
        if one is not None:
            return np.asarray(one)
    return _array_times(ops, device, precision_code, sixteen_bit, ceiling, stream_efficiency)


def kernel_seconds(ops: tuple[Op, ...], device: Device, precision_code: Array, sixteen_bit: bool = False,
                   ceiling: float | None = None, stream_efficiency: float | None = None,
                   block_format: Array = 0.0) -> list[float] | list[np.ndarray]:
    """`kernel_times` op by op, what the estimator unpacks kernel by kernel: one configuration's times as
    floats; a sweep's as arrays, each op's on its own inputs' shape (with the precision's): the ops of each
    shape evaluated together (`_array_times`), none broadcast to a larger op's shape (a layer's GEMMs stay on
    the axes they vary along where its norms vary along sequence parallelism too; every value the same, each
    element's arithmetic elementwise)."""
    precision_code = _combined(precision_code, 0.0 if sixteen_bit else block_format)
    if type(precision_code) in _ONE and device.fp8_gemm_latency is None:
        one = _point_times(ops, device, float(precision_code), sixteen_bit, ceiling, stream_efficiency)
        if one is not None:
            return one
    # (the ops grouped by their inputs' shapes: np.broadcast_shapes costs some microseconds an op)
    shapes: dict[tuple[tuple[int, ...], ...], list[int]] = {}
    for i, op in enumerate(ops):
        shapes.setdefault((np.shape(op.flop), np.shape(op.group), np.shape(op.bytes)), []).append(i)
    if len(shapes) == 1:
        return list(_array_times(ops, device, precision_code, sixteen_bit, ceiling, stream_efficiency))
    times: list[np.ndarray] = [np.empty(0)] * len(ops)
    for members in shapes.values():
        for i, t in zip(members, _array_times(tuple(ops[i] for i in members), device, precision_code, sixteen_bit,
                                              ceiling, stream_efficiency), strict=True):
            times[i] = t
    return times


def _array_times(ops: tuple[Op, ...], device: Device, precision_code: Array, sixteen_bit: bool,
                 ceiling: float | None, stream_efficiency: float | None) -> np.ndarray:
    """`kernel_times` of a sweep (or of a device with fp8 GEMM latencies), on the combined precision code."""
    sweep = np.shape(precision_code)
    flop = _stacked([op.flop for op in ops], sweep)
    size = _stacked([op.flop / op.group for op in ops], sweep)  # one problem's FLOPs
    moved = _stacked([op.bytes for op in ops], sweep)
    peak = matrix_peak(device, precision_code, sixteen_bit)
    efficiency = _efficiency(device, precision_code, sixteen_bit, size)
    if ceiling is not None:
        efficiency = np.minimum(efficiency, ceiling)
    works = flop > 0
    rate = efficiency * peak  # positive (validated fractions and peaks): only ops without FLOPs are skipped
    compute = np.divide(flop, rate, out=np.zeros(np.broadcast(flop, rate).shape), where=works)
    memory = stream_time(moved, device, stream_efficiency)
    runs = works | (moved > 0)  # an op with no work (e.g. rotary without rotary positions) is no kernel
    busy = np.maximum(compute, memory)
    latency = device.fp8_gemm_latency
    if latency is not None:  # small-M fp8 weight GEMMs: their serial walk over K, a floor or added (GemmLatency)
        fp8 = np.array([p is Precision.FP8 for p in _precisions(sixteen_bit)])[np.asarray(precision_code, int)]
        kernels, depth = (_leading(_stacked([getattr(op, k) for op in ops], sweep), busy.ndim)
                          for k in ("kernels", "depth"))
        floor = np.where(depth > 0, kernels * latency.fixed_s + depth / 128 * latency.per_k_block_s, 0.0)
        busy = np.where(fp8, busy + floor if latency.adds else np.maximum(busy, floor), busy)
    times: np.ndarray = np.where(runs, busy + device.kernel_overhead, 0.0)
    return times


# per device and precision: (matrix peak, efficiency curve's table, HBM streaming rate, kernel overhead), the
# constants of `_point_times`, looked up once (each pydantic attribute read costs 0.1-1 us)
_POINT: IdentityCache[Device, dict[Precision, tuple[float, CurveTable, float, float]]] = IdentityCache(256)


def _point_constants(device: Device, precision: Precision) -> tuple[float, CurveTable, float, float]:
    constants = _POINT.get(device, lambda _: {})
    found = constants.get(precision)
    if found is None:
        found = constants[precision] = (_peak(device, precision), _curve(device, precision).table, device.hbm.rate,
                                        device.kernel_overhead)
    return found


# the exact types of one configuration's numbers (anything else, e.g. an array, takes the array path)
_ONE = frozenset((float, int, np.float64))


def _point_times(ops: tuple[Op, ...], device: Device, precision_code: float, sixteen_bit: bool,
                 ceiling: float | None, stream_efficiency: float | None) -> list[float] | None:
    """`kernel_seconds` of one configuration: the array path's arithmetic, op by op in plain floats (the
    efficiency curve's `interpolate`; the logs in one numpy call, as the array path takes them), so both
    agree to the bit. None where an op holds an array (a sweep)."""
    sizes = []
    one = _ONE
    for op in ops:
        flop, group, moved_bytes = op.flop, op.group, op.bytes
        if type(flop) not in one or type(group) not in one or type(moved_bytes) not in one:
            return None
        size = float(flop / group)  # one problem's FLOPs, as the array path divides them
        sizes.append(1.0 if size < 1.0 else size)  # np.maximum(size, 1.0) (max(size, 1.0)), NaN kept
    peak, curve, hbm_rate, overhead = _point_constants(device, _precisions(sixteen_bit)[int(precision_code)])
    stream_rate = hbm_rate if stream_efficiency is None else stream_efficiency * device.hbm.bandwidth
    times = []
    for op, log_size in zip(ops, np.log(sizes).tolist(), strict=True):
        flop, moved_bytes = float(op.flop), float(op.bytes)
        if not (flop > 0 or moved_bytes > 0):  # no work: no kernel
            times.append(0.0)
            continue
        compute = 0.0
        if flop > 0:
            efficiency = interpolate(curve, log_size)
            if ceiling is not None:
                efficiency = min(efficiency, ceiling)
            compute = flop / (efficiency * peak)
        memory = moved_bytes / stream_rate
        times.append((compute if compute >= memory else memory) + overhead)
    return times


def _leading(values: np.ndarray, ndim: int) -> np.ndarray:
    """`values` (ops first) with trailing axes of length 1 up to `ndim`, to broadcast against per-op arrays."""
    return values.reshape(values.shape + (1,) * (ndim - values.ndim))


def _stacked(values: list[Array], sweep_shape: tuple[int, ...]) -> np.ndarray:
    """The ops' values stacked on a new first axis; the other axes broadcast with the sweep."""
    try:  # all scalars, or arrays of one shape: one fast conversion
        stacked = np.array(values, dtype=float)
    except ValueError:  # a sweep mixing scalars and arrays: each copied into its row, as np.stack would
        stacked = np.empty((len(values), *np.broadcast_shapes(*(np.shape(v) for v in values))),
                           np.result_type(*values))
        for row, value in zip(stacked, values, strict=True):
            row[...] = value
    if sweep_shape and stacked.ndim - 1 < len(sweep_shape):  # align the op axes with the sweep's
        stacked = stacked.reshape(stacked.shape[0], *([1] * (len(sweep_shape) - stacked.ndim + 1)),
                                  *stacked.shape[1:])
    return stacked


def fused_attention_time(op: Op, device: Device, precision_code: Array, version: Array = 2.0) -> Array:
    """FlashAttention kernel (16-bit; version 1, 2 or 3): roofline at the device's fused-attention
    efficiency for that version, each query walking `op.depth` keys plus the device's
    `flash_attention_overhead_keys` (`walked_flop`)."""
    fa2 = device.flash_attention_efficiency
    fa1 = device.flash1_attention_efficiency or fa2 / 2
    fa3 = device.flash3_attention_efficiency or fa2
    efficiency = where(version < 2, fa1, where(version < 3, fa2, fa3))
    flop = walked_flop(op.flop, op.flop_per_key, device.flash_attention_overhead_keys)
    if device.attention_nonmatmul_dims is not None:  # the FA3 / cuDNN class kernel's rate by head dimension
        flop = flop * where(version < 3, 1.0, head_dim_factor(op.head_dim, device.attention_nonmatmul_dims))
    compute = flop / (efficiency * matrix_peak(device, precision_code, sixteen_bit=True))
    return maximum(compute, stream_time(op.bytes, device)) + device.kernel_overhead


# the head dimension the fused-attention efficiencies were calibrated at: the d 128 rows of every preset
# (Llama 2/3, GPT-3 175B, Nemotron, Mixtral, ...; the kernel benchmarks they cite are d 128 too)
CALIBRATION_HEAD_DIM = 128.0


def head_dim_factor(head_dim: Array, nonmatmul_dims: float) -> Array:
    """A fused attention kernel's time per FLOP at head dimension d over its time per FLOP at the calibration's
    d 128: (d + d0) / d over (128 + d0) / 128, d0 = `Device.attention_nonmatmul_dims`. Per score element the
    kernel does 4 d MMA FLOPs forward and a fixed amount of other work (the softmax exponential on the SFU,
    rescaling), which overlaps the MMA only in part: a score element costs the time of d + d0 MMA units
    [derived: FlashAttention-4 paper (Zadouri et al. 2026), forward bound by the exponential on Blackwell;
    FlashAttention-3 paper §3 (Shah et al. 2024), the exponential's throughput on Hopper; d0 per device from
    a same-release d 64 / d 128 kernel pair, the device presets' sources]. Only below d 128: above it the
    same-release cuDNN 9.22 benchmark shows little or no gain per FLOP where the formula would give 1.10 and
    1.30 (GB200 / GB300 against Llama 3.1's d 128, causal and not, 2K-32K: DeepSeek-V3's d 192/128 forward
    0.93-1.08, backward 0.79-0.96; Qwen3.5's d 256 forward 0.95-1.09; NVIDIA/cudnn-frontend
    benchmark/sdpa_benchmark_training/results, 2026-04-24), so d >= 128 keeps 1. `head_dim` is the MMA work
    per score in head-dimension units, (d_qk + d_v) / 2 (`workload.attention.fused_attention_op`); 0
    (unknown): 1."""
    cal = CALIBRATION_HEAD_DIM
    if not isinstance(head_dim, np.ndarray):
        d = float(head_dim)
        return (1 + nonmatmul_dims / d) / (1 + nonmatmul_dims / cal) if 0 < d < cal else 1.0
    below = (head_dim > 0) & (head_dim < cal)
    return np.where(below, (1 + nonmatmul_dims / np.where(below, head_dim, cal)) / (1 + nonmatmul_dims / cal), 1.0)


def walked_flop(flop: Array, flop_per_key: Array, overhead_keys: float) -> Array:
    """FLOPs a fused attention kernel takes the time of: a query block's fixed work (loading Q, rescaling
    and writing O and the log-sum-exp, the half-masked diagonal tile) costs as much as `overhead_keys` more
    keys per query, so over d keys per query the kernel runs at d / (d + overhead) of its long-sequence
    efficiency [derived: FlashAttention's tiling, Dao 2023 §3.1-3.2; the constant from its benchmark
    (docs/formulas.md §12)]. `flop_per_key`: the op's FLOPs divided by the keys each query walks (summed
    over the sequences of a batched call)."""
    return flop + overhead_keys * flop_per_key


def addition_time(op: Op, nonzero: Array, device: Device) -> Array:
    """A ternary-weight projection run as additions on the vector units (Zhu et al. 2024 §3.1): one addition
    per nonzero weight and token, nonzero x flop / 2, at half the 16-bit vector peak (the peak counts a
    fused multiply-add as two operations) [derived; docs/formulas.md §10]."""
    adds = nonzero * op.flop / 2
    rate = device.vector_flops.get(Precision.BF16) or device.vector_flops[Precision.FP32]
    return np.maximum(adds / (rate / 2), stream_time(op.bytes, device)) + device.kernel_overhead


def stream_time(bytes_moved: Array, device: Device, efficiency: float | None = None) -> Array:
    """Time to stream `bytes_moved` through HBM (optimizer step, element-wise passes), at the memory's
    streaming efficiency or at `efficiency` of its bandwidth (a kernel slower than the device's streams)."""
    return bytes_moved / (device.hbm.rate if efficiency is None else efficiency * device.hbm.bandwidth)


