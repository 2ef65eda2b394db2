"""Write the residuals the error bands are drawn from (validation/data/residuals.json): every training,
inference and serving row as the model predicts it now (in sample), and the first untouched run of every
batch of new rows (out of sample: validation/data/out_of_sample.csv, with the batch model's re-read errors
where `tools/out_of_sample_reread.py` recorded them). Prints the leave-one-source-out coverage per regime, of
both pools, and the collective bands' figures (`collective_figures`: the residuals of
validation/data/collective_residuals.json, written by tools/calibrate_fabric.py --residuals). Run after a model
change: python tools/error_bands.py [--collectives: only the collective figures, without running any row]
[--refit: only the collective refits, validation/data/collective_refits.json: each row of a sweep a fabric preset
was fitted on with that fit redone on the fabric's other sweeps, tools/calibrate_fabric.py's own loss and search]"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import numpy as np

from armillary.comm.fabrics import fabrics
from armillary.validation.bands import (
    SERVING,
    STATIC_BATCH,
    TRAINING,
    Residual,
    band_quantile,
    leave_one_source_out,
    write_residuals,
)
from armillary.validation.collective_bands import (
    BAND_QUANTILE,
    band_of,
    band_to_error_ratio,
    leave_one_source_out_coverage,
    out_of_sample_coverage,
)
from armillary.validation.collective_residuals import (
    CALIBRATIONS,
    COLLECTIVE_REFITS,
    Calibration,
    CollectiveResidual,
    first_run_residuals,
    out_of_fit_residuals,
    read_refits,
    shipped_collective_residuals,
    uncalibrated_fields,
)
from armillary.validation.coverage import row_regime
from armillary.validation.out_of_sample import honest_errors
from armillary.validation.run import RowResult, read_rows, run_row
from armillary.writing import replaced

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate_fabric  # the fits themselves: tools/calibrate_fabric.py


def residuals(results: Mapping[str, RowResult] | None = None) -> list[Residual]:
    """Training, static-batch inference and serving rows (collectives have bands of their own), in sample
    and out of sample; `results`: rows already run, by id (the tests share one run of the set)."""
    out, regimes = [], {}
    for row in read_rows():
        if row["kind"] not in ("training", "inference"):
            continue
        result = results[row["id"]] if results is not None and row["id"] in results else run_row(row)
        regime = row_regime(row)
        regimes[row["id"]] = (result.group, regime)
        if regime is not None and result.error is not None:
            out.append(Residual(result.group, regime, result.error))
    for row_id, error in honest_errors().items():
        group, regime = regimes.get(row_id, ("", None))
        if regime is not None:
            out.append(Residual(group, regime, error, out_of_sample=True))
    return out


def _workload(described: str) -> str:
    """The workload of a regime as `Regime.describe` words it (training is left unsaid)."""
    return SERVING if ", serving" in described else STATIC_BATCH if described.endswith(STATIC_BATCH) else TRAINING


def _share(counts: dict[str, tuple[int, int]]) -> str:
    hit, total = sum(c for c, _ in counts.values()), sum(n for _, n in counts.values())
    return f"{hit}/{total} = {hit / max(total, 1):.0%}"


def split_floor(residuals: list[CollectiveResidual], quantile: float = 0.8) -> float:
    """The sharpest ratio of median band to median |error| a split by fabric class and latency regime (and op
    kind) could give: each row's band the `quantile` rank of its own cell, the row itself included, nothing
    left out, no floor or coarsening. A rule that covers left-out sweeps can only be wider."""
    cells: dict[tuple[str, str], list[float]] = {}
    for r in residuals:
        cells.setdefault((r.fabric_class, str(r.regime)), []).append(r.error)
    bands = [band_quantile(cells[(r.fabric_class, str(r.regime))], quantile) for r in residuals]
    return float(np.median(bands) / np.median(np.abs([r.error for r in residuals])))


def collective_figures() -> list[str]:
    """Issue 43's collective figures: in sample (each sweep left out) coverage and median band / median
    |error| per fabric class and latency regime; the split's floor; the same of the out-of-fit residuals the
    bands are drawn from (`collective_residuals.out_of_fit_residuals`: how each row's residual was had, the sweeps
    left out for want of one); the first-run (out-of-sample) rows' coverage by the band of a fabric no sweep
    calibrated, each sweep left out of both pools, and its ratio."""
    shipped, first = list(shipped_collective_residuals()), list(first_run_residuals())
    lines = [f"collectives in sample: {len(shipped)} residuals; leave-one-sweep-out coverage at the "
             f"{BAND_QUANTILE:.0%} rank {_share(leave_one_source_out_coverage(shipped))}; median band / median "
             f"|error| {band_to_error_ratio(shipped)['all']:.2f} (a class x regime split's floor, in sample at the "
             f"80% rank: {split_floor(shipped):.2f})"]
    for by in ("fabric_class", "regime"):
        coverage, ratios = leave_one_source_out_coverage(shipped, by), band_to_error_ratio(shipped, by)
        lines += [f"  {name}: {c}/{n} = {c / n:.0%}, ratio {ratios[name]:.2f}"
                  for name, (c, n) in sorted(coverage.items())]
    found = out_of_fit_residuals(shipped, first, read_refits())
    pool = [o.residual for o in found if o.residual is not None]
    reasons: dict[str, int] = {}
    for o in found:
        reasons[o.reason.split(":")[0]] = reasons.get(o.reason.split(":")[0], 0) + 1
    left = sorted({o.id.rsplit("-", 1)[0] for o in found if o.residual is None})
    lines.append(f"collectives out of fit (the bands' pool: each row of a sweep a preset was fitted on as a model "
                 f"without that fit gives it): {len(pool)} of {len(found)} rows "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}); left out: {', '.join(left)}; "
                 f"leave-one-sweep-out coverage {_share(leave_one_source_out_coverage(pool))}; median band / median "
                 f"|error| {band_to_error_ratio(pool)['all']:.2f} (median |error| "
                 f"{100 * float(np.median(np.abs([r.error for r in pool]))):.1f}%)")
    for by in ("fabric_class", "regime"):
        coverage, ratios = leave_one_source_out_coverage(pool, by), band_to_error_ratio(pool, by)
        lines += [f"  {name}: {c}/{n} = {c / n:.0%}, ratio {ratios[name]:.2f}"
                  for name, (c, n) in sorted(coverage.items())]
    unseen = out_of_sample_coverage(pool, first)
    bands = [band_of(None, r.small, [o for o in pool if o.source != r.source], r.gpus, r.latency_share, r.op,
                     [o for o in first if o.source != r.source]).relative for r in first]
    ratio = float(np.median(bands) / np.median(np.abs([r.error for r in first])))
    lines.append(f"collectives first run out of sample, as on a fabric no sweep calibrated: coverage "
                 f"{_share(unseen)}; median band / median |error| {ratio:.2f}")
    lines += [f"  {name}: {c}/{n} = {c / n:.0%}" for name, (c, n) in sorted(unseen.items())]
    return lines


def _refit_fields(fit: Calibration, rows: list[dict[str, str]]) -> dict[str, object]:
    """`fit`'s fabric fields fitted on `rows` as tools/calibrate_fabric.py --fabric fits them (efficiency on
    the rows of 1 MiB and above, latency on all rows, alternated, least absolute log error per sweep), the
    fabric's algorithms and unfitted fields as shipped; the latency search starts at NCCL tuning.cc's 14 us
    network latency, not at the shipped fit (docs/formulas.md section 1.3)."""
    rows = [r for r in rows if calibrate_fabric.read_system(r).fabric == fit.fabric]
    big = [r for r in rows if float(r["msg_bytes"]) >= 2**20]
    trial: dict[str, object] = {"latency": 14e-6} if "latency" in fit.fields else {}
    for _ in range(3 if "latency" in fit.fields else 1):
        if big and "efficiency" in fit.fields:
            trial["efficiency"] = calibrate_fabric._golden(
                partial(calibrate_fabric._loss, big, trial, "efficiency"), 0.05, 1.0)
        if rows and "latency" in fit.fields:
            trial["latency"] = calibrate_fabric._golden(
                partial(calibrate_fabric._loss, rows, trial, "latency"), 1e-7, 1e-2)
    return trial


def _refit_incast(fit: Calibration, rows: list[dict[str, str]]) -> float:
    """`fit`'s fabric incast on the all-to-all rows of 1 MiB and above among `rows` (tools/calibrate_fabric.py
    --incast: kept at 0 where it does not lower the loss); 0 without such rows."""
    rows = [{**r, "_fabric": str(fit.fabric)} for r in rows
            if calibrate_fabric.read_op(r["op"]).value == "all_to_all" and float(r["msg_bytes"]) >= 2**20
            and calibrate_fabric.read_system(r).fabric == fit.fabric]
    if not rows:
        return 0.0
    dimension = calibrate_fabric.fabric_dimension(str(fit.fabric)).name
    incast = calibrate_fabric._golden(partial(calibrate_fabric._incast_loss, rows, dimension), 1e-4, 1.0)
    return 0.0 if calibrate_fabric._incast_loss(rows, dimension, 0.0) <= calibrate_fabric._incast_loss(
        rows, dimension, incast) else incast


def _refit_channel(fit: Calibration, rows: list[dict[str, str]]) -> float | None:
    """`fit`'s fabric channel rate on the sweeps of `rows` (tools/calibrate_fabric.py --channel-rate:
    comm/calibration.fit_channel_bandwidth on their largest messages); None without rows."""
    by_sweep: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_sweep.setdefault(calibrate_fabric.sweep_of(r["id"]), []).append(r)
    if not by_sweep:
        return None
    preset = fabrics()[str(fit.fabric)].dimension_of
    sweeps = [calibrate_fabric.sweep(mine) for mine in by_sweep.values()]
    fitted = calibrate_fabric.fit_channel_bandwidth([(pts, op, gpus) for op, gpus, pts in sweeps],
                                                    calibrate_fabric.load_system(str(preset)))
    return fitted.network[-1].channel_bandwidth


# the NVLink hops across racks before --nvlink-domain: NCCL tuning.cc hwLat of an NVLink ring hop, LL 0.6 us and
# LL128 1.9 us, and no LL128 bus-bandwidth cap (tools/calibrate_fabric.py fit_nvlink_domain starts there)
_UNCALIBRATED_DOMAIN = {"protocol_latency": {"LL": 0.6e-6, "LL128": 1.9e-6}, "ring_busbw": {"LL128": 1e12}}


def refit_residuals() -> dict[str, dict[str, object]]:
    """Per row of a sweep a preset was fitted on (`CALIBRATIONS`, fits inside a node apart): its error from the
    model with every fit it entered redone on the other sweeps (`Calibration.refittable`: "how" "refit") or,
    where one of them was fitted on it alone, that one reset to uncalibrated ("uncalibrated"), the others
    redone; with the values used. Incast first, then the fabric fields with that incast."""
    rows = [r for r in read_rows() if r.get("kind") == "collective"]
    by_sweep: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_sweep.setdefault(calibrate_fabric.sweep_of(r["id"]), []).append(r)
    out: dict[str, dict[str, object]] = {}
    shipped_incast = calibrate_fabric._SHIPPED_INCAST
    for left in sorted({s for c in CALIBRATIONS for s in c.sweeps}):
        fits = [c for c in CALIBRATIONS if left in c.sweeps]
        if any(c.refit is None for c in fits):
            continue  # a fit inside a node: no trial field reaches it
        how = "refit" if all(c.refittable for c in fits) else "uncalibrated"
        trial: dict[str, dict[str, object]] = {}  # per fabric
        incast: dict[str, float] = {}
        domain: dict[str, dict[str, float]] | None = None
        for c in fits:
            others = [r for s in c.sweeps if s != left for r in by_sweep.get(s, [])]
            fields = trial.setdefault(str(c.fabric), {}) if c.fabric else {}
            if c.refit == "incast":
                incast[str(c.fabric)] = _refit_incast(c, others) if c.refittable else 0.0
            elif c.refit == "channel":
                fields["channel_bandwidth"] = _refit_channel(c, others) if c.refittable else None
            elif c.refit == "domain":
                domain = _UNCALIBRATED_DOMAIN
        patched = {calibrate_fabric.fabric_dimension(name).name: value for name, value in incast.items()}
        calibrate_fabric.fabrics_module._incast_by_dimension = lambda p=patched: {**shipped_incast(), **p}  # type: ignore[misc]
        try:
            for c in fits:  # the fabric fields, with the incast found
                fields = trial.setdefault(str(c.fabric), {}) if c.fabric else {}
                if c.refit == "fabric" and c.refittable:
                    kept = [r for s in c.sweeps if s != left for r in calibrate_fabric.monotone(by_sweep.get(s, []))]
                    fields.update(_refit_fields(c, kept))
                elif c.refit in ("fabric", "tier"):
                    fields.update(uncalibrated_fields(c))
            for row in by_sweep.get(left, []):
                if run_row(row).error is None:
                    continue
                mine = trial.get(str(calibrate_fabric.read_system(row).fabric)) or None
                measured, _ = calibrate_fabric.best_of_runs(row, float(row["value"]))
                _, predicted, _ = calibrate_fabric.predict_collective(row, mine, domain)
                out[row["id"]] = {"error": round(predicted / measured - 1, 6), "how": how, "without": left,
                                  "fields": {f: t for f, t in trial.items() if t}, "incast": incast,
                                  "domain": domain is not None}
        finally:
            calibrate_fabric.fabrics_module._incast_by_dimension = shipped_incast
        print(f"{left}: {how}, {len([k for k, v in out.items() if v['without'] == left])} rows, {trial} incast "
              f"{incast}{' NVLink hops uncalibrated' if domain else ''}", flush=True)
    return out


def write_refits(refits: dict[str, dict[str, object]], path: Path = COLLECTIVE_REFITS) -> None:
    with replaced(path) as temporary:
        temporary.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                                                 for k, v in sorted(refits.items())) + "\n}\n")


def main() -> None:
    if "--refit" in sys.argv[1:]:
        write_refits(refit_residuals())
        print("\n".join(collective_figures()))
        return
    if "--collectives" in sys.argv[1:]:
        print("\n".join(collective_figures()))
        return
    found = residuals()
    write_residuals(found)
    for name, unseen in (("in sample", False), ("out of sample", True)):
        coverage = leave_one_source_out(found, out_of_sample=unseen)
        covered, total = sum(c for c, _ in coverage.values()), sum(n for _, n in coverage.values())
        print(f"{name}: {total} residuals; leave-one-source-out coverage {covered}/{total} "
              f"= {covered / max(total, 1):.0%}")
        for workload in (TRAINING, STATIC_BATCH, SERVING):
            mine = [(c, n) for regime, (c, n) in coverage.items() if _workload(regime) == workload]
            if mine:
                hit, rows = sum(c for c, _ in mine), sum(n for _, n in mine)
                print(f" {workload}: {hit}/{rows} = {hit / rows:.0%}")
        for regime, (c, n) in sorted(coverage.items()):
            print(f"  {regime}: {c}/{n} = {c / n:.0%}")
    print("\n".join(collective_figures()))


if __name__ == "__main__":
    main()
