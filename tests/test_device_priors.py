"""An uncalibrated device carries a principled prior, never another vendor's curve: the presets that name a
`prior` hold exactly what tools/device_prior.py derives from it (curves at equal kernel time); the benchmarked
devices the priors read hold the published figures; a device still on another vendor's curve says it is a
placeholder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from armillary.presets.registry import preset_names
from armillary.specs.device import Precision
from armillary.specs.loading import load_device

TOOL = Path(__file__).parent.parent / "tools" / "device_prior.py"
_spec = importlib.util.spec_from_file_location("device_prior", TOOL)
assert _spec is not None and _spec.loader is not None
device_prior = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(device_prior)
WITH_PRIOR = [n for n in preset_names("devices") if load_device(n).prior is not None]


def test_the_amd_parts_take_mi300x_as_their_prior():
    assert {"mi325x", "mi355x"} <= set(WITH_PRIOR)


def test_the_tpus_take_the_benchmarked_v6e_as_their_prior():
    assert {load_device(n).prior for n in ("tpu-v4", "tpu-v5p", "tpu7x")} == {"tpu-v6e"}
    assert load_device("tpu-v6e").prior is None and "BENCHMARKED" in load_device("tpu-v6e").sources["matrix_efficiency"]


def _curve(device):
    return tuple(device.matrix_efficiency.points)


@pytest.mark.parametrize("name", preset_names("devices"))
def test_no_uncalibrated_device_carries_another_vendors_curve(name):
    """An uncalibrated device's GEMM curve is its own vendor's (a copy of the same chip, a prior of the same
    vendor at equal kernel time) or the vendor-neutral prior: never a copy of another platform's device."""
    device = load_device(name)
    if device.calibrated_on:
        return
    others = [o for o in preset_names("devices") if o != name and load_device(o).platform != device.platform]
    assert not any(_curve(load_device(o)) == _curve(device) for o in others), f"{name}: another vendor's curve"


NEUTRAL = [n for n in preset_names("devices")
           if load_device(n).sources["matrix_efficiency"].startswith(device_prior.NEUTRAL_LABEL)]


def test_the_devices_without_a_same_vendor_reference_take_the_vendor_neutral_prior():
    assert set(NEUTRAL) == {"trainium2", "wafer-dojo-d1"}


@pytest.mark.parametrize("name", NEUTRAL)
def test_a_vendor_neutral_prior_is_what_the_tool_derives(name):
    device = load_device(name)
    assert not device.calibrated_on and device.prior is None
    expected = device_prior.neutral_curve(device, device_prior.neutral_references())
    assert [x for p in device.matrix_efficiency.points for x in p] == pytest.approx(
        [x for p in expected for x in p], rel=1e-3)


def test_gaudi3_below_its_smallest_benchmark_takes_the_vendor_neutral_roll_off():
    """Gaudi 3's published matmul figures start at 1.03e11 FLOP (0.68); below it the points are the neutral prior
    scaled to meet that figure, not the A100's roll-off."""
    points = load_device("gaudi3").matrix_efficiency.points
    below = [list(p) for p in points if p[0] < 1.03e11]
    expected = device_prior.neutral_roll_off("gaudi3", device_prior.neutral_references(), (1.03e11, 0.68))
    assert len(below) == len(expected) >= 3
    assert [x for p in below for x in p] == pytest.approx([x for p in expected for x in p], rel=1e-3)
    assert [list(p) for p in points if p[0] >= 1.03e11] == [[1.03e11, 0.68], [4.34e12, 0.70]]


def test_the_neutral_references_are_every_curve_measured_on_its_own_device_once():
    """Each reference was fitted on its own rows or benchmarked on its own kernels; every calibrated device's
    curve is one of theirs (none left out), and no two references share a curve (none counted twice)."""
    references = {r: load_device(r) for r in device_prior.NEUTRAL_REFERENCES}
    for name, device in references.items():
        assert device.prior is None
        assert device.calibrated_on or "benchmark" in device.sources["matrix_efficiency"].lower(), name
    curves = {_curve(d) for d in references.values()}
    assert len(curves) == len(references) and len({d.platform for d in references.values()}) == 4
    for name in preset_names("devices"):
        if load_device(name).calibrated_on:
            assert _curve(load_device(name)) in curves, f"{name}: a measured curve the neutral prior leaves out"


def test_the_neutral_prior_by_hand():
    """At 1 ms of ideal kernel time every reference is measured: A100 0.714, H100 0.601, B200 0.553, MI300X
    0.540, Gaudi 3 0.695, TPU v6e 0.780 (their presets' curves); the median of six is the mean of the middle two.
    At 10 us Gaudi 3 (1.8e10 FLOP, below its first benchmarked 1.03e11) and TPU v6e (9.2e9, below 6.87e10) are
    not measured: the median is over the four GPUs."""
    trn2 = load_device("trainium2")

    def readings(t, names):
        return sorted(float(load_device(r).matrix_efficiency(t * load_device(r).matrix_peak(Precision.BF16)))
                      for r in names)

    every = readings(1e-3, device_prior.NEUTRAL_REFERENCES)
    assert float(trn2.matrix_efficiency(1e-3 * 667e12)) == pytest.approx((every[2] + every[3]) / 2, abs=1e-3)
    gpus = readings(1e-5, ("a100-sxm4-80gb", "h100-sxm", "b200", "mi300x"))
    assert float(trn2.matrix_efficiency(1e-5 * 667e12)) == pytest.approx((gpus[1] + gpus[2]) / 2, abs=1e-3)
    # a Trainium2 GEMM of 1e12 FLOP (1.5 ms ideal) is slower than on the A100-shaped placeholder it carried (0.80)
    assert float(trn2.matrix_efficiency(1e12)) < 0.7
