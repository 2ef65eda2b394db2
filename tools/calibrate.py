"""Fit one device's GEMM-efficiency curve (a common scale and the small-GEMM end) and its fused-attention
efficiency to all validation rows of that device, by grid search on the root mean square over sources of
each source's mean |error| (every source weighs the same, however many rows it has; the worst source
weighs more than in a plain mean).

Run: python tools/calibrate.py a100-sxm4-80gb TR-KOR-T5 TR-KOR-T4 TR-SC21-T1   (rows of other devices
are left out); add --flash-only to keep the GEMM curve and fit only the fused-attention efficiency.

What the shipped presets were calibrated on (README, Validation):
  a100-sxm4-80gb: GEMM curve on TR-KOR-T5 TR-KOR-T4 TR-SC21-T1; flash (--flash-only) on TR-FOUNDRY
  h100-sxm:       GEMM curve and flash on TR-MLM-H100 TR-NEMO2407 TR-MBRIDGE TR-FOUNDRY
Prints the best points; copy them into the device preset (one description for every row of the device).
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

import armillary.validation.rows as rows_mod
from armillary.specs.loading import load_device, load_system
from armillary.validation.run import read_rows, run_row


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    keep_curve = "--flash-only" in sys.argv  # fit only the fused-attention efficiency
    device_name, prefixes = args[0], tuple(args[1:])
    base = load_device(device_name)

    def on_device(row: dict[str, str]) -> bool:
        try:
            return rows_mod.row_specs(row)[0].system.device.name == base.name
        except (rows_mod.Unsupported, ValueError):
            return False

    rows = [r for r in read_rows() if r["id"].startswith(prefixes) and r["kind"] == "training" and on_device(r)]
    print(f"{len(rows)} rows on {base.name}")
    pts = np.array(base.matrix_efficiency.points)
    original = rows_mod.load_system
    best = None
    scales = (1.0,) if keep_curve else np.arange(0.50, 1.06, 0.02)
    flashes = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6) if any("flash" in str(rows_mod.row_specs(r)[0].strategy)
                                                          for r in rows[:50]) else (base.flash_attention_efficiency,)
    lows = (1.0,) if keep_curve else (0.6, 0.8, 1.0)
    for scale, low, flash in itertools.product(scales, lows, flashes):
        eff = pts[:, 1] * scale
        eff[:2] *= low  # the small-GEMM end of the curve
        device = base.model_copy(update={
            "matrix_efficiency": base.matrix_efficiency.model_validate(
                {"points": [[float(x), float(min(y, 1.0))] for x, y in zip(pts[:, 0], eff, strict=True)]}),
            "flash_attention_efficiency": flash})

        def patched(name, gpus=None, _device=device):
            s = original(name, gpus)
            return s.model_copy(update={"device": _device}) if s.device.name == base.name else s

        rows_mod.load_system = patched
        groups: dict[str, list[float]] = {}
        for r in rows:
            res = run_row(r)
            if res.error is not None:
                groups.setdefault(res.group, []).append(abs(res.error))
        score = float(np.sqrt(np.mean([np.mean(v) ** 2 for v in groups.values()])))
        worst = max(max(v) for v in groups.values())
        if best is None or score < best[0]:
            best = (score, worst, scale, low, flash, eff.round(3).tolist(),
                    {g: round(float(np.mean(v)), 4) for g, v in groups.items()})
    rows_mod.load_system = original
    print(f"score {best[0]:.4f} max {best[1]:.4f}  scale {best[2]:.2f} low {best[3]} flash {best[4]}")
    print("mean |error| per source:", best[6])
    print("points:", [[float(x), y] for x, y in zip(pts[:, 0], best[5], strict=True)])


if __name__ == "__main__":
    load_system  # noqa: B018 - imported so the patch target exists
    main()
