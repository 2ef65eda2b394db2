"""Fit one device's GEMM-efficiency curve (a common scale and the small-GEMM end) and its fused-attention
efficiency to the validation rows of that device, by grid search on the root mean square over sources of
each source's mean |error| (every source weighs the same, however many rows it has; the worst source
weighs more than in a plain mean). Prints the best values; copy them into the device preset: one
description for every row of the device.

Run: python tools/calibrate.py DEVICE ROW-PREFIX... [--flash-only] [--precision P]
  --flash-only   keep the GEMM curve, fit only the fused-attention efficiency
  --flash3       also fit the FlashAttention-3 efficiency (rows that run cuDNN / FA3 attention)
  --wide         a wide grid for a device far from its copied curve (scale 0.3-1.3, small-GEMM end 0.4-1.0)
  --precision P  use only rows of training precision P and fit the device's GEMM curve for P (fp8
                 GEMMs follow their own curve; the attention efficiency stays); without it the base
                 curve and the attention efficiency are fitted on all rows. A device without a curve of its
                 own for P (fp8 read from the 16-bit curve at equal kernel time, Device.gemm_efficiency) has
                 its 16-bit curve fitted on the P rows
  --scales A,B.. --lows A,B.. --flash3s A,B..   the grid's values instead of the defaults (a narrow refit)
  --also D[,D]   devices of the same silicon at other peaks (a package at another power limit): their rows
                 join the fit and take the same curve and attention efficiencies, each at its own peaks

What the shipped presets were calibrated on (README, Validation):
  a100-sxm4-80gb: curve on TR-KOR-T5 TR-KOR-T4 TR-SC21-T1; --flash-only on TR-FOUNDRY
  h100-sxm:       curve, flash and flash3 on TR-MLM-H100 TR-FOUNDRY --precision bf16 --flash3;
                  fp8 curve on TR-NEMO2407 TR-MBRIDGE TR-FOUNDRY --precision fp8; with the attention
                  length overhead (flash_attention_overhead_keys) flash and flash3 re-fitted on every H100
                  source: TR-MLM-H100 TR-FOUNDRY TR-NEMO-LONGSEQ-H100 TR-NEMO2407 TR-MBRIDGE TR-TORCHTITAN
                  --flash3 --flash-only
  b200, gb200:    fp8 curve and flash3 on the dense B200 and GB200 rows, TR-NEMO-LONGSEQ-B200
                  TR-MBRIDGE-25.11-B200-17 TR-MBRIDGE-25.11-B200-18 TR-MBRIDGE-25.11-GB200-09
                  TR-MBRIDGE-25.11-GB200-10 TR-MBRIDGE-25.11-GB200-11 --precision fp8 --flash3 --wide --also gb200
                  (the MoE and GB300 rows held out)
  a100-sxm4-80gb, with the attention length overhead: --flash-only on TR-FOUNDRY again (0.3 kept)
  b200, gb200, since fp8 reads the 16-bit curve at equal kernel time: not re-fitted (the dense rows moved
                  0.6 points or less); the check, on the same rows: --precision fp8 --flash3 --also gb200
                  --scales 0.94,0.96,0.98,1.0,1.02,1.04 --lows 0.8,0.9,1.0,1.1,1.2,1.4 --flash3s 0.36,0.38,0.4,0.42
                  (docs/hardware.md "fp8 at equal kernel time")
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

import armillary.validation.rows as rows_mod
from armillary.specs.device import Device, Precision
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.loading import load_device
from armillary.validation.row_columns import Unsupported
from armillary.validation.run import read_rows, run_row


def _option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def _score(rows: list[dict[str, str]]) -> tuple[float, float, dict[str, float]]:
    groups: dict[str, list[float]] = {}
    for r in rows:
        res = run_row(r)
        if res.error is not None:
            groups.setdefault(res.group, []).append(abs(res.error))
    means = {g: float(np.mean(v)) for g, v in groups.items()}
    return float(np.sqrt(np.mean([m**2 for m in means.values()]))), max(max(v) for v in groups.values()), means


def main() -> None:
    precision = _option("--precision")
    args = [a for a in sys.argv[1:] if not a.startswith("--") and a != precision]
    flash_only = "--flash-only" in sys.argv
    with_flash3 = "--flash3" in sys.argv  # also fit the FlashAttention-3 efficiency
    base = load_device(args[0])
    also = {load_device(name).name for name in (_option("--also") or "").split(",") if name}
    args = [a for a in args if a not in {_option(o) for o in ("--also", "--scales", "--lows", "--flash3s")}]
    sharing = {base.name} | also  # devices that take the fitted curve
    prefixes = tuple(args[1:])
    target = Precision(precision) if precision else None

    def selected(row: dict[str, str]) -> bool:
        try:
            rs = rows_mod.row_specs(row)[0]
        except (Unsupported, ValueError):
            return False
        return rs.system.device.name in sharing and (
            target is None or rs.strategy.precision.value == target.value)

    rows = [r for r in read_rows() if r["id"].startswith(prefixes) and r["kind"] == "training" and selected(r)]
    print(f"{len(rows)} rows on {base.name}" + (f" at {target.value}" if target else ""))
    # the curve fitted: P's own, or the 16-bit curve where P's is read from it (Device.gemm_efficiency)
    fits_base = target is None or target not in base.matrix_efficiency_by_precision
    start = base.matrix_efficiency if fits_base else base.matrix_efficiency_by_precision[target]
    pts = np.array(start.points)
    wide = "--wide" in sys.argv
    scales = ((1.0,) if flash_only else np.arange(0.30, 1.32, 0.02) if wide else np.arange(0.9, 1.32, 0.04)
              if with_flash3 else np.arange(0.50, 1.32, 0.02))
    lows = (1.0,) if flash_only else (0.4, 0.6, 0.8, 1.0) if wide else (0.8, 1.0) if with_flash3 else (0.6, 0.8, 1.0)
    flash3s = ((0.2, 0.22, 0.25, 0.28, 0.3, 0.32, 0.35, 0.38, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7) if with_flash3
               else (base.flash3_attention_efficiency,))
    def listed(name: str) -> tuple[float, ...] | None:
        values = _option(name)
        return tuple(float(v) for v in values.split(",")) if values else None

    scales = listed("--scales") or scales
    lows = listed("--lows") or lows
    flash3s = listed("--flash3s") or flash3s
    uses_flash = any(rows_mod.row_specs(r)[0].strategy.attention.value == "flash" for r in rows)
    # attention runs in 16 bit: its efficiencies are fitted with the 16-bit curve, not with fp8's
    sixteen_bit = target is None or target in (Precision.BF16, Precision.FP16)
    grid = ((0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.25, 0.3) if with_flash3 else
            (0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.33, 0.36, 0.4, 0.45, 0.5, 0.6))
    flashes = grid if uses_flash and sixteen_bit else (base.flash_attention_efficiency,)
    original = rows_mod.load_system
    best = None
    try:
        for scale, low, flash, flash3 in itertools.product(scales, lows, flashes, flash3s):
            eff = pts[:, 1] * scale
            eff[:2] *= low  # the small-GEMM end of the curve
            curve = EfficiencyCurve(points=[[float(x), float(min(y, 1.0))]
                                            for x, y in zip(pts[:, 0], eff, strict=True)])
            update: dict[str, object] = {"flash_attention_efficiency": flash, "flash3_attention_efficiency": flash3}
            if fits_base:
                update["matrix_efficiency"] = curve
            else:
                update["matrix_efficiency_by_precision"] = {**base.matrix_efficiency_by_precision, target: curve}
            def patched(name, gpus=None, _update=update):
                s = original(name, gpus)
                if s.device.name not in sharing:
                    return s
                device: Device = s.device.model_copy(update=_update)
                return s.model_copy(update={"device": device})

            rows_mod.load_system = patched
            score, worst, means = _score(rows)
            if best is None or score < best[0]:
                best = (score, worst, scale, low, (flash, flash3), curve.points, means)
    finally:
        rows_mod.load_system = original
    assert best is not None
    print(f"score {best[0]:.4f} max {best[1]:.4f}  scale {best[2]:.2f} low {best[3]} flash {best[4]}")
    print("mean |error| per source:", {g: round(m, 4) for g, m in best[6].items()})
    print("points:", [[x, round(y, 3)] for x, y in best[5]])


if __name__ == "__main__":
    main()
