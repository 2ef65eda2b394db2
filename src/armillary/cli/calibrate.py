"""`armillary calibrate-compute`: measure this machine's kernels with torch, fit a device file; and the
round trip `armillary validate --device FILE` shows (`device_round_trip`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from armillary.cli.common import print_json, reported, show, stderr_console, writable
from armillary.errors import SpecError
from armillary.specs.device import Precision


def _list(text: str, option: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise SpecError(f"{option}: give a comma-separated list")
    return items


def _precisions(text: str) -> tuple[Precision, ...]:
    try:
        return tuple(Precision(p) for p in _list(text, "--precisions"))
    except ValueError:
        raise SpecError(f"--precisions {text!r}: comma list of {', '.join(p.value for p in Precision)}") from None


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in _list(text, option))
    except ValueError:
        raise SpecError(f"{option} {text!r}: comma list of positive integers") from None
    if min(values) < 1:
        raise SpecError(f"{option} {text!r}: comma list of positive integers")
    return values


def calibrate_compute_cmd(
    device: Annotated[str, typer.Option(help="name of the fitted device")],
    out: Annotated[Path | None, typer.Option(help="device file to write (YAML; default NAME.yaml); the raw "
                                             "measurements go beside it as NAME.kernels.csv")] = None,
    precisions: Annotated[str | None, typer.Option(help="GEMM precisions, comma list (default: bf16 on a GPU, "
                                                   "fp32 on a CPU)")] = None,
    models: Annotated[str | None, typer.Option(help="model presets whose GEMM shapes are swept")] = None,
    tp: Annotated[str | None, typer.Option(help="tensor-parallel degrees of the swept shapes")] = None,
    base: Annotated[str | None, typer.Option(help="device preset giving the datasheet peaks and bandwidth "
                                             "(default: the fastest measured)")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads torch uses (default: torch's)")] = None,
    quick: Annotated[bool, typer.Option(help="a few kernels only (seconds; for tests)")] = False,
    check: Annotated[bool, typer.Option(help="also print every kernel measured vs predicted")] = False,
    compare: Annotated[Path | None, typer.Option(help="also save a measured-vs-fitted picture (PNG, SVG)")] = None,
) -> None:
    """Measure GEMMs, attention, memory-bound kernels and launches with torch; fit a device file to them."""
    from rich.progress import track

    from armillary.calibrate.compute_bench import machine, set_threads
    from armillary.calibrate.compute_kernels import default_sweep
    from armillary.calibrate.run import calibrate, write
    from armillary.specs.loading import load_device, load_model

    _check_device_name(device)
    out = out or Path(f"{device}.yaml")
    writable(out)
    writable(compare)
    asked = _precisions(precisions) if precisions else None
    names = _list(models, "--models") if models else ()
    for name in names:
        load_model(name)
    degrees = _ints(tp, "--tp") if tp else ()
    start = load_device(base) if base else None
    with reported(RuntimeError):
        set_threads(threads)
        here = machine()
        sweep = default_sweep(asked or ((Precision.BF16,) if here.accelerator else (Precision.FP32,)),
                              here.accelerator, quick, names, degrees)
        count = len(sweep.kernels())
        done = calibrate(device, sweep, here, out, start, lambda ks: track(
            ks, description=f"measuring {count} kernels", console=stderr_console(), transient=True))
    raw = write(done, out)
    _show_round_trip(out, check, compare, json_out=False,
                     note=f"{count} kernels measured and fitted in {done.seconds:.0f} s; written to {out} and {raw}")


def _check_device_name(name: str) -> None:
    """A device name is a name, not a path: it names the default output file NAME.yaml in the working folder."""
    if (not name.strip() or len(name) > 100 or name in (".", "..") or any(c in name for c in "/\\")
            or any(not c.isprintable() for c in name)):
        raise SpecError(f"--device {name[:40]!r}: a name of 1 to 100 printable characters without / or \\ (it "
                        "names the output NAME.yaml in the working folder; give --out for another place)")


def _show_round_trip(device_file: Path, every: bool, compare: Path | None, json_out: bool, note: str = "",
                     measurements: Path | None = None) -> None:
    from armillary.calibrate.compute_records import (
        group_errors,
        measurements_path,
        read_measurements,
        round_trip,
    )
    from armillary.report.compute_calibration import compare_plot, device_table, group_table, round_trip_table
    from armillary.specs.loading import load_device

    device = load_device(str(device_file))
    rows = round_trip(read_measurements(measurements or measurements_path(device_file)), device)
    errors = group_errors(rows)
    if compare is not None:
        compare_plot(rows, device, compare)
    if json_out:
        print_json([{"kernel": r.kernel.label, "kind": r.kernel.kind.value, "precision": r.kernel.precision.value,
                     "held_out": r.kernel.held_out, "flop": r.kernel.flop, "measured_s": r.measured_s,
                     "predicted_s": r.predicted_s, "error": r.error} for r in rows], indent=1)
        return
    tables = [device_table(device), *([round_trip_table(rows, "every kernel")] if every else []),
              group_table(errors)]
    show([*tables, *([note] if note else [])])


def device_round_trip(device_file: Path, measurements: Path | None, compare: Path | None, json_out: bool) -> None:
    """`validate --device`: the fitted device predicts its measured kernels back."""
    writable(compare)
    if not device_file.is_file():
        raise SpecError(f"{device_file} does not exist")
    _show_round_trip(device_file, True, compare, json_out, measurements=measurements)
