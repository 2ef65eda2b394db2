"""Pictures of a served request stream (`armillary serve --plot`): CDFs of TTFT, TPOT and end-to-end
latency over the simulated requests with the SLOs; for `--max-rate`, the judged percentiles against every
rate the search tried (matplotlib, imported lazily)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armillary.report.figures import save_figure
from armillary.serving.rate import MaxRate
from armillary.serving.run import ServingResult


@dataclass(frozen=True)
class Cdf:
    name: str
    values_s: tuple[float, ...]  # sorted, the requests that have the metric (TPOT: more than one output token)
    slo_s: float | None


def latency_cdfs(r: ServingResult) -> tuple[Cdf, ...]:
    """Per request TTFT, TPOT and end-to-end latency (`RequestTimes.ttft_s`, `tpot_s`, `e2e_s`), sorted;
    the percentiles of each are those of the result."""
    t = r.times
    ttft, tpot, e2e = t.ttft_s, t.tpot_s, t.e2e_s

    def finite(v: np.ndarray) -> tuple[float, ...]:
        return tuple(float(x) for x in np.sort(v[np.isfinite(v)]))

    return (Cdf("TTFT", finite(ttft), r.ttft_slo_s), Cdf("TPOT", finite(tpot), r.tpot_slo_s),
            Cdf("end-to-end latency", finite(e2e), None))


def serving_plot(r: ServingResult, path: Path, title: str) -> Path:
    """Three panels: the CDF of each latency (log x), the SLO dashed, P50 / P90 / P99 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))
    for ax, cdf in zip(axes, latency_cdfs(r), strict=True):
        v = np.array(cdf.values_s)
        if len(v):
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color="C0")
            for q, style in ((50, ":"), (90, "-."), (99, "--")):
                ax.axhline(q / 100, color="grey", lw=0.6, ls=style)
                ax.annotate(f"P{q} {_ms(float(np.percentile(v, q)))}", (float(np.percentile(v, q)), q / 100),
                            textcoords="offset points", xytext=(4, -10), fontsize=7)
        if cdf.slo_s is not None and np.isfinite(cdf.slo_s):
            ax.axvline(cdf.slo_s, color="C3", ls="--", label=f"SLO {_ms(cdf.slo_s)}")
            ax.legend(fontsize=8, loc="lower right")
        if len(v) and v.min() > 0 and v.max() / v.min() > 20:
            ax.set_xscale("log")
        ax.set_xlabel(f"{cdf.name} [s]")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"share of requests (of {r.requests})")
    fig.suptitle(f"{title}: {r.offered_rate:.3g} requests/s offered (arrivals drawn), {r.completed} of {r.requests} "
                 f"served, SLO attainment {r.slo_attainment:.0%}", fontsize=10)
    return save_figure(fig, path, 120)


def rate_points(found: MaxRate) -> list[dict[str, float | int | bool]]:
    """Every rate the max-rate search ran (all seeds, in order) with the percentiles it judged: what
    `serve --max-rate --json` lists as `rates_tried` and the rate plot draws."""
    return [{"rate": p.rate, "seed": p.seed, "ttft_p90_s": p.latency.ttft_p90_s, "tpot_p99_s": p.latency.tpot_p99_s,
             "tail_ttft_p90_s": p.latency.tail_ttft_p90_s, "all_served": p.latency.all_served, "meets": p.meets}
            for p in found.tried]


def rate_plot(found: MaxRate, ttft_slo_s: float, tpot_slo_s: float, path: Path, title: str) -> Path:
    """Steady P90 TTFT and P99 TPOT against the request rate, for every rate tried (filled: met the SLOs),
    the SLOs dashed and the max rate (mean of the seeds) as a vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted(rate_points(found), key=lambda p: (p["seed"], p["rate"]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    panels = (("ttft_p90_s", "P90 TTFT after warm-up [s]", ttft_slo_s),
              ("tpot_p99_s", "P99 TPOT after warm-up [s]", tpot_slo_s))
    for ax, (key, label, slo) in zip(axes, panels, strict=True):
        for seed in sorted({int(p["seed"]) for p in points}):
            mine = [p for p in points if p["seed"] == seed]
            line = ax.plot([p["rate"] for p in mine], [p[key] for p in mine], "-", lw=0.8, label=f"seed {seed}")
            colour = line[0].get_color()
            for p in mine:
                ax.plot(p["rate"], p[key], "o", color=colour, mfc=colour if p["meets"] else "white", ms=5)
        ax.axhline(slo, color="C3", ls="--", label=f"SLO {_ms(slo)}")
        ax.axvline(found.rate, color="black", lw=0.8, label=f"max rate {found.rate:.3g} req/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("request rate [requests/s]")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{title}: rates the max-rate search tried (filled: met the SLOs)", fontsize=10)
    return save_figure(fig, path, 120)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"
