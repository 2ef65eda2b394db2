"""Write the residuals the error bands are drawn from (validation/data/residuals.json): every training,
inference and serving row as the model predicts it now (in sample), and the first untouched run of every
batch of new rows (out of sample: validation/data/out_of_sample.csv, with the batch model's re-read errors
where `tools/out_of_sample_reread.py` recorded them). Prints the leave-one-source-out coverage per regime, of
both pools. Run after a model change: python tools/error_bands.py"""

from __future__ import annotations

from armillary.validation.bands import Residual, leave_one_source_out, write_residuals
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


def main() -> None:
    found = residuals()
    write_residuals(found)
    for name, unseen in (("in sample", False), ("out of sample", True)):
        coverage = leave_one_source_out(found, out_of_sample=unseen)
        covered, total = sum(c for c, _ in coverage.values()), sum(n for _, n in coverage.values())
        print(f"{name}: {total} residuals; leave-one-source-out coverage {covered}/{total} "
              f"= {covered / max(total, 1):.0%}")
        for regime, (c, n) in sorted(coverage.items()):
            print(f"  {regime}: {c}/{n} = {c / n:.0%}")


if __name__ == "__main__":
    main()
