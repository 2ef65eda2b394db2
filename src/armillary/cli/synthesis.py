"""Topology-aware commands: `synthesize` (a collective schedule for a topology, next to the closed-form
algorithms) and `network-optimize` (each network dimension's bandwidth for a run's workload)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from armillary.arguments import number
from armillary.cli.common import JsonFlag, RunFileArg, load_run_file, print_json, show, writable
from armillary.errors import SpecError
from armillary.specs.communication import Collective
from armillary.units import parse_quantity
from armillary.writing import check_folder_writable, replaced

if TYPE_CHECKING:
    from armillary.comm.synthesis import Schedule
    from armillary.search.network_bandwidth import BandwidthConstraints, BandwidthOptimum
    from armillary.specs.system import System

TopologyOption = Annotated[str | None, typer.Option(
    help="instead of --system: KIND:SHAPE with KIND mesh, torus or ring, e.g. mesh:5x5, torus:4x4x4, ring:8")]


def _quantity(text: str, dimension: str, option: str) -> float:
    try:
        return parse_quantity(text, dimension)
    except ValueError as err:
        raise SpecError(f"{option}: {err}") from None


ENGINE_TRANSFERS = 200_000  # schedules up to this size are also run through the event simulator


def synthesize_cmd(
    system: Annotated[str | None, typer.Option(help="system preset or file (its topology graph)")] = None,
    gpus: Annotated[int | None, typer.Option(help="devices of the system")] = None,
    topology: TopologyOption = None,
    link_bandwidth: Annotated[str, typer.Option(help="with --topology: per link and direction")] = "50GiB/s",
    latency: Annotated[str, typer.Option(help="with --topology: per link")] = "0.5us",
    op: Annotated[str, typer.Option(help="all_gather, reduce_scatter, all_reduce or all_to_all")] = "all_gather",
    size: Annotated[str, typer.Option(help="all-gather output / reduce-scatter input / all-reduce buffer / "
                                              "all-to-all buffer of each device")] = "1GiB",
    chunks: Annotated[int, typer.Option(help="chunks per device (all-to-all: per pair of devices)")] = 1,
    seeds: Annotated[int, typer.Option(help="syntheses to run; the fastest is kept")] = 16,
    batch: Annotated[int, typer.Option(help="most chunks a link carries in one transfer (latency paid once); "
                                            "1: one chunk per transfer, as TACOS")] = 1,
    xml: Annotated[Path | None, typer.Option(help="also write the schedule as MSCCL XML")] = None,
    chakra: Annotated[Path | None, typer.Option(help="also write Chakra ET traces (one per device) here")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Synthesize a collective for a topology (TACOS-style greedy link-chunk matching), compare it with
    ring, tree, halving-doubling, direct, hierarchical and the lower bound, and say which to use."""
    from armillary.comm.baselines import baselines, grid_system, recommend, synthesize_on
    from armillary.comm.synthesis import SYNTHESIZED_OPS
    from armillary.simulate.replay import replay, simulate_schedule
    from armillary.specs.loading import load_system
    from armillary.specs.network import NetworkKind

    writable(xml)
    if chakra is not None:
        check_folder_writable(chakra)
    try:
        operation = Collective(op)
    except ValueError:
        operation = Collective.SEND_RECV
    if operation not in SYNTHESIZED_OPS:
        raise SpecError(f"--op {op!r}: one of {', '.join(o.value for o in SYNTHESIZED_OPS)}")
    if (system is None) == (topology is None):
        raise SpecError("give either --system (with --gpus) or --topology")
    if operation is Collective.ALL_TO_ALL and (xml is not None or chakra is not None):
        raise SpecError("--xml and --chakra export all-gather, reduce-scatter and all-reduce schedules, not all_to_all")
    total = _quantity(size, "bytes", "--size")
    if topology is not None:
        kind_text, _, shape_text = topology.partition(":")
        try:
            kind, shape = NetworkKind(kind_text), tuple(int(x) for x in shape_text.split("x"))
        except ValueError:
            shape = ()
        if not shape or min(shape) < 1 or len(shape) > 8 or len(topology) > 100:
            raise SpecError(f"--topology {topology[:40]!r}: KIND:SHAPE with KIND mesh, torus or ring and up to 8 "
                            "axes of 1 or more positions, e.g. mesh:5x5, torus:4x4x4, ring:8")
        devices = math.prod(shape)
        _check_options(operation, devices, total, chunks, seeds, batch)  # before the topology is built
        bandwidth = number("--link-bandwidth", _quantity(link_bandwidth, "bytes_per_s", "--link-bandwidth"),
                           above=True)
        sysm = grid_system(kind, shape, bandwidth, number("--latency", _quantity(latency, "s", "--latency")))
    else:
        sysm = load_system(str(system), gpus)
        devices = gpus or math.prod(sysm.sizes)
        _check_options(operation, devices, total, chunks, seeds, batch)
    schedule = synthesize_on(sysm, devices, operation, total, chunks, seeds, batch)
    rows: list[tuple[str, float | None]] = [("synthesized", schedule.time)]
    if batch == 1:  # the replay and the event simulator pay the latency per chunk
        rows.append(("replayed", replay(schedule).time))
        if len(schedule.link) <= ENGINE_TRANSFERS:  # the event simulator builds a Python task per transfer
            rows.append(("event simulator", simulate_schedule(schedule)))
    closed_form = baselines(sysm, devices, operation, total)
    rows += [(b.name, b.time_s) for b in closed_form]
    rows.append(("lower bound", schedule.bound))
    advice = recommend(schedule, closed_form)
    if json_out:  # printed first: a failed save does not lose the schedule's times
        print_json({"op": operation.value, "devices": devices, "bytes": total, "seed": schedule.seed,
                    "batch": batch, "link_utilization_mean": float(schedule.utilization.mean()),
                    "times_s": {name: t for name, t in rows},
                    "recommendation": {"use": advice.use, "time_s": advice.time_s, "runner_up": advice.runner_up,
                                       "runner_up_s": advice.runner_up_s, "reason": advice.reason}})
    else:
        _show_schedule(schedule, rows, operation, size, devices, sysm,
                       f"use {advice.use} ({advice.time_s * 1e6:.1f} us): {advice.reason}")
    if xml is not None:
        from armillary.comm.msccl import to_xml

        with replaced(xml) as temporary:
            temporary.write_text(to_xml(schedule))
    if chakra is not None:
        from armillary.simulate.schedule_chakra import write_schedule

        write_schedule(schedule, chakra)


