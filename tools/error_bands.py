"""Write the residuals (training, inference and serving rows) the error bands are drawn from
(validation/data/residuals.json) and print the leave-one-source-out coverage per regime. Run after a model
change: python tools/error_bands.py"""

from __future__ import annotations

from armillary.validation.bands import Residual, leave_one_source_out, write_residuals
from armillary.validation.coverage import row_regime
from armillary.validation.run import read_rows, run_row


def residuals() -> list[Residual]:
    """Training, static-batch inference and serving rows (collectives have no band)."""
    out = []
    for row in read_rows():
        if row["kind"] not in ("training", "inference"):
            continue
        result = run_row(row)
        regime = row_regime(row) if result.error is not None else None
        if regime is not None and result.error is not None:
            out.append(Residual(result.group, regime, result.error))
    return out


def main() -> None:
    found = residuals()
    write_residuals(found)
    coverage = leave_one_source_out(found)
    covered = sum(c for c, _ in coverage.values())
    print(f"{len(found)} residuals; leave-one-source-out coverage {covered}/{len(found)} "
          f"= {covered / len(found):.0%}")
    for regime, (c, n) in sorted(coverage.items()):
        print(f"  {regime}: {c}/{n} = {c / n:.0%}")


if __name__ == "__main__":
    main()
