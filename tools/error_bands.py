"""Write the residuals the error bands are drawn from (validation/data/residuals.json): every training,
inference and serving row as the model predicts it now (in sample), and the first untouched run of every
batch of new rows (out of sample: validation/data/out_of_sample.csv, with the batch model's re-read errors
where `tools/out_of_sample_reread.py` recorded them). Prints the leave-one-source-out coverage per regime, of
both pools, and the collective bands' figures (`collective_figures`: the residuals of
validation/data/collective_residuals.json, written by tools/calibrate_fabric.py --residuals). Run after a model
change: python tools/error_bands.py [--collectives: only the collective figures, without running any row]"""

from __future__ import annotations

import sys

import numpy as np

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
    CollectiveResidual,
    band_of,
    band_to_error_ratio,
    first_run_residuals,
    leave_one_source_out_coverage,
    out_of_sample_coverage,
    shipped_collective_residuals,
)
from armillary.validation.coverage import row_regime
from armillary.validation.out_of_sample import honest_errors
from armillary.validation.run import read_rows, run_row


def residuals() -> list[Residual]:
    """Training, static-batch inference and serving rows (collectives have bands of their own), in sample
    and out of sample."""
    out, regimes = [], {}
    for row in read_rows():
        if row["kind"] not in ("training", "inference"):
            continue
        result = run_row(row)
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
    |error| per fabric class and latency regime; the split's floor; the first-run (out-of-sample) rows'
    coverage by the band of a fabric no sweep calibrated, each sweep left out of both pools, and its ratio."""
    shipped, first = list(shipped_collective_residuals()), list(first_run_residuals())
    lines = [f"collectives in sample: {len(shipped)} residuals; leave-one-sweep-out coverage at the "
             f"{BAND_QUANTILE:.0%} rank {_share(leave_one_source_out_coverage(shipped))}; median band / median "
             f"|error| {band_to_error_ratio(shipped)['all']:.2f} (a class x regime split's floor, in sample at the "
             f"80% rank: {split_floor(shipped):.2f})"]
    for by in ("fabric_class", "regime"):
        coverage, ratios = leave_one_source_out_coverage(shipped, by), band_to_error_ratio(shipped, by)
        lines += [f"  {name}: {c}/{n} = {c / n:.0%}, ratio {ratios[name]:.2f}"
                  for name, (c, n) in sorted(coverage.items())]
    unseen = out_of_sample_coverage(shipped, first)
    bands = [band_of(None, r.small, [o for o in shipped if o.source != r.source], r.gpus, r.latency_share, r.op,
                     [o for o in first if o.source != r.source]).relative for r in first]
    ratio = float(np.median(bands) / np.median(np.abs([r.error for r in first])))
    lines.append(f"collectives first run out of sample, as on a fabric no sweep calibrated: coverage "
                 f"{_share(unseen)}; median band / median |error| {ratio:.2f}")
    lines += [f"  {name}: {c}/{n} = {c / n:.0%}" for name, (c, n) in sorted(unseen.items())]
    return lines


def main() -> None:
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
