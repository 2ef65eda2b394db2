"""How often the printed error band covered the measurement, per regime: `armillary validate`'s check that
the trust signal holds on the rows it was drawn from (and, for a new batch, on rows it had never seen)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from armillary.estimate.result import ErrorBand
from armillary.validation.bands import Regime, inference_regime, regime_of, shipped_band
from armillary.validation.collective_bands import row_band as collective_row_band
from armillary.validation.inference_rows import inference_row_specs
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import RowResult, choose_candidate, is_serving_row


def row_regime(row: dict[str, str]) -> Regime | None:
    """The regime of the configuration a training or inference row ran (None: it did not run)."""
    try:
        if row["kind"] == "training":
            _, chosen = choose_candidate(row_specs(row))
            return regime_of(chosen.model, chosen.system, chosen.strategy)
        if row["kind"] != "inference":
            return None
        if is_serving_row(row):
            from armillary.validation.serving_rows import serving_row_specs  # the serving kernels: on first use

            s = serving_row_specs(row)
            return inference_regime(s.model, s.system, s.strategy, s.workload, s.engine.family.value)
        i = inference_row_specs(row)
        return inference_regime(i.model, i.system, i.strategy, i.workload)
    except (Unsupported, ValueError):
        return None


def row_band(row: dict[str, str]) -> ErrorBand | None:
    """The band the estimate of a row's configuration prints: its regime's (training, inference), or its fabric
    class's, latency regime's and op kind's (collectives); None where the row does not run."""
    if row.get("kind") == "collective":
        return collective_row_band(row)
    regime = row_regime(row)
    return shipped_band(regime) if regime is not None else None


@dataclass(frozen=True)
class RegimeCoverage:
    regime: str  # the rows' full regime
    band: float  # the band an estimate of that regime prints
    rows: int
    covered: int  # rows whose |error| lies inside the band
    mean_abs_error: float


def regime_coverage(rows: Sequence[dict[str, str]], results: Sequence[RowResult]) -> list[RegimeCoverage]:
    """Per regime of the rows that ran (training and inference by their regime, collectives by fabric class
    and size): the band, how many rows it covers, and their mean |error|."""
    by_id = {r["id"]: r for r in rows}
    groups: dict[str, tuple[float, list[float]]] = {}
    for result in results:
        row = by_id.get(result.id)
        band = row_band(row) if result.error is not None and row is not None else None
        if band is None or result.error is None:
            continue
        _, errors = groups.setdefault(band.regime, (band.relative, []))
        errors.append(abs(result.error))
    return [RegimeCoverage(name, band, len(errors), int(np.sum(np.asarray(errors) <= band)),
                           float(np.mean(errors))) for name, (band, errors) in sorted(groups.items())]
