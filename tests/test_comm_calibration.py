"""Calibration round trip: nccl-tests logs made from known parameters are fitted back within 2%."""

import numpy as np
import pytest
from typer.testing import CliRunner

from armillary.cli import app
from armillary.comm.calibration import fit_tier, parse_nccl_tests
from armillary.comm.sweep import collective_sweep, group_of, parse_sizes
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def nccl_tests_log(system, op, gpus, sizes="1K:16G"):
    rows = collective_sweep(op, parse_sizes(sizes), group_of(system, gpus), system)
    lines = [f"{r.size_bytes:12.0f} {r.size_bytes / 4:13.0f}     float     sum      -1 {r.time_s * 1e6:8.2f} "
             f"{r.algbw_bytes_per_s / 1e9:7.2f} {r.busbw_bytes_per_s / 1e9:7.2f}      0 {r.time_s * 1e6:8.2f} "
             f"{r.algbw_bytes_per_s / 1e9:7.2f} {r.busbw_bytes_per_s / 1e9:7.2f}      0" for r in rows]
    return HEADER + "\n".join(lines) + "\n# Avg bus bandwidth    : 123.4\n"


def _perturbed(system, tier, latency, efficiency):
    return system.with_dimension(tier, latency=latency, efficiency=efficiency)


@pytest.mark.parametrize(("preset", "gpus", "tier"), [("dgx-a100", 8, 0), ("dgx-a100", 32, 1)])
def test_round_trip_recovers_latency_and_efficiency(preset, gpus, tier):
    truth = load_system(preset, gpus)
    measured = parse_nccl_tests(nccl_tests_log(truth, Collective.ALL_REDUCE, gpus))
    start = _perturbed(truth, tier, truth.network[tier].latency * 3, 0.5)
    fitted = fit_tier(measured, Collective.ALL_REDUCE, gpus, start)
    got, want = fitted.network[tier], truth.network[tier]
    assert got.efficiency == pytest.approx(want.efficiency, rel=0.02)
    assert got.latency == pytest.approx(want.latency, rel=0.02)
    again = parse_nccl_tests(nccl_tests_log(fitted, Collective.ALL_REDUCE, gpus))
    ratio = np.array([m.time_s / a.time_s for a, m in zip(again, measured, strict=True)])
    assert np.all(np.abs(ratio - 1) < 0.02)


def test_size_efficiency_reproduces_a_ramp():
    """A fabric whose mid-size messages reach only part of the bandwidth (a known ramp) is fitted back from
    its sweep, starting from the plain alpha-beta description."""
    from armillary.specs.efficiency import EfficiencyCurve

    plain = load_system("hgx-h200", 8)
    plain = plain.with_dimension(0, size_efficiency=None)
    ramp = EfficiencyCurve(points=((1e6, 0.3), (64e6, 1.0)))
    truth = plain.with_dimension(0, size_efficiency=ramp)
    measured = parse_nccl_tests(nccl_tests_log(truth, Collective.ALL_REDUCE, 8, "1K:1G"))
    fitted = fit_tier(measured, Collective.ALL_REDUCE, 8, plain)
    assert fitted.network[0].size_efficiency is not None
    again = parse_nccl_tests(nccl_tests_log(fitted, Collective.ALL_REDUCE, 8, "1K:1G"))
    errors = [m.time_s / a.time_s - 1 for a, m in zip(again, measured, strict=True)]
    assert max(abs(e) for e in errors) < 0.03


def test_parse_rejects_a_file_without_results():
    with pytest.raises(ValueError, match="no nccl-tests result rows"):
        parse_nccl_tests("# just a header\n")


def test_calibrate_network_command(tmp_path):
    log = tmp_path / "ar.log"
    log.write_text(nccl_tests_log(load_system("dgx-a100", 8), Collective.ALL_REDUCE, 8))
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(app, ["calibrate-network", str(log), "--system", "dgx-a100", "--gpus", "8",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    fitted = load_system(str(out))
    assert fitted.network[0].latency == pytest.approx(load_system("dgx-a100").network[0].latency, rel=0.02)
