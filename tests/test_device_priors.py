"""An uncalibrated device carries a principled prior, never another vendor's curve: the presets that name a
`prior` hold exactly what tools/device_prior.py derives from it (curves at equal kernel time); the benchmarked
devices the priors read hold the published figures; a device still on another vendor's curve says it is a
placeholder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from armillary.presets.registry import preset_names
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
def test_no_uncalibrated_device_silently_carries_another_vendors_curve(name):
    """An uncalibrated device with no prior whose GEMM curve equals a device of another platform's says plainly
    that it is a placeholder; one with a prior reads its own vendor's."""
    device = load_device(name)
    if device.calibrated_on or device.prior is not None:
        return
    others = [o for o in preset_names("devices") if o != name and load_device(o).platform != device.platform]
    if any(_curve(load_device(o)) == _curve(device) for o in others):
        assert "PLACEHOLDER" in device.sources["matrix_efficiency"], f"{name}: another vendor's curve, unlabelled"


def test_benchmarked_points_are_the_published_figures():
    # TPU v6e: JAX/XLA bf16 8192^3 in 1510.9 us of device time (profiler trace), peak 918 TFLOP/s
    v6e = load_device("tpu-v6e")
    assert float(v6e.matrix_efficiency(2 * 8192**3)) == pytest.approx(2 * 8192**3 / 1510.94e-6 / 918e12, abs=0.005)
    # Gaudi 3: MAMF bf16 1243.0 TFLOP/s at 16384x4096x768, of the preset's 1835
    gaudi3 = load_device("gaudi3")
    assert float(gaudi3.matrix_efficiency(2 * 16384 * 4096 * 768)) == pytest.approx(1243.0 / 1835, abs=0.005)


@pytest.mark.parametrize("name", WITH_PRIOR)
def test_a_prior_is_what_the_tool_derives(name):
    device = load_device(name)
    prior = load_device(device.prior)
    assert not device.calibrated_on and device.platform == prior.platform  # the same vendor's software
    expected = device_prior.prior_fields(device, prior)
    def flat(points):
        return [x for p in points for x in p]

    assert flat(device.matrix_efficiency.points) == pytest.approx(flat(expected["matrix_efficiency"]["points"]),
                                                                  rel=1e-3)
    for precision, curve in expected.get("matrix_efficiency_by_precision", {}).items():
        assert flat(device.matrix_efficiency_by_precision[precision].points) == pytest.approx(
            flat(curve["points"]), rel=1e-3)
    for field in device_prior.COPIED:
        assert getattr(device, field) == pytest.approx(expected[field])
    assert device.hbm.efficiency == expected["hbm_efficiency"]
    assert "prior" in device.sources["matrix_efficiency"]


def test_equal_kernel_time_by_hand():
    mi355x, mi300x = load_device("mi355x"), load_device("mi300x")
    ratio = 2516.6 / 1307.4  # bf16 peaks (datasheets)
    f, e = mi300x.matrix_efficiency.points[1]
    # a GEMM ratio x larger on MI355X takes as long as f on MI300X: the same share of its peak
    assert float(mi355x.matrix_efficiency(f * ratio)) == pytest.approx(e, rel=1e-3)


def test_a_what_if_system_scales_the_hbm_it_says_it_scales():
    from armillary.specs.loading import load_system

    system = load_system("dgx-h100")
    faster = system.scaled(hbm_bandwidth=2.0)
    assert faster.device.hbm.bandwidth == 2 * system.device.hbm.bandwidth
    assert faster.device.memory[1:] == system.device.memory[1:]
