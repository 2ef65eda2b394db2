"""`armillary validate`: every measured row of a validation CSV, predicted and compared."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from armillary.cli.common import print_json, show, stderr_console, writable
from armillary.errors import SpecError
from armillary.report import records, tables


def validate_cmd(
    csv_path: Annotated[Path | None, typer.Argument(help="validation CSV (default: the shipped copy)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per row")] = False,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="also save the per-row results as CSV")] = None,
    plot: Annotated[Path | None, typer.Option(help="also save a predicted/measured picture (PNG, SVG, PDF)")] = None,
    device: Annotated[Path | None, typer.Option(help="instead: a device file from calibrate-compute, predicting "
                                                "its measured kernels back (CSV: the measurements; default "
                                                "NAME.kernels.csv beside it)")] = None,
    compare: Annotated[Path | None, typer.Option(help="with --device: save measured vs fitted (PNG, SVG)")] = None,
) -> None:
    """Run every supported measured row and report predicted vs measured, per row and per source."""
    if device is not None:  # the compute calibration's round trip (cli/calibrate.py)
        from armillary.cli.calibrate import device_round_trip

        device_round_trip(device, csv_path, compare, json_out)
        return
    from rich.progress import track

    from armillary.validation.memory_rows import MEMORY_CSV
    from armillary.validation.run import DEFAULT_CSV, read_rows, summarize, validate, write_csv

    path = csv_path or DEFAULT_CSV
    if not path.is_file():
        raise SpecError(f"{path} does not exist")
    writable(csv_out)
    writable(plot)
    rows = read_rows(path)
    missing = {"id", "kind", "value"} - set(rows[0] if rows else ())
    if missing:
        raise SpecError(f"{path}: not a validation CSV (missing columns: {', '.join(sorted(missing))})")
    def progress(todo: list[dict[str, str]]) -> Iterable[dict[str, str]]:
        return track(todo, description="running measured rows", transient=True, console=stderr_console())

    results = validate(path, progress=progress)  # every kind the file holds, memory rows included
    if csv_path is None:  # the shipped measurements and the shipped memory rows (validation/data/memory.csv)
        rows = [*rows, *read_rows(MEMORY_CSV)]
        results = [*results, *validate(MEMORY_CSV, ("memory",), progress)]
    if json_out:  # printed first: a failed save does not lose the run
        print_json(records.validation_records(results), indent=1)
    else:
        from armillary.validation.coverage import regime_coverage

        show([*tables.validation_tables(results, summarize(results)),
              tables.coverage_table(regime_coverage(rows, results))])
    if csv_out is not None:
        write_csv(results, csv_out)
    if plot is not None:
        from armillary.report.plots import validation_plot

        validation_plot(results, plot)
