"""A run as one self-contained HTML page (plotly, its JavaScript inlined once): the headline numbers and
assumptions, where the time goes, the memory stack, the communication by call, the simulated timeline,
for a search the top strategies with their time / memory Pareto front, for a served stream the latency
CDFs. Rendering only: the figures come from the result objects."""

from __future__ import annotations

import html
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from armillary.units import GIB

if TYPE_CHECKING:
    from armillary.estimate.economics import Economics
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import CommCall, StepEstimate
    from armillary.search.run import SearchResult
    from armillary.serving.run import ServingResult
    from armillary.simulate.run import SimulationResult

TIMELINE_TASKS = 20000  # tasks drawn at most (the earliest), so the page stays light


@dataclass(frozen=True)
class Page:
    """What the report shows: a title, lines of text (strategy, assumptions, costs) and the results."""

    title: str
    lines: tuple[str, ...]
    estimate: StepEstimate | InferenceEstimate
    economics: Economics | None = None
    simulation: SimulationResult | None = None
    search: SearchResult | None = None
    serving: ServingResult | None = None


def _figure(**layout: Any) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.update_layout(**{"template": "plotly_white", "height": 420, "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
                         **layout})
    return fig


def breakdown_figure(r: StepEstimate | InferenceEstimate) -> Any:
    """Seconds per component (training), or prefill and decode per component (inference)."""
    import plotly.graph_objects as go

    from armillary.estimate.inference_result import InferenceEstimate

    fig = _figure(title="Where the time goes", yaxis_title="seconds")
    if isinstance(r, InferenceEstimate):
        names = [f.name for f in fields(r.prefill)]
        for phase, part in (("prefill", r.prefill), ("decode (all steps)", r.decode)):
            fig.add_trace(go.Bar(name=phase, x=names, y=[float(getattr(part, n)) for n in names]))
        return fig
    names = [f.name for f in fields(r.breakdown)]
    fig.add_trace(go.Bar(name="step", x=[n.replace("_", " ") for n in names],
                         y=[float(getattr(r.breakdown, n)) for n in names]))
    return fig


def memory_figure(r: StepEstimate | InferenceEstimate) -> Any:
    """HBM per device, one stacked bar per memory category, against the capacity."""
    import plotly.graph_objects as go

    from armillary.estimate.inference_result import InferenceEstimate

    fig = _figure(title="Memory per device", yaxis_title="GiB", barmode="stack")
    if isinstance(r, InferenceEstimate):
        parts = {n: float(getattr(r.memory, n)) for n in ("weights", "kv_cache", "activations")}
    else:
        parts = {f.name: float(getattr(r.memory_hbm, f.name)) for f in fields(r.memory_hbm)}
    for name, value in parts.items():
        fig.add_trace(go.Bar(name=name.replace("_", " "), x=["HBM"], y=[value / GIB]))
    fig.add_hline(y=float(r.hbm_capacity_bytes) / GIB, line_dash="dash", annotation_text="capacity")
    return fig


def communication_figure(calls: tuple[CommCall, ...]) -> Any:
    """Bytes sent per step by each kind of call (parallel dimension and operation), with its calls per step
    and message size on hover."""
    import plotly.graph_objects as go

    fig = _figure(title="Communication per step (busiest stage)", yaxis_title="GB per step (calls x message)",
                  yaxis_type="log")
    live = [c for c in calls if float(c.per_step) > 0]
    fig.add_trace(go.Bar(
        x=[f"{c.dimension.value} {c.operation.value}" for c in live],
        y=[float(c.per_step * c.message_bytes) / 1e9 for c in live],
        customdata=[[float(c.per_step), float(c.message_bytes) / 1e6, float(c.time_s)] for c in live],
        hovertemplate="%{x}<br>%{customdata[0]:.4g} calls of %{customdata[1]:.4g} MB<br>"
                      "%{customdata[2]:.4g} s before overlap<extra></extra>"))
    return fig


def timeline_figure(sim: SimulationResult) -> Any:
    """The simulated step: a bar per task, a row per rank and stream, a colour per kind of work."""
    import plotly.graph_objects as go

    g, t = sim.graph, sim.timeline
    fig = _figure(title=f"Simulated timeline ({sim.schedule.value}, {g.ranks} ranks, {len(g.tasks):,} tasks)",
                  xaxis_title="ms", barmode="overlay", height=max(300, 60 + 28 * g.ranks))
    shown = sorted(range(len(g.tasks)), key=lambda i: int(t.start_ns[i]))[:TIMELINE_TASKS]
    by_category: dict[str, list[int]] = {}
    for i in shown:
        by_category.setdefault(g.tasks[i].category.value, []).append(i)
    for category, tasks in by_category.items():
        rows = [f"{g.rank_labels[r]}" for i in tasks for r in g.tasks[i].ranks[:1]]
        fig.add_trace(go.Bar(name=category, orientation="h", y=rows,
                             x=[(int(t.end_ns[i]) - int(t.start_ns[i])) / 1e6 for i in tasks],
                             base=[int(t.start_ns[i]) / 1e6 for i in tasks],
                             text=[g.tasks[i].name for i in tasks], hovertemplate="%{text}<br>%{base:.4g} ms "
                             "+ %{x:.4g} ms<extra></extra>", textposition="none"))
    return fig


