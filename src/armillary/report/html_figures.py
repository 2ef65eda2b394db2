"""The charts of the HTML report as plotly figure specifications (plain data: the page's script hands them to
plotly.js, so no plotly Python object is built). Rendering only: the figures come from the result objects."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from armillary.report.formatting import fixed, percent
from armillary.report.records import layout_label, search_rows
from armillary.report.timeline_bars import shade, timeline_bars
from armillary.units import GIB

if TYPE_CHECKING:
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import CommCall, StepEstimate
    from armillary.search.run import SearchResult
    from armillary.serving.run import ServingResult
    from armillary.simulate.run import SimulationResult

Figure = dict[str, Any]
CDF_POINTS = 2000  # quantiles drawn per latency curve at most
# One colour per kind of work (and per serving metric), the same in every chart
COLOURS = {"compute": "#4c78a8", "recompute": "#9ecae9", "optimizer": "#54a24b", "offload": "#9d755d",
           "tp": "#f58518", "cp": "#e45756", "ep": "#b279a2", "pp": "#72b7b2", "dp": "#eeca3b",
           "TTFT": "#1f77b4", "TPOT": "#ff7f0e", "end-to-end latency": "#2ca02c"}
_AXIS = {"gridcolor": "#e8e8e8", "zerolinecolor": "#bbb", "linecolor": "#999", "automargin": True}


def figure(title: str, data: list[dict[str, Any]], height: int = 360, xaxis: dict[str, Any] | None = None,
           yaxis: dict[str, Any] | None = None, **layout: Any) -> Figure:
    """A figure with the report's look: title at the left, light grid, legend under the plot."""
    return {"data": data, "layout": {
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 15}}, "height": height,
        "margin": {"l": 70, "r": 30, "t": 48, "b": 40}, "paper_bgcolor": "white", "plot_bgcolor": "white",
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12, "color": "#222"},
        "legend": {"traceorder": "normal"}, "hoverlabel": {"align": "left"},
        "xaxis": {**_AXIS, **(xaxis or {})}, "yaxis": {**_AXIS, **(yaxis or {})}, **layout}}


