"""Write the training residuals the error bands are drawn from (validation/data/residuals.json) and print
the leave-one-source-out coverage per regime. Run after a model change: python tools/error_bands.py"""

from __future__ import annotations

from armillary.validation.bands import Residual, leave_one_source_out, regime_of, write_residuals
from armillary.validation.rows import Unsupported, row_specs
from armillary.validation.run import choose_candidate, read_rows, run_row


def residuals() -> list[Residual]:
    out = []
    for row in read_rows():
        if row["kind"] != "training":
            continue
        result = run_row(row)
        if result.error is None:
            continue
        try:
            _, chosen = choose_candidate(row_specs(row))
        except (Unsupported, ValueError):
            continue
        out.append(Residual(result.group, regime_of(chosen.model, chosen.system, chosen.strategy), result.error))
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
