"""Fit a device's compute parameters to kernel measurements: measured kernels in, a `Device` out.

Fitted in order, each through the cost model (`cost.compute`) with the shared routines of
`armillary.fitting` (those of the network calibration), alternating until both settle:
1. the per-kernel overhead: least squares in log time over the empty launches (golden section);
2. the achievable memory rate: the streaming efficiency that fits the workload's memory-bound kernels
   (layernorm, softmax, optimizer step), least squares in log time (golden section) against the device's
   bandwidth (the base preset's datasheet figure, else the fastest copy measured);
3. per precision, the size-dependent GEMM efficiency: for each GEMM the efficiency that reproduces its
   time (bisection), pooled per half decade of FLOPs (geometric mean: the least-squares value in log time).
   Unlike a network's ramp the curve is not forced non-decreasing: a CPU's GEMMs lose efficiency once their
   operands overflow the caches (the LM head), so the measured shape is kept;
4. the fused attention efficiency: bisection per kernel, geometric mean.
Peaks are the base preset's datasheet figures, else the fastest GEMM measured at that precision (the
efficiencies are then relative to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from armillary.calibrate.compute_bench import Measurement
from armillary.calibrate.compute_kernels import KernelKind
from armillary.errors import SpecError
from armillary.fitting import bisect, golden_section, log_squared_error
from armillary.specs.device import Device, Precision
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.memory import MemoryTier

_BINS_PER_DECADE = 2
_ROUNDS = 4  # overhead <-> memory rate alternations


def _keys(p: Precision) -> tuple[Precision, ...]:
    """Curve keys a precision's GEMMs are priced with: fp32 recipes run their GEMMs as TF32 (cost.compute)."""
    return (Precision.FP32, Precision.TF32) if p is Precision.FP32 else (p,)


def _flat(device: Device, p: Precision, efficiency: float) -> Device:
    curve = EfficiencyCurve(points=((1.0, efficiency),))
    return device.model_copy(update={"matrix_efficiency_by_precision": {
        **device.matrix_efficiency_by_precision, **{k: curve for k in _keys(p)}}})


def _with_memory(device: Device, efficiency: float) -> Device:
    return device.model_copy(update={"memory": (device.hbm.model_copy(update={"efficiency": efficiency}),
                                                *device.memory[1:])})


def _loss(measured: Sequence[Measurement], device: Device) -> float:
    return log_squared_error([m.kernel.predict(device) for m in measured], [m.time_s for m in measured])


def _solve(measured: Measurement, trial: object, lo: float = 1e-4) -> float:
    """The efficiency at which the model meets the measured time (1 where even full efficiency is slower:
    a memory- or overhead-bound kernel)."""
    def at(x: float) -> float:
        return measured.kernel.predict(trial(x))  # type: ignore[operator]

    if at(1.0) >= measured.time_s:
        return 1.0
    a, b = bisect(lambda x: at(x) > measured.time_s, lo, 1.0, iterations=40, geometric=True)
    return float((a * b) ** 0.5)


def _gemm_curve(measured: Sequence[Measurement], device: Device, p: Precision) -> EfficiencyCurve:
    flop = np.array([m.kernel.flop / m.kernel.batch for m in measured])  # one problem's FLOPs (grouped GEMMs)
    eta = np.array([_solve(m, lambda x: _flat(device, p, x)) for m in measured])
    bins = np.floor(np.log10(flop) * _BINS_PER_DECADE)
    sizes, values = [], []
    for b in np.unique(bins):
        sel = bins == b
        sizes.append(float(np.exp(np.mean(np.log(flop[sel])))))
        values.append(float(np.exp(np.mean(np.log(eta[sel])))))
    return EfficiencyCurve(points=tuple(zip(sizes, values, strict=True)))


@dataclass(frozen=True)
class FitInputs:
    """What the fit starts from besides the measurements."""

    name: str
    memory_bytes: float
    provenance: str  # when, where, which software: recorded in the device's sources
    base: Device | None = None


def _workload_streams(fit: Sequence[Measurement]) -> list[Measurement]:
    """The memory-bound kernels the workload issues: a plain copy is the bandwidth's yardstick, not one."""
    return [m for m in fit if m.kernel.kind in (KernelKind.LAYERNORM, KernelKind.SOFTMAX, KernelKind.OPTIMIZER)]


def _busy(m: Measurement, overhead: float) -> float:
    """The measured time less the launch overhead."""
    return max(m.time_s - overhead, 1e-3 * m.time_s)


def _rate(ms: Sequence[Measurement], overhead: float) -> float:
    return max(float(sum(op.bytes for op in m.kernel.ops())) / _busy(m, overhead) for m in ms)


