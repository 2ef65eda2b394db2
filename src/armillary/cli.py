"""Command line: each command parses its arguments, makes one library call and renders the result."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from armillary.api import estimate
from armillary.errors import SpecError
from armillary.estimate.inference_result import InferenceEstimate
from armillary.presets.registry import KINDS, preset_names
from armillary.simulate.cli import simulate_cmd
from armillary.specs.workload import Inference, Training

if TYPE_CHECKING:
    from armillary.search.systems import CoDesignResult
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Predict time, memory and traffic of LLM training and inference on large systems.")
console = Console()


def _writable(path: Path | None, table: bool = False) -> None:
    """Fail early, with a message, when an output file cannot be written (`table`: nor its format named)."""
    if path is not None and not path.parent.is_dir():
        _fail(f"cannot write {path}: the folder {path.parent} does not exist")
    from armillary.report.files import FORMATS

    if path is not None and table and path.suffix.lower() not in FORMATS:
        _fail(f"{path}: the file name must end in one of {', '.join(FORMATS)}")


def _fail(message: str) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(2)


@app.command("estimate")
def estimate_cmd(
    run_file: Annotated[Path, typer.Argument(help="RUN.yaml with model, system, strategy, workload")],
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    gpus: Annotated[int | None, typer.Option(help="size the system to this many devices")] = None,
    tp: Annotated[int | None, typer.Option(help="override strategy.tp")] = None,
    pp: Annotated[int | None, typer.Option(help="override strategy.pp")] = None,
    micro_batch: Annotated[int | None, typer.Option(help="override strategy.micro_batch")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override any field, e.g. --set strategy.recompute=full (repeatable)")] = None,
) -> None:
    """Estimate one training iteration, or a static inference batch (or, with workload.serving.trace, serve
    that trace), of the run described in RUN_FILE."""
    from armillary.report.tables import estimate_tables, inference_tables
    from armillary.specs.run import load_run, parse_override

    try:
        overrides = [parse_override(s) for s in set_ or []]
        for key, value in (("gpus", gpus), ("strategy.tp", tp), ("strategy.pp", pp),
                           ("strategy.micro_batch", micro_batch)):
            if value is not None:
                overrides.append((key, value))
        model, system, strategy, workload = load_run(run_file, overrides)
        if isinstance(workload, Inference) and workload.serving.trace is not None:  # a trace: serve it
            from armillary.api import simulate_serving
            from armillary.report.tables import serving_tables

            served = simulate_serving(model, system, strategy, workload)
            if json_out:
                sys.stdout.write(json.dumps(served.to_dict(), indent=2) + "\n")
                return
            for table in serving_tables(served, f"Serving {workload.serving.trace}: {model.name} on "
                                                f"{system.devices} x {system.device.name}"):
                console.print(table)
            return
        result = estimate(model, system, strategy, workload)
    except (SpecError, ValueError) as err:
        _fail(str(err))
        return
    if json_out:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    title = f"{model.name} on {system.devices} x {system.device.name}"
    tables = inference_tables(result, title) if isinstance(result, InferenceEstimate) else estimate_tables(
        result, title)
    for table in tables:
        console.print(table)


@app.command("serve")
def serve_cmd(
    run_file: Annotated[Path, typer.Argument(help="RUN.yaml with an inference workload")],
    rate: Annotated[float | None, typer.Option(help="Poisson arrivals, requests/s (without a trace)")] = None,
    duration: Annotated[float, typer.Option(help="seconds of arrivals (without a trace)")] = 60.0,
    find_max_rate: Annotated[bool, typer.Option(
        "--max-rate", help="search the largest rate meeting P90 TTFT and P99 TPOT (workload.serving SLOs)")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    csv_out: Annotated[Path | None, typer.Option("--save", "--csv", help="also save per-request times: .csv, "
                                                 ".json or .parquet")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override any field, e.g. --set workload.serving.max_batch=128 (repeatable)")] = None,
) -> None:
    """Simulate serving a request stream (continuous batching, chunked prefill, KV capacity)."""
    from armillary.api import simulate_serving
    from armillary.report.tables import serving_tables
    from armillary.serving.run import max_rate
    from armillary.specs.run import load_run, parse_override

    _writable(csv_out, table=True)
    try:
        model, system, strategy, workload = load_run(run_file, [parse_override(s) for s in set_ or []])
        if not isinstance(workload, Inference):
            raise SpecError("serve needs an inference workload (workload.kind: inference)")
        if workload.serving.trace is None and rate is None and not find_max_rate:
            raise SpecError("give --rate (requests/s), --max-rate, or a trace file in workload.serving.trace")
        best = None
        if find_max_rate:
            best, result = max_rate(lambda r: simulate_serving(model, system, strategy, workload, r, duration))
            if result is None:
                raise SpecError(f"no rate meets P90 TTFT <= {workload.serving.ttft_slo_s} s and P99 TPOT <= "
                                f"{workload.serving.tpot_slo_s} s")
        else:
            result = simulate_serving(model, system, strategy, workload, rate, duration)
    except (SpecError, ValueError) as err:
        _fail(str(err))
        return
    if csv_out is not None:
        from armillary.report.files import save_rows

        t = result.times
        names = ("arrival_s", "input_len", "output_len", "first_token_s", "finish_s", "preemptions")
        save_rows([dict(zip(names, values, strict=True)) for values in zip(
            t.arrival_s.tolist(), t.input_len.tolist(), t.output_len.tolist(), t.first_token_s.tolist(),
            t.finish_s.tolist(), t.preemptions.tolist(), strict=True)], csv_out)
    if json_out:
        from armillary.estimate.result import plain

        sys.stdout.write(json.dumps(plain({**result.to_dict(), "max_rate": best}), indent=2) + "\n")
        return
    title = f"Serving {model.name} on {system.devices} x {system.device.name}"
    for table in serving_tables(result, title, best):
        console.print(table)


@app.command("search")
def search_cmd(
    model: Annotated[str, typer.Option(help="model preset or file")],
    system: Annotated[str, typer.Option(help="system preset or file")],
    gpus: Annotated[int, typer.Option(help="devices to use")],
    global_batch: Annotated[int | None, typer.Option(help="samples per iteration (training)")] = None,
    seq_len: Annotated[int, typer.Option(help="tokens per sample")] = 2048,
    tpot_limit: Annotated[float | None, typer.Option(help="inference: the most output tokens/s per device with "
                                                          "time per output token at most this (s)")] = None,
    ttft_limit: Annotated[float | None, typer.Option(help="inference: time to first token at most this (s)")] = None,
    input_len: Annotated[int, typer.Option(help="inference: prompt tokens")] = 2048,
    output_len: Annotated[int, typer.Option(help="inference: generated tokens")] = 256,
    strategy: Annotated[Path | None, typer.Option(help="base strategy (YAML) for the fields not searched")] = None,
    strategies: Annotated[Path | None, typer.Option(help="strategy space (YAML): values per axis")] = None,
    space: Annotated[Path | None, typer.Option(help="system space (YAML): GPU counts, memory, bandwidths, "
                                                    "prices, power; the best strategy of each system")] = None,
    pareto: Annotated[Path | None, typer.Option(help="with --space: draw the time / cost front (PNG)")] = None,
    budget: Annotated[float | None, typer.Option(help="with --space: best systems costing at most this (USD)")] = None,
    objective: Annotated[str, typer.Option(help="time or memory")] = "time",
    top: Annotated[int, typer.Option(help="how many strategies to keep")] = 10,
    workers: Annotated[int, typer.Option(help="local processes (1 = serial), or Dask workers with --dask local")] = 1,
    dask: Annotated[str | None, typer.Option(help="run the chunks on a Dask cluster: tcp://scheduler:8786, or "
                                                  "local (a LocalCluster); pip install 'armillary[dask]'")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    save: Annotated[Path | None, typer.Option("--save", "--csv", help="also save the top strategies: .csv, .json "
                                              "or .parquet (pip install 'armillary[parquet]')")] = None,
    resume: Annotated[Path | None, typer.Option(help="checkpoint file: finished blocks are appended, and a rerun "
                                                     "of the same search skips them")] = None,
) -> None:
    """The fastest (or leanest) parallelization strategies for a model on a system."""
    from rich.progress import Progress, TextColumn, TimeRemainingColumn

    from armillary.report.tables import search_table
    from armillary.search.run import Objective, candidate_row, dask_cluster, process_pool, search, serial
    from armillary.search.space import StrategySpace
    from armillary.specs.loading import (
        load_model,
        load_strategy,
        load_system,
        read_spec_file,
        validate_spec,
    )

    _writable(save, table=True)
    _writable(pareto)
    _writable(resume)
    try:
        goal = Objective(objective)
        spec_space = (validate_spec(StrategySpace, read_spec_file(strategies, "strategies"), "strategies")
                      if strategies else None)
        base = load_strategy(read_spec_file(strategy, "strategy") if strategy else {"attention": "flash"})
        m, sysm = load_model(model), load_system(system, gpus)
        if tpot_limit is not None:
            _inference_search(m, sysm, base, strategies, tpot_limit, ttft_limit, input_len, output_len, top,
                              json_out)
            return
        if global_batch is None:
            raise SpecError("--global-batch is needed for a training search (or give --tpot-limit for inference)")
        workload = validate_spec(Training, {"seq_len": seq_len, "global_batch": global_batch}, "workload")
        columns = (*Progress.get_default_columns()[:-1], TextColumn("{task.fields[rate]} points/s"),
                   TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("searching", total=None, rate="-")
            started = time.perf_counter()

            def tick(done: int, total: int) -> None:
                rate = done / max(time.perf_counter() - started, 1e-9)
                bar.update(task, completed=done, total=total, rate=f"{rate:,.0f}")

            executor = (dask_cluster(dask, max(workers, 2)) if dask else process_pool(workers) if workers > 1
                        else serial)
            if space is not None:
                from armillary.search.systems import SystemSpace, codesign

                systems = validate_spec(SystemSpace, read_spec_file(space, "space"), "space")
                designs = codesign(m, sysm, workload, systems, base, spec_space, executor)
                _print_codesign(designs, json_out, pareto, f"{m.name}: best strategy per system", budget)
                return
            result = search(m, sysm, workload, base, spec_space, goal, top, executor=executor, progress=tick,
                            checkpoint=resume)
    except SpecError as err:
        _fail(str(err))
        return
    except ValueError as err:
        _fail(f"{err} (objective: time or memory)")
        return
    rows = [candidate_row(c) for c in result.top]
    if save is not None:
        from armillary.report.files import save_rows

        save_rows(rows, save)
    if json_out:
        summary = {"points": result.points, "evaluated": result.evaluated, "pruned": result.pruned,
                   "bounded": result.bounded,
                   "feasible": result.feasible, "elapsed_s": result.elapsed_s, "top": rows}
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    console.print(search_table(rows, f"{m.name} on {gpus} x {sysm.device.name}: top {len(rows)} by {goal.value}"))
    console.print(f"{result.points:,} points: {result.pruned:,} pruned (degrees that do not divide, memory "
                  f"floor, {result.bounded:,} of them by the lower bound of the objective), {result.evaluated:,} "
                  f"evaluated, {result.feasible:,} feasible, in {result.elapsed_s:.2f} s "
                  f"({result.points_per_s:,.0f} points/s)")


def _inference_search(m: Model, sysm: System, base: Strategy, space_file: Path | None, tpot_limit: float,
                      ttft_limit: float | None, input_len: int, output_len: int, top: int, json_out: bool) -> None:
    from armillary.report.tables import serving_search_table
    from armillary.search.inference import InferenceSpace, search_inference
    from armillary.specs.loading import read_spec_file, validate_spec
    from armillary.specs.workload import Inference

    data = read_spec_file(space_file, "strategies") if space_file else {}
    space = validate_spec(InferenceSpace, {**data, "tpot_limit_s": tpot_limit, "ttft_limit_s": ttft_limit},
                          "strategies")
    workload = validate_spec(Inference, {"input_len": input_len, "output_len": output_len}, "workload")
    result = search_inference(m, sysm, workload, base, space, top)
    rows = [{"rank": c.rank, "tp": c.strategy.tp, "pp": c.strategy.pp, "batch": c.batch,
             "weights": c.weights.value if c.weights else None,
             "output_tokens_per_s_per_device": float(c.estimate.output_tokens_per_s_per_device),
             "ttft_s": float(c.estimate.ttft_s), "tpot_s": float(c.estimate.tpot_s),
             "memory_gib": float(c.estimate.memory.total) / 2**30} for c in result.top]
    if json_out:
        sys.stdout.write(json.dumps({"points": result.points, "feasible": result.feasible,
                                     "within_limits": result.within_limits, "top": rows}, indent=2) + "\n")
        return
    console.print(serving_search_table(rows, f"{m.name} on {sysm.devices} x {sysm.device.name}: most tokens/s per "
                                             f"device with TPOT <= {tpot_limit * 1e3:g} ms"))
    console.print(f"{result.points} points, {result.feasible} fit, {result.within_limits} within the limits")


def _print_codesign(designs: CoDesignResult, json_out: bool, pareto: Path | None, title: str,
                    budget: float | None) -> None:
    from armillary.report.tables import codesign_table
    from armillary.search.run import candidate_row
    from armillary.search.systems import DesignGoal

    rows = [{**{k: (v / 2**30 if "capacity" in k else v / 1e9 if "bandwidth" in k else v)
                for k, v in p.values.items() if v is not None},
             "cost_usd": p.cost, "power_w": p.power, "step_time_s": p.step_time_s, "pareto": i in designs.pareto,
             "tokens_per_s_per_dollar": p.tokens_per_s_per_dollar, "tokens_per_joule": p.tokens_per_joule,
             "strategy": candidate_row(p.best) if p.best else None} for i, p in enumerate(designs.points)]
    best = {goal.value: designs.best(goal, budget) for goal in DesignGoal}
    position = {id(p): i for i, p in enumerate(designs.points)}
    if pareto is not None:
        from armillary.report.plots import pareto_plot

        pareto_plot([(r["step_time_s"], r["cost_usd"], r["pareto"],
                      f"{r['gpus']} GPUs, {r['hbm_capacity']:.0f} GiB") for r in rows if r["strategy"]], pareto)
    if json_out:
        sys.stdout.write(json.dumps({"systems": rows, "strategies_evaluated": designs.strategies_evaluated,
                                     "budget_usd": budget,
                                     "best": {k: position[id(p)] if p else None for k, p in best.items()}},
                                    indent=2, default=str) + "\n")
        return
    console.print(codesign_table(rows, title))
    console.print(f"{len(rows)} systems, {designs.strategies_evaluated:,} strategies evaluated; "
                  f"{len(designs.pareto)} on the time / cost / power front (*)")
    within = f" within ${budget:,.0f}" if budget is not None else ""
    for goal, p in best.items():
        text = (f"{p.system.devices} GPUs, {p.system.device.hbm.capacity / 2**30:.0f} GiB HBM: "
                f"{p.step_time_s:.4g} s, ${p.cost / 1e6:.2f}M, {p.power / 1e3:.0f} kW" if p else "none")
        console.print(f"best by {goal}{within}: {text}")


@app.command("comm-profile")
def comm_profile_cmd(
    run_file: Annotated[Path, typer.Argument(help="RUN.yaml with model, system, strategy, workload")],
    json_out: Annotated[bool, typer.Option("--json", help="print the calls as JSON")] = False,
    plot: Annotated[Path | None, typer.Option(help="also save a message-size histogram (PNG, SVG, PDF)")] = None,
) -> None:
    """Every collective and point-to-point transfer of one step: count, size, bytes per tier, time."""
    from armillary.report.tables import comm_profile_table
    from armillary.specs.run import load_run

    _writable(plot)
    try:
        model, system, strategy, workload = load_run(run_file)
        if not isinstance(workload, Training):
            raise SpecError("comm-profile profiles a training step: the run's workload is not training")
        result = estimate(model, system, strategy, workload)
    except (SpecError, ValueError) as err:
        _fail(str(err))
        return
    if plot is not None:
        from armillary.report.plots import message_size_histogram

        message_size_histogram(result.communication, plot)
    if json_out:
        from armillary.estimate.result import plain

        sys.stdout.write(json.dumps([plain(asdict(c)) for c in result.communication], indent=1) + "\n")
        return
    title = f"Communication of one step: {model.name} on {system.devices} x {system.device.name}"
    console.print(comm_profile_table(result.communication, title))


@app.command("validate")
def validate_cmd(
    csv_path: Annotated[Path | None, typer.Argument(help="validation CSV (default: the shipped copy)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per row")] = False,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="also save the per-row results as CSV")] = None,
    plot: Annotated[Path | None, typer.Option(help="also save a predicted/measured picture (PNG, SVG, PDF)")] = None,
) -> None:
    """Run every supported measured row and report predicted vs measured, per row and per source."""
    from armillary.report.tables import validation_tables
    from armillary.validation.run import DEFAULT_CSV, read_rows, summarize, validate, write_csv

    path = csv_path or DEFAULT_CSV
    if not path.is_file():
        _fail(f"{path} does not exist")
    _writable(csv_out)
    _writable(plot)
    missing = {"id", "kind", "value"} - set(read_rows(path)[0] if read_rows(path) else ())
    if missing:
        _fail(f"{path}: not a validation CSV (missing columns: {', '.join(sorted(missing))})")
    from rich.progress import track

    results = validate(path, progress=lambda rows: track(
        rows, description="running measured rows", transient=True, console=Console(stderr=True)))
    if csv_out is not None:
        write_csv(results, csv_out)
    if plot is not None:
        from armillary.report.plots import validation_plot

        validation_plot(results, plot)
    if json_out:
        sys.stdout.write(json.dumps([asdict(r) for r in results], indent=1) + "\n")
        return
    for table in validation_tables(results, summarize(results)):
        console.print(table)


@app.command("collective")
def collective_cmd(
    system: Annotated[str, typer.Option(help="system preset or file")],
    op: Annotated[str, typer.Option(help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce")] = (
        "all_reduce"),
    gpus: Annotated[int, typer.Option(help="ranks in the group (whole nodes beyond one node)")] = 8,
    sizes: Annotated[str, typer.Option(help="START:END[:FACTOR] (binary K/M/G) or a comma list")] = "1K:16G",
    algorithm: Annotated[str, typer.Option(help="auto or one of ring, tree, halving_doubling, direct, "
                                                "in_network")] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
) -> None:
    """Cost of one collective over a range of sizes, as nccl-tests prints it (time, algbw, busbw)."""
    from armillary.comm.sweep import collective_sweep, group_of, parse_sizes
    from armillary.report.tables import sweep_table
    from armillary.specs.communication import Algorithm, Collective
    from armillary.specs.loading import load_system

    try:
        operation = Collective(op)
        if operation is Collective.SEND_RECV:
            raise ValueError("send_recv is point-to-point, not a collective")
        algo = Algorithm(algorithm)
        spec = load_system(system, gpus)
        rows = collective_sweep(operation, parse_sizes(sizes), group_of(spec, gpus), spec, algo)
    except SpecError as err:
        _fail(str(err))
        return
    except ValueError as err:
        allowed = {"op": [c.value for c in Collective], "algorithm": [a.value for a in Algorithm]}
        _fail(f"{err} (op: {', '.join(allowed['op'][:-1])}; algorithm: {', '.join(allowed['algorithm'])})")
        return
    if json_out:
        sys.stdout.write(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
        return
    console.print(sweep_table(rows, f"{operation.value} on {gpus} x {spec.device.name} ({spec.name})"))


@app.command("commbench")
def commbench_cmd(
    op: Annotated[str, typer.Option(help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce")] = (
        "all_reduce"),
    ranks: Annotated[int, typer.Option(help="processes (gloo) or GPUs (nccl) on this machine")] = 2,
    backend: Annotated[str, typer.Option(help="gloo (CPU) or nccl (GPU)")] = "gloo",
    sizes: Annotated[str, typer.Option(help="START:END[:FACTOR] or a comma list")] = "1K:16M",
    iters: Annotated[int, typer.Option(help="timed iterations per size")] = 10,
    out: Annotated[Path | None, typer.Option(help="also write the nccl-tests table here")] = None,
) -> None:
    """Measure a collective with torch.distributed and print the nccl-tests table (feeds calibrate-network)."""
    from armillary.comm.bench import BenchConfig, nccl_tests_table, run_benchmark
    from armillary.comm.sweep import parse_sizes
    from armillary.specs.communication import Collective

    try:
        operation = Collective(op)
        if operation is Collective.SEND_RECV or backend not in ("gloo", "nccl") or ranks < 2:
            raise ValueError(f"need a collective, backend gloo or nccl and ranks >= 2 (got {op}, {backend}, {ranks})")
        config = BenchConfig(operation, tuple(float(x) for x in parse_sizes(sizes)), ranks, backend, iters=iters)
        table = nccl_tests_table(operation, ranks, run_benchmark(config))
    except (ValueError, RuntimeError) as err:
        _fail(str(err))
        return
    if out is not None:
        out.write_text(table)
    sys.stdout.write(table)


@app.command("calibrate-network")
def calibrate_network_cmd(
    log: Annotated[Path, typer.Argument(help="nccl-tests output (the table it prints)")],
    system: Annotated[str, typer.Option(help="system preset or file to start from")],
    op: Annotated[str, typer.Option(help="the collective the log measured")] = "all_reduce",
    gpus: Annotated[int, typer.Option(help="ranks of the measured run")] = 8,
    out: Annotated[Path, typer.Option(help="where to write the fitted system (YAML)")] = Path("fitted-system.yaml"),
) -> None:
    """Fit the latency, efficiency and size-efficiency of the tier a measured collective crosses."""
    import yaml

    from armillary.comm.calibration import fit_tier, parse_nccl_tests
    from armillary.specs.communication import Collective
    from armillary.specs.loading import load_system

    _writable(out)
    try:
        if not log.is_file():
            raise ValueError(f"{log} does not exist")
        operation = Collective(op)
        if operation is Collective.SEND_RECV:
            raise ValueError("send_recv is point-to-point, not a collective nccl-tests measures")
        fitted = fit_tier(parse_nccl_tests(log.read_text()), operation, gpus, load_system(system, gpus))
    except (SpecError, ValueError) as err:
        _fail(str(err))
        return
    out.write_text(yaml.safe_dump(fitted.model_dump(mode="json", exclude_defaults=True), sort_keys=False))
    tier = fitted.scale_up if gpus <= fitted.devices_per_node else fitted.scale_out
    console.print(f"fitted {tier.name}: latency {tier.latency * 1e6:.2f} us, efficiency {tier.efficiency:.3f}, "
                  f"in-network efficiency {tier.in_network_efficiency:.3f}; written to {out}")


@app.command("presets")
def presets_cmd(kind: Annotated[str | None, typer.Argument(help=f"one of {', '.join(KINDS)}")] = None) -> None:
    """List the shipped presets (models, devices, systems)."""
    if kind is not None and kind not in KINDS:
        _fail(f"kind {kind!r}: allowed values are {', '.join(KINDS)}")
    for k in [kind] if kind else KINDS:
        console.print(f"[bold]{k}[/bold]: " + ", ".join(preset_names(k)))


@app.command("schema")
def schema_cmd(kind: Annotated[str, typer.Argument(
        help="model, device, system, strategy, workload (training), inference or run")]) -> None:
    """Print the JSON Schema of a specification."""
    from armillary.specs.schema import SCHEMAS

    if kind not in SCHEMAS:
        _fail(f"kind {kind!r}: allowed values are {', '.join(SCHEMAS)}")
    sys.stdout.write(json.dumps(SCHEMAS[kind].model_json_schema(), indent=2) + "\n")


app.command("simulate")(simulate_cmd)  # its own module (simulate/cli.py); registered last, as listed in --help

if __name__ == "__main__":
    app()
