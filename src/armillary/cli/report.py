"""`armillary report`: a run as one self-contained HTML page (charts of plotly, inlined)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from armillary import api, defaults
from armillary.cli.common import (
    PriceOption,
    PueOption,
    RunFileArg,
    SetOption,
    load_costs_file,
    load_run_file,
    working,
    writable,
)
from armillary.estimate.economics import inference_economics, training_economics
from armillary.estimate.inference_result import InferenceEstimate
from armillary.report import records, tables
from armillary.specs.workload import Inference
from armillary.writing import replaced


def report_cmd(
    run_file: RunFileArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="the HTML file to write")] = Path("report.html"),
    simulate: Annotated[bool, typer.Option(help="simulate the training step for the timeline (one rank per "
                                                "stage)")] = True,
    search: Annotated[bool, typer.Option(help="also search the strategies of the run's model, system and "
                                              "workload: top table and time / memory Pareto front")] = False,
    rate: Annotated[float | None, typer.Option(help="inference: also serve this many requests/s (a trace in "
                                                "workload.serving.trace is served without it) and draw the "
                                                "latency CDFs")] = None,
    duration: Annotated[float, typer.Option(help="with --rate: seconds of arrivals")] = defaults.SERVE_DURATION_S,
    set_: SetOption = None,
    pue: PueOption = None,
    usd_per_gpu_hour: PriceOption = None,
) -> None:
    """Write RUN_FILE's estimate (breakdown, memory, communication), its simulated timeline and, with
    --search, the best strategies, as one HTML page that opens offline."""
    writable(output)
    from armillary.report.html import Page, render

    model, system, strategy, workload = load_run_file(run_file, set_)
    costs = load_costs_file(run_file, set_, {"costs.pue": pue, "costs.usd_per_gpu_hour": usd_per_gpu_hour})
    est = api.estimate(model, system, strategy, workload)
    training = not isinstance(est, InferenceEstimate)
    econ = training_economics(est, system, costs) if not isinstance(est, InferenceEstimate) else (
        inference_economics(est, system, costs))
    sim = None
    if simulate and training and est.feasible:
        from armillary.simulate.run import SimulationResult

        result = api.simulate(model, system, strategy, workload)
        sim = result if isinstance(result, SimulationResult) else None
    found = None
    if search and training:
        from armillary.search.run import SearchResult

        result_s = api.search(model, system, workload)
        found = result_s if isinstance(result_s, SearchResult) else None
    served = None
    if not training and isinstance(workload, Inference) and (rate is not None or workload.serving.trace is not None):
        with working("serving the request stream"):
            served = api.simulate_serving(model, system, strategy, workload, rate, duration)
    verdict = "feasible" if est.feasible else "INFEASIBLE: " + "; ".join(est.infeasible_reasons)
    lines = (records.strategy_line(strategy, system), verdict, tables.economics_line(econ),
             *([f"simulated step {sim.step_time_s:.4g} s against the estimate's "
                f"{float(sim.estimate.step_time_s):.4g} s"] if sim is not None else []),
             *([_served_line(served)] if served is not None else []))
    page = Page(f"{run_file.stem}: {model.name} on {system.devices} x {system.device.name}", lines, est, econ,
                sim, found, served)
    with replaced(output) as temporary:
        temporary.write_text(render(page), encoding="utf-8")
    typer.echo(f"wrote {output}", err=True)


def _served_line(r: api.ServingResult) -> str:
    return (f"served {r.offered_rate:.3g} requests/s: P90 TTFT {r.ttft_s.p90 * 1e3:.4g} ms (SLO "
            f"{r.ttft_slo_s * 1e3:.4g} ms), P99 TPOT {r.tpot_s.p99 * 1e3:.4g} ms (SLO {r.tpot_slo_s * 1e3:.4g} ms), "
            f"{r.output_tokens_per_s:,.0f} output tokens/s, SLO attainment {r.slo_attainment:.0%}")
