"""A whole compute calibration: measure a sweep on this machine, fit a device, write the device file and
its raw measurements (the command line and the benchmark call this)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from armillary.calibrate.compute_bench import Machine, Measurement, Progress, measure
from armillary.calibrate.compute_fit import FitInputs, fit_device
from armillary.calibrate.compute_kernels import Sweep
from armillary.calibrate.compute_records import measurements_path, write_measurements
from armillary.specs.device import Device
from armillary.writing import replaced


@dataclass(frozen=True)
class Calibration:
    device: Device
    measured: tuple[Measurement, ...]
    seconds: float  # measuring and fitting
    provenance: str


def calibrate(name: str, sweep: Sweep, here: Machine, out: Path, base: Device | None = None,
              progress: Progress | None = None) -> Calibration:
    """Measure `sweep` on `here`, fit the device `name` (from `base`'s datasheet figures, if given);
    `out` is where the device file will go (its measurements file is named in the provenance)."""
    start = time.perf_counter()
    measured = measure(sweep.kernels(), progress, sweep.round_s)
    taken = time.perf_counter() - start
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ")
    provenance = (f"measured {when} on {here.describe()}; GEMMs of {', '.join(sweep.models)} at tp {sweep.tp} and "
                  f"{sweep.tokens} tokens ({', '.join(p.value for p in sweep.precisions)}), held out: "
                  f"{', '.join(sweep.held_out_models) or 'none'}; {len(measured)} kernels in {taken:.0f} s; "
                  f"raw measurements: {measurements_path(out).name}")
    device = fit_device(measured, FitInputs(name, here.memory_bytes, provenance, base))
    return Calibration(device, measured, time.perf_counter() - start, provenance)


def write(calibration: Calibration, out: Path) -> Path:
    """The device file at `out` (YAML) and the raw measurements beside it; returns the latter's path."""
    import yaml

    with replaced(out) as temporary:
        temporary.write_text(yaml.safe_dump(calibration.device.model_dump(mode="json", exclude_defaults=True),
                                            sort_keys=False))
    path = measurements_path(out)
    write_measurements(calibration.measured, path, calibration.provenance)
    return path
