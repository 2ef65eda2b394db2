"""`armillary serve`: a request stream on the run's replicas (engine profile, capacity policy, chunked
prefill, open- or closed-loop arrivals)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from armillary import api, defaults
from armillary.cli.common import (
    JsonFlag,
    PriceOption,
    PueOption,
    load_costs_file,
    load_run_file,
    print_json,
    show,
    working,
    writable,
)
from armillary.errors import SpecError
from armillary.estimate.economics import serving_economics
from armillary.report import records, tables
from armillary.specs.workload import Inference

if TYPE_CHECKING:
    from armillary.serving.rate import MaxRate
    from armillary.serving.run import ServingResult
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System


def serve_cmd(
    run_file: Annotated[Path, typer.Argument(help="RUN.yaml with an inference workload")],
    rate: Annotated[float | None, typer.Option(help="arrivals, requests/s (without a trace)")] = None,
    duration: Annotated[float, typer.Option(help="seconds of arrivals (without a trace)")] = (
        defaults.SERVE_DURATION_S),
    find_max_rate: Annotated[bool, typer.Option(
        "--max-rate", help="search the largest rate meeting P90 TTFT and P99 TPOT (workload.serving SLOs) on the "
        "steady part of the run (warm-up trimmed); a trace is stretched to each rate")] = False,
    seeds: Annotated[int, typer.Option(
        min=1, help="--max-rate: seeds of the generated arrivals (mean and range)")] = defaults.MAX_RATE_SEEDS,
    json_out: JsonFlag = False,
    csv_out: Annotated[Path | None, typer.Option("--save", "--csv", help="also save per-request times: .csv, "
                                                 ".json or .parquet")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override any field, e.g. --set workload.serving.engine=vllm-0.8 (repeatable)")] = None,
    pue: PueOption = None,
    usd_per_gpu_hour: PriceOption = None,
    plot: Annotated[Path | None, typer.Option(help="also save a picture (PNG, SVG): CDFs of TTFT, TPOT and latency "
                                              "with the SLOs; with --max-rate, the judged percentiles against "
                                              "every rate tried")] = None,
    mode: Annotated[str | None, typer.Option(
        help="run as a published benchmark does: rate (--rate), offline, concurrency (--concurrency), "
        "mlperf-offline, mlperf-server or mlperf-interactive (--rate: target QPS); without --requests the run "
        "reaches its steady state and rates are read over the steady window")] = None,
    requests: Annotated[int | None, typer.Option(min=1, help="--mode: requests the client sends (default: not "
                                                 "stated, measured over the steady window)")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="--mode concurrency: outstanding requests")] = None,
) -> None:
    """Simulate serving a request stream (engine profile, capacity policy, chunked prefill, KV capacity)."""
    writable(csv_out, table=True)
    writable(plot)
    model, system, strategy, workload = load_run_file(run_file, set_)
    costs = load_costs_file(run_file, set_, pue, usd_per_gpu_hour)
    if not isinstance(workload, Inference):
        raise SpecError("serve needs an inference workload (workload.kind: inference)")
    if mode is not None and find_max_rate:
        raise SpecError("--mode runs one benchmark; --max-rate searches rates: give one of them")
    if mode is None and workload.serving.trace is None and rate is None and not find_max_rate:
        raise SpecError("give --rate (requests/s), --max-rate, --mode, or a trace file in workload.serving.trace")
    best, found, bench = None, None, None
    if mode is not None:
        with working(f"serving the {mode} benchmark"):
            bench = api.serve_benchmark(model, system, strategy, workload, {
                "mode": mode, "requests": requests, "rate": rate, "concurrency": concurrency})
        result = bench.served
    elif find_max_rate:
        found, result = _max_rate(model, system, strategy, workload, duration, seeds)
        best = found.rate
    else:
        what = f"the trace {workload.serving.trace}" if workload.serving.trace is not None else (
            f"{rate:g} requests/s for {duration:g} s")
        with working(f"serving {what}"):
            result = api.simulate_serving(model, system, strategy, workload, rate, duration)
    from armillary.serving.rate import JUDGED  # the serving kernels load on first use

    money = serving_economics(result.output_tokens_per_s, result.devices, system, costs)
    if json_out:  # printed first: a failed save does not lose the run
        from armillary.report.serving_plots import rate_points

        tried = {} if found is None else {"rates_tried": rate_points(found), "judged": JUDGED}
        benchmark = {} if bench is None else {"benchmark": records.benchmark_record(bench)}
        print_json({**records.rate_record(result, best), **tried, **benchmark, "economics": money.to_dict()})
    else:
        show([*tables.serving_report(result, model, system, best, workload.serving.trace),
              *([] if bench is None else tables.benchmark_lines(bench)), tables.economics_line(money),
              *([] if found is None else [JUDGED])])
    if csv_out is not None:
        from armillary.report.files import save_rows

        save_rows(records.request_rows(result), csv_out)
    if plot is not None:
        _plot(result, found, plot, run_file.stem)


def _max_rate(model: Model, system: System, strategy: Strategy, workload: Inference, duration: float,
              seeds: int) -> tuple[MaxRate, ServingResult]:
    """`api.max_rate` under a spinner, the seeds' range on stderr; with its run."""
    with working(f"searching the largest rate meeting the SLOs ({seeds} seeds)"):
        found = api.max_rate(model, system, strategy, workload, duration, seeds)
    assert found.result is not None  # api.max_rate refuses a search where no rate meets
    if found.high > found.low:
        typer.echo(f"max rate over {seeds} seeds: {found.rate:.3g} requests/s "
                   f"(range {found.low:.3g} - {found.high:.3g})", err=True)
    return found, found.result


def _plot(result: ServingResult, found: MaxRate | None, path: Path, title: str) -> None:
    from armillary.report.serving_plots import rate_plot, serving_plot

    if found is None:
        serving_plot(result, path, title)
    else:
        rate_plot(found, result.ttft_slo_s, result.tpot_slo_s, path, title)

