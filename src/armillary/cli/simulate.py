"""`armillary simulate`: one training iteration or a static inference batch on the event engine, or the
Chakra traces of a folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from armillary import api
from armillary.cli.common import (
    GpusOption,
    JsonFlag,
    SetOption,
    load_run_file,
    print_json,
    reported,
    show,
    working,
    writable,
)
from armillary.errors import SpecError
from armillary.report import records, tables
from armillary.specs.workload import Training
from armillary.writing import check_folder_writable

if TYPE_CHECKING:
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System
    from armillary.specs.workload import Workload


def simulate_cmd(
    run_file: Annotated[Path | None, typer.Argument(help="RUN.yaml with model, system, strategy, workload")] = None,
    trace: Annotated[Path | None, typer.Option(help="write the timeline for Perfetto: Chrome trace JSON, or "
                                                     "Perfetto protobuf if the name ends in .pftrace")] = None,
    chakra: Annotated[Path | None, typer.Option(help="write one Chakra ET file per rank into this folder")] = None,
    chakra_in: Annotated[Path | None, typer.Option(help="simulate the Chakra ET files of this folder instead")] = None,
    send_cost: Annotated[str, typer.Option(help="with --chakra-in, another tool's send/recv: 'library' (the "
                                                "system's collective library) or 'astra-sim' (ASTRA-sim's "
                                                "analytical network: hops x latency + bytes / bandwidth)")] = "library",
    system: Annotated[str | None, typer.Option(help="with --chakra-in, --hlo or --torch-trace: system preset "
                                                    "or file")] = None,
    gpus: GpusOption = None,
    schedule: Annotated[str | None, typer.Option(help="gpipe, 1f1b, interleaved or zb-h1 (default: the "
                                                      "strategy's)")] = None,
    symmetric: Annotated[bool, typer.Option(help="simulate one rank per pipeline stage (--no-symmetric: "
                                                 "every rank)")] = True,
    rank_classes: Annotated[bool, typer.Option(help="with --no-symmetric: simulate one rank per class of ranks "
                                                    "with the same program and contention (exact, much "
                                                    "faster)")] = False,
    straggler: Annotated[list[str] | None, typer.Option(help="RANK=FACTOR: that simulated rank's compute is "
                                                             "FACTOR times slower (repeatable)")] = None,
    jitter: Annotated[float, typer.Option(help="relative standard deviation of every task's duration")] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of the jitter")] = 0,
    hlo: Annotated[Path | None, typer.Option(help="simulate this XLA HLO text module (with --system)")] = None,
    replicas: Annotated[int, typer.Option(help="with --hlo: partitions to simulate (1: one stands for all)")] = 1,
    torch_trace: Annotated[Path | None, typer.Option(help="replay this torch.profiler trace (a file, or a folder "
                                                           "of one per rank) on --system")] = None,
    source_system: Annotated[str | None, typer.Option(help="with --torch-trace: the system it was recorded on "
                                                             "(rescales its GEMMs to --system's device)")] = None,
    json_out: JsonFlag = False,
    set_: SetOption = None,
    show_infeasible: Annotated[bool, typer.Option(help="simulate an infeasible run too (exits with 1)")] = False,
) -> None:
    """Simulate one training iteration as a task graph (step time, breakdown, critical path), a static
    inference batch (prefill and decode with micro-batches in flight), or the Chakra traces given with
    --chakra-in."""
    writable(trace)
    if chakra is not None:
        check_folder_writable(chakra)
    stragglers = dict(_straggler(s) for s in straggler or [])
    if hlo is not None or torch_trace is not None:
        _ingest(hlo, torch_trace, system, gpus, replicas, source_system, trace, chakra, json_out)
        return
    if chakra_in is not None:
        _simulate_traces(chakra_in, system, gpus, stragglers, jitter, seed, trace, json_out, send_cost)
        return
    if run_file is None:
        raise SpecError("give RUN.yaml, or --chakra-in DIR with --system")
    if rank_classes and symmetric:
        raise SpecError("--rank-classes simulates every rank, one per class: add --no-symmetric")
    run = load_run_file(run_file, set_, {"gpus": gpus})
    feasible = _feasible(run, show_infeasible)
    with working("simulating (the first run after installing compiles the event engine: about 10 s)"):
        result = api.simulate(*run, schedule=schedule, symmetric=symmetric, stragglers=stragglers, jitter=jitter,
                              seed=seed, classes=rank_classes)
    _show_and_save(result, run, symmetric, json_out, trace, chakra)
    if not feasible:
        raise typer.Exit(1)


def _ingest(hlo: Path | None, torch_trace: Path | None, system: str | None, gpus: int | None, replicas: int,
            source_system: str | None, trace: Path | None, chakra: Path | None, json_out: bool) -> None:
    """An XLA HLO module (`hlo`), else a torch.profiler trace, simulated on `system`."""
    from armillary.cli import simulate_ingest as ingest

    if hlo is not None:
        ingest.simulate_hlo_file(hlo, system, gpus, replicas, trace, chakra, json_out)
    else:
        ingest.replay_torch_trace(torch_trace, system, gpus, source_system, trace, chakra, json_out)


def _feasible(run: tuple[Model, System, Strategy, Workload], show_infeasible: bool) -> bool:
    """Whether `estimate` finds the run feasible; an infeasible one is refused (exit 1) unless `show_infeasible`."""
    estimate = api.estimate(*run)
    if not estimate.feasible and not show_infeasible:
        show([f"infeasible: {'; '.join(estimate.infeasible_reasons)} (--show-infeasible simulates it anyway)"])
        raise typer.Exit(1)
    return bool(estimate.feasible)


def _show_and_save(result: SimulationResult | InferenceSimulation, run: tuple[Model, System, Strategy, Workload],
                   symmetric: bool, json_out: bool, trace: Path | None, chakra: Path | None) -> None:
    """The simulation printed first (a failed save does not lose it), then its timeline and Chakra traces."""
    from armillary.simulate.inference import InferenceSimulation  # the engine's kernels: loaded when used

    model, sysm, strategy, workload = run
    if isinstance(result, InferenceSimulation):
        if json_out:
            print_json(records.inference_simulation_record(result))
        else:
            show([tables.inference_simulation_table(result)])
    elif json_out:
        print_json(records.simulation_record(result, symmetric))
    else:
        from armillary.simulate.engine import compiled_here

        show(tables.simulation_report(result, model, compiled_here()))
    if trace is not None:
        from armillary.simulate.perfetto import write_timeline

        write_timeline(result.graph, result.timeline, trace)
    if chakra is not None and not isinstance(result, InferenceSimulation):
        from armillary.simulate.chakra import write_chakra
        from armillary.simulate.run import every_rank_graph

        assert isinstance(workload, Training)  # a training simulation
        write_chakra(every_rank_graph(model, sysm, strategy, workload, result), chakra)  # real groups for ASTRA-sim


def _simulate_traces(folder: Path, system: str | None, gpus: int | None, stragglers: dict[int, float],
                     jitter: float, seed: int, trace: Path | None, json_out: bool, sends: str = "library") -> None:
    """Chakra ET files (ours, or others' with `system` for the costs, their sends costed as `sends` says) on the
    event engine."""
    from armillary.simulate.chakra import SendCost, read_chakra
    from armillary.simulate.engine import run
    from armillary.specs.loading import load_system

    if sends not in {c.value for c in SendCost}:
        raise SpecError(f"--send-cost {sends[:40]!r}: one of {', '.join(c.value for c in SendCost)}")
    with reported(FileNotFoundError):  # a folder without trace files
        graph = read_chakra(folder, load_system(system, gpus) if system else None, sends=sends)
    timeline = run(graph, stragglers, jitter, seed)
    if json_out:
        print_json(records.traces_record(graph, timeline), indent=None)
    else:
        show([tables.traces_line(graph, timeline)])
    if trace is not None:
        from armillary.simulate.perfetto import write_timeline

        write_timeline(graph, timeline, trace)


def _straggler(text: str) -> tuple[int, float]:
    rank, _, factor = text.partition("=")
    try:
        return int(rank), float(factor)
    except ValueError:
        raise SpecError(f"--straggler {text!r}: expected RANK=FACTOR, e.g. 3=1.2") from None
