"""How far to trust a collective prediction: the error band of its fabric class and latency regime, from the
out-of-fit residuals of the shared collective rows (`collective_residuals.band_residuals`: each row of a sweep a
preset was fitted on with the error of a model not fitted on it, `collective_residuals.out_of_fit_residuals`; the
rows' residuals in validation/data/collective_residuals.json, written by tools/calibrate_fabric.py --residuals,
the refits in validation/data/collective_refits.json, by tools/error_bands.py --refit), widened where the
collective spans more GPUs than any measured sweep of its class (a scale never validated: issue 43's "scale beyond
the largest validated").

The regime is the one the model itself is in: the share of the predicted time that is latency (the protocol's
base cost and per-step latencies, `collective_rows.latency_share`). A bandwidth-bound collective's error is
the fabric's efficiency error alone; where latency and transfer are of one size NCCL's tuner switches protocol
and algorithm (tuning.cc picks the (algorithm, protocol) of least latency + bytes / bandwidth), and a switch
point off by a factor of two moves the time most; a latency-bound one errs by the latency. The three mix error
scales about 10x apart (median |error| 0.9% bandwidth-bound, 9.0% crossover, 7.4% latency-bound over the shared
rows), so one band per size regime was too wide for large messages and narrow at the crossover."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from armillary.comm.fabrics import fabrics, rack_scale
from armillary.estimate.result import ErrorBand
from armillary.numerics import Array
from armillary.plan.placement import Placement
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.validation.bands import band_quantile
from armillary.validation.collective_reading import message_bytes, read_op
from armillary.validation.collective_residuals import (
    BANDWIDTH_BOUND,
    BANDWIDTH_BOUND_BELOW,
    COLLECTIVE_RESIDUALS,
    CROSSOVER,
    LATENCY_BOUND,
    LATENCY_BOUND_FROM,
    REGIMES,
    CollectiveResidual,
    band_residuals,
    first_run_residuals,
    latency_regime,
    regime_of,
)
from armillary.validation.collective_rows import SMALL_MESSAGE_BYTES, latency_share, row_latency_share
from armillary.validation.collective_system import NVL72_RACKS, ONE_DOMAIN, class_of_fabric, fabric_class, read_system
from armillary.validation.row_columns import Unsupported

# the split-conformal rank (`bands.band_quantile`: the ceil(q (n + 1))-th smallest |error|) at the lowest level,
# in steps of 5 points from the other kinds' 80%, at which every fabric class's left-out sweeps are covered in
# at least 80%: at 80% EFA is covered in 15 of 19 (a sweep's rows move together, so a left-out sweep is a
# lump, not 80% of independent rows); at 85% every class in 84-100% (tools/calibrate_fabric.py --residuals).
# Before the latency regimes it was the interpolated 90th percentile of each size regime.
BAND_QUANTILE = 0.85
BAND_MIN_ROWS = 8  # fewer rows in a class and regime: the band of all scale-out classes in it, marked uncalibrated
# fewer measured sweeps in a class: the same. One sweep's rows show its own scatter around a fit often made on
# it, not how far a new sweep lands: left out in turn, GCP's A4 sweep was covered by the A3 Mega sweep's band
# in 12 of 24 rows (Ethernet/GCP 78% -> 91% with two sweeps required)
BAND_MIN_SOURCES = 2
UNCALIBRATED = "uncalibrated fabric"
UNCALIBRATED_FIRST_RUN = "collectives first run on fabrics not yet calibrated"

_MEANING = {BANDWIDTH_BOUND: f"latency < {BANDWIDTH_BOUND_BELOW:.0%} of the time",
            CROSSOVER: f"latency {BANDWIDTH_BOUND_BELOW:.0%}-{LATENCY_BOUND_FROM:.0%} of the time",
            LATENCY_BOUND: f"latency >= {LATENCY_BOUND_FROM:.0%} of the time"}


def _latency_part(regime: str) -> str:
    return regime.split(",")[0]


def band_of(fabric_class: str | None, small: bool, residuals: Sequence[CollectiveResidual],
            gpus: int | None = None, latency_share: float | None = None, op: str | None = None,
            first_run: Sequence[CollectiveResidual] = ()) -> ErrorBand:
    """The band of a collective `op` on `fabric_class` whose modelled time is `latency_share` latency
    (`regime_band`). What the caller does not give widens it, never narrows it: without the share (a caller
    that knows only whether the message is below 1 MiB: `small`) the widest of the latency regimes the
    residuals of that class and size fall in (all three where none do); without the op, the wider of a ring /
    tree collective's and an all-to-all's. On a fabric class no residual calibrated (None: a fabric no sweep
    fitted), at least the band of the `first_run` residuals of its size (`uncalibrated_band`)."""
    widest = _widest_regime(fabric_class, small, residuals, gpus, latency_share, op)
    if fabric_class is not None and any(r.fabric_class == fabric_class for r in residuals):
        return widest
    return uncalibrated_band(widest, small, first_run)


def uncalibrated_band(band: ErrorBand, small: bool, first_run: Sequence[CollectiveResidual]) -> ErrorBand:
    """`band` (a collective's band on a fabric no sweep calibrated), widened to the BAND_QUANTILE rank of the
    `first_run` residuals of its message size (`small`: below 1 MiB): collectives first run on fabrics the model
    had not been calibrated on (`first_run_residuals`). Issue 43's widening for a prediction that leaves the
    validated regime: the in-sample pool is of sweeps the presets were then fitted on, which land within a few
    percent; a fabric met before calibration erred up to 12x (EFA's SRD latency floor, LL across NVL72 racks over
    RoCE). The size, not the latency share, keys it: the share is modelled with the very latency an
    uncalibrated fabric gets wrong. A size with fewer than BAND_MIN_ROWS rows or BAND_MIN_SOURCES sweeps takes
    the wider of its rows' band and every first-run row's. Scale-out rows only, as the in-sample pool: a fabric
    class with no residual is a scale-out fabric (one NVLink domain always has rows). Never narrower than
    `band`."""
    scale_out = [r for r in first_run if r.fabric_class != ONE_DOMAIN]  # as the in-sample pool (`regime_band`)
    if not scale_out:
        return band
    rows = [r for r in scale_out if r.small == small]
    relative = _quantile(rows) if rows else 0.0
    if len(rows) < BAND_MIN_ROWS or len({r.source for r in rows}) < BAND_MIN_SOURCES:
        rows, relative = scale_out, max(relative, _quantile(scale_out))
    if relative <= band.relative:
        return band
    size = "< 1 MiB" if small else ">= 1 MiB"
    return ErrorBand(relative=relative, rows=len(rows), sources=len({r.source for r in rows}),
                     regime=f"{band.regime}; widened to {UNCALIBRATED_FIRST_RUN} {size} ({len(rows)} rows)")


def _widest_regime(fabric_class: str | None, small: bool, residuals: Sequence[CollectiveResidual],
                   gpus: int | None, latency_share: float | None, op: str | None) -> ErrorBand:
    if latency_share is not None:
        latencies = [latency_regime(latency_share)]
    else:
        seen = ({r.regime for r in residuals if r.fabric_class == fabric_class and r.small == small}
                or {r.regime for r in residuals if r.small == small}) - {None}
        latencies = sorted({_latency_part(str(r)) for r in seen}) or list(REGIMES)
    kinds = [op] if op is not None else [Collective.ALL_REDUCE.value, Collective.ALL_TO_ALL.value]
    candidates = [regime_band(fabric_class, regime_of(_SHARE[lat], kind), residuals, gpus)
                  for lat in latencies for kind in kinds]
    widest = max(candidates, key=lambda b: b.relative)
    if len(candidates) == 1:
        return widest
    unknown = " and ".join(w for w, given in (("latency share", latency_share), ("op", op)) if given is None)
    size = "< 1 MiB" if small else ">= 1 MiB"
    return replace(widest, regime=f"{widest.regime}; {unknown} not given: the widest regime {size}")


_SHARE = {BANDWIDTH_BOUND: 0.0, CROSSOVER: BANDWIDTH_BOUND_BELOW, LATENCY_BOUND: 1.0}  # a share in each regime


def regime_band(fabric_class: str | None, regime: str, residuals: Sequence[CollectiveResidual],
                gpus: int | None = None) -> ErrorBand:
    """The BAND_QUANTILE (split-conformal rank) of |error| over the residuals of `fabric_class` in `regime`
    (`regime_of`). Coarsened, never narrowed: a class with fewer than BAND_MIN_ROWS rows or BAND_MIN_SOURCES
    sweeps in the regime (or none: a fabric no sweep calibrated) takes the wider of its own rows' band and that
    of every scale-out class in the regime (in its latency regime where no scale-out row is of its op kind),
    named uncalibrated. Drawn from out-of-fit residuals (`band_residuals`), a class with rows of its own stands
    on them: the floor of every scale-out class's band that stood for a class's in-sample fit scatter is gone
    with the in-sample rows (until issue 43's out-of-fit residuals a scale-out class was never narrower than
    every scale-out class in its regime). A collective of more `gpus` than
    any sweep of its scale-out class measured takes the wider of that and the band of every scale-out row in
    every regime: rows of 2-node rings say little of a 1,024-GPU ring, nor does the regime its latency share is
    modelled in there."""
    scale_out = [r for r in residuals if r.fabric_class != ONE_DOMAIN and r.regime is not None]
    rows = [r for r in residuals if r.fabric_class == fabric_class and r.regime == regime]
    pooled = ([r for r in scale_out if r.regime == regime]
              or [r for r in scale_out if _latency_part(str(r.regime)) == _latency_part(regime)] or scale_out)
    meaning = _MEANING[_latency_part(regime)]
    label = f"collective, {fabric_class}, {regime} ({meaning})"
    relative = _quantile(rows) if rows else 0.0
    drawn = rows
    if len(rows) < BAND_MIN_ROWS or len({r.source for r in rows}) < BAND_MIN_SOURCES:
        if not pooled:
            raise ValueError(f"no collective residuals with a latency share: regenerate {COLLECTIVE_RESIDUALS.name}")
        relative, drawn = max(relative, _quantile(pooled)), pooled
        label = f"collective, {UNCALIBRATED} ({fabric_class or 'unknown'}: all classes), {regime} ({meaning})"
    largest = max((r.gpus for r in residuals if r.fabric_class == fabric_class), default=0)
    if gpus and fabric_class != ONE_DOMAIN and scale_out and 0 < largest < gpus:
        relative = max(relative, _quantile(scale_out))
        label += f"; {gpus} GPUs, beyond the largest validated ({largest}): widened to all classes' band"
    return ErrorBand(relative=relative, regime=label, rows=len(drawn), sources=len({r.source for r in drawn}))


def _quantile(rows: Sequence[CollectiveResidual]) -> float:
    return band_quantile([r.error for r in rows], BAND_QUANTILE)


def _own_band(r: CollectiveResidual, residuals: Sequence[CollectiveResidual]) -> ErrorBand:
    """The band a residual's collective gets from `residuals`: by its regime, or its size where not recorded."""
    return band_of(r.fabric_class, r.small, residuals, r.gpus, r.latency_share, r.op)


def out_of_sample_coverage(residuals: Sequence[CollectiveResidual], first_run: Sequence[CollectiveResidual],
                           by: str = "fabric_class") -> dict[str, tuple[int, int]]:
    """Per fabric class (or `by`="regime", "small"): (rows covered, rows) of the `first_run` residuals, each
    against the band its collective gets as on a fabric no sweep calibrated (`band_of` with class None), built
    without its own sweep in either pool: how far the uncalibrated band holds on sweeps it was not drawn from."""
    out: dict[str, tuple[int, int]] = {}
    for r in first_run:
        fitted = [o for o in residuals if o.source != r.source]
        unseen = [o for o in first_run if o.source != r.source]
        band = band_of(None, r.small, fitted, r.gpus, r.latency_share, r.op, unseen)
        key = str(getattr(r, by))
        hit, total = out.get(key, (0, 0))
        out[key] = (hit + (abs(r.error) <= band.relative), total + 1)
    return out


def leave_one_source_out_coverage(residuals: Sequence[CollectiveResidual], by: str = "fabric_class"
                                  ) -> dict[str, tuple[int, int]]:
    """Per fabric class (or `by`="regime": per latency regime): (rows covered, rows) when each sweep's rows are
    checked against the band built without that sweep (the honest coverage of the band)."""
    out: dict[str, tuple[int, int]] = {}
    for r in residuals:
        others = [o for o in residuals if o.source != r.source]
        covered = abs(r.error) <= _own_band(r, others).relative
        key = str(getattr(r, by))
        hit, total = out.get(key, (0, 0))
        out[key] = (hit + covered, total + 1)
    return out


def band_to_error_ratio(residuals: Sequence[CollectiveResidual], by: str | None = None) -> dict[str, float]:
    """Issue 43's sharpness check: the median band the rows' collectives get over their median |error|, over
    all rows ("all") and per fabric class (`by`="fabric_class") or latency regime (`by`="regime")."""
    bands = np.array([_own_band(r, residuals).relative for r in residuals])
    errors = np.abs([r.error for r in residuals])
    keys = np.array([str(getattr(r, by)) if by else "all" for r in residuals])
    ratios = {"all": float(np.median(bands) / np.median(errors))}
    for key in sorted(set(keys)):
        mine = keys == key
        ratios[str(key)] = float(np.median(bands[mine]) / max(float(np.median(errors[mine])), 1e-12))
    return ratios


def collective_band(system: System, gpus: int, size_bytes: float, fabric_name: str | None = None,
                    latency_share: float | None = None, op: str | None = None) -> ErrorBand:
    """The error band of a collective of `size_bytes` over `gpus` devices of `system` (as shipped, before it is
    sized to the group; on fabric `fabric_name` where given) whose modelled time is `latency_share` latency
    (`collective_rows.latency_share`; without it, the widest regime of its size) of `op` (a `Collective` value;
    without it, the wider of ring / tree and all-to-all): the class is one NVLink
    domain where the group fits in it, NVL72 racks, the named fabric's, or that of the fabric whose calibrated
    dimension the system's outermost tier is."""
    return band_of(system_fabric_class(system, gpus, fabric_name), size_bytes < SMALL_MESSAGE_BYTES,
                   band_residuals(), gpus, latency_share, op, first_run_residuals())


def sweep_bands(op: Collective, sizes: Array, group: Placement, system: System, unsized: System, gpus: int,
                algorithm: Algorithm = Algorithm.AUTO, composition: Composition = Composition.AUTO,
                fabric_name: str | None = None) -> list[ErrorBand]:
    """Per size of an `armillary collective` sweep: `collective_band` in the regime the model is in there (its
    latency share on `system`, the group's sized system; the class read on `unsized`, the system as shipped)."""
    shares = np.atleast_1d(latency_share(op, sizes, group, system, algorithm, composition))
    sizes = np.broadcast_to(np.asarray(sizes, float), shares.shape)
    return [collective_band(unsized, gpus, float(size), fabric_name, float(share), op.value)
            for size, share in zip(sizes, shares, strict=True)]


def row_band(row: dict[str, str]) -> ErrorBand | None:
    """The band of the collective a validation row measured, in the regime the harness models it in (what
    `armillary validate`'s coverage table checks); None where the row does not run."""
    try:
        reading = read_system(row)
        share = row_latency_share(row)
        size = float(message_bytes(row))
    except (Unsupported, ValueError):
        return None
    gpus = int(row.get("n_gpus") or 0) if (row.get("n_gpus") or "").isdigit() else 0
    return band_of(fabric_class(reading), size < SMALL_MESSAGE_BYTES, band_residuals(), gpus, share,
                   read_op(row.get("op") or "").value, first_run_residuals())


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
