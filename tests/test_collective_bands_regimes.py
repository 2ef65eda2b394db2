"""Collective error bands by latency regime (the share of the modelled time that is latency: bandwidth-bound,
crossover, latency-bound) and op kind (all-to-all apart from ring / tree collectives), coarsened to all
scale-out classes where a regime is sparse, never narrowed on the way (issue 43)."""

import numpy as np
import pytest

from armillary.comm.sweep import group_of
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system
from armillary.validation.bands import band_quantile
from armillary.validation.collective_bands import (
    BAND_QUANTILE,
    UNCALIBRATED,
    band_of,
    band_to_error_ratio,
    collective_band,
    leave_one_source_out_coverage,
    regime_band,
    row_band,
    sweep_bands,
)
from armillary.validation.collective_residuals import (
    ALL_TO_ALL,
    BANDWIDTH_BOUND,
    CROSSOVER,
    LATENCY_BOUND,
    CollectiveResidual,
    band_residuals,
    latency_regime,
    regime_of,
    shipped_collective_residuals,
)
from armillary.validation.collective_rows import latency_share
from armillary.validation.collective_system import ONE_DOMAIN


def test_the_regime_is_the_modelled_latency_share():
    assert [latency_regime(s) for s in (0.0, 0.099, 0.1, 0.499, 0.5, 1.0)] == [
        BANDWIDTH_BOUND, BANDWIDTH_BOUND, CROSSOVER, CROSSOVER, LATENCY_BOUND, LATENCY_BOUND]
    assert regime_of(0.0, "all_to_all") == f"{BANDWIDTH_BOUND}, {ALL_TO_ALL}"
    assert regime_of(0.0, "send_recv") == f"{BANDWIDTH_BOUND}, {ALL_TO_ALL}"
    assert regime_of(0.7, "all_gather") == LATENCY_BOUND == regime_of(0.7, None)


def test_an_8_byte_all_reduce_is_latency_bound_and_a_16_gib_one_bandwidth_bound():
    """64 H100s over InfiniBand: 8 B is all protocol latency, 16 GiB all transfer; the share is a fraction."""
    system = load_system("dgx-h100", 64)
    shares = latency_share(Collective.ALL_REDUCE, np.array([8.0, 2.0**34]), group_of(system, 64), system)
    assert shares[0] > 0.99 and shares[1] < 0.05
    assert isinstance(latency_share(Collective.ALL_TO_ALL, 2.0**30, group_of(system, 64), system), float)


def _made_up(fabric: str, sweeps: str, error: float, share: float, op: str = "all_reduce",
             gpus: int = 16) -> list[CollectiveResidual]:
    return [CollectiveResidual(f"{s}-{i}", s, fabric, False, error, gpus, share, op) for s in sweeps for i in range(5)]


def test_a_sparse_or_unknown_regime_is_never_narrower_than_its_parent():
    """Issue 43: coarsening only widens. For every class and regime of the bands' out-of-fit pool, the band is
    at least its own rows' band; a sparse one (coarsened, named uncalibrated) at least every scale-out class's
    band in that regime; and not giving the share or the op gives at least the band of each regime it could
    be in."""
    residuals = band_residuals()
    classes = [*sorted({r.fabric_class for r in residuals}), "Omni-Path", None]
    scale_out = [r for r in residuals if r.fabric_class != ONE_DOMAIN]
    for regime in {str(r.regime) for r in residuals}:
        parent = band_quantile([r.error for r in scale_out if r.regime == regime], BAND_QUANTILE)
        for name in classes:
            band = regime_band(name, regime, residuals)
            rows = [r for r in residuals if r.fabric_class == name and r.regime == regime]
            if rows:
                assert band.relative >= band_quantile([r.error for r in rows], BAND_QUANTILE)
            if UNCALIBRATED in band.regime:
                assert band.relative >= parent, (name, regime)
    share = {BANDWIDTH_BOUND: 0.0, CROSSOVER: 0.2, LATENCY_BOUND: 0.9}
    for name in classes:
        for small in (False, True):
            unknown = band_of(name, small, residuals)
            assert "not given" in unknown.regime
            seen = ({str(r.regime).split(",")[0] for r in residuals if r.fabric_class == name and r.small == small}
                    or {str(r.regime).split(",")[0] for r in residuals if r.small == small})
            for latency in seen:
                for op in ("all_reduce", "all_to_all"):
                    assert unknown.relative >= band_of(name, small, residuals, None, share[latency], op).relative
                assert band_of(name, small, residuals, None, None, "all_reduce").relative >= band_of(
                    name, small, residuals, None, share[latency], "all_reduce").relative