def _check_options(operation: Collective, devices: int, total: float, chunks: int, seeds: int, batch: int) -> None:
    """`comm.synthesis.check_synthesis` with the options' names."""
    from armillary.comm.synthesis import check_synthesis

    try:
        check_synthesis(operation, devices, total, chunks, seeds, batch)
    except SpecError as err:
        text = str(err)
        for name, option in (("devices", "--topology / --gpus: devices"), ("size (bytes)", "--size"),
                             ("chunks (per device)", "--chunks"), ("seeds", "--seeds"),
                             ("batch (chunks per transfer)", "--batch")):
            if text.startswith(name):
                text = option + text[len(name):]
        raise SpecError(text) from None


def _show_schedule(schedule: Schedule, rows: list[tuple[str, float | None]], operation: Collective, size: str,
                   devices: int, sysm: System, advice: str) -> None:
    use = schedule.utilization
    table = Table(title=f"{operation.value} of {size} over {devices} devices of {sysm.name} "
                        f"(link utilization mean {use.mean():.0%}, max {use.max():.0%})")
    table.add_column("algorithm")
    table.add_column("time (us)", justify="right")
    table.add_column("x bound", justify="right")
    for name, t in rows:
        table.add_row(name, "-" if t is None else f"{t * 1e6:.1f}", "-" if t is None else f"{t / schedule.bound:.3f}")
    notes = [escape(advice)]
    if schedule.batch > 1:
        notes.append(f"(--batch {schedule.batch}: not replayed, as the replay and the event simulator pay the "
                     "latency per chunk)")
    show([table, *notes])


