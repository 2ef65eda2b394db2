"""How far to trust a collective prediction: the error band of its fabric class and size regime, from the
residuals of the shared collective rows (validation/data/collective_residuals.json, written by
tools/calibrate_fabric.py --residuals), widened where the collective spans more GPUs than any measured sweep of
its class (a scale never validated: issue 43's "scale beyond the largest validated")."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from armillary.comm.fabrics import fabrics, rack_scale
from armillary.estimate.result import ErrorBand
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.validation.collective_rows import NVL72_RACKS, ONE_DOMAIN, SMALL_MESSAGE_BYTES, class_of_fabric
from armillary.writing import replaced

COLLECTIVE_RESIDUALS = Path(str(resources.files("armillary.validation") / "data" / "collective_residuals.json"))
# the 90th percentile of |error|: with the 80th (as the training bands) a left-out sweep's rows are covered in
# 70-84% per class, with the 90th in 72-100% (tools/calibrate_fabric.py --residuals prints it)
BAND_QUANTILE = 0.9
BAND_MIN_ROWS = 8  # fewer rows in a class: the band of all classes of that size regime, marked uncalibrated
# fewer measured sweeps in a class: the same. One sweep's rows show its own scatter around a fit often made on
# it, not how far a new sweep lands: left out in turn, GCP's A4 sweep was covered by the A3 Mega sweep's band
# in 12 of 24 rows (Ethernet/GCP 78% -> 91% with two sweeps required)
BAND_MIN_SOURCES = 2
UNCALIBRATED = "uncalibrated fabric"


@dataclass(frozen=True)
class CollectiveResidual:
    id: str
    source: str  # the measured sweep: the row id without its running number
    fabric_class: str
    small: bool  # below SMALL_MESSAGE_BYTES: latency-bound
    error: float  # predicted / measured - 1
    gpus: int = 0  # the ranks of the row's collective (0: not recorded)


def band_of(fabric_class: str | None, small: bool, residuals: Sequence[CollectiveResidual],
            gpus: int | None = None) -> ErrorBand:
    """The BAND_QUANTILE of |error| over the residuals of `fabric_class` in the same size regime (below / from
    1 MiB); a class with fewer than BAND_MIN_ROWS rows or BAND_MIN_SOURCES sweeps (or none: a fabric no sweep
    calibrated) takes the band of every scale-out class in that size regime, named uncalibrated. A collective
    of more `gpus` than any sweep of its scale-out class measured takes the wider of its class's band and that
    pooled band: rows of 2-node rings say little of a 1,024-GPU ring, and a coarser regime only widens."""
    size = "< 1 MiB" if small else ">= 1 MiB"
    rows = [r for r in residuals if r.small == small and r.fabric_class == fabric_class]
    regime = f"collective, {fabric_class}, {size}"
    pooled = [r for r in residuals if r.small == small and r.fabric_class != ONE_DOMAIN]
    if len(rows) < BAND_MIN_ROWS or len({r.source for r in rows}) < BAND_MIN_SOURCES:
        rows = pooled
        regime = f"collective, {UNCALIBRATED} ({fabric_class or 'unknown'}: all classes), {size}"
    if not rows:
        raise ValueError(f"no collective residuals {size}: regenerate {COLLECTIVE_RESIDUALS.name}")
    relative = _quantile(rows)
    largest = max((r.gpus for r in residuals if r.fabric_class == fabric_class), default=0)
    if gpus and fabric_class != ONE_DOMAIN and rows is not pooled and 0 < largest < gpus:
        relative = max(relative, _quantile(pooled))
        regime += f"; {gpus} GPUs, beyond the largest validated ({largest}): widened to all classes' band"
    return ErrorBand(relative=relative, regime=regime, rows=len(rows), sources=len({r.source for r in rows}))


def _quantile(rows: Sequence[CollectiveResidual]) -> float:
    return float(np.quantile(np.abs([r.error for r in rows]), BAND_QUANTILE))


def leave_one_source_out_coverage(residuals: Sequence[CollectiveResidual]) -> dict[str, tuple[int, int]]:
    """Per fabric class: (rows covered, rows) when each sweep's rows are checked against the band built
    without that sweep (the honest coverage of the band)."""
    out: dict[str, tuple[int, int]] = {}
    for r in residuals:
        others = [o for o in residuals if o.source != r.source]
        covered = abs(r.error) <= band_of(r.fabric_class, r.small, others, r.gpus).relative
        hit, total = out.get(r.fabric_class, (0, 0))
        out[r.fabric_class] = (hit + covered, total + 1)
    return out


def write_collective_residuals(residuals: Sequence[CollectiveResidual], path: Path = COLLECTIVE_RESIDUALS) -> None:
    with replaced(path) as temporary:
        temporary.write_text("[\n" + ",\n".join(json.dumps(asdict(r)) for r in residuals) + "\n]\n")


@functools.cache
def shipped_collective_residuals() -> tuple[CollectiveResidual, ...]:
    return tuple(CollectiveResidual(**r) for r in json.loads(COLLECTIVE_RESIDUALS.read_text()))


def collective_band(system: System, gpus: int, size_bytes: float, fabric_name: str | None = None) -> ErrorBand:
    """The error band of a collective of `size_bytes` over `gpus` devices of `system` (as shipped, before it is
    sized to the group; on fabric `fabric_name` where given): the class is one NVLink domain where the group
    fits in it, NVL72 racks, the named fabric's, or that of the fabric whose calibrated dimension the system's
    outermost tier is."""
    return band_of(system_fabric_class(system, gpus, fabric_name), size_bytes < SMALL_MESSAGE_BYTES,
                   shipped_collective_residuals(), gpus)


def system_fabric_class(system: System, gpus: int, fabric_name: str | None = None) -> str | None:
    """The fabric class of a collective over `gpus` devices of `system` (None: a fabric nothing calibrated)."""
    if gpus <= system.network[0].size or len(system.network) == 1:
        return ONE_DOMAIN
    if rack_scale(system):
        return NVL72_RACKS
    if fabric_name is None:
        outer = system.network[-1].name
        fabric_name = next((n for n, f in fabrics().items() if f.dimension_of is not None and not f.dimension
                            and load_system(f.dimension_of).network[-1].name == outer), None)
        if fabric_name is None:
            return None
    return class_of_fabric(fabric_name)
