"""`armillary compare`: two or more run files side by side, with the differences from the first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from armillary import api
from armillary.cli.common import (
    GpusOption,
    JsonFlag,
    SetOption,
    load_costs_file,
    load_run_file,
    print_json,
    show,
    writable,
)
from armillary.errors import SpecError
from armillary.estimate.compare import compare
from armillary.estimate.economics import economics_of
from armillary.report.compare import comparison_record, comparison_tables

PlotOption = Annotated[Path | None, typer.Option(help="also save a grouped bar chart (PNG, SVG, PDF)")]


def run_names(paths: list[Path]) -> list[str]:
    """Each run file's name without its extension; where two are alike, with its parent folder too."""
    stems = [p.stem for p in paths]
    return [f"{p.parent.name}/{p.stem}" if stems.count(p.stem) > 1 else p.stem for p in paths]


def compare_cmd(
    run_files: Annotated[list[Path], typer.Argument(help="two or more RUN.yaml files, training or inference (one "
                                                    "with --variant)")],
    json_out: JsonFlag = False,
    plot: PlotOption = None,
    gpus: GpusOption = None,
    set_: SetOption = None,
    variant: Annotated[list[str] | None, typer.Option(
        help="a column of the one run file with these --set style overrides, e.g. 'system=dgx-b200' or "
        "'strategy.tp=4,strategy.pp=2' (optionally 'NAME: FIELD=VALUE,...'; repeatable)")] = None,
) -> None:
    """Estimate run files side by side: headline figures, time by component, memory by category and
    traffic, each with its difference from the first run (the --set overrides apply to every run; an
    inference run is estimated as a static batch). With --variant: one run file and its variants."""
    writable(plot)
    if variant:
        if len(run_files) != 1:
            raise SpecError(f"--variant compares variants of one run file; got {len(run_files)} run files")
        sets = [*(set_ or []), *([f"gpus={gpus}"] if gpus is not None else [])]
        comparison = api.compare_variants(run_files[0], variant, sets)
    else:
        named, money = [], []
        for name, path in zip(run_names(run_files), run_files, strict=True):
            model, system, strategy, workload = load_run_file(path, set_, {"gpus": gpus})
            result = api.estimate(model, system, strategy, workload)
            named.append((name, result))
            money.append(economics_of(result, system, load_costs_file(path, set_)))
        comparison = compare(named, money)
    if json_out:  # printed first: a failed save does not lose the comparison
        print_json(comparison_record(comparison))
    else:
        show(comparison_tables(comparison))
    if plot is not None:
        from armillary.report.whatif_plots import comparison_plot

        comparison_plot(comparison, plot)