def test_a_regime_without_rows_of_its_op_kind_takes_its_latency_regimes_pool():
    """Made-up: a fabric class whose only all-to-all rows exist nowhere else falls back to the pool of its latency
    regime (every op kind), not to nothing."""
    residuals = [*_made_up("InfiniBand", "AB", 0.05, 0.0), *_made_up("RoCE", "CD", 0.2, 0.0)]
    band = regime_band("InfiniBand", regime_of(0.0, "all_to_all"), residuals)
    assert UNCALIBRATED in band.regime
    assert band.relative == pytest.approx(band_quantile([r.error for r in residuals], BAND_QUANTILE))


def test_a_class_with_enough_out_of_fit_rows_stands_on_them_and_a_sparse_one_takes_the_pool():
    """Made-up: two tight sweeps of a class (10 rows, out of fit) and two loose sweeps of another: the tight
    class keeps its own band (its rows are no longer its fit reproduced: `out_of_fit_residuals`); with one sweep
    it is coarsened to the pool's band, named uncalibrated."""
    tight = _made_up("RoCE", "AB", 0.001, 0.0)
    loose = _made_up("InfiniBand", "CD", 0.2, 0.0)
    domain = _made_up(ONE_DOMAIN, "EF", 0.001, 0.0, gpus=8)
    residuals = [*tight, *loose, *domain]
    assert regime_band("RoCE", BANDWIDTH_BOUND, residuals).relative == pytest.approx(0.001)
    one = [*_made_up("RoCE", "A", 0.001, 0.0), *loose]
    pool = band_quantile([r.error for r in one], BAND_QUANTILE)
    sparse = regime_band("RoCE", BANDWIDTH_BOUND, one)
    assert sparse.relative == pytest.approx(pool) and UNCALIBRATED in sparse.regime
    assert regime_band(ONE_DOMAIN, BANDWIDTH_BOUND, residuals).relative == pytest.approx(0.001)


def test_each_class_and_each_regime_is_covered_when_its_sweep_is_left_out():
    residuals = shipped_collective_residuals()
    for by in ("fabric_class", "regime"):
        for name, (hit, total) in leave_one_source_out_coverage(residuals, by).items():
            assert hit / total >= 0.8, (by, name, hit, total)


def test_a_bandwidth_bound_collective_is_trusted_more_than_one_at_the_crossover():
    """The point of the split: on InfiniBand (134 rows, 7 sweeps) a large all-reduce's band is the fabric's
    efficiency scatter, narrower than where NCCL switches protocol; the all-to-all's +292% GB300 pair no
    longer widens the bandwidth-bound all-reduce across NVL72 racks."""
    residuals = shipped_collective_residuals()
    assert regime_band("InfiniBand", BANDWIDTH_BOUND, residuals).relative < 0.6 * regime_band(
        "InfiniBand", CROSSOVER, residuals).relative
    racks = "NVL72 multi-rack"
    assert regime_band(racks, BANDWIDTH_BOUND, residuals).relative < 0.5
    assert regime_band(racks, regime_of(0.0, "all_to_all"), residuals).relative > 2.0


def test_the_median_band_over_the_median_error():
    """Issue 43's sharpness figure on a hand example: 10 rows of two sweeps with |errors| 1..10% in one class
    and regime; each gets the split-conformal 85% rank of the ten (the 10th: 10%), the median |error| is 5.5%."""
    residuals = [CollectiveResidual(f"{s}-{i}", s, ONE_DOMAIN, False, (i + 1 + (5 if s == "B" else 0)) / 100, 8, 0.0,
                                    "all_reduce") for s in "AB" for i in range(5)]
    ratios = band_to_error_ratio(residuals, "fabric_class")
    assert ratios["all"] == pytest.approx(0.10 / 0.055) == ratios[ONE_DOMAIN]
    shipped = band_to_error_ratio(shipped_collective_residuals(), "regime")
    assert shipped[CROSSOVER] < 3  # where the errors are the model's, not its fits' (docs/collectives.md)


def test_the_command_and_the_harness_see_the_band_of_the_modelled_regime():
    """`sweep_bands` (the command's per-size bands) and `row_band` (the harness's) give each size the band of
    the regime the model is in there."""
    unsized, system = load_system("dgx-h100"), load_system("dgx-h100", 64)
    sizes = np.array([8.0, 2.0**24, 2.0**34])
    bands = sweep_bands(Collective.ALL_REDUCE, sizes, group_of(system, 64), system, unsized, 64)
    shares = latency_share(Collective.ALL_REDUCE, sizes, group_of(system, 64), system)
    for band, size, share in zip(bands, sizes, shares, strict=True):
        assert band == collective_band(unsized, 64, float(size), None, float(share), "all_reduce")
    assert LATENCY_BOUND in bands[0].regime and BANDWIDTH_BOUND in bands[-1].regime
    from armillary.validation.run import read_rows

    shipped = {r.id: r for r in shipped_collective_residuals()}
    row = next(r for r in read_rows() if r["id"] == "CO-H100-IBNDR-4N-AR-qoofyk-28")
    band = row_band(row)
    assert band is not None and shipped[row["id"]].regime in band.regime
