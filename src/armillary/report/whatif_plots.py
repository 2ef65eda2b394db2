"""Pictures of what-if results: a comparison as grouped bars, a sweep as scaling curves (matplotlib,
imported lazily)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from armillary.estimate.compare import Comparison, Section
from armillary.estimate.inference_result import InferenceEstimate
from armillary.report.figures import leading, save_figure
from armillary.units import GIB, parse_quantity

if TYPE_CHECKING:
    from armillary.search.sweep import Sweep


def comparison_plot(c: Comparison, path: Path) -> Path:
    """Grouped bars, one colour per run: time by component (left) and HBM per device by category (right);
    titled with the run names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    time_sections = (Section.TIME,) if c.section(Section.TIME) else (Section.PREFILL, Section.DECODE)
    panels = [(f"{'time' if len(time_sections) == 1 else ' + '.join(s.value for s in time_sections)} [s]",
               [r for s in time_sections for r in c.section(s)], 1.0),
              ("memory per device [GiB]", [r for r in c.section(Section.MEMORY) if "capacity" not in r.name], GIB)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, (label, rows, scale) in zip(axes, panels, strict=True):
        shown = [r for r in rows if any(r.values) and not r.name.endswith("total")]
        x = np.arange(len(shown))
        width = 0.8 / len(c.names)
        for i, name in enumerate(c.names):
            ax.bar(x + (i - (len(c.names) - 1) / 2) * width, [r.values[i] / scale for r in shown], width, label=name)
        multi = len({r.section for r in shown}) > 1
        ax.set_xticks(x, [(f"{r.section.value}\n" if multi else "") + r.name.replace("_", " ") for r in shown],
                      rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(" vs ".join(c.names) + ("" if all(c.feasible) else "  (infeasible: " + ", ".join(
        n for n, ok in zip(c.names, c.feasible, strict=True) if not ok) + ")"))
    return save_figure(fig, path, 120)


def _numeric(axis_values: tuple[Any, ...]) -> list[float] | None:
    """The values as numbers (quantities with units read in SI), or None where one is not a number."""
    out = []
    for v in axis_values:
        if isinstance(v, bool):
            return None
        if isinstance(v, int | float):
            out.append(float(v))
            continue
        try:
            out.append(parse_quantity(str(v), "bytes_per_s" if "/s" in str(v) else "bytes"))
        except ValueError:
            return None
    return out


def sweep_plot(s: Sweep, path: Path, title: str) -> Path:
    """MFU (or output tokens/s per device) and step time (or TPOT) against the first varied field, one
    line per combination of the other fields; infeasible points drawn as crosses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullLocator

    first = s.axes[0]
    numbers = _numeric(first.values)
    xs = numbers if numbers is not None else list(range(len(first.values)))
    inference = any(isinstance(p.result, InferenceEstimate) for p in s.points)
    metrics = (("output tokens/s per device", lambda r: float(r.output_tokens_per_s_per_device)),
               ("time per output token [ms]", lambda r: 1e3 * float(r.tpot_s))) if inference else (
        ("MFU [%]", lambda r: 100 * float(r.mfu)), ("step time [s]", lambda r: float(r.step_time_s)))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    others = [a.values for a in s.axes[1:]]
    for combo in itertools.product(*others):
        mine = [p for p in s.points if p.values[1:] == combo]
        label = ", ".join(f"{a.field}={a.shown(v)}" for a, v in zip(s.axes[1:], combo, strict=True)) or None
        for ax, (_, metric) in zip(axes, metrics, strict=True):
            ok = [(x, metric(p.result)) for x, p in zip(xs, mine, strict=True) if p.result is not None]
            good = [(x, y) for (x, y), p in zip(ok, [p for p in mine if p.result is not None], strict=True)
                    if bool(p.result.feasible)]  # type: ignore[union-attr]
            bad = [xy for xy in ok if xy not in good]
            line = ax.plot([x for x, _ in good], [y for _, y in good], "o-", label=label)
            ax.plot([x for x, _ in bad], [y for _, y in bad], "x", color=line[0].get_color())
    for ax, (ylabel, _) in zip(axes, metrics, strict=True):
        ax.set_xlabel(first.field)
        ax.set_ylabel(ylabel)
        if numbers is not None and min(numbers) > 0 and max(numbers) / min(numbers) >= 8:
            ax.set_xscale("log", base=2)
        if ylabel.startswith("step time"):
            ax.set_yscale("log")  # strong scaling: time halves per doubling at best
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if leading(y) in (2, 3, 5) else ""))
        if numbers is None or len(xs) <= 16:  # the values as given (with their units)
            ax.set_xticks(xs, [str(first.shown(v)) for v in first.values], fontsize=8)
            ax.xaxis.set_minor_locator(NullLocator())
        if len(s.axes) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(f"{title}: sweep over {first.field} (x: infeasible)")
    return save_figure(fig, path, 120)
