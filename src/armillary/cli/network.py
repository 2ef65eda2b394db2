"""Network commands: a collective's modelled cost (`collective`), measuring one (`commbench`), fitting
a system's network tier to a measurement (`calibrate-network`), and choosing each network dimension's
bandwidth for a run (`network-optimize`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from armillary import api, defaults
from armillary.cli.common import (
    JsonFlag,
    RunFileArg,
    SystemOption,
    load_run_file,
    print_json,
    reported,
    show,
    writable,
)
from armillary.errors import SpecError
from armillary.report import records, tables
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.writing import replaced

if TYPE_CHECKING:
    from rich.table import Table

    from armillary.comm.sweep import SweepRow
    from armillary.estimate.result import ErrorBand
    from armillary.search.network_bandwidth import BandwidthObjective
    from armillary.search.network_optimize import NetworkPlan

_OPS = ", ".join(c.value for c in Collective if c is not Collective.SEND_RECV)
OpOption = Annotated[str, typer.Option(help=_OPS)]


def collective_cmd(
    system: SystemOption,
    op: OpOption = Collective.ALL_REDUCE.value,
    gpus: Annotated[int, typer.Option(help="ranks in the group (whole nodes beyond one node)")] = (
        defaults.COLLECTIVE_GPUS),
    sizes: Annotated[str, typer.Option(help="START:END[:FACTOR] (binary K/M/G) or a comma list")] = "1K:16G",
    algorithm: Annotated[str, typer.Option(help="auto or one of " + ", ".join(
        a.value for a in Algorithm if a is not Algorithm.AUTO))] = Algorithm.AUTO.value,
    composition: Annotated[str, typer.Option(help="how a group over several network dimensions runs: auto or "
                                             "one of " + ", ".join(c.value for c in Composition
                                                                   if c is not Composition.AUTO))] = (
        Composition.AUTO.value),
    channels: Annotated[int | None, typer.Option(help="ring channels across nodes, as NCCL_MIN_NCHANNELS = "
                                                 "NCCL_MAX_NCHANNELS = N (default: the system's)")] = None,
    fabric: Annotated[str | None, typer.Option(help="run the scale-out tier on a fabric preset "
                                               "(presets/network/fabrics.yaml), e.g. roce-oci, efa-v4, pollara; "
                                               "default: the system's own")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the rows as JSON, with the algorithm, protocol "
                                           "and channels chosen, why, and the error band")] = False,
    plot: Annotated[Path | None, typer.Option(help="also save busbw vs size, one line per algorithm the group's "
                                              "dimensions offer, each dimension's bandwidth dashed (PNG, SVG)")] = None,
) -> None:
    """Cost of one collective over a range of sizes, as nccl-tests prints it (time, algbw, busbw), with the
    algorithm chosen and an error band from the validation residuals of its fabric class."""
    from armillary.comm.sweep import parse_sizes

    writable(plot)
    group = load_system(system, gpus)
    if fabric is not None:
        from armillary.comm.fabrics import fabrics, rack_scale, with_fabric

        if fabric not in fabrics():
            raise SpecError(f"--fabric {fabric!r}: one of {', '.join(sorted(fabrics()))}")
        group = with_fabric(group, fabric, across_racks=rack_scale(load_system(system)))
    if channels is not None:
        from armillary.comm.channels import MAX_CHANNELS, ChannelSettings, with_channels

        if not 1 <= channels <= MAX_CHANNELS:
            raise SpecError(f"--channels: between 1 and {MAX_CHANNELS} (NCCL's MAXCHANNELS), not {channels}")
        group = with_channels(group, ChannelSettings(min_channels=channels, max_channels=channels))
    rows = api.collective(op, parse_sizes(sizes), group, gpus, algorithm, composition)
    bands, explained = _bands_and_reasons(rows, op, group, load_system(system), gpus, algorithm, composition,
                                          fabric)
    if json_out:  # printed first: a failed save does not lose the rows
        print_json([{**record, **reason, "error_band": band}
                    for record, reason, band in zip(records.sweep_records(rows), explained, bands, strict=True)],
                   indent=1)
    else:
        show([_sweep_table(rows, op, group, bands)])
    if plot is not None:
        from armillary.report.collective_plot import collective_plot, collective_plot_data

        collective_plot(collective_plot_data(rows, Collective(op), group, gpus, Algorithm(algorithm),
                                             Composition(composition)), plot)


def _bands_and_reasons(rows: list[SweepRow], op: str, system: System, unsized: System, gpus: int, algorithm: str,
                       composition: str, fabric: str | None) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Per row: the error band of its fabric class, latency regime and op kind (the class read on the system as
    shipped, before it is sized to the group), and why the model chose what it did."""
    import numpy as np

    from armillary.comm.explain import explain_sweep
    from armillary.comm.sweep import group_of
    from armillary.validation.collective_bands import sweep_bands

    sizes = np.array([r.size_bytes for r in rows])
    group = group_of(system, gpus)
    explained = explain_sweep(Collective(op), sizes, group, system, Algorithm(algorithm), Composition(composition))
    bands = []
    for r, band in zip(rows, sweep_bands(Collective(op), sizes, group, system, unsized, gpus, Algorithm(algorithm),
                                         Composition(composition), fabric), strict=True):
        bands.append({"relative": band.relative, "regime": band.regime, "rows": band.rows, "sources": band.sources,
                      "busbw_low_bytes_per_s": r.busbw_bytes_per_s / (1 + band.relative),
                      "busbw_high_bytes_per_s": r.busbw_bytes_per_s / max(1 - band.relative, 0.05)})
    return bands, explained


