"""An uncalibrated device carries a principled prior, never another vendor's curve: the presets that name a
`prior` hold exactly what tools/device_prior.py derives from it (curves at equal kernel time)."""

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
