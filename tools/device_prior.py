"""Write an uncalibrated device's efficiency prior into its preset: the GEMM curves, attention efficiencies and
kernel overhead of the device named by its `prior:` (same vendor, nearest calibrated or benchmarked
generation), its curves read at equal kernel time. A GEMM of F FLOPs on a device of peak P runs as long as one
of F x P_prior / P on the prior, so its efficiency is the prior's at that size: each curve point (F, e) becomes
(F x P / P_prior, e), per precision. The attention kernels keep the prior's share of the peak, the HBM its
streaming share. tests/test_device_priors.py checks the presets equal this derivation.
    python tools/device_prior.py mi355x
"""

from __future__ import annotations

import argparse
from typing import Any

from armillary.presets.registry import find_preset
from armillary.specs.loading import load_device
from armillary.specs.system import Device, Precision

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("device")
    name = parser.parse_args().device
    device = load_device(name)
    if device.prior is None:
        raise SystemExit(f"{name}: no prior named in its preset")
    for key, value in prior_fields(device, load_device(device.prior)).items():
        print(f"{key}: {value}")
    print(f"(write these into {find_preset('devices', name)}, with sources naming the prior)")


if __name__ == "__main__":
    main()
