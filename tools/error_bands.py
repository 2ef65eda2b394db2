"""Write the residuals (training, inference and serving rows) the error bands are drawn from
(validation/data/residuals.json) and print the leave-one-source-out coverage per regime. Run after a model
change: python tools/error_bands.py"""

from __future__ import annotations

from armillary.validation.bands import (
    Regime,
    Residual,
    inference_regime,
    leave_one_source_out,
    regime_of,
    write_residuals,
)
from armillary.validation.inference_rows import inference_row_specs
from armillary.validation.rows import Unsupported, row_specs
from armillary.validation.run import choose_candidate, is_serving_row, read_rows, run_row
from armillary.validation.serving_rows import serving_row_specs


def _regime(row: dict[str, str]) -> Regime | None:
    """The regime of the configuration a row ran (None: it did not run)."""
    try:
        if row["kind"] == "training":
            _, chosen = choose_candidate(row_specs(row))
            return regime_of(chosen.model, chosen.system, chosen.strategy)
        if is_serving_row(row):
            s = serving_row_specs(row)
            return inference_regime(s.model, s.system, s.strategy, s.workload, s.engine.name)
        i = inference_row_specs(row)
        return inference_regime(i.model, i.system, i.strategy, i.workload)
    except (Unsupported, ValueError):
        return None


def residuals() -> list[Residual]:
    """Training, static-batch inference and serving rows (collectives have no band)."""
    out = []
    for row in read_rows():
        if row["kind"] not in ("training", "inference"):
            continue
        result = run_row(row)
        regime = _regime(row) if result.error is not None else None
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
