"""Pictures of results (matplotlib, imported lazily so the estimator never pays for it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from armillary.estimate.result import CommCall
from armillary.report.figures import leading, save_figure
from armillary.report.records import design_label, design_name, varied_axes
from armillary.validation.run import RowResult, source_group

if TYPE_CHECKING:
    from armillary.search.systems import CoDesignResult


def validation_plot(results: list[RowResult], path: Path) -> Path:
    """Predicted against measured, one colour per source, with the +-10% band; saved to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    run = [r for r in results if r.predicted is not None and r.error is not None]
    groups = sorted({source_group(r.id) for r in run})
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.axhspan(0.9, 1.1, color="grey", alpha=0.15, label="within 10%")
    ax.axhline(1.0, color="black", lw=0.8)
    for i, group in enumerate(groups):
        ratio = np.array([1 + (r.error or 0.0) for r in run if source_group(r.id) == group])
        jitter = np.linspace(-0.3, 0.3, len(ratio)) if len(ratio) > 1 else np.zeros(1)
        ax.scatter(i + jitter, ratio, s=12)
        mean = np.abs(ratio - 1).mean()
        ax.annotate(f"{100 * mean:.1f}%", (i, ratio.max()), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7)
    ax.set_xticks(range(len(groups)), [f"{g}\n({sum(source_group(r.id) == g for r in run)})" for g in groups],
                  rotation=45, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_ylabel("predicted / measured (label: mean |error|)")
    ax.set_title("armillary against published measurements")
    ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path, 120)


def message_size_histogram(calls: tuple[CommCall, ...], path: Path) -> Path:
    """Calls per step by message size (log bins), one colour per parallel dimension."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sizes = [float(c.message_bytes) for c in calls if float(c.per_step) > 0]
    bins = list(np.geomspace(max(min(sizes, default=1.0) / 2, 1.0), max(sizes, default=2.0) * 2, 30))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for dim in sorted({c.dimension for c in calls}):
        mine = [c for c in calls if c.dimension is dim and float(c.per_step) > 0]
        ax.hist([float(c.message_bytes) for c in mine], bins=bins, weights=[float(c.per_step) for c in mine],
                alpha=0.6, label=dim.value)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("calls per step")
    ax.set_title("communication of one step by message size")
    ax.legend()
    return save_figure(fig, path, 120)


def pareto_plot(points: list[tuple[float, float, bool, str]], path: Path, title: str = "") -> Path:
    """Step time against cost of each system (its best strategy), the Pareto front joined and labelled;
    `points` are (step time s, cost $, on the front, label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.scatter([c / 1e6 for _, c, _, _ in points], [t for t, _, _, _ in points], s=14, color="grey",
               label="systems (best strategy each)")
    front = sorted((c / 1e6, t, label) for t, c, on, label in points if on)
    ax.plot([c for c, _, _ in front], [t for _, t, _ in front], "o-", color="C3", label="Pareto front")
    for c, t, label in front:
        ax.annotate(label, (c, t), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("capital cost [M$]")
    ax.set_ylabel("step time [s]")
    ax.set_yscale("log")
    times = [t for t, _, _, _ in points if t > 0 and t != float("inf")]
    narrow = bool(times) and max(times) / min(times) < 10  # within a decade: every minor tick labelled
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if narrow or leading(y) in (2, 5) else ""))
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend()
    return save_figure(fig, path, 150)


def codesign_pareto_plot(designs: CoDesignResult, path: Path) -> Path:
    """`pareto_plot` of the systems of a co-design that fit a strategy, each labelled by the values of the
    axes the co-design varied (named in the title)."""
    axes = varied_axes(designs)
    return pareto_plot([(p.step_time_s, p.cost, i in designs.pareto, design_label(p, axes))
                        for i, p in enumerate(designs.points) if p.best is not None], path,
                       "varied: " + (", ".join(design_name(k) for k in axes) if axes else "nothing (one system)"))

