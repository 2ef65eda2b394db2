"""`armillary estimate` (an iteration, a static batch, or a trace served) and `armillary comm-profile`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from armillary import api
from armillary.cli.common import GpusOption, JsonFlag, RunFileArg, SetOption, load_run_file, print_json, show, writable
from armillary.errors import SpecError
from armillary.report import records, tables
from armillary.specs.workload import Inference, Training


def estimate_cmd(
    run_file: RunFileArg,
    json_out: JsonFlag = False,
    gpus: GpusOption = None,
    tp: Annotated[int | None, typer.Option(help="override strategy.tp")] = None,
    pp: Annotated[int | None, typer.Option(help="override strategy.pp")] = None,
    micro_batch: Annotated[int | None, typer.Option(help="override strategy.micro_batch")] = None,
    set_: SetOption = None,
) -> None:
    """Estimate one training iteration, or a static inference batch (or, with workload.serving.trace, serve
    that trace), of the run described in RUN_FILE."""
    model, system, strategy, workload = load_run_file(run_file, set_, {
        "gpus": gpus, "strategy.tp": tp, "strategy.pp": pp, "strategy.micro_batch": micro_batch})
    if isinstance(workload, Inference) and workload.serving.trace is not None:  # a trace: serve it
        served = api.simulate_serving(model, system, strategy, workload)
        if json_out:
            print_json(records.serving_record(served))
            return
        show(tables.serving_report(served, model, system, trace=workload.serving.trace))
        return
    result = api.estimate(model, system, strategy, workload)
    if json_out:
        print_json(records.estimate_record(result))
        return
    show(tables.estimate_report(result, model, system))


def comm_profile_cmd(
    run_file: RunFileArg,
    json_out: Annotated[bool, typer.Option("--json", help="print the calls as JSON")] = False,
    plot: Annotated[Path | None, typer.Option(help="also save a message-size histogram (PNG, SVG, PDF)")] = None,
) -> None:
    """Every collective and point-to-point transfer of one step: count, size, bytes per tier, time."""
    writable(plot)
    model, system, strategy, workload = load_run_file(run_file)
    if not isinstance(workload, Training):
        raise SpecError("comm-profile profiles a training step: the run's workload is not training")
    calls = api.estimate(model, system, strategy, workload).communication
    if plot is not None:
        from armillary.report.plots import message_size_histogram

        message_size_histogram(calls, plot)
    if json_out:
        print_json(records.comm_records(calls), indent=1)
        return
    show([tables.comm_profile_table(calls, model, system)])
