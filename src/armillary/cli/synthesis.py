"""`synthesize`: a collective schedule for a topology, next to the closed-form algorithms, and which to use
(`network-optimize` lives in `cli/network.py`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from armillary.arguments import number
from armillary.cli.common import JsonFlag, print_json, show, writable
from armillary.errors import SpecError
from armillary.specs.communication import Collective
from armillary.units import parse_quantity
from armillary.writing import check_folder_writable, replaced

if TYPE_CHECKING:
    from armillary.comm.synthesis import Schedule
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
    from armillary.comm.baselines import baselines, recommend, synthesize_on

    writable(xml)
    if chakra is not None:
        check_folder_writable(chakra)
    operation = _operation(op, system, topology, exports=xml is not None or chakra is not None)
    total = _quantity(size, "bytes", "--size")
    sysm, devices = _target(system, gpus, topology, link_bandwidth, latency, operation, total, chunks, seeds, batch)
    schedule = synthesize_on(sysm, devices, operation, total, chunks, seeds, batch)
    closed_form = baselines(sysm, devices, operation, total)
    rows = [*_simulated_times(schedule, batch), *((b.name, b.time_s) for b in closed_form),
            ("lower bound", schedule.bound)]
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
    _export(schedule, xml, chakra)


def _operation(op: str, system: str | None, topology: str | None, exports: bool) -> Collective:
    """The collective to synthesize, checked against what synthesis and the exports take."""
    from armillary.comm.synthesis import SYNTHESIZED_OPS

    try:
        operation = Collective(op)
    except ValueError:
        operation = Collective.SEND_RECV
    if operation not in SYNTHESIZED_OPS:
        raise SpecError(f"--op {op!r}: one of {', '.join(o.value for o in SYNTHESIZED_OPS)}")
    if (system is None) == (topology is None):
        raise SpecError("give either --system (with --gpus) or --topology")
    if operation is Collective.ALL_TO_ALL and exports:
        raise SpecError("--xml and --chakra export all-gather, reduce-scatter and all-reduce schedules, not all_to_all")
    return operation


def _target(system: str | None, gpus: int | None, topology: str | None, link_bandwidth: str, latency: str,
            operation: Collective, total: float, chunks: int, seeds: int, batch: int) -> tuple[System, int]:
    """The system to synthesize on and its device count: a preset or file, or a --topology grid; the options
    are checked before the topology is built."""
    from armillary.comm.baselines import grid_system
    from armillary.specs.loading import load_system
    from armillary.specs.network import NetworkKind

    if topology is None:
        sysm = load_system(str(system), gpus)
        devices = gpus or math.prod(sysm.sizes)
        _check_options(operation, devices, total, chunks, seeds, batch)
        return sysm, devices
    kind_text, _, shape_text = topology.partition(":")
    try:
        kind, shape = NetworkKind(kind_text), tuple(int(x) for x in shape_text.split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1 or len(shape) > 8 or len(topology) > 100:
        raise SpecError(f"--topology {topology[:40]!r}: KIND:SHAPE with KIND mesh, torus or ring and up to 8 "
                        "axes of 1 or more positions, e.g. mesh:5x5, torus:4x4x4, ring:8")
    devices = math.prod(shape)
    _check_options(operation, devices, total, chunks, seeds, batch)
    bandwidth = number("--link-bandwidth", _quantity(link_bandwidth, "bytes_per_s", "--link-bandwidth"), above=True)
    return grid_system(kind, shape, bandwidth, number("--latency", _quantity(latency, "s", "--latency"))), devices


def _simulated_times(schedule: Schedule, batch: int) -> list[tuple[str, float | None]]:
    """The schedule's own time, and where they pay latency as it does (one chunk per transfer) its replay and
    its event simulation (up to ENGINE_TRANSFERS transfers: a Python task each)."""
    from armillary.simulate.replay import replay, simulate_schedule

    rows: list[tuple[str, float | None]] = [("synthesized", schedule.time)]
    if batch == 1:
        rows.append(("replayed", replay(schedule).time))
        if len(schedule.link) <= ENGINE_TRANSFERS:
            rows.append(("event simulator", simulate_schedule(schedule)))
    return rows


def _export(schedule: Schedule, xml: Path | None, chakra: Path | None) -> None:
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
