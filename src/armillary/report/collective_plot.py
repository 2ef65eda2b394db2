"""Bus bandwidth of one collective against message size (`armillary collective --plot`): the rows the
command printed, each algorithm the group's dimensions offer pinned as its own line, and the per-device
bandwidth of each spanned dimension as the bound (matplotlib, imported lazily)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armillary.comm.sweep import SweepRow, collective_sweep, group_of
from armillary.errors import SpecError
from armillary.report.figures import save_figure
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.system import System
from armillary.units import GIGA


@dataclass(frozen=True)
class BusbwLine:
    label: str
    size_bytes: tuple[float, ...]
    busbw_gb_s: tuple[float, ...]  # GB/s (1e9 bytes/s), as nccl-tests prints it
    chosen: bool  # the line of the command's own rows


@dataclass(frozen=True)
class CollectivePlot:
    title: str
    lines: tuple[BusbwLine, ...]
    bounds: tuple[tuple[str, float], ...]  # (dimension, per-device bandwidth in GB/s) of each spanned dimension


def _ran(rows: list[SweepRow]) -> str:
    """What ran: per spanned dimension its algorithms over the sizes, dimensions joined by '+'."""
    per_dim = []
    for i in range(len(rows[0].dimensions)):
        algorithms = dict.fromkeys(r.dimensions[i].split("/")[0] for r in rows if r.dimensions[i] != "-")
        if algorithms:
            per_dim.append("|".join(algorithms))
    return per_dim[0] if len(set(per_dim)) == 1 else " + ".join(per_dim)


def collective_plot_data(rows: list[SweepRow], op: Collective, system: System, gpus: int,
                         algorithm: Algorithm, composition: Composition) -> CollectivePlot:
    """The command's `rows` (algorithm `algorithm`, auto: the fastest per size) and, as the other lines,
    every other algorithm pinned over the same sizes (a dimension that cannot run it takes its fastest;
    pinnings that give the same curve share a line, labelled with what ran per dimension)."""
    sized = system.with_devices(gpus)
    group = group_of(system, gpus)
    sizes = np.array([r.size_bytes for r in rows])
    chosen = "auto (fastest per size)" if algorithm is Algorithm.AUTO else f"{algorithm.value} (chosen)"
    lines = [BusbwLine(chosen, tuple(sizes), tuple(r.busbw_bytes_per_s / GIGA for r in rows), True)]
    pinned: dict[tuple[float, ...], tuple[list[str], str]] = {}
    for candidate in Algorithm:
        if candidate in (Algorithm.AUTO, algorithm):
            continue
        try:
            mine = collective_sweep(op, sizes, group, system, candidate, composition)
        except (SpecError, ValueError):
            continue  # cannot run on any dimension the group spans
        busbw = tuple(r.busbw_bytes_per_s / GIGA for r in mine)
        pinned.setdefault(busbw, ([], _ran(mine)))[0].append(candidate.value)
    for busbw, (names, ran) in pinned.items():
        label = ran if [ran] == names else f"{', '.join(names)} pinned: {ran}"
        lines.append(BusbwLine(label, tuple(sizes), busbw, False))
    spanned = [(d.name, float(d.bandwidth) / d.shared_by / GIGA)
               for d, span in zip(sized.network, group.spans, strict=True) if float(span) > 1]
    title = f"{op.value} over {gpus} GPUs ({algorithm.value}, {composition.value} composition)\n{system.name}"
    return CollectivePlot(title, tuple(lines), tuple(spanned))


def collective_plot(data: CollectivePlot, path: Path) -> Path:
    """busbw against message size (log x), the chosen line bold, the bounds dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    fig, ax = plt.subplots(figsize=(8, 5))
    for line in data.lines:  # the chosen line wide and pale underneath: a pinned one equal to it shows on top
        if line.chosen:
            ax.plot(line.size_bytes, line.busbw_gb_s, "-", lw=7, color="grey", alpha=0.4, label=line.label)
        else:
            ax.plot(line.size_bytes, line.busbw_gb_s, ".-", lw=1.2, ms=4, label=line.label)
    for i, (name, gb_s) in enumerate(data.bounds):
        ax.axhline(gb_s, ls="--", lw=1, color=f"C{7 + i}",
                   label=f"{name.split(',')[0].split(' (')[0]}: {gb_s:,.0f} GB/s per device")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))  # 1K, 4K, 16K, ...
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _size(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth [GB/s]")
    ax.set_title(data.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path, 120)


def _size(n: float) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"