def _start(fit: Sequence[Measurement], inputs: FitInputs, precisions: list[Precision], overhead: float) -> Device:
    """The device before fitting: peaks and bandwidth from the base preset, else the fastest measured
    (less the launch `overhead`)."""
    copies = [m for m in fit if m.kernel.kind is KernelKind.COPY] or _workload_streams(fit)
    gemms = [m for m in fit if m.kernel.kind is KernelKind.GEMM]
    if not copies or not gemms:
        raise SpecError("a compute calibration needs GEMM and memory-bound kernel measurements")
    base = inputs.base
    peaks = {p: (base.matrix_peak(p) if base else max(m.kernel.flop / _busy(m, overhead) for m in gemms
                                                     if m.kernel.precision is p)) for p in precisions}
    tier = MemoryTier(name=base.hbm.name if base else "host memory (copy rate at the swept sizes, caches included)",
                      capacity=base.hbm.capacity if base else inputs.memory_bytes,
                      bandwidth=base.hbm.bandwidth if base else _rate(copies, overhead), efficiency=1.0)
    fields: dict[str, Any] = base.model_dump() if base else {"vector_flops": {p: peaks[p] for p in precisions}}
    fields.update(name=inputs.name, matrix_flops={**fields.get("matrix_flops", {}), **peaks},
                  matrix_efficiency=EfficiencyCurve(points=((1.0, 1.0),)), matrix_efficiency_by_precision={},
                  memory=(tier, *(base.memory[1:] if base else ())), kernel_overhead=overhead, calibrated_on=(),
                  flash1_attention_efficiency=None, flash3_attention_efficiency=None)
    return Device.model_validate(fields)


def _fit_overhead_and_rate(device: Device, launches: list[Measurement], streams: list[Measurement]) -> Device:
    """One round: the overhead on the launches, then the streaming efficiency on the memory-bound kernels."""
    if launches:
        overhead = golden_section(lambda x: _loss(launches, device.model_copy(update={"kernel_overhead": x})),
                                  np.geomspace(1e-8, 1e-2, 90))
        device = device.model_copy(update={"kernel_overhead": overhead})
    return _with_memory(device, golden_section(lambda x: _loss(streams, _with_memory(device, x)),
                                               np.geomspace(1e-3, 1.0, 90)))


def fit_device(measured: Sequence[Measurement], inputs: FitInputs) -> Device:
    """A device whose cost model reproduces the measurements not `held_out`."""
    fit = [m for m in measured if not m.kernel.held_out]
    precisions = list(dict.fromkeys(m.kernel.precision for m in fit if m.kernel.kind is KernelKind.GEMM))
    device = _start(fit, inputs, precisions, 0.0)
    launches = [m for m in fit if m.kernel.kind is KernelKind.LAUNCH]
    streams = _workload_streams(fit)
    for _ in range(_ROUNDS):
        device = _fit_overhead_and_rate(device, launches, streams)
    if inputs.base is None:  # the fastest kernels' rates without their launch overhead, then the rate again
        device = _fit_overhead_and_rate(_start(fit, inputs, precisions, device.kernel_overhead), launches, streams)
    curves = {p: _gemm_curve([m for m in fit if m.kernel.kind is KernelKind.GEMM and m.kernel.precision is p],
                             device, p) for p in precisions}
    main = precisions[0]
    by_precision = {k: c for p, c in curves.items() if p is not main for k in _keys(p)}
    if main is not Precision.FP32 and Precision.TF32 in by_precision and Precision.FP32 not in device.matrix_flops:
        by_precision.pop(Precision.TF32)
    device = device.model_copy(update={"matrix_efficiency": curves[main],
                                       "matrix_efficiency_by_precision": by_precision})
    fused = [m for m in fit if m.kernel.kind is KernelKind.FUSED_ATTENTION]
    if fused:
        eta = [_solve(m, lambda x: device.model_copy(update={"flash_attention_efficiency": x})) for m in fused]
        device = device.model_copy(update={"flash_attention_efficiency": float(np.exp(np.mean(np.log(eta))))})
    return Device.model_validate({**device.model_dump(), "sources": _sources(inputs, measured, device)})


def _sources(inputs: FitInputs, measured: Sequence[Measurement], device: Device) -> dict[str, str]:
    kinds = sorted({m.kernel.kind.value for m in measured})
    count = sum(not m.kernel.held_out for m in measured)
    base = f"the {inputs.base.name} preset's datasheet figure" if inputs.base else "the fastest measured"
    return {
        **(inputs.base.sources if inputs.base else {}),
        "calibration": f"armillary calibrate-compute: {inputs.provenance}; {count} kernels fitted "
                       f"({', '.join(kinds)}), {len(measured) - count} held out",
        "matrix_flops": f"{base} (efficiencies are relative to it)",
        "matrix_efficiency": "fitted: per GEMM the efficiency reproducing its time, geometric mean per half "
                             "decade of FLOPs (calibrate.compute_fit)",
        "memory": f"bandwidth: {base} copy rate; efficiency fitted on layernorm/softmax/fused AdamW "
                  f"(achievable {device.hbm.rate / 1e9:.2f} GB/s)",
        "kernel_overhead": "fitted on empty-sized launches (least squares in log time)",
        "flash_attention_efficiency": "fitted on torch scaled_dot_product_attention (causal) kernels",
    }