def serving_figure(result: ServingResult) -> Any:
    """CDFs of TTFT, TPOT and end-to-end latency of the served requests (log x), the SLOs dashed in the
    colour of their metric."""
    import plotly.graph_objects as go

    from armillary.report.serving_plots import latency_cdfs

    fig = _figure(title=f"Served requests: {result.offered_rate:.3g} requests/s offered, {result.completed} of "
                  f"{result.requests} served, SLO attainment {result.slo_attainment:.0%}", xaxis_title="seconds",
                  xaxis_type="log", yaxis_title="share of requests", yaxis_range=[0, 1.02])
    for i, cdf in enumerate(latency_cdfs(result)):
        n = len(cdf.values_s)
        colour = f"#{('1f77b4', 'ff7f0e', '2ca02c')[i]}"
        fig.add_trace(go.Scatter(name=cdf.name, x=list(cdf.values_s), y=[(k + 1) / n for k in range(n)],
                                 mode="lines", line={"shape": "hv", "color": colour}))
        if cdf.slo_s is not None:  # a trace, not add_vline: its annotation lands wrong on a log axis
            fig.add_trace(go.Scatter(name=f"{cdf.name} SLO {cdf.slo_s:g} s", x=[cdf.slo_s, cdf.slo_s], y=[0, 1.02],
                                     mode="lines", line={"dash": "dash", "color": colour}))
    return fig


def search_figure(result: SearchResult) -> Any:
    """Step time against memory of the top strategies, the Pareto front (fastest at each memory) joined."""
    import plotly.graph_objects as go

    from armillary.report.records import search_rows

    rows = search_rows(result)
    fig = _figure(title=f"Top {len(rows)} strategies: time against memory", xaxis_title="GiB per device",
                  yaxis_title="step time (s)")
    fig.add_trace(go.Scatter(mode="markers", name="strategies", x=[r["memory_gib"] for r in rows],
                             y=[r["step_time_s"] for r in rows], text=[_label(r) for r in rows],
                             hovertemplate="%{text}<br>%{x:.3g} GiB, %{y:.4g} s<extra></extra>"))
    front = [r for r in sorted(rows, key=lambda r: (r["memory_gib"], r["step_time_s"]))
             if not any(o["memory_gib"] <= r["memory_gib"] and o["step_time_s"] < r["step_time_s"] for o in rows)]
    fig.add_trace(go.Scatter(mode="lines+markers", name="Pareto front", x=[r["memory_gib"] for r in front],
                             y=[r["step_time_s"] for r in front]))
    return fig


def _label(row: dict[str, Any]) -> str:
    return " ".join(f"{k} {row[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "mb", "zero") if k in row)


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>no feasible strategy</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in r.values()) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def render(page: Page) -> str:
    """The page: plotly's JavaScript inlined with the first chart, no file or network fetched to view it."""
    import plotly.io as pio

    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.report.records import search_rows

    figures = [breakdown_figure(page.estimate), memory_figure(page.estimate)]
    if not isinstance(page.estimate, InferenceEstimate):
        figures.append(communication_figure(page.estimate.communication))
    if page.simulation is not None:
        figures.append(timeline_figure(page.simulation))
    if page.search is not None:
        figures.append(search_figure(page.search))
    if page.serving is not None:
        figures.append(serving_figure(page.serving))
    charts = [pio.to_html(f, full_html=False, include_plotlyjs=i == 0, div_id=f"chart{i}",
                          config={"displaylogo": False}) for i, f in enumerate(figures)]
    lines = "".join(f"<p>{html.escape(line)}</p>" for line in page.lines)
    top = f"<h2>Top strategies</h2>{_table(search_rows(page.search))}" if page.search is not None else ""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(page.title)}"
            f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(page.title)}</h1>{lines}"
            + "".join(f"<section>{c}</section>" for c in charts) + f"{top}</body></html>\n")


_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222}"
          "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;"
          "text-align:right}p{margin:.2em 0}")