def _sweep_table(rows: list[SweepRow], op: str, system: System, bands: list[dict[str, object]]) -> Table:
    """The nccl-tests table with each row's error band (a measured busbw within it in 85% of its class's
    validation rows in its latency regime; the regime in the caption)."""
    table = tables.sweep_table(rows, op, system)
    table.add_column("band", justify="right")
    table.columns[-1]._cells[:] = [f"+-{float(b['relative']):.0%}" for b in bands]  # type: ignore[arg-type]
    regimes = sorted({str(b["regime"]) for b in bands})
    table.caption = "error band: " + "; ".join(f"{r}" for r in regimes)
    return table


def commbench_cmd(
    op: OpOption = Collective.ALL_REDUCE.value,
    ranks: Annotated[int, typer.Option(help="processes (gloo) or GPUs (nccl) on this machine")] = 2,
    backend: Annotated[str, typer.Option(help="gloo (CPU) or nccl (GPU)")] = "gloo",
    sizes: Annotated[str, typer.Option(help="START:END[:FACTOR] or a comma list")] = "1K:16M",
    iters: Annotated[int, typer.Option(help="timed iterations per size")] = 10,
    out: Annotated[Path | None, typer.Option(help="also write the nccl-tests table here (with --backends: "
                                             "one file per backend and op, OUT-BACKEND-OP.txt)")] = None,
    backends: Annotated[str | None, typer.Option(help="compare several, e.g. gloo,shm[,nccl] (shm: armillary's "
                                                 "shared-memory backend); replaces --backend")] = None,
    ops: Annotated[str | None, typer.Option(help="with --backends: comma list of ops (default: --op)")] = None,
    dtype: Annotated[str, typer.Option(help="with --backends: torch dtype, e.g. float32, bfloat16")] = "float32",
    tune: Annotated[Path | None, typer.Option(help="with --backends: write the tuning table (YAML) here")] = None,
) -> None:
    """Measure collectives with torch.distributed and print the nccl-tests table (feeds calibrate-network);
    with --backends, every backend on every op and size, and with --tune the runtime's dispatch table."""
    from armillary.comm.bench import BenchConfig, nccl_tests_table, run_benchmark
    from armillary.comm.sweep import parse_sizes

    writable(out)
    size_list = tuple(float(x) for x in parse_sizes(sizes))
    if backends is not None:
        _commbench_backends(backends, ops or op, ranks, size_list, iters, dtype, out, tune)
        return
    operation = _collective(op)
    if backend not in ("gloo", "nccl") or ranks < 2:
        raise SpecError(f"need backend gloo or nccl and ranks >= 2 (got {backend}, {ranks})")
    config = BenchConfig(operation, size_list, ranks, backend, iters=iters)
    with reported(RuntimeError):  # what torch.distributed raises
        table = nccl_tests_table(operation, ranks, run_benchmark(config))
    sys.stdout.write(table)  # printed first: a failed save does not lose the measurement
    if out is not None:
        with replaced(out) as temporary:
            temporary.write_text(table)


