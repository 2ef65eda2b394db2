"""`armillary serve`: a request stream on the run's replicas (engine profile, capacity policy, chunked
prefill, open- or closed-loop arrivals)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
    from armillary.estimate.economics import Economics
    from armillary.serving.benchmark import BenchmarkResult
    from armillary.serving.rate import MaxRate
    from armillary.serving.run import ServingResult
    from armillary.specs.model import Model
    from armillary.specs.run import BenchmarkSection
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
        "reaches its steady state and rates are read over the steady window. Replaces the run file's "
        "benchmark section, which runs without --mode")] = None,
    requests: Annotated[int | None, typer.Option(min=1, help="a benchmark's requests the client sends (default: "
                                                 "not stated, measured over the steady window)")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="--mode concurrency: outstanding requests")] = None,
    client: Annotated[str | None, typer.Option(
        help="a benchmark's tool, where it launches the engine itself: trtllm-bench (mode offline, "
        "workload.serving.engine tensorrt-llm-1.x: its CUDA graphs and, unless workload.serving sets max_batch "
        "or max_batched_tokens, its heuristic's limits); default: a client of the engine's server")] = None,
) -> None:
    """Simulate serving a request stream (engine profile, capacity policy, chunked prefill, KV capacity), or a
    benchmark run (--mode, or the run file's benchmark section)."""
    writable(csv_out, table=True)
    writable(plot)
    model, system, strategy, workload = load_run_file(run_file, set_)
    costs = load_costs_file(run_file, set_, pue, usd_per_gpu_hour)
    if not isinstance(workload, Inference):
        raise SpecError("serve needs an inference workload (workload.kind: inference)")
    run = (model, system, strategy, workload)
    section = _benchmark_section(run_file, set_, mode, requests, rate, concurrency, client)
    if section is not None:
        bench = _benchmark(run, section, find_max_rate)
        served = _Served(bench.served, bench=bench)
    elif find_max_rate:
        found, result = _max_rate(*run, duration, seeds)
        served = _Served(result, found=found)
    else:
        served = _Served(_stream(run, rate, duration))
    money = serving_economics(served.result.output_tokens_per_s, served.result.devices, system, costs)
    _print(served, money, model, system, workload.serving.trace, json_out)  # first: a failed save loses nothing
    if csv_out is not None:
        from armillary.report.files import save_rows

        save_rows(records.request_rows(served.result), csv_out)
    if plot is not None:
        _plot(served.result, served.found, plot, run_file.stem)


@dataclass(frozen=True)
class _Served:
    """The run printed: a stream or trace, the run at the largest rate found (`found`), or a benchmark's run."""

    result: ServingResult
    found: MaxRate | None = None
    bench: BenchmarkResult | None = None


def _benchmark_section(run_file: Path, sets: list[str] | None, mode: str | None, requests: int | None,
                       rate: float | None, concurrency: int | None,
                       client: str | None) -> BenchmarkSection | dict[str, Any] | None:
    """The benchmark to run, for `api.serve_benchmark` to read: with --mode the options' alone; else the run
    file's `benchmark:` section (after `--set benchmark.*`), the options given overriding its fields; None
    where neither gives one (a stream, a trace or --max-rate)."""
    from armillary.specs.run import load_benchmark, parse_override

    given = {k: v for k, v in {"requests": requests, "rate": rate, "concurrency": concurrency,
                               "client": client}.items() if v is not None}
    if mode is not None:
        return {"mode": mode, **given}
    overrides = [parse_override(s) for s in sets or []]
    if load_benchmark(run_file, overrides) is None:
        if client is not None:
            raise SpecError(f"--client {client} names the tool of a benchmark run: give --mode (trtllm-bench: "
                            "--mode offline), or a benchmark section in the run file")
        return None
    return load_benchmark(run_file, [*overrides, *((f"benchmark.{k}", v) for k, v in given.items())])


def _benchmark(run: tuple[Model, System, Strategy, Inference], benchmark: BenchmarkSection | dict[str, Any],
               find_max_rate: bool) -> BenchmarkResult:
    """`api.serve_benchmark` under a spinner (a benchmark is one run: not with --max-rate)."""
    if find_max_rate:
        raise SpecError("--mode runs one benchmark; --max-rate searches rates: give one of them (a run file's "
                        "benchmark section runs as --mode does; --set benchmark=null drops it)")
    mode = benchmark["mode"] if isinstance(benchmark, dict) else benchmark.mode
    with working(f"serving the {mode} benchmark"):
        return api.serve_benchmark(*run, benchmark)


def _client_lines(bench: BenchmarkResult) -> list[str]:
    """What the benchmark's client changed in the engine it launched (none without a client)."""
    if bench.benchmark.client is None:
        return []
    return [f"client {bench.benchmark.client.value}: " + ("; ".join(bench.assumed) or "the engine as its profile says")]


def _stream(run: tuple[Model, System, Strategy, Inference], rate: float | None, duration: float) -> ServingResult:
    """`api.simulate_serving` of the workload's trace, else of `rate` requests/s for `duration` s."""
    trace = run[3].serving.trace
    if trace is None and rate is None:
        raise SpecError("give --rate (requests/s), --max-rate, --mode, or a trace file in workload.serving.trace "
                        "(or a benchmark section in the run file)")
    what = f"the trace {trace}" if trace is not None else f"{rate:g} requests/s for {duration:g} s"
    with working(f"serving {what}"):
        return api.simulate_serving(*run, rate, duration)


def _print(served: _Served, money: Economics, model: Model, system: System, trace: str | None,
           json_out: bool) -> None:
    """The run as JSON (with the rates tried, the benchmark and the economics) or as tables."""
    from armillary.serving.rate import JUDGED  # the serving kernels load on first use

    found, bench = served.found, served.bench
    best = None if found is None else found.rate
    if json_out:
        from armillary.report.serving_plots import rate_points

        tried = {} if found is None else {"rates_tried": rate_points(found), "judged": JUDGED}
        benchmark = {} if bench is None else {"benchmark": {
            **records.benchmark_record(bench), "client": bench.benchmark.client, "client_launch": list(bench.assumed)}}
        print_json({**records.rate_record(served.result, best), **tried, **benchmark, "economics": money.to_dict()})
    else:
        show([*tables.serving_report(served.result, model, system, best, trace),
              *([] if bench is None else [*tables.benchmark_lines(bench), *_client_lines(bench)]),
              tables.economics_line(money),
              *([] if found is None else [JUDGED])])


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

