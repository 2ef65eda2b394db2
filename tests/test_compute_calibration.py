"""Compute calibration: the shared fitting routines, the swept shapes against the workload's own kernels,
a synthetic round trip (kernel times made from known parameters are fitted back within 2%), and, with
torch, a real quick calibration of this machine checked against a measured training step."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from armillary.calibrate.compute_bench import Measurement
from armillary.calibrate.compute_fit import FitInputs, fit_device
from armillary.calibrate.compute_kernels import Kernel, KernelKind, Sweep, workload_gemms
from armillary.calibrate.compute_records import (
    group_errors,
    read_measurements,
    round_trip,
    write_measurements,
)
from armillary.cli import app
from armillary.fitting import bisect, golden_section, non_decreasing_ramp
from armillary.plan.arrays import ModelArrays
from armillary.specs.device import Device, Precision
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.loading import load_device, load_model
from armillary.specs.memory import MemoryTier
from armillary.workload.experts import experts_forward
from armillary.workload.transformer import ends_forward, layer_forward

# ---- the shared fitting routines ---------------------------------------------------------------------


def test_bisect_and_golden_section_find_known_roots() -> None:
    lo, hi = bisect(lambda x: x * x < 2, 0.0, 2.0)
    assert lo <= math.sqrt(2) <= hi and hi - lo < 1e-12
    lo, hi = bisect(lambda x: x < 3e-5, 1e-8, 1.0, iterations=60, geometric=True)
    assert math.isclose((lo * hi) ** 0.5, 3e-5, rel_tol=1e-9)
    best = golden_section(lambda x: (np.log(x) - np.log(3e-6)) ** 2, np.geomspace(1e-8, 1e-2, 40))
    assert math.isclose(best, 3e-6, rel_tol=1e-6)


def test_ramp_is_non_decreasing_keeps_the_largest_and_never_faster() -> None:
    sizes = [1e3, 1e4, 1e5, 1e6]
    ramp = non_decreasing_ramp(sizes, [0.5, 0.2, 0.6, 0.4])
    assert ramp[-1] == 0.4 and all(a <= b for a, b in itertools.pairwise(ramp))
    times = [s / r for s, r in zip(sizes, ramp, strict=True)]
    assert all(a <= b for a, b in itertools.pairwise(times))


# ---- the swept shapes are the workload's GEMMs -------------------------------------------------------


@pytest.mark.parametrize(("model", "tp", "tokens"), [("mpt-125m", 2, 512), ("llama3-8b", 4, 1024),
                                                     ("mixtral-8x7b", 1, 256)])
def test_swept_gemms_carry_the_workloads_flops(model: str, tp: int, tokens: int) -> None:
    m = ModelArrays.of(load_model(model))
    fw = layer_forward(m, 1, tokens, tp, 0, 2)
    expected = {"qkv": fw.qkv.flop, "proj": fw.out_proj.flop, "head": ends_forward(m, 1, tokens, tp, 2).head_gemm.flop,
                "mlp_up": fw.mlp_in.flop, "mlp_down": fw.mlp_out.flop}
    if load_model(model).moe is not None:
        ex = experts_forward(m, tokens, 1, 1, 1.0, 2, 2)
        expected |= {"experts_up": ex.experts_in.flop, "experts_down": ex.experts_out.flop}
    swept = {k.label.split()[-1]: k for k in workload_gemms(model, tp, tokens, Precision.BF16)}
    assert swept.keys() <= expected.keys() and {"qkv", "proj", "head"} <= swept.keys()
    for name, kernel in swept.items():
        assert math.isclose(2 * kernel.m * kernel.n * kernel.k * kernel.batch, expected[name], rel_tol=1e-9), name
        assert math.isclose(kernel.flop, expected[name], rel_tol=1e-9)


# ---- synthetic round trip ----------------------------------------------------------------------------

_SIZES = (64, 128, 256, 512, 1024, 2048)  # square GEMMs: one per half decade of FLOPs
_TRUE_ETA = (0.05, 0.15, 0.35, 0.55, 0.70, 0.75)


def _truth() -> Device:
    curve = EfficiencyCurve(points=tuple((2.0 * n**3, e) for n, e in zip(_SIZES, _TRUE_ETA, strict=True)))
    return Device(name="truth", matrix_flops={Precision.BF16: 400e12}, vector_flops={Precision.BF16: 50e12},
                  matrix_efficiency=curve, flash_attention_efficiency=0.4, kernel_overhead=4e-6,
                  memory=(MemoryTier(name="HBM", capacity=80e9, bandwidth=3e12, efficiency=0.7),))


def _synthetic(truth: Device) -> list[Measurement]:
    p = Precision.BF16
    kernels = [Kernel(KernelKind.GEMM, p, n, n, n, label=f"gemm {n}") for n in _SIZES]
    kernels += [Kernel(KernelKind.FUSED_ATTENTION, p, s, 128, 1, 16) for s in (1024, 4096)]
    kernels += [Kernel(kind, p, n) for kind in (KernelKind.LAYERNORM, KernelKind.SOFTMAX) for n in (1 << 22, 1 << 26)]
    kernels += [Kernel(KernelKind.OPTIMIZER, Precision.FP32, 1 << 24), Kernel(KernelKind.LAUNCH, Precision.FP32, 1)]
    return [Measurement(k, k.predict(truth)) for k in kernels]


def test_synthetic_round_trip_recovers_the_parameters_within_2_percent() -> None:
    truth = _truth()
    fitted = fit_device(_synthetic(truth), FitInputs("fitted", 80e9, "synthetic", base=truth))
    assert math.isclose(fitted.kernel_overhead, truth.kernel_overhead, rel_tol=0.02)
    assert math.isclose(fitted.hbm.rate, truth.hbm.rate, rel_tol=0.02)
    assert math.isclose(fitted.flash_attention_efficiency, truth.flash_attention_efficiency, rel_tol=0.02)
    for (size, eta), (fsize, feta) in zip(truth.matrix_efficiency.points, fitted.matrix_efficiency.points,
                                          strict=True):
        assert math.isclose(size, fsize, rel_tol=1e-9) and math.isclose(eta, feta, rel_tol=0.02)


def test_synthetic_round_trip_without_a_base_predicts_every_kernel_within_2_percent(tmp_path: Path) -> None:
    measured = _synthetic(_truth())
    fitted = fit_device(measured, FitInputs("fitted", 80e9, "synthetic"))
    # the device file and the measurements written and read back give the same round trip
    (tmp_path / "d.yaml").write_text(fitted.model_dump_json())
    write_measurements(measured, tmp_path / "d.kernels.csv", "synthetic")
    again = read_measurements(tmp_path / "d.kernels.csv")
    assert [m.kernel for m in again] == [m.kernel for m in measured]
    rows = round_trip(again, load_device(str(tmp_path / "d.yaml")))
    assert max(abs(r.error) for r in rows) < 0.02
    assert all(g.max_abs < 0.02 for g in group_errors(rows))


def test_sweep_holds_back_shapes_not_fitted() -> None:
    sweep = Sweep((Precision.FP32,), ("mpt-125m",), (1,), (128,), ("mpt-350m",), (256,))
    kernels = sweep.kernels()
    held = [k for k in kernels if k.held_out]
    assert held and all(k.kind is KernelKind.GEMM for k in held)
    assert not {(k.m, k.n, k.k) for k in held} & {(k.m, k.n, k.k) for k in kernels if not k.held_out}


def test_bad_options_fail_with_a_named_field(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate-compute", "--device", "x", "--precisions", "fp64"])
    assert result.exit_code == 2 and "--precisions" in result.output
    missing = CliRunner().invoke(app, ["validate", "--device", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_without_torch_the_command_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails as if not installed
    result = CliRunner().invoke(app, ["calibrate-compute", "--device", "x", "--quick", "--out",
                                      str(tmp_path / "x.yaml")])
    assert result.exit_code == 2 and "armillary[commbench]" in result.output


# ---- a real calibration of this machine (torch) --------------------------------------------------------


def test_quick_calibration_of_this_machine_predicts_a_training_step(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from armillary.calibrate.train_step import StepConfig, estimate_step, measure_step

    out = tmp_path / "here.yaml"
    result = CliRunner().invoke(app, ["calibrate-compute", "--device", "here", "--quick", "--threads", "1",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    device = load_device(str(out))
    assert device.sources["calibration"].startswith("armillary calibrate-compute: measured")
    shown = CliRunner().invoke(app, ["validate", "--device", str(out), "--compare", str(tmp_path / "c.png")])
    assert shown.exit_code == 0 and "held out" in shown.output and (tmp_path / "c.png").stat().st_size > 0
    # a small GPT step measured with torch vs estimated on the fitted device; a loose bound for a busy
    # 2-core CI box and a quick sweep (the notes report the full calibration's figure)
    config = StepConfig(layers=2, hidden=256, heads=4, vocab=4096, seq=128, batch=2)
    measured, estimated = measure_step(config), estimate_step(config, device)
    assert 0.4 < estimated / measured < 2.5