def network_optimize_cmd(
    run_file: RunFileArg,
    total: Annotated[str | None, typer.Option(help="total bandwidth per device over all dimensions")] = None,
    budget: Annotated[float | None, typer.Option(help="network cost cap ($ per device)")] = None,
    objective: Annotated[str, typer.Option(help="time, time_cost or time_power")] = "time",
    cost: Annotated[str | None, typer.Option(help="$ per GB/s per device of each dimension, comma list "
                                             "(default: each dimension's `component` class)")] = None,
    power: Annotated[str | None, typer.Option(help="W per GB/s per device of each dimension, comma list "
                                              "(default: each dimension's `component` class)")] = None,
    minimum: Annotated[str, typer.Option("--min", help="least bandwidth of any dimension")] = "1GB/s",
    maximum: Annotated[str | None, typer.Option("--max", help="most bandwidth of any dimension")] = None,
    ordered: Annotated[bool, typer.Option(help="inner dimensions at least as fast as outer ones")] = False,
    pipelined: Annotated[bool, typer.Option(help="a collective runs at its slowest dimension (else: sum)")] = True,
    plot: Annotated[Path | None, typer.Option(help="save step time vs network cost over the budget range")] = None,
    refine: Annotated[bool, typer.Option(help="then refine with the full estimator as the objective")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Choose each network dimension's bandwidth for the run's step (LIBRA-style convex program; --refine:
    then a pattern search on the full estimator, so algorithms and overlap move with the bandwidths)."""
    from armillary import api
    from armillary.search.bandwidth_workload import workload_from_estimate
    from armillary.search.network_bandwidth import BandwidthConstraints, BandwidthObjective, optimize, step_time
    from armillary.search.network_prices import dimension_prices
    from armillary.specs.workload import Training

    writable(plot)
    model, system, strategy, workload = load_run_file(run_file)
    if not isinstance(workload, Training):
        raise SpecError("network-optimize takes a training run")
    try:
        goal = BandwidthObjective(objective)
    except ValueError:
        raise SpecError(f"--objective {objective!r}: one of {', '.join(o.value for o in BandwidthObjective)}") from None
    work = workload_from_estimate(api.estimate(model, system, strategy, workload), system, strategy, pipelined)
    n = len(system.network)
    now = np.array([d.bandwidth for d in system.network])
    cap = _quantity(total, "bytes_per_s", "--total") if total else None
    top = _quantity(maximum, "bytes_per_s", "--max") if maximum else (cap or 4 * float(now.sum()))
    prices = dimension_prices(system.network)
    cost_bw = _per_dim(cost, n, "--cost") if cost is not None else prices.cost_per_bw
    power_bw = _per_dim(power, n, "--power") if power is not None else prices.power_per_bw
    cons = BandwidthConstraints(np.full(n, _quantity(minimum, "bytes_per_s", "--min")), np.full(n, top), cap,
                                ordered, cost_bw, budget, power_bw)
    try:
        best = optimize(work, cons, goal)
    except ValueError as err:
        reason = prices.missing_power if goal is BandwidthObjective.TIME_POWER else prices.missing_cost
        hint = f" (no --cost/--power, and {reason})" if goal is not BandwidthObjective.TIME and reason else ""
        raise SpecError(f"{err}{hint}") from None
    current = float(step_time(work, now))
    bandwidth, estimated = best.bandwidth, None
    if refine:
        from armillary.search.bandwidth_refine import estimator_step
        from armillary.search.bandwidth_refine import refine as refine_search

        refined = refine_search(model, system, strategy, workload, best.bandwidth, cons)
        bandwidth, estimated = refined.bandwidth, refined.step_time_s
        estimated_now = estimator_step(model, system, strategy, workload, now)
    devices = math.prod(system.sizes)
    cost_now = float(cons.cost_per_bw @ now) if cons.cost_per_bw is not None else None
    sources = (_source(cost, prices.cost_per_bw), _source(power, prices.power_per_bw))
    if json_out:
        print_json({"bandwidth_bytes_per_s": bandwidth.tolist(), "step_time_s": best.step_time_s,
                    "estimator_step_time_s": estimated, "model_optimum_bytes_per_s": best.bandwidth.tolist(),
                    "current_step_time_s": current, "cost": best.cost, "power_w": best.power,
                    "current_cost": cost_now, "devices": devices, "cost_source": sources[0],
                    "power_source": sources[1], "component_classes": list(prices.classes),
                    "sensitivity_s_per_gbps": (best.sensitivity * 1e9).tolist()})
    else:
        notes = [f"cost per GB/s: {sources[0]}; power per GB/s: {sources[1]}"]
        if estimated is not None:
            notes.append(f"refined with the full estimator: step {estimated:.4g} s (the estimator at the "
                         f"system's own bandwidths: {estimated_now:.4g} s)")
        show([_optimum_table(system, best, bandwidth, now, current, cost_now, cons, prices.classes, notes)])
    if plot is not None:  # saved after printing: a failed save does not lose the optimum
        from armillary.report.bandwidth_plot import time_vs_cost_plot

        time_vs_cost_plot(work, cons, plot)


def _optimum_table(system: System, best: BandwidthOptimum, bandwidth: np.ndarray, now: np.ndarray,
                   current: float, cost_now: float | None, cons: BandwidthConstraints,
                   classes: tuple[str | None, ...], notes: list[str]) -> Table:
    """The optimum per dimension, with its component class, prices and the network cost now and after."""
    devices = math.prod(system.sizes)
    table = Table(title=f"{system.name}: step {best.step_time_s:.4g} s at the optimum vs {current:.4g} s now "
                        f"(model step time, LIBRA-style)")
    cost = (f"network cost per device ${best.cost:,.0f} at the optimum"
            + (f" vs ${cost_now:,.0f} now; x {devices:,} devices: ${best.cost * devices / 1e6:,.2f}M vs "
               f"${cost_now * devices / 1e6:,.2f}M" if cost_now is not None else "")
            + (f"; power per device {best.power:,.1f} W" if cons.power_per_bw is not None else ""))
    table.caption = "\n".join([cost, *notes])
    for col in ("dimension", "component class", "$ / GB/s", "W / GB/s", "now (GB/s)", "optimum (GB/s)",
                "d step / d bw (ms per GB/s)"):
        table.add_column(col, justify="left" if col in ("dimension", "component class") else "right")
    for i, (d, b, s, b0) in enumerate(zip(system.network, bandwidth, best.sensitivity, now, strict=True)):
        table.add_row(d.name, classes[i] or "-", _figure(cons.cost_per_bw, i), _figure(cons.power_per_bw, i),
                      f"{b0 / 1e9:.2f}", f"{b / 1e9:.2f}", f"{s * 1e9 * 1e3:.4g}")
    return table


def _source(option: str | None, table: np.ndarray | None) -> str:
    """Where the per-dimension figures came from."""
    if option is not None:
        return "command line"
    return "component classes (presets/network/components.yaml)" if table is not None else "none"


def _figure(per_bw: np.ndarray | None, i: int) -> str:
    return "-" if per_bw is None else f"{per_bw[i] * 1e9:.4g}"


def _per_dim(text: str | None, n: int, option: str) -> np.ndarray | None:
    """A comma list of n numbers per GB/s, as per byte/s."""
    if text is None:
        return None
    try:
        values = np.array([float(x) for x in text.split(",")])
    except ValueError:
        raise SpecError(f"{option} {text!r}: {n} numbers separated by commas") from None
    if len(values) != n:
        raise SpecError(f"{option}: {n} numbers (one per network dimension), got {len(values)}")
    return values / 1e9
