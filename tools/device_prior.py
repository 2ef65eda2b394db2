"""Write an uncalibrated device's efficiency prior into its preset: the GEMM curves, attention efficiencies and
kernel overhead of the device named by its `prior:` (same vendor, nearest calibrated or benchmarked
generation), its curves read at equal kernel time. A GEMM of F FLOPs on a device of peak P runs as long as one
of F x P_prior / P on the prior, so its efficiency is the prior's at that size: each curve point (F, e) becomes
(F x P / P_prior, e), per precision. The attention kernels keep the prior's share of the peak, the HBM its
streaming share. tests/test_device_priors.py checks the presets equal this derivation.
    python tools/device_prior.py mi355x

A device no calibrated or benchmarked device of its vendor describes (Trainium2, Tesla's D1) takes the
vendor-neutral prior instead (`--neutral`): at each ideal kernel time t = F / P (bf16 peak), the median over
NEUTRAL_REFERENCES of their GEMM efficiency at that kernel time, read on the device at F = t x P_device. It is a
statement about GEMM libraries in general, not about the device: its band is the uncalibrated devices'.
    python tools/device_prior.py trainium2 --neutral
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from armillary.presets.registry import find_preset
from armillary.specs.device import Device, Precision
from armillary.specs.loading import load_device

# one device per distinct GEMM curve measured on that device itself: fitted on its own validation rows
# (A100, H100, B200: tools/calibrate.py) or read from its own published kernel benchmarks (MI300X, Gaudi 3,
# TPU v6e; see their presets). Devices whose curve is a copy or a prior of one of these are left out, so that no
# curve counts twice. Four vendors, three GPU generations of one of them.
NEUTRAL_REFERENCES = ("a100-sxm4-80gb", "h100-sxm", "b200", "mi300x", "gaudi3", "tpu-v6e")
# a reference speaks only where it was measured: from its first curve point up (beyond its last point every curve
# is flat, at its plateau), and Gaudi 3 from its first benchmarked size (its preset: below 1.03e11 FLOP the points
# are this prior's own roll-off, `neutral_roll_off`). Below that, the median is over the others.
MEASURED_FROM = {"gaudi3": 1.03e11}
# the ideal kernel times (F / bf16 peak) the median is read at: half decades from 1 us (a GEMM of 1e9 FLOP on
# an H100) to 10 ms, past which every reference curve is flat
NEUTRAL_TIMES = tuple(float(t) for t in 10.0 ** np.arange(-6.0, -1.99, 0.5))
NEUTRAL_LABEL = "VENDOR-NEUTRAL PRIOR"

COPIED = ("flash_attention_efficiency", "flash3_attention_efficiency", "flash_attention_overhead_keys",
          "kernel_overhead")


def prior_fields(device: Device, prior: Device) -> dict[str, Any]:
    """The fields `device` takes from `prior`: curves scaled to equal kernel time, the rest as they are."""
    def scaled(points: tuple[tuple[float, float], ...], precision: Any) -> list[list[float]]:
        ratio = device.matrix_peak(precision) / prior.matrix_peak(precision)
        return [[float(f"{f * ratio:.4g}"), e] for f, e in points]

    out: dict[str, Any] = {"matrix_efficiency": {"points": scaled(prior.matrix_efficiency.points, Precision.BF16)}}
    if prior.matrix_efficiency_by_precision:
        out["matrix_efficiency_by_precision"] = {p.value: {"points": scaled(c.points, p)}
                                                 for p, c in prior.matrix_efficiency_by_precision.items()}
    out.update({k: getattr(prior, k) for k in COPIED})
    out["hbm_efficiency"] = prior.hbm.efficiency  # the streaming share its HBM reaches (memory[0].efficiency)
    return out


def neutral_curve(device: Device, references: dict[str, Device]) -> list[list[float]]:
    """The vendor-neutral prior GEMM curve of `device`: per ideal kernel time in NEUTRAL_TIMES, the median of
    the references' efficiencies at that kernel time (those measured there), placed at the FLOPs that take that
    long on `device`."""
    def reading(name: str, reference: Device, t: float) -> float | None:
        flops = t * reference.matrix_peak(Precision.BF16)
        measured_from = MEASURED_FROM.get(name, reference.matrix_efficiency.points[0][0])
        return float(reference.matrix_efficiency(flops)) if flops >= measured_from * (1 - 1e-9) else None

    peak = device.matrix_peak(Precision.BF16)
    out = []
    for t in NEUTRAL_TIMES:
        readings = [e for n, r in references.items() if (e := reading(n, r, t)) is not None]
        out.append([float(f"{t * peak:.4g}"), round(float(np.median(readings)), 3)])
    return out


def neutral_roll_off(name: str, references: dict[str, Device], benchmarked: tuple[float, float]) -> list[list[float]]:
    """A benchmarked device's GEMM curve below its smallest benchmarked size (`benchmarked`: FLOP, efficiency):
    the vendor-neutral prior's points there, scaled so that the prior meets the benchmark at its size. It says
    how GEMM libraries in general lose efficiency on small GEMMs, not how this device does. The device itself
    is left out of the references."""
    flops, efficiency = benchmarked
    points = neutral_curve(load_device(name), {n: r for n, r in references.items() if n != name})
    at = float(np.interp(np.log(flops), np.log([f for f, _ in points]), [e for _, e in points]))
    return [[f, round(e * efficiency / at, 3)] for f, e in points if f < flops * (1 - 1e-9)]


def neutral_references() -> dict[str, Device]:
    return {name: load_device(name) for name in NEUTRAL_REFERENCES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("device")
    parser.add_argument("--neutral", action="store_true", help="the vendor-neutral prior (no same-vendor device)")
    parser.add_argument("--below", type=float, help="a benchmarked device: the vendor-neutral roll-off below its "
                        "smallest benchmarked GEMM of this many FLOP (Gaudi 3: 1.03e11)")
    args = parser.parse_args()
    name = args.device
    device = load_device(name)
    if args.below is not None:
        efficiency = float(device.matrix_efficiency(args.below))
        points = neutral_roll_off(name, neutral_references(), (args.below, efficiency))
        print(f"matrix_efficiency points below {args.below:g} FLOP: {points}")
        return
    if args.neutral:
        print(f"matrix_efficiency: {{points: {neutral_curve(device, neutral_references())}}}")
        print(f"(write it into {find_preset('devices', name)}, its source starting '{NEUTRAL_LABEL}')")
        return
    if device.prior is None:
        raise SystemExit(f"{name}: no prior named in its preset")
    for key, value in prior_fields(device, load_device(device.prior)).items():
        print(f"{key}: {value}")
    print(f"(write these into {find_preset('devices', name)}, with sources naming the prior)")


if __name__ == "__main__":
    main()
