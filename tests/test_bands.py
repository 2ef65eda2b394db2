"""Error bands only widen as a regime is coarsened, and an uncalibrated device is never trusted more than a
calibrated one."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from armillary.validation.bands import _COARSENING, MIN_ROWS, Regime, Residual, band, shipped_residuals


def _coarsenings(regime: Regime) -> list[Regime]:
    out, current = [regime], regime
    for feature in _COARSENING:
        current = replace(current, **{feature: None})
        out.append(current)
    return out


def test_a_sparser_regime_never_gets_a_narrower_band_than_its_parent():
    residuals = shipped_residuals()
    for regime in {r.regime for r in residuals}:
        chain = _coarsenings(regime)
        for sparse, parent in pairwise(chain):
            own = [r for r in residuals if sparse.matches(r.regime)]
            if len(own) < MIN_ROWS:  # the sparse regime borrows its parent's rows: it may only widen
                assert band(sparse, residuals).relative >= band(parent, residuals).relative - 1e-12, sparse


def test_coarsening_keeps_the_sparse_rows_spread():
    wide = [Residual("a", Regime(True, "fp8", True, False, "<=64"), e) for e in (0.5, -0.6)]
    narrow = [Residual(f"s{i}", Regime(True, "fp8", False, False, "<=64"), 0.01) for i in range(20)]
    moe = band(Regime(True, "fp8", True, False, "<=64"), wide + narrow)
    assert moe.relative >= 0.5  # two MoE rows 50-60% off: the dense rows' 1% is not their band


def test_an_uncalibrated_device_is_never_trusted_more_than_a_calibrated_one():
    residuals = shipped_residuals()
    for regime in {replace(r.regime, calibrated=False) for r in residuals}:
        assert band(regime, residuals).relative >= band(replace(regime, calibrated=True), residuals).relative


def test_validate_reports_how_often_each_regimes_band_covers_its_rows():
    from armillary.validation.coverage import regime_coverage
    from armillary.validation.run import read_rows, run_row

    rows = [r for r in read_rows() if r["id"].startswith(("TR-KOR-T5", "TR-SC21-T1"))]
    coverage = regime_coverage(rows, [run_row(r) for r in rows])
    assert coverage and sum(c.rows for c in coverage) == len(rows)
    for c in coverage:
        assert 0 <= c.covered <= c.rows and 0 < c.band < 1
    everything = {c.regime: c for c in coverage}
    assert any("16-bit, dense, unsharded" in name for name in everything)


def test_compare_shows_each_runs_band_and_its_calibration_status():
    from armillary import api
    from armillary.estimate.compare import Section, compare

    strategy = {"tp": 8, "pp": 4, "zero": 1, "attention": "flash", "sequence_parallel": True}
    workload = {"seq_len": 4096, "global_batch": 256}
    a = api.estimate("llama3-70b", "dgx-h100", strategy, workload, gpus=256)
    b = api.estimate("llama3-70b", "mi355x-8", strategy, workload, gpus=256)
    c = compare([("h100", a), ("mi355x", b)])
    row = c.row(Section.SUMMARY, "error_band")
    assert row.values == (a.error_band.relative, b.error_band.relative) and row.values[1] >= row.values[0]
    assert "calibrated device" in c.bands[0] and "uncalibrated device" in c.bands[1]
