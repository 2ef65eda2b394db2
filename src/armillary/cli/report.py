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
from armillary.estimate.economics import economics_of, serving_economics
from armillary.estimate.inference_result import InferenceEstimate
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
    costs = load_costs_file(run_file, set_, pue, usd_per_gpu_hour)
    est = api.estimate(model, system, strategy, workload)
    training = not isinstance(est, InferenceEstimate)
    econ = economics_of(est, system, costs)
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
    asked = served is not None and isinstance(workload, Inference) and workload.serving.trace is None
    if served is not None:  # energy and cost of the stream served, not of the static batch
        econ = serving_economics(served.output_tokens_per_s, served.devices, system, costs)
    page = Page(f"{run_file.stem}: {model.name} on {system.devices:,} x {system.device.name}", model, system,
                strategy, workload, est, econ, sim, found, served, rate if asked else None, duration if asked else None)
    with replaced(output) as temporary:
        temporary.write_text(render(page), encoding="utf-8")
    typer.echo(f"wrote {output}", err=True)

