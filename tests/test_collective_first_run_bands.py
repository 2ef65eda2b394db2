"""A collective on a fabric no sweep calibrated takes at least the band of the collectives first run on fabrics
not yet calibrated (the 2026-12-06 batch's first untouched run, validation/data/out_of_sample.csv), by message
size; coarsening only widens; and its coverage on those rows is measured with each sweep left out of the pools
its band is drawn from (issue 43)."""

import pytest

from armillary.specs.loading import load_system
from armillary.validation.bands import band_quantile
from armillary.validation.collective_bands import (
    BAND_QUANTILE,
    UNCALIBRATED_FIRST_RUN,
    band_of,
    collective_band,
    out_of_sample_coverage,
    regime_band,
    uncalibrated_band,
)
from armillary.validation.collective_residuals import (
    CollectiveResidual,
    band_residuals,
    first_run_residuals,
    shipped_collective_residuals,
)
from armillary.validation.collective_system import ONE_DOMAIN
from armillary.validation.out_of_sample import read_out_of_sample


def _rows(fabric: str, sweeps: str, errors: list[float], small: bool = False, gpus: int = 16,
          share: float = 0.0) -> list[CollectiveResidual]:
    return [CollectiveResidual(f"{s}-{i}", s, fabric, small, e, gpus, share, "all_reduce")
            for s in sweeps for i, e in enumerate(errors)]


def test_the_band_is_the_split_conformal_rank_of_the_first_run_rows_of_its_size():
    """Hand calculation: 2 sweeps x 5 large-message rows with |errors| 0.1..0.5 and 0.6..1.0: the 85% rank of
    10 is the ceil(0.85 x 11) = 10th smallest, 1.0; in-sample a band of 0.05 is widened to it, named."""
    first = [*_rows("RoCE", "A", [0.1, 0.2, 0.3, 0.4, 0.5]), *_rows("EFA", "B", [0.6, 0.7, 0.8, 0.9, 1.0])]
    inside = regime_band(None, "bandwidth-bound", _rows("RoCE", "CD", [0.05] * 5))
    band = uncalibrated_band(inside, False, first)
    assert band.relative == pytest.approx(1.0) and band.rows == 10 and band.sources == 2
    assert UNCALIBRATED_FIRST_RUN in band.regime and inside.regime in band.regime
    # never narrower than the in-sample band it widens
    assert uncalibrated_band(inside, False, _rows("RoCE", "AB", [0.01] * 5)) == inside


def test_a_sparse_size_is_never_narrower_than_every_first_run_row():
    """Issue 43: coarsening only widens. Three small-message rows of one sweep (fewer than 8 rows, 1 sweep):
    the wider of their band and all rows'; with 8 rows of 2 sweeps their own band, even where narrower. One
    NVLink domain's first-run rows never enter the pool (a fabric without rows is a scale-out one)."""
    large = [*_rows("RoCE", "A", [1.0, 2.0, 3.0, 4.0]), *_rows("EFA", "B", [5.0, 6.0, 7.0, 8.0])]
    few = _rows("RoCE", "S", [0.1, 0.2, 0.3], small=True)
    zero = regime_band(None, "bandwidth-bound", _rows("RoCE", "CD", [0.0] * 5))
    assert uncalibrated_band(zero, True, [*large, *few]).relative == pytest.approx(
        band_quantile([r.error for r in [*large, *few]], BAND_QUANTILE))
    enough = _rows("RoCE", "ST", [0.1, 0.2, 0.3, 0.4], small=True)
    assert uncalibrated_band(zero, True, [*large, *enough]).relative == pytest.approx(0.4)
    domain = _rows(ONE_DOMAIN, "XY", [50.0] * 5, gpus=8)
    assert uncalibrated_band(zero, False, [*large, *domain]) == uncalibrated_band(zero, False, large)


def test_only_a_fabric_no_sweep_calibrated_is_widened():
    residuals, first = band_residuals(), first_run_residuals()
    h20 = collective_band(load_system("hgx-h20", 16), 16, 2.0**30, latency_share=0.01, op="all_reduce")
    scale_out = [r.error for r in first if r.fabric_class != ONE_DOMAIN and not r.small]
    assert h20.relative == pytest.approx(max(band_quantile(scale_out, BAND_QUANTILE),
                                             regime_band(None, "bandwidth-bound", residuals).relative))
    assert UNCALIBRATED_FIRST_RUN in h20.regime
    ib = collective_band(load_system("dgx-h100", 64), 64, 2.0**30, latency_share=0.01, op="all_reduce")
    assert UNCALIBRATED_FIRST_RUN not in ib.regime
    assert ib == band_of("InfiniBand", False, residuals, 64, 0.01, "all_reduce")
    # an unknown class name is a fabric no sweep calibrated too
    assert UNCALIBRATED_FIRST_RUN in band_of("Omni-Path", False, residuals, 16, 0.01, "all_reduce", first).regime


def test_the_first_run_residuals_are_the_recorded_errors_of_rows_the_harness_runs():
    recorded = {r.id: r.error for r in read_out_of_sample() if r.kind == "collective" and r.error is not None}
    now = {r.id: r for r in shipped_collective_residuals()}
    first = first_run_residuals()
    assert first and {r.id for r in first} == set(recorded) & set(now)
    for r in first:
        assert r.error == recorded[r.id] and r.source == now[r.id].source and r.small == now[r.id].small


def test_no_sweep_covers_itself():
    """Made-up: sweep B erred 20x where the others erred 10%: left out, B meets the others' band and is not
    covered; A and C are."""
    fitted = _rows("RoCE", "DE", [0.01] * 5)
    first = [*_rows("RoCE", "AC", [0.1] * 5), *_rows("EFA", "B", [20.0] * 5)]
    coverage = out_of_sample_coverage(fitted, first)
    assert coverage == {"RoCE": (10, 10), "EFA": (0, 5)}


def test_the_uncalibrated_band_covers_the_first_run_rows_of_sweeps_it_was_not_drawn_from():
    """Issue 43's acceptance on the recorded out-of-sample collectives: 80% of the rows, each sweep left out
    (75 of 88 at the commit of this test; 24 of 88 with the bands the rows' classes get now they are
    calibrated). The one NVL72 RoCE sweep (33 rows) is covered in 20 of 33: no other sweep erred 10x."""
    coverage = out_of_sample_coverage(shipped_collective_residuals(), first_run_residuals())
    hit, total = sum(h for h, _ in coverage.values()), sum(t for _, t in coverage.values())
    assert total >= 70 and hit / total >= 0.8, coverage