def _commbench_backends(backends: str, ops: str, ranks: int, sizes: tuple[float, ...], iters: int, dtype: str,
                        out: Path | None, tune: Path | None) -> None:
    """commbench --backends: sweep, print one table per backend and op, write the tuning table."""
    from armillary.comm.bench import MixConfig, nccl_tests_table, run_mix_benchmark, tuned_table
    from armillary.report import backends as backend_tables
    from armillary.runtime.table import save_table

    names = tuple(b.strip() for b in backends.split(",") if b.strip())
    known = ("gloo", "shm", "nccl", "mpi", "ucc")
    if not names or any(b not in known for b in names) or ranks < 2:
        raise SpecError(f"--backends: a comma list of {', '.join(known)}, with --ranks >= 2 "
                        f"(got {backends!r}, {ranks})")
    operations = tuple(_collective(o.strip()) for o in ops.split(","))
    writable(tune)
    config = MixConfig(operations, sizes, ranks, names, dtype=dtype, iters=iters)
    with reported(RuntimeError):
        samples = run_mix_benchmark(config)
    for name in names:
        for operation in operations:
            rows = [(s.size_bytes, s.time_s) for s in samples if s.backend == name and s.op is operation]
            text = f"# backend: {name}\n" + nccl_tests_table(operation, ranks, rows)
            sys.stdout.write(text)
            if out is not None:
                with replaced(out.with_name(f"{out.stem}-{name}-{operation.value}.txt")) as temporary:
                    temporary.write_text(text)
    if tune is not None:
        table = tuned_table(samples, ranks, dtype)
        save_table(table, tune)
        show([backend_tables.tuning_table(table)])


def calibrate_network_cmd(
    log: Annotated[Path, typer.Argument(help="nccl-tests output (the table it prints)")],
    system: Annotated[str, typer.Option(help="system preset or file to start from")],
    op: Annotated[str, typer.Option(help="the collective the log measured")] = Collective.ALL_REDUCE.value,
    gpus: Annotated[int, typer.Option(help="ranks of the measured run")] = 8,
    out: Annotated[Path, typer.Option(help="where to write the fitted system (YAML)")] = Path("fitted-system.yaml"),
) -> None:
    """Fit the latency, efficiency and size-efficiency of the tier a measured collective crosses."""
    import yaml

    from armillary.comm.calibration import fit_tier, parse_nccl_tests

    writable(out)
    if not log.is_file():
        raise SpecError(f"{log} does not exist")
    fitted = fit_tier(parse_nccl_tests(log.read_text()), _collective(op), gpus, load_system(system, gpus))
    with replaced(out) as temporary:
        temporary.write_text(yaml.safe_dump(fitted.model_dump(mode="json", exclude_defaults=True), sort_keys=False))
    show([tables.calibration_line(fitted, gpus, out)])


def _collective(op: str) -> Collective:
    try:
        operation = Collective(op)
    except ValueError:
        raise SpecError(f"--op {op!r}: one of {_OPS}") from None
    if operation is Collective.SEND_RECV:
        raise SpecError("--op send_recv is point-to-point, not a collective")
    return operation


