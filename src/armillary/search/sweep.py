"""What-if sweeps of a run file: estimate it at every combination of the values of one or more fields
(`armillary sweep RUN.yaml --vary gpus=64..8192 --vary system.network.1.bandwidth=100GB/s,400GB/s`).

Each varied field is a dotted run-file path, set as `--set` sets it (`specs.overrides`: into presets too).
A point whose specification fails (a device count the strategy does not divide) is kept, with its error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armillary.errors import SpecError
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.result import StepEstimate
from armillary.estimate.run import estimate_run
from armillary.specs.loading import read_spec_file
from armillary.specs.overrides import Relative, parse_override
from armillary.specs.run import load_run

_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")
MAX_POINTS = 4096  # combinations one sweep may estimate


@dataclass(frozen=True)
class Axis:
    """A varied field and its values (as `--set` reads them)."""

    field: str
    values: tuple[Any, ...]

    def shown(self, value: Any) -> Any:
        """The value as JSON and tables print it."""
        return value.text if isinstance(value, Relative) else value


@dataclass(frozen=True)
class SweepPoint:
    values: tuple[Any, ...]  # one per axis
    result: StepEstimate | InferenceEstimate | None  # None: the point's specification failed
    error: str | None = None


@dataclass(frozen=True)
class Sweep:
    axes: tuple[Axis, ...]
    points: tuple[SweepPoint, ...]  # every combination, the last axis varying fastest


def parse_axis(text: str) -> Axis:
    """'gpus=64..8192' -> the powers of two from 64 to 8192 (the start doubled while within the end);
    'FIELD=a,b,c' -> those values, each read as `--set` reads a value."""
    if "=" not in text:
        raise SpecError(f"--vary {text!r}: expected FIELD=A..B or FIELD=V1,V2,...")
    field, values = (x.strip() for x in text.split("=", 1))
    span = _RANGE.match(values)
    if span:
        start, end = int(span.group(1)), int(span.group(2))
        if start < 1 or end < start:
            raise SpecError(f"--vary {text!r}: a range A..B needs 1 <= A <= B")
        return Axis(field, tuple(start * 2**k for k in range((end // start).bit_length()) if start * 2**k <= end))
    items = [v for v in values.split(",") if v.strip()]
    if not items:
        raise SpecError(f"--vary {text!r}: no values")
    return Axis(field, tuple(parse_override(f"{field}={v}")[1] for v in items))


def sweep(run_file: str | Path, axes: Sequence[Axis], overrides: Sequence[tuple[str, Any]] = ()) -> Sweep:
    """Estimate `run_file` (with `overrides`) at every combination of the axes' values."""
    if not axes:
        raise SpecError("sweep: vary at least one field (--vary FIELD=A..B or FIELD=V1,V2)")
    count = 1
    for a in axes:
        count *= len(a.values)
    if count > MAX_POINTS:
        raise SpecError(f"sweep: {count} combinations; at most {MAX_POINTS}")
    if not isinstance(read_spec_file(Path(run_file), "run"), dict):  # a file that cannot be read fails once
        raise SpecError(f"{run_file}: expected a mapping with model, system, strategy, workload")
    points = []
    for combo in itertools.product(*(a.values for a in axes)):
        changes = [*overrides, *((a.field, v) for a, v in zip(axes, combo, strict=True))]
        try:
            model, system, strategy, workload = load_run(run_file, changes)
            points.append(SweepPoint(combo, estimate_run(model, system, strategy, workload)))
        except ValueError as err:  # SpecError and what the model refuses (a size it cannot split)
            if len(points) == 0 and _is_path_error(err):
                raise
            points.append(SweepPoint(combo, None, str(err)))
    return Sweep(tuple(axes), tuple(points))


def _is_path_error(err: ValueError) -> bool:
    """A mistake in a field path fails every point alike: report it once, not per point."""
    return isinstance(err, SpecError) and str(err).startswith("override ")
