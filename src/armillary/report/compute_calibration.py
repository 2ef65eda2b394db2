"""Tables and the measured-vs-fitted picture of a compute calibration (rendering only)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from armillary.calibrate.compute_records import GroupError, RoundTrip
from armillary.report.figures import save_figure
from armillary.specs.device import Device


def device_table(device: Device) -> Table:
    """The fitted parameters the cost model consumes."""
    t = Table(title=f"fitted device {device.name}")
    t.add_column("parameter")
    t.add_column("value", justify="right")
    for p, peak in device.matrix_flops.items():
        t.add_row(f"matrix peak {p.value}", f"{peak / 1e12:.4g} TFLOP/s")
    curves = {"default": device.matrix_efficiency, **{p.value: c for p, c in
                                                     device.matrix_efficiency_by_precision.items()}}
    for key, curve in curves.items():
        t.add_row(f"GEMM efficiency ({key})", ", ".join(f"{s:.2g}:{e:.3f}" for s, e in curve.points))
    t.add_row("fused attention efficiency", f"{device.flash_attention_efficiency:.3f}")
    t.add_row("memory bandwidth x efficiency", f"{device.hbm.bandwidth / 1e9:.2f} GB/s x {device.hbm.efficiency:.3f}")
    t.add_row("kernel overhead", f"{device.kernel_overhead * 1e6:.2f} us")
    return t


def round_trip_table(rows: Sequence[RoundTrip], title: str) -> Table:
    t = Table(title=title)
    for name in ("kernel", "precision", "shape", "FLOP", "measured", "predicted", "error"):
        t.add_column(name, justify="left" if name in ("kernel", "shape") else "right")
    for r in rows:
        k = r.kernel
        shape = f"{k.batch}x" if k.batch > 1 else ""
        shape += f"{k.m}x{k.n}x{k.k}" if k.kind.value == "gemm" else (
            f"s{k.m} d{k.n}" if "attention" in k.kind.value else f"{k.m}")
        t.add_row(k.label + (" (held out)" if k.held_out else ""), k.precision.value, shape, f"{k.flop:.3g}",
                  f"{r.measured_s * 1e6:.1f} us", f"{r.predicted_s * 1e6:.1f} us", f"{r.error:+.1%}")
    return t


def group_table(errors: Sequence[GroupError]) -> Table:
    t = Table(title="round trip: predicted vs measured per kernel group")
    for name in ("group", "kernels", "mean |error|", "max |error|", "error of the sum"):
        t.add_column(name, justify="left" if name == "group" else "right")
    for g in errors:
        t.add_row(g.group.value, str(g.kernels), f"{g.mean_abs:.1%}", f"{g.max_abs:.1%}", f"{g.total:+.1%}")
    return t


def compare_plot(rows: Sequence[RoundTrip], device: Device, path: Path) -> Path:
    """Left: achieved GEMM FLOP/s vs FLOPs per problem, measured (dots; held out: crosses) and the fitted
    curve; right: predicted vs measured time of every kernel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for held, marker in ((False, "o"), (True, "x")):
        sel = [r for r in rows if r.kernel.kind.value == "gemm" and r.kernel.held_out is held]
        for p in sorted({r.kernel.precision for r in sel}):
            mine = [r for r in sel if r.kernel.precision is p]
            size = np.array([r.kernel.flop / r.kernel.batch for r in mine])
            left.scatter(size, [r.kernel.flop / r.measured_s for r in mine], marker=marker,
                         label=f"{p.value} measured" + (" (held out)" if held else ""))
            if not held:
                grid = np.geomspace(size.min(), size.max(), 100)
                left.plot(grid, device.gemm_efficiency(p)(grid) * device.matrix_peak(p), label=f"{p.value} fitted")
    left.set(xscale="log", yscale="log", xlabel="FLOP per GEMM problem", ylabel="FLOP/s", title="GEMMs")
    left.legend(fontsize=8)
    groups = sorted({r.group for r in rows}, key=lambda g: g.value)
    for g in groups:
        sel = [r for r in rows if r.group is g]
        right.scatter([r.measured_s for r in sel], [r.predicted_s for r in sel], label=g.value, s=14)
    lo, hi = min(r.measured_s for r in rows), max(r.measured_s for r in rows)
    right.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    right.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="predicted (s)", title="every kernel")
    right.legend(fontsize=8)
    return save_figure(fig, path)