def network_optimize_cmd(
    run_file: RunFileArg,
    total: Annotated[str | None, typer.Option(help="total bandwidth per device over all dimensions (at most; "
                                              "exactly with --total-exact)")] = None,
    total_exact: Annotated[bool, typer.Option(help="the dimensions add up to exactly --total")] = False,
    budget: Annotated[float | None, typer.Option(help="network cost cap ($ per device)")] = None,
    objective: Annotated[str, typer.Option(help="time, time_cost (step x (device $ + network $), LIBRA's "
                                           "perf-per-cost) or time_power (step x (device W + network W))")] = "time",
    gpu_cost: Annotated[float | None, typer.Option(help="with time_cost: $ per device besides the network "
                                                   "(default: presets/costs/device-prices.yaml); with "
                                                   "time_power: W (default: the device's board power); 0 "
                                                   "weighs the network alone")] = None,
    cost: Annotated[str | None, typer.Option(help="$ per GB/s per device of each dimension, comma list "
                                             "(default: each dimension's `component` class, inferred by kind "
                                             "where none is named)")] = None,
    power: Annotated[str | None, typer.Option(help="W per GB/s per device of each dimension, comma list "
                                              "(default: each dimension's `component` class)")] = None,
    minimum: Annotated[str, typer.Option("--min", help="least bandwidth of any dimension")] = "1GB/s",
    maximum: Annotated[str | None, typer.Option("--max", help="most bandwidth of any dimension")] = None,
    fix: Annotated[list[str] | None, typer.Option(help="DIM=BW: a dimension (name or index) at exactly BW; "
                                                  "repeat for several")] = None,
    sum_: Annotated[list[str] | None, typer.Option("--sum", help="DIM+DIM<=BW or DIM+DIM=BW: a sum of chosen "
                                                   "dimensions; repeat for several")] = None,
    order: Annotated[list[str] | None, typer.Option(help="DIM>=DIM: one dimension at least as fast as "
                                                    "another; repeat for a partial order")] = None,
    ordered: Annotated[bool, typer.Option(help="inner dimensions at least as fast as outer ones")] = False,
    pipelined: Annotated[bool, typer.Option(help="a collective runs at its slowest dimension (else: sum)")] = True,
    plot: Annotated[Path | None, typer.Option(help="save step time vs network cost over the budget range")] = None,
    refine: Annotated[bool, typer.Option(help="then refine with the full estimator as the objective")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Choose each network dimension's bandwidth for the run's step (LIBRA-style convex program; --refine:
    then a pattern search on the full estimator, so algorithms and overlap move with the bandwidths).
    A run that `estimate` calls infeasible is refused."""
    from armillary.search.bandwidth_options import ConstraintOptions, constraints
    from armillary.search.network_optimize import NetworkRequest, optimize_network
    from armillary.specs.workload import Training
    from armillary.validation.bands import error_band

    writable(plot)
    model, system, strategy, workload = load_run_file(run_file)
    if not isinstance(workload, Training):
        raise SpecError("network-optimize takes a training run")
    goal = _bandwidth_objective(objective)
    options = ConstraintOptions(total, total_exact, budget, minimum, maximum, ordered, tuple(fix or ()),
                                tuple(sum_ or ()), tuple(order or ()), cost, power)
    request = NetworkRequest(constraints(options, system), goal, pipelined, gpu_cost, refine)
    plan = optimize_network(model, system, strategy, workload, request)
    band = error_band(model, system, strategy)  # the step times' band: the regime does not move with bandwidths
    _show_plan(plan, goal, system, band, json_out)
    if plot is not None:  # saved after printing: a failed save does not lose the optimum
        from armillary.report.bandwidth_plot import time_vs_cost_plot

        time_vs_cost_plot(plan.work, plan.constraints, plot)


def _bandwidth_objective(text: str) -> BandwidthObjective:
    from armillary.search.network_bandwidth import BandwidthObjective

    try:
        return BandwidthObjective(text)
    except ValueError:
        raise SpecError(f"--objective {text!r}: one of {', '.join(o.value for o in BandwidthObjective)}") from None


def _show_plan(plan: NetworkPlan, goal: BandwidthObjective, system: System, band: ErrorBand, json_out: bool) -> None:
    """The bandwidths chosen, as JSON or a table, with the error band of the step times."""
    from armillary.report.bandwidth_table import plan_record, plan_table
    from armillary.report.search_tables import poorly_validated_warning

    if json_out:
        print_json({**plan_record(plan, goal), "error_band": {"relative": band.relative, "regime": band.regime,
                                                              "poorly_validated": band.poorly_validated}})
    else:
        show([plan_table(system, plan, goal), f"step times {band.describe()}",
              *poorly_validated_warning("the optimum's step time", band)])
