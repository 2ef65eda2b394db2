"""`armillary simulate --hlo FILE` and `--torch-trace PATH`: a compiled XLA program or a measured
torch.profiler trace (armillary.ingest) on the event engine. Thin: parse options, call the library, print."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from armillary.cli.common import print_json, reported, show
from armillary.errors import SpecError

if TYPE_CHECKING:
    from rich.table import Table

    from armillary.simulate.engine import Timeline
    from armillary.simulate.graph import TaskGraph


def simulate_hlo_file(path: Path, system: str | None, gpus: int | None, replicas: int, trace: Path | None,
                      chakra: Path | None, json_out: bool) -> None:
    from armillary.ingest.hlo_parse import read_hlo
    from armillary.ingest.hlo_run import simulate_hlo
    from armillary.ingest.report import hlo_record, hlo_table
    from armillary.specs.loading import load_system

    if system is None:
        raise SpecError("--hlo needs --system (a preset or file) to cost the program on")
    with reported(FileNotFoundError):
        module = read_hlo(path)
        devices = module.num_partitions * module.replica_count
        result = simulate_hlo(module, load_system(system, gpus or devices), replicas)
    _show_and_save(hlo_record(result) if json_out else hlo_table(result), result.graph, result.timeline, trace,
                   chakra)


def replay_torch_trace(path: Path | None, system: str | None, gpus: int | None, source: str | None,
                       trace: Path | None, chakra: Path | None, json_out: bool) -> None:
    from armillary.ingest.report import torch_record, torch_table
    from armillary.ingest.torch_replay import replay
    from armillary.ingest.torch_trace import read_torch_traces
    from armillary.specs.loading import load_system

    if system is None or path is None:
        raise SpecError("--torch-trace needs --system: the system to replay the trace on")
    with reported(FileNotFoundError):
        traces = read_torch_traces(path)
        world = gpus or len(traces.ranks)
        result = replay(traces, load_system(system, world), load_system(source, world) if source else None)
    _show_and_save(torch_record(result) if json_out else torch_table(result), result.graph, result.timeline, trace,
                   chakra)


def _show_and_save(shown: dict[str, Any] | Table, graph: TaskGraph, timeline: Timeline, trace: Path | None,
                   chakra: Path | None) -> None:
    """The result printed (a record as JSON, or its table) before its timeline and Chakra traces are written: a
    failed save does not lose it."""
    if isinstance(shown, dict):
        print_json(shown, indent=2)
    else:
        show([shown])
    if trace is not None:
        from armillary.simulate.perfetto import write_timeline

        write_timeline(graph, timeline, trace)
    if chakra is not None:
        from armillary.simulate.chakra import write_chakra

        write_chakra(graph, chakra)
