"""Step time vs network cost of the time-optimal bandwidths over a range of budgets (`network-optimize`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from armillary.report.figures import save_figure
from armillary.search.network_bandwidth import BandwidthConstraints, BandwidthWorkload, time_cost_curve


def time_vs_cost_plot(work: BandwidthWorkload, cons: BandwidthConstraints, path: Path, points: int = 24) -> None:
    """Save the curve; without a cost model, cost is the total bandwidth (GB/s per device)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = cons.cost_per_bw if cons.cost_per_bw is not None else np.full(len(cons.lower), 1e-9)
    costed = replace(cons, cost_per_bw=weights, budget=None)  # every other constraint kept
    low = float(weights @ cons.lower)
    high = cons.budget if cons.budget is not None else float(weights @ cons.upper)
    curve = time_cost_curve(work, costed, np.geomspace(low * 1.01, high, points))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([o.cost for o in curve], [o.step_time_s for o in curve], marker="o")
    ax.set_xlabel("network cost per device ($)" if cons.cost_per_bw is not None else "total bandwidth (GB/s)")
    ax.set_ylabel("step time (s)")
    ax.set_yscale("log")  # the cheapest points are orders of magnitude slower
    ax.set_title("time-optimal per-dimension bandwidths")
    ax.grid(True, alpha=0.3)
    save_figure(fig, path)
