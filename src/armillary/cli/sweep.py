"""`armillary sweep`: a run file estimated over the product of varied fields."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from armillary.cli.common import JsonFlag, RunFileArg, SetOption, print_json, show, writable
from armillary.report.compare import sweep_record, sweep_table
from armillary.search.sweep import parse_axis, sweep
from armillary.specs.overrides import parse_override

VaryOption = Annotated[list[str], typer.Option(
    "--vary", help="FIELD=A..B (powers of two from A to B, e.g. gpus=64..8192) or FIELD=V1,V2,... (any field "
    "--set takes, e.g. system.network.1.bandwidth=100GB/s,400GB/s); repeatable: the product is estimated")]


def sweep_cmd(
    run_file: RunFileArg,
    vary: VaryOption,
    json_out: JsonFlag = False,
    plot: Annotated[Path | None, typer.Option(
        help="also save scaling curves against the first varied field (PNG, SVG, PDF)")] = None,
    set_: SetOption = None,
) -> None:
    """Estimate RUN_FILE at every combination of the varied fields: step time, MFU, tokens/s, memory and
    feasibility per point (an inference run: TTFT, TPOT, output tokens/s)."""
    writable(plot)
    result = sweep(run_file, [parse_axis(v) for v in vary], [parse_override(s) for s in set_ or []])
    if json_out:  # printed first: a failed save does not lose the sweep
        print_json(sweep_record(result))
    else:
        show([sweep_table(result, f"{run_file.stem}: {len(result.points)} points")])
    if plot is not None:
        from armillary.report.whatif_plots import sweep_plot

        sweep_plot(result, plot, run_file.stem)
