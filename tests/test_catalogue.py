"""The hardware catalogue (issue 21): B300, H20, MI325X, MI355X, TPU v6e, TPU7x, Gaudi 3 and Trainium2 presets
load, cite a source for every number, say they are uncalibrated, match the datasheet headline figures they
cite (worked out here from the vendors' own per-system or per-clock figures), and estimate a small model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from armillary import estimate, load_system
from armillary.cli import app
from armillary.specs.device import Precision
from armillary.specs.loading import load_device

NEW_DEVICES = ("b300", "h20", "mi325x", "mi355x", "tpu-v6e", "tpu7x", "gaudi3", "trainium2")
NEW_SYSTEMS = ("dgx-b300", "hgx-h20", "mi325x-8", "mi355x-8", "tpu-v6e-slice", "tpu7x-slice", "hls-gaudi3",
               "trn2-16", "trn2-ultraserver")
GiB, TB = 2**30, 1e12


@pytest.mark.parametrize("name", NEW_DEVICES)
def test_new_device_cites_every_number_and_is_uncalibrated(name):
    d = load_device(name)
    for field in ("matrix_flops", "matrix_efficiency", "memory", "kernel_overhead", "power"):
        assert d.sources.get(field), f"{name}: no source for {field}"
    if d.second_tier is not None:
        assert d.sources.get("memory_tier2"), f"{name}: no source for its second memory tier"
    assert d.calibrated_on == ()
    assert "UNCALIBRATED" in d.sources["matrix_efficiency"]


@pytest.mark.parametrize("name", NEW_SYSTEMS)
def test_new_system_cites_every_dimension(name):
    system = load_system(name)
    assert system.device.calibrated_on == ()
    for dim in system.network:
        for field in ("bandwidth", "latency", "efficiency"):
            assert dim.sources.get(field), f"{name}/{dim.name}: no source for {field}"


# (device, precision, dense peak FLOP/s) from the datasheet figures each preset cites, computed from the
# vendors' own aggregate or per-clock numbers rather than copied from the preset
PEAKS = [
    ("b300", Precision.BF16, 36e15 / 8 / 2),  # HGX B300: 36 PFLOPS BF16 with sparsity per 8 GPUs
    ("b300", Precision.FP8, 72e15 / 8 / 2),  # HGX B300: 72 PFLOPS FP8 with sparsity per 8 GPUs
    ("gb200", Precision.BF16, 360e15 / 72 / 2),  # GB200 NVL72: 360 PFLOPS FP16/BF16 with sparsity per 72 GPUs
    ("gb200", Precision.FP8, 720e15 / 72 / 2),  # GB200 NVL72: 720 PFLOPS FP8 with sparsity per 72 GPUs
    ("h20", Precision.BF16, 148e12),  # H20 spec sheet, dense FP16/BF16
    ("mi325x", Precision.BF16, 1307.4e12),  # AMD MI325X datasheet, dense (= MI300X)
    ("mi355x", Precision.FP8, 8 * 32 * 8192 * 2.4e9),  # 256 CUs x 8192 FP8 FLOP/clock (ISSCC 2026) x 2.4 GHz
    ("mi355x", Precision.BF16, 8 * 32 * 4096 * 2.4e9),  # BF16 at half the FP8 rate: AMD's 2.5 PFLOPS
    ("tpu-v6e", Precision.BF16, 918e12),  # Cloud TPU v6e page
    ("tpu7x", Precision.BF16, 2307e12),  # Cloud TPU7x page
    ("tpu7x", Precision.FP8, 4614e12),
    ("gaudi3", Precision.BF16, 1835e12),  # Intel Hot Chips 2024 spec table
    ("trainium2", Precision.BF16, 10.7e15 / 16),  # trn2.48xlarge: 10.7 PFLOPS BF16 for 16 chips
    ("trainium2", Precision.FP8, 20.8e15 / 16),  # trn2.48xlarge: 20.8 PFLOPS FP8 for 16 chips
]


@pytest.mark.parametrize(("name", "precision", "peak"), PEAKS, ids=lambda v: getattr(v, "value", str(v)))
def test_dense_peak_matches_datasheet(name, precision, peak):
    assert load_device(name).matrix_peak(precision) == pytest.approx(peak, rel=0.005)


# (device, HBM bytes, HBM bytes/s)
HBM = [
    ("b300", 2.3e12 / 8, 64 * TB / 8),  # HGX B300: 2.3 TB, 64 TB/s per 8 GPUs
    # GB200 NVL72: 13.4 TB HBM3e at 576 TB/s per 72 GPUs, "186 GB" a GPU as NVIDIA writes GiB (MIG 7g.186gb);
    # nvidia-smi shows 189,471 MiB = 185.0 GiB (the preset's source)
    ("gb200", 185 * GiB, 576 * TB / 72),
    ("h20", 96e9, 4.0 * TB),
    ("mi325x", 2e12 / 8 * 1.024, 6 * TB),  # the MI325X platform's "2 TB" is 8 x 256 GB
    ("mi355x", 288e9, 8 * TB),
    ("tpu-v6e", 32 * GiB, 1638e9),
    ("tpu7x", 192 * GiB, 7380e9),
    ("gaudi3", 128e9, 3.67 * TB),
    ("trainium2", 1536 * GiB / 16, 46.4 * TB / 16),  # trn2.48xlarge: 1,536 GiB at 46.4 TB/s for 16 chips
]


@pytest.mark.parametrize(("name", "capacity", "bandwidth"), HBM, ids=[h[0] for h in HBM])
def test_hbm_matches_datasheet(name, capacity, bandwidth):
    hbm = load_device(name).hbm
    assert hbm.capacity == pytest.approx(capacity, rel=0.01)
    assert hbm.bandwidth == pytest.approx(bandwidth, rel=0.01)


def _up_bidirectional(name: str, dims: int) -> float:
    """Bytes/s a device injects into its first `dims` dimensions, both directions."""
    return 2 * sum(d.bandwidth for d in load_system(name).network[:dims])


def test_scale_up_bandwidth_matches_vendor_totals():
    assert _up_bidirectional("tpu-v6e-slice", 2) == pytest.approx(800e9)  # v6e: 800 GBps bidirectional ICI
    assert 256 * _up_bidirectional("tpu-v6e-slice", 2) / 2 == pytest.approx(102.4 * TB)  # all-reduce bw / Pod
    assert _up_bidirectional("tpu7x-slice", 3) == pytest.approx(1200e9)  # TPU7x: 1200 GBps bidirectional ICI
    assert _up_bidirectional("trn2-16", 2) == pytest.approx(1024e9)  # intra-instance NeuronLink-v3 per chip
    assert _up_bidirectional("trn2-ultraserver", 3) == pytest.approx(1280e9)  # + 256 GB/s inter-instance
    assert load_system("hls-gaudi3").network[0].bandwidth == pytest.approx(21 * 200e9 / 8)  # 21 x 200GbE
    assert load_system("hls-gaudi3").network[1].bandwidth == pytest.approx(3 * 200e9 / 8)  # 3 x 200GbE
    assert load_system("trn2-16").network[-1].bandwidth == pytest.approx(3200e9 / 8 / 16)  # EFAv3 / 16 chips
    assert load_system("dgx-b300").network[1].bandwidth == pytest.approx(800e9 / 8)  # ConnectX-8 per GPU
    assert load_system("mi355x-8").network[0].bandwidth == pytest.approx(7 * 153.6e9 / 2)  # 7 IF links


def test_shapes_hold_the_published_device_counts():
    assert load_system("tpu-v6e-slice").with_devices(256).sizes[:2] == (16, 16)  # 256-chip Pod, 2-D torus
    assert load_system("trn2-16").with_devices(16).sizes[:2] == (4, 4)  # 4x4 torus per trn2.48xlarge
    assert load_system("trn2-ultraserver").with_devices(64).sizes[:3] == (4, 4, 4)  # 64-chip UltraServer


STRATEGY = {"zero": 3, "attention": "flash", "recompute": "selective"}
WORKLOAD = {"seq_len": 4096, "global_batch": 32}


@pytest.mark.parametrize("name", NEW_SYSTEMS)
def test_llama3_8b_estimates_on_eight_devices(name):
    for tp in (1, 2, 4, 8):
        r = estimate("llama3-8b", name, {**STRATEGY, "tp": tp}, WORKLOAD, gpus=8)
        if name == "tpu-v6e-slice" and tp == 1:  # 32 GiB per chip: 8B params' ZeRO-3 states + activations
            assert not r.feasible and any("out of memory" in why for why in r.infeasible_reasons)
            continue
        assert r.feasible, (name, tp, r.infeasible_reasons)
        assert 0.05 < r.mfu < 0.8, (name, tp, r.mfu)  # 0.8: the top of the copied efficiency curves


@pytest.mark.parametrize("name", NEW_SYSTEMS)
def test_cli_estimate_runs_on_each_new_system(tmp_path, name):
    run = tmp_path / "run.yaml"
    run.write_text(f"model: llama3-8b\nsystem: {name}\ngpus: 8\nstrategy: {{tp: 8, zero: 1, attention: flash}}\n"
                   "workload: {seq_len: 4096, global_batch: 32}\n")
    result = CliRunner().invoke(app, ["estimate", str(run), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["feasible"] and 0.05 < data["mfu"] < 0.8


def test_packages_of_one_die_share_its_fitted_curve():
    """GB200 runs the B200's dies at a higher power limit: its own peaks (11% above HGX B200's), the
    b200 preset's fitted efficiency curves and attention efficiency (tools/calibrate.py --also gb200), and
    the gb200-nvl72 system uses it."""
    b200, gb200 = load_device("b200"), load_device("gb200")
    assert gb200.matrix_peak(Precision.FP8) == pytest.approx(b200.matrix_peak(Precision.FP8) * 5 / 4.5)
    for precision in (Precision.BF16, Precision.FP8):
        assert gb200.gemm_efficiency(precision).points == b200.gemm_efficiency(precision).points
    assert gb200.flash3_attention_efficiency == b200.flash3_attention_efficiency
    assert load_system("gb200-nvl72").device == gb200
