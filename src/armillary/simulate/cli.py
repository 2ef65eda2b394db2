"""`armillary simulate`: one training iteration on the event engine, or Chakra traces from elsewhere."""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table


def simulate_cmd(
    run_file: Annotated[Path | None, typer.Argument(help="RUN.yaml with model, system, strategy, workload")] = None,
    trace: Annotated[Path | None, typer.Option(help="write the timeline for Perfetto: Chrome trace JSON, or "
                                                     "Perfetto protobuf if the name ends in .pftrace")] = None,
    chakra: Annotated[Path | None, typer.Option(help="write one Chakra ET file per rank into this folder")] = None,
    chakra_in: Annotated[Path | None, typer.Option(help="simulate the Chakra ET files of this folder instead")] = None,
    system: Annotated[str | None, typer.Option(help="with --chakra-in: system preset or file")] = None,
    gpus: Annotated[int | None, typer.Option(help="size the system to this many devices")] = None,
    schedule: Annotated[str | None, typer.Option(help="gpipe, 1f1b, interleaved or zb-h1 (default: the "
                                                      "strategy's)")] = None,
    symmetric: Annotated[bool, typer.Option(help="simulate one rank per pipeline stage (--no-symmetric: "
                                                 "every rank)")] = True,
    straggler: Annotated[list[str] | None, typer.Option(help="RANK=FACTOR: that simulated rank's compute is "
                                                             "FACTOR times slower (repeatable)")] = None,
    jitter: Annotated[float, typer.Option(help="relative standard deviation of every task's duration")] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of the jitter")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override any field of the run file, e.g. "
                                                   "--set strategy.pp=8 (repeatable)")] = None,
) -> None:
    """Simulate one training iteration as a task graph (step time, breakdown, critical path), a static
    inference batch (prefill and decode with micro-batches in flight), or the Chakra traces given with
    --chakra-in."""
    from armillary.cli import _fail, _writable, console
    from armillary.errors import SpecError
    from armillary.simulate.engine import run
    from armillary.simulate.perfetto import write_protobuf_trace, write_trace
    from armillary.simulate.run import simulate_training
    from armillary.simulate.schedules import PipelineSchedule
    from armillary.specs.loading import load_system
    from armillary.specs.run import load_run, parse_override
    from armillary.specs.workload import Training

    _writable(trace)
    # Perfetto's protobuf format by suffix, else Chrome trace JSON (the same arguments)
    write_timeline = write_protobuf_trace if trace is not None and trace.suffix == ".pftrace" else write_trace
    try:
        stragglers = dict(_straggler(s) for s in straggler or [])
        if jitter < 0:
            raise SpecError(f"--jitter must be >= 0, not {jitter}")
        if chakra_in is not None:
            from armillary.simulate.chakra import read_chakra

            graph = read_chakra(chakra_in, load_system(system, gpus) if system else None)
            timeline = run(graph, stragglers, jitter, seed)
            if trace is not None:
                write_timeline(graph, timeline, trace)
            _print_traces(graph.ranks, len(graph.tasks), timeline.makespan_ns, json_out, console)
            return
        if run_file is None:
            raise SpecError("give RUN.yaml, or --chakra-in DIR with --system")
        overrides = [parse_override(s) for s in set_ or []] + ([("gpus", gpus)] if gpus else [])
        model, sysm, strategy, workload = load_run(run_file, overrides)
        if not isinstance(workload, Training):
            from armillary.simulate.inference import simulate_inference

            served = simulate_inference(model, sysm, strategy, workload)
            if trace is not None:
                write_timeline(served.graph, served.timeline, trace)
            _print_inference(served, json_out, console)
            return
        chosen = None
        if schedule is not None:
            try:
                chosen = PipelineSchedule(schedule)
            except ValueError:
                raise SpecError(f"--schedule {schedule!r}: one of {', '.join(s.value for s in PipelineSchedule)}"
                                ) from None
        result = simulate_training(model, sysm, strategy, workload, chosen, symmetric, stragglers, jitter, seed)
        if trace is not None:
            write_timeline(result.graph, result.timeline, trace)
        if chakra is not None:
            from armillary.simulate.chakra import write_chakra

            write_chakra(result.graph, chakra)
    except (SpecError, ValueError) as err:
        _fail(str(err))
        return
    summary = {"step_time_s": result.step_time_s, "estimate_step_time_s": float(result.estimate.step_time_s),
               "difference": result.difference, "schedule": result.schedule.value, "symmetric": symmetric,
               "ranks": result.graph.ranks, "devices": result.graph.devices, "tasks": len(result.graph.tasks),
               "events": result.timeline.events, "wall_s": result.wall_s, "engine_s": result.engine_s,
               "critical_path": {f.name: getattr(result.on_critical_path, f.name)
                                 for f in fields(result.on_critical_path)},
               "critical_path_tasks": len(result.critical_path),
               "busiest_rank": result.graph.rank_labels[result.busiest_rank],
               "busiest_compute_s": result.busiest_compute_s}
    if json_out:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    table = Table(title=f"{model.name}: one iteration simulated ({result.schedule.value}, "
                        f"{result.graph.ranks} simulated ranks for {result.graph.devices} devices)")
    table.add_column("critical path")
    table.add_column("s", justify="right")
    table.add_column("share", justify="right")
    for f in fields(result.on_critical_path):
        value = getattr(result.on_critical_path, f.name)
        if value > 0:
            table.add_row(f.name, f"{value:.4g}", f"{value / result.step_time_s:.1%}")
    table.add_row("step (simulated)", f"{result.step_time_s:.4g}", "")
    table.add_row("step (analytical)", f"{float(result.estimate.step_time_s):.4g}", f"{result.difference:+.2%}")
    console.print(table)
    path = result.critical_path
    names = [result.graph.tasks[i].name for i in (path[0], path[-1])] if path else []
    console.print(f"critical path: {len(path):,} tasks, from {names[0]!r} to {names[-1]!r}" if path else "")
    console.print(f"{len(result.graph.tasks):,} tasks, {result.timeline.events:,} events; {result.wall_s:.2f} s in "
                  f"all, of which the event engine {result.engine_s:.3f} s (with loading it, once per process); "
                  f"busiest rank: {result.graph.rank_labels[result.busiest_rank]} "
                  f"({result.busiest_compute_s:.4g} s of compute)")
    from armillary.simulate.engine import compiled_here

    if compiled_here():
        console.print("(this first simulation compiled the event engine; later runs load it from numba's cache)")