def log_axis(title: str, values: list[float]) -> dict[str, Any]:
    """A log axis labelled at powers of ten only (1, 10, 100: no label on every minor tick); spanning less
    than two decades, at 1, 2 and 5 of each; less than one, a linear axis."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    decades = math.log10(max(positive) / min(positive)) if positive else 0.0
    if decades < 1:
        return {"title": {"text": title}, "type": "linear", "rangemode": "tozero"}
    return {"title": {"text": title}, "type": "log", "dtick": 1 if decades >= 2 else "D2", "tickformat": "~g"}


def breakdown_figure(r: StepEstimate | InferenceEstimate) -> Figure:
    """Seconds per component, its share of the step on the bar (training; components that take no time
    left out), or the prompt pass and the decode steps per component (inference)."""
    from armillary.estimate.inference_result import InferenceEstimate

    if isinstance(r, InferenceEstimate):
        names = [f.name for f in fields(r.prefill) if float(getattr(r.prefill, f.name)) + float(getattr(
            r.decode, f.name)) > 0]
        data = [{"type": "bar", "name": phase, "x": [n.replace("_", " ") for n in names],
                 "y": [float(getattr(part, n)) for n in names], "hovertemplate": "%{x}: %{y:.4g} s<extra>"
                 + phase + "</extra>"} for phase, part in (("prefill", r.prefill), ("decode (all steps)", r.decode))]
        return figure(f"Where the time goes: one static batch of {r.batch} ({r.input_len:,} + {r.output_len:,} "
                      "tokens)", data, yaxis={"title": {"text": "seconds"}}, barmode="group")
    step = float(r.step_time_s)
    parts = [(f.name.replace("_", " "), float(getattr(r.breakdown, f.name))) for f in fields(r.breakdown)]
    shown = [(n, v) for n, v in parts if v > 0]
    idle = [n for n, v in parts if v <= 0]
    bars: dict[str, Any] = {"type": "bar", "x": [n for n, _ in shown], "y": [v for _, v in shown],
                            "marker": {"color": "#4c78a8"}, "textposition": "outside",
                            "text": [f"{fixed(v)} s ({percent(v / step)})" for _, v in shown], "cliponaxis": False,
                            "hovertemplate": "%{x}: %{text}<extra></extra>"}
    title = f"Where the time goes: {fixed(step)} s per step" + (f" (no time: {', '.join(idle)})" if idle else "")
    return figure(title, [bars], yaxis={"title": {"text": "seconds"}}, showlegend=False)


def memory_figure(r: StepEstimate | InferenceEstimate) -> Figure:
    """HBM per device, one stacked segment per memory category, against the capacity (dashed)."""
    from armillary.estimate.inference_result import InferenceEstimate

    if isinstance(r, InferenceEstimate):
        parts = {n: float(getattr(r.memory, n)) for n in ("weights", "kv_cache", "activations")}
        total = float(r.memory.total)
    else:
        parts = {f.name: float(getattr(r.memory_hbm, f.name)) for f in fields(r.memory_hbm)}
        total = float(r.memory_hbm.total)
    capacity = float(r.hbm_capacity_bytes) / GIB
    data = [{"type": "bar", "orientation": "h", "name": n.replace("_", " "), "y": ["HBM"], "x": [v / GIB],
             "hovertemplate": f"{n.replace('_', ' ')}: %{{x:.2f}} GiB<extra></extra>"}
            for n, v in parts.items() if v > 0]
    line = {"type": "line", "x0": capacity, "x1": capacity, "y0": -0.5, "y1": 0.5, "line": {"dash": "dash"}}
    note = {"x": capacity, "y": 0.5, "text": f"capacity {capacity:.0f} GiB", "showarrow": False, "yanchor": "bottom"}
    return figure(f"Memory per device: {total / GIB:.1f} of {capacity:.0f} GiB", data, height=250,
                  xaxis={"ticksuffix": " GiB", "range": [0, max(capacity, total / GIB) * 1.05]},
                  barmode="stack", shapes=[line], annotations=[note],
                  legend={"orientation": "h", "x": 0, "y": -0.3, "yanchor": "top", "traceorder": "normal"},
                  margin={"l": 70, "r": 30, "t": 48, "b": 70})


def communication_figure(calls: tuple[CommCall, ...]) -> Figure:
    """Bytes sent per step by each kind of call (parallel dimension and operation), with its calls per step,
    message size and time on hover."""
    live = [c for c in calls if float(c.per_step) > 0]
    gb = [float(c.per_step * c.message_bytes) / 1e9 for c in live]
    data = [{"type": "bar", "x": [f"{c.dimension.value} {c.operation.value}" for c in live], "y": gb,
             "marker": {"color": [COLOURS.get(c.dimension.value.lower(), "#4c78a8") for c in live]},
             "customdata": [[fixed(float(c.per_step)), fixed(float(c.message_bytes) / 1e6), fixed(float(c.time_s))]
                            for c in live],
             "hovertemplate": "%{x}<br>%{customdata[0]} calls of %{customdata[1]} MB<br>%{customdata[2]} s before "
                              "overlap<extra></extra>"}]
    return figure("Communication per step (busiest stage)", data, yaxis=log_axis("GB per step (calls x message)", gb),
                  showlegend=False)


def timeline_figure(sim: SimulationResult) -> tuple[Figure, str]:
    """The whole simulated step, a row per rank (compute above, communication in a thin band below it), a
    colour per kind of work, pale where the lane was busy half of the time or less; with the note that says
    how the step was sliced."""
    tb = timeline_bars(sim.graph, sim.timeline)
    unit, scale = ("s", 1.0) if tb.makespan_s >= 10 else ("ms", 1e3)
    digits = max(0, 5 - math.ceil(math.log10(max(tb.makespan_s * scale, 1e-9))))  # 1e-5 of the step: sub-pixel
    rows = list(dict.fromkeys(sim.graph.rank_labels))
    data = []
    for b in tb.bars:
        data.append({"type": "bar", "orientation": "h", "name": b.category.value,
                     "y": [rows.index(r) + (0.33 if lane else -0.12) for r, lane in zip(b.rows, b.lanes, strict=True)],
                     "width": [0.26 if lane else 0.62 for lane in b.lanes],
                     "base": [round(s * scale, digits) for s in b.start_s],
                     "x": [round((e - s) * scale, digits) for s, e in zip(b.start_s, b.end_s, strict=True)],
                     "marker": {"color": COLOURS.get(b.category.value, "#888"), "line": {"width": 0},
                                "opacity": [shade(x) for x in b.busy]},
                     "customdata": [[r, percent(x, 0)] for r, x in zip(b.rows, b.busy, strict=True)],
                     "hovertemplate": f"%{{customdata[0]}}: {b.category.value} from %{{base:.4g}} {unit} for "
                                      f"%{{x:.4g}} {unit}, lane busy up to %{{customdata[1]}}<extra></extra>"})
    g = sim.graph
    title = f"Simulated step: {fixed(sim.step_time_s)} s ({sim.schedule.value}, {g.ranks} simulated ranks)"
    note = (f"The whole step is drawn: {tb.tasks:,} tasks (a collective once per rank it occupies) in "
            f"{round(tb.makespan_s / tb.slice_s):,} slices of {fixed(tb.slice_s * scale)} {unit}. Per rank, compute "
            "above and communication in the thin band below; a slice takes the colour of the work that fills most "
            "of it, pale where the lane was busy half of the slice or less.")
    fig = figure(title, data, height=max(260, 110 + 30 * g.ranks), barmode="overlay",
                 xaxis={"title": {"text": unit}, "range": [0, tb.makespan_s * scale * 1.01]},
                 yaxis={"tickvals": list(range(len(rows))), "ticktext": rows, "autorange": "reversed",
                        "showgrid": False, "zeroline": False})
    return fig, note


def search_figure(result: SearchResult) -> Figure:
    """Step time against memory of the top strategies (numbered by rank as in the table; hover: the whole
    layout), the Pareto front (fastest at each memory) joined."""
    rows = search_rows(result)
    front = [r for r in sorted(rows, key=lambda r: (r["memory_gib"], r["step_time_s"]))
             if not any(o["memory_gib"] <= r["memory_gib"] and o["step_time_s"] < r["step_time_s"] for o in rows)]
    points = {"type": "scatter", "mode": "markers+text", "name": "strategy (its rank)",
              "x": [r["memory_gib"] for r in rows], "y": [r["step_time_s"] for r in rows],
              "text": [str(r["rank"]) for r in rows], "textposition": "top right", "marker": {"size": 9},
              "customdata": [layout_label(r) for r in rows],
              "hovertemplate": "rank %{text}: %{customdata}<br>%{x:.1f} GiB, %{y:.4g} s<extra></extra>"}
    line = {"type": "scatter", "mode": "lines", "name": "Pareto front", "x": [r["memory_gib"] for r in front],
            "y": [r["step_time_s"] for r in front], "line": {"color": "#d62728"}, "hoverinfo": "skip"}
    return figure(f"Top {len(rows)} strategies: step time against memory", [line, points],
                  xaxis={"title": {"text": "GiB per device"}}, yaxis={"title": {"text": "step time (s)"}})


def serving_figure(result: ServingResult) -> tuple[Figure, str]:
    """CDFs of TTFT, TPOT and end-to-end latency of the served requests (log x), each SLO dashed in the
    colour of its metric; with the note that says when a curve is drawn at quantiles."""
    from armillary.report.serving_plots import latency_cdfs

    data: list[dict[str, Any]] = []
    values: list[float] = []
    capped = False
    for cdf in latency_cdfs(result):
        n = len(cdf.values_s)
        keep = range(n) if n <= CDF_POINTS else sorted({round(i * (n - 1) / (CDF_POINTS - 1)) for i in
                                                        range(CDF_POINTS)})
        capped |= n > CDF_POINTS
        colour = COLOURS[cdf.name]
        data.append({"type": "scatter", "mode": "lines", "name": cdf.name, "x": [cdf.values_s[i] for i in keep],
                     "y": [(i + 1) / n for i in keep], "line": {"shape": "hv", "color": colour},
                     "hovertemplate": f"{cdf.name} %{{x:.4g}} s: %{{y:.1%}} of requests<extra></extra>"})
        values += [cdf.values_s[0], cdf.values_s[-1]] if n else []
        if cdf.slo_s is not None and math.isfinite(cdf.slo_s):  # a trace: a shape's label lands wrong on a log axis
            data.append({"type": "scatter", "mode": "lines", "name": f"{cdf.name} SLO {fixed(cdf.slo_s)} s",
                         "x": [cdf.slo_s, cdf.slo_s], "y": [0, 1.02], "line": {"dash": "dash", "color": colour},
                         "hoverinfo": "name"})
            values.append(cdf.slo_s)
    note = (f"Each curve drawn at {CDF_POINTS:,} evenly spaced quantiles of its requests." if capped else
            "Every completed request is a step of its curve.")
    return figure(f"Latency of the {result.completed:,} served requests", data, xaxis=log_axis("seconds", values),
                  yaxis={"title": {"text": "share of requests"}, "range": [0, 1.02], "tickformat": ".0%"}), note
