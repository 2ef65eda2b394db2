"""A run as one self-contained HTML page: a headline box (throughput, step time or latency, MFU, memory per
GPU, the error band), what the run assumed, then the charts (where the time goes, the memory stack, the
communication by call, the whole simulated timeline, for a search the top strategies and their time / memory
Pareto front, for a served stream the latency CDFs). Training and serving pages show their own fields.
Rendering only: the figures come from the result objects; tables and charts in `html_tables` and
`html_figures`, the template in `html_page`."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from armillary.report import html_figures as figs
from armillary.report.formatting import fixed, percent
from armillary.report.html_page import PAGE, SCRIPT, STYLE, chart, plotly_js
from armillary.report.html_tables import Column, pairs, table
from armillary.report.records import layout_label, overlap_label, search_rows, strategy_line
from armillary.units import GIB

if TYPE_CHECKING:
    from armillary.estimate.economics import Economics
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import ErrorBand, StepEstimate
    from armillary.search.run import SearchResult
    from armillary.serving.run import ServingResult
    from armillary.simulate.run import SimulationResult
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System
    from armillary.specs.workload import Workload


@dataclass(frozen=True)
class Page:
    """What the report shows: the run's inputs and its results; `rate` and `duration_s`: the Poisson stream
    a served page was asked for (None: the workload's trace file was served)."""

    title: str
    model: Model
    system: System
    strategy: Strategy
    workload: Workload
    estimate: StepEstimate | InferenceEstimate
    economics: Economics | None = None
    simulation: SimulationResult | None = None
    search: SearchResult | None = None
    serving: ServingResult | None = None
    rate: float | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Card:
    """One headline figure: what it is, its value, a line under it."""

    label: str
    value: str
    detail: str = ""
    alert: bool = False  # drawn in red: e.g. memory beyond the HBM


def headline(page: Page) -> tuple[Card, ...]:
    """The figures a reader looks for first: throughput, time, utilization, memory per GPU (training);
    requested and realised rate, latency percentiles against the SLOs, throughput, attainment (serving);
    TTFT, TPOT, throughput, memory (a static inference batch)."""
    from armillary.estimate.inference_result import InferenceEstimate

    r = page.estimate
    if page.serving is not None:
        return serving_cards(page.serving, page.rate, page.duration_s, page.workload)
    memory = Card("memory per GPU", f"{_total(r) / GIB:.1f} GiB", f"of {float(r.hbm_capacity_bytes) / GIB:.0f} GiB HBM",
                  _total(r) > float(r.hbm_capacity_bytes))
    if isinstance(r, InferenceEstimate):
        return (Card("output tokens/s", f"{float(r.output_tokens_per_s):,.0f}",
                     f"{float(r.output_tokens_per_s_per_device):,.0f} per GPU"),
                Card("time to first token", f"{fixed(float(r.ttft_s) * 1e3)} ms", f"batch of {r.batch}"),
                Card("time per output token", f"{fixed(float(r.tpot_s) * 1e3)} ms", "mean after the first"),
                Card("end to end", f"{fixed(float(r.e2e_s))} s", _band_short(r.error_band)), memory)
    cards = [Card("tokens/s", f"{float(r.tokens_per_s):,.0f}",
                  f"{float(r.tokens_per_s) / page.system.devices:,.0f} per GPU"),
             Card("step time", f"{fixed(float(r.step_time_s))} s", _band_short(r.error_band)),
             Card("MFU", percent(float(r.mfu)), f"HFU {percent(float(r.hfu))}"), memory]
    if page.simulation is not None:
        cards.append(Card("simulated step", f"{fixed(page.simulation.step_time_s)} s",
                          f"{page.simulation.difference:+.1%} against the estimate"))
    return tuple(cards)


def serving_cards(s: ServingResult, rate: float | None, duration_s: float | None, workload: Workload) -> tuple[
        Card, ...]:
    """A served stream's headline. The offered rate is measured on the arrivals drawn: (requests - 1) over
    the time from the first arrival to the last, so a Poisson stream asked for 4 requests/s may offer 3.6."""
    arrivals = s.times.arrival_s
    span = float(arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    drawn = f"{s.requests:,} arrivals in {fixed(span)} s = {fixed(s.offered_rate, 3)} req/s offered"
    asked = (Card("requested rate", f"{rate:g} req/s", f"{_arrivals(workload)} drawn for {duration_s:g} s: {drawn}")
             if rate is not None else Card("offered rate", f"{fixed(s.offered_rate, 3)} req/s",
                                           f"trace file: {drawn}"))
    return (asked,
            Card("served", f"{s.completed:,} of {s.requests:,}", f"{s.rejected:,} rejected (cache too large)"),
            Card("P90 TTFT", f"{fixed(s.ttft_s.p90 * 1e3)} ms", f"SLO {fixed(s.ttft_slo_s * 1e3)} ms"),
            Card("P99 TPOT", f"{fixed(s.tpot_s.p99 * 1e3)} ms", f"SLO {fixed(s.tpot_slo_s * 1e3)} ms"),
            Card("output tokens/s", f"{s.output_tokens_per_s:,.0f}",
                 f"{s.output_tokens_per_s_per_device:,.0f} per GPU"),
            Card("SLO attainment", percent(s.slo_attainment, 0),
                 f"goodput {fixed(s.goodput_requests_per_s, 3)} req/s"))


def assumptions(page: Page) -> tuple[tuple[str, str], ...]:
    """What the run assumed, in the words of its kind: training fields for a training step, serving fields
    (replicas, precisions, KV cache, scheduler, SLOs) for inference."""
    from armillary.plan.layout import data_parallel
    from armillary.specs.workload import Inference

    m, sy, st, w = page.model, page.system, page.strategy, page.workload
    on = (("model", m.name), ("system", f"{sy.name}: {sy.devices:,} x {sy.device.name}"))
    if not isinstance(w, Inference):
        return (*on, ("strategy", strategy_line(st, sy, on=False)), ("overlap", overlap_label(st.overlap.model_dump())),
                ("workload", f"global batch {w.global_batch:,} sequences of {w.seq_len:,} tokens"),
                *_costs(page.economics))
    sv = w.serving
    replica = " · ".join(f"{k} {v}" for k, v in (("tp", st.tp), ("pp", st.pp), ("ep", st.ep)) if v > 1 or k == "tp")
    replicas = data_parallel(st, sy)
    rows = [*on, ("replicas", f"{replicas} replica{'s' if replicas > 1 else ''} of {replica} ({st.attention.value} "
                              f"attention, {st.precision.value} compute)"),
            ("precisions", f"weights {w.weights.value if w.weights else f'of the {st.precision.value} recipe'}, KV "
                           f"cache {w.kv_cache.precision.value if w.kv_cache.precision else '16-bit'} in pages of "
                           f"{w.kv_cache.block_tokens} tokens"),
            ("requests", f"{w.input_len:,} prompt + {w.output_len:,} output tokens"
                         + (f" ({sv.lengths.value} lengths)" if page.serving is not None else " each"))]
    if page.serving is not None:
        rows += [("request stream", f"trace file {sv.trace}" if sv.trace is not None else
                  f"{sv.arrivals.value} arrivals at {page.rate:g} requests/s for {page.duration_s:g} s (seed {sv.seed})"
                  if page.rate is not None and page.duration_s is not None else "as served"),
                 ("scheduler", f"up to {sv.max_batch} sequences and {sv.max_batched_tokens:,} new tokens per "
                               f"iteration, chunked prefill {'on' if sv.chunked_prefill else 'off'}"
                               + (f", engine {sv.engine}" if sv.engine else "")),
                 ("SLOs", f"P90 TTFT <= {fixed(sv.ttft_slo_s * 1e3)} ms, P99 TPOT <= {fixed(sv.tpot_slo_s * 1e3)} ms")]
    else:
        rows.append(("static batch", f"{w.batch} sequences per replica"))
    return (*rows, *_costs(page.economics))


def render(page: Page) -> str:
    """The page: the headline, what the run assumed, the charts and tables; plotly.js inlined once, so no
    file or network is fetched to view it."""
    from armillary import __version__
    from armillary.estimate.inference_result import InferenceEstimate

    r = page.estimate
    charts: list[tuple[dict[str, Any], str]] = []
    if page.serving is not None:
        charts.append(figs.serving_figure(page.serving))
    charts += [(figs.breakdown_figure(r), ""), (figs.memory_figure(r), "")]
    if not isinstance(r, InferenceEstimate):
        charts.append((figs.communication_figure(r.communication), ""))
    if page.simulation is not None:
        charts.append(figs.timeline_figure(page.simulation))
    if page.search is not None:
        charts.append((figs.search_figure(page.search), _search_note(page.search)))
    parts = [_headline_html(page), "<h2>What the run assumed</h2>", pairs(assumptions(page)),
             *(chart(i, spec, html.escape(note)) for i, (spec, note) in enumerate(charts))]
    if page.search is not None:
        parts.append(search_table(page.search))
    js, version = plotly_js()
    kind = "serving" if page.serving is not None else "inference" if isinstance(r, InferenceEstimate) else "training"
    return PAGE.substitute(title=html.escape(page.title), version=html.escape(__version__), style=STYLE,
                           charts=len(charts), subtitle=html.escape(f"{kind} report"), body="\n".join(parts),
                           plotly=js, plotly_version=html.escape(version), script=SCRIPT)


SEARCH_COLUMNS = (
    Column("rank", lambda r: str(r["rank"])), Column("tp", lambda r: str(r["tp"])),
    Column("pp", lambda r: str(r["pp"])), Column("dp", lambda r: str(r["dp"])), Column("vpp", lambda r: str(r["vpp"])),
    Column("cp", lambda r: str(r["cp"])), Column("ep", lambda r: str(r["ep"])),
    Column("mb", lambda r: str(r["micro_batch"]), tip="micro-batch (sequences)"),
    Column("attention", lambda r: str(r["attention"]), "left"),
    Column("SP", lambda r: "yes" if r["sequence_parallel"] else "no", "left", "sequence parallelism"),
    Column("recompute", lambda r: str(r["recompute"]) + (f" ({r['recompute_layers']} layers)"
                                                         if r["recompute_layers"] is not None else ""), "left"),
    Column("ZeRO", lambda r: str(r["zero"])),
    Column("overlap", lambda r: overlap_label(r["overlap"]), "left", "communication overlapped with compute", True),
    Column("offload", lambda r: str(r.get("offload") or "-"), "left", "states offloaded to the second tier or "
           "the memory pool"),
    Column("rank order", lambda r: str(r["rank_order"]), "left", "parallel groups from closest to farthest"),
    Column("step time", lambda r: f"{fixed(r['step_time_s'])} s"),
    Column("band", lambda r: ("±" + percent(r["error_band"]["relative"], 0)
                              + (" (poorly validated)" if r["error_band"]["poorly_validated"] else ""))
           if r["error_band"] else "-", tip="error band: 80% of measured rows of its regime lie within it"),
    Column("tokens/s", lambda r: f"{r['tokens_per_s']:,.0f}"), Column("MFU", lambda r: percent(r["mfu"])),
    Column("memory", lambda r: f"{r['memory_gib']:.1f} GiB", tip="HBM per GPU"))


def search_table(result: SearchResult) -> str:
    """The top strategies: every column formatted (no field shown as a Python value)."""
    return table(SEARCH_COLUMNS, search_rows(result), f"Top {len(result.top)} strategies, fastest first",
                 "no feasible strategy in the space")


def _search_note(result: SearchResult) -> str:
    rows = search_rows(result)
    best = f" The fastest: {layout_label(rows[0])}." if rows else ""
    return (f"{result.points:,} points, {result.evaluated:,} evaluated, {result.feasible:,} feasible; each point "
            f"is numbered by its rank in the table below.{best}")


def _headline_html(page: Page) -> str:
    r = page.estimate
    cards = "".join(f'<div class="card{" alert" if c.alert else ""}"><div class="label">{html.escape(c.label)}'
                    f'</div><div class="value">{html.escape(c.value)}</div><div class="detail">'
                    f"{html.escape(c.detail)}</div></div>" for c in headline(page))
    band = page.serving.error_band if page.serving is not None else r.error_band
    verdict = ('<p class="verdict ok">fits: feasible as configured</p>' if bool(r.feasible) else
               f'<p class="verdict bad">INFEASIBLE: {html.escape("; ".join(r.infeasible_reasons))}</p>')
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in getattr(r, "notes", ()))
    return (f'<section class="headline" id="headline">{cards}</section><p class="band"><b>Error band:</b> '
            f"{html.escape(band.describe() if band is not None else 'none: no measured rows of this regime')}"
            f"</p>{verdict}{notes}")


def _band_short(band: ErrorBand | None) -> str:
    return f"±{band.relative:.0%} error band" if band is not None else "no error band"


def _total(r: StepEstimate | InferenceEstimate) -> float:
    from armillary.estimate.inference_result import InferenceEstimate

    return float(r.memory.total) if isinstance(r, InferenceEstimate) else float(r.memory_hbm.total)


def _arrivals(w: Workload) -> str:
    from armillary.specs.workload import Inference

    return f"{w.serving.arrivals.value.capitalize()} arrivals" if isinstance(w, Inference) else "arrivals"


def _costs(e: Economics | None) -> tuple[tuple[str, str], ...]:
    from armillary.report.tables import economics_line

    return () if e is None else (("energy and cost", economics_line(e)),)