def _print_inference(sim, json_out: bool, console) -> None:
    est = sim.estimate
    rows = (("time to first token", sim.ttft_s, float(est.ttft_s)), ("time per output token", sim.tpot_s,
                                                                      float(est.tpot_s)),
            ("end to end", sim.e2e_s, float(est.e2e_s)))
    if json_out:
        sys.stdout.write(json.dumps({name.replace(" ", "_"): {"simulated_s": a, "analytical_s": b}
                                     for name, a, b in rows} | {"tasks": len(sim.graph.tasks)}, indent=2) + "\n")
        return
    table = Table(title=f"static batch of {est.batch}: simulated ({sim.graph.ranks} stages) vs analytical")
    for column in ("", "simulated s", "analytical s", "difference"):
        table.add_column(column, justify="right" if column else "left")
    for name, a, b in rows:
        table.add_row(name, f"{a:.4g}", f"{b:.4g}", f"{a / b - 1:+.2%}" if b else "")
    console.print(table)


def _straggler(text: str) -> tuple[int, float]:
    from armillary.errors import SpecError

    rank, _, factor = text.partition("=")
    try:
        return int(rank), float(factor)
    except ValueError:
        raise SpecError(f"--straggler {text!r}: expected RANK=FACTOR, e.g. 3=1.2") from None


def _print_traces(ranks: int, tasks: int, makespan_ns: int, json_out: bool, console) -> None:
    if json_out:
        sys.stdout.write(json.dumps({"ranks": ranks, "tasks": tasks, "step_time_s": makespan_ns / 1e9}) + "\n")
        return
    console.print(f"{ranks} ranks, {tasks:,} tasks: {makespan_ns / 1e9:.6g} s")
