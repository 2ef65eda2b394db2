"""FP4 and block-scaled formats (docs/fp4.md): format sizes, device peaks, the recipe's kernels, training
speed-ups against published FP4-vs-FP8 figures, serving, search."""

import numpy as np
import pytest

import armillary
from armillary.cost.compute import kernel_times
from armillary.errors import SpecError
from armillary.plan.codes import BLOCK_FORMAT
from armillary.report.deploy import Target, deployment
from armillary.specs.device import Precision
from armillary.specs.formats import MXFP4, MXFP8, NVFP4
from armillary.specs.loading import load_device, load_model, load_strategy, load_system, load_workload
from armillary.specs.strategy import BlockFormat, Strategy
from armillary.specs.workload import StoredPrecision
from armillary.validation.rows import row_specs
from armillary.validation.run import choose_candidate, read_rows
from armillary.workload.ops import gemm
from armillary.workload.quantize import quantize_bytes

NVFP4_CODE = BLOCK_FORMAT.code(BlockFormat.NVFP4)


def test_bits_per_element_include_the_block_scales():
    # NVFP4: E2M1 + an E4M3 scale per 16 (arXiv:2509.25149 §2); MX: an E8M0 scale per 32 (OCP MX v1.0)
    assert NVFP4.bits == 4 + 8 / 16 == 4.5
    assert MXFP4.bits == 4 + 8 / 32 == 4.25
    assert MXFP8.bits == 8.25
    assert Precision.NVFP4.bytes == StoredPrecision.NVFP4.bytes == 0.5625
    assert StoredPrecision.MXFP4.bytes == 4.25 / 8


@pytest.mark.parametrize(("device", "ratio"), [("b200", 2.0), ("gb200", 2.0), ("b300", 3.0), ("gb300", 3.0)])
def test_blackwell_fp4_peak_over_fp8(device, ratio):
    """Datasheets: B200 9 vs 4.5 PFLOP/s dense; Blackwell Ultra 15 (GB300) "3x that of FP8"; B300 13.5 vs 4.5."""
    d = load_device(device)
    assert d.matrix_peak(Precision.NVFP4) == d.matrix_peak(Precision.MXFP4) == ratio * d.matrix_peak(Precision.FP8)
    assert d.matrix_peak(Precision.MXFP8) == d.matrix_peak(Precision.FP8)


def test_mi355x_runs_mxfp4_not_nvfp4():
    d = load_device("mi355x")
    assert d.matrix_peak(Precision.MXFP4) == pytest.approx(2 * d.matrix_peak(Precision.FP8), rel=1e-4)
    with pytest.raises(SpecError, match="nvfp4 GEMMs run on: b200, b300, gb200, gb300"):
        d.matrix_peak(Precision.NVFP4)


@pytest.mark.parametrize("device", ["h100-sxm", "mi300x"])
def test_no_fp4_before_blackwell_names_the_devices_that_have_it(device):
    with pytest.raises(SpecError, match=r"has no mxfp4 matrix units.*mxfp4 GEMMs run on: .*b200.*mi355x"):
        load_device(device).matrix_peak(Precision.MXFP4)


def test_an_estimate_on_hopper_with_nvfp4_is_a_clear_error():
    with pytest.raises(SpecError, match="no nvfp4 matrix units"):
        armillary.estimate("llama3-8b", "dgx-h100", {"block_format": "nvfp4"}, {"seq_len": 4096, "global_batch": 8},
                           gpus=8)


def test_a_sweep_without_fp4_points_runs_on_a_device_without_fp4():
    op = gemm(4096, 4096, 4096, 1, 2)
    times = kernel_times((op,), load_device("h100-sxm"), np.array([1.0, 3.0]), block_format=np.array([0.0, 0.0]))
    assert np.all(times > 0)


def test_fp4_gemm_curve_is_fp8_read_at_equal_kernel_time():
    """A GEMM of F FLOPs at twice the peak takes as long as one of F/2 at fp8: it reaches that efficiency."""
    d = load_device("b200")
    assert d.gemm_efficiency(Precision.NVFP4)(2e10) == pytest.approx(d.gemm_efficiency(Precision.FP8)(1e10))
    op = gemm(16384, 16384, 16384, 1, 2)  # large: both at the top of the curve, so twice as fast
    fp8, fp4 = (kernel_times((op,), d, 3.0, block_format=f)[0] for f in (0.0, NVFP4_CODE))
    assert fp8 / fp4 == pytest.approx(2.0, rel=0.01)


def test_quantize_traffic_by_hand():
    """NVFP4: amax pass + cast pass over bf16 (2 x 2 bytes), rowwise and columnwise copies of 0.5625 bytes;
    MXFP8: one pass, two copies of 1.03125; per-tensor fp8 (code 0): none (inside its calibrated curve)."""
    assert quantize_bytes(1000.0, NVFP4_CODE) == pytest.approx(1000 * (2 * 2 + 2 * 0.5625))
    assert quantize_bytes(1000.0, BLOCK_FORMAT.code(BlockFormat.MXFP8)) == pytest.approx(1000 * (2 + 2 * 1.03125))
    assert quantize_bytes(1000.0, 0.0) == 0.0
    assert np.allclose(quantize_bytes(np.array([1.0, 1.0]), np.array([0.0, NVFP4_CODE])), [0.0, 5.125])


def test_block_format_needs_a_bf16_or_fp8_recipe():
    with pytest.raises(ValueError, match="block_format 'nvfp4' needs precision 'bf16' or 'fp8'"):
        Strategy(precision="fp32", block_format="nvfp4")
    with pytest.raises(ValueError, match="quantized_gemms applies to a quantized recipe"):
        Strategy(precision="bf16", quantized_gemms={"first_layers_bf16": 2})
    Strategy(precision="bf16", block_format="nvfp4", quantized_gemms={"first_layers_bf16": 2})


_ROWS = {r["id"]: r for r in read_rows()}


def _speedup(row_id: str, **changes) -> float:
    """Step time of the shared row as the harness runs it (fp8) over the same configuration changed."""
    base, rs = choose_candidate(row_specs(_ROWS[row_id]))
    strategy = Strategy.model_validate({**rs.strategy.model_dump(), **changes})
    return base.step_time_s / armillary.estimate(rs.model, rs.system, strategy, rs.workload).step_time_s


# NVIDIA, "Train Models Faster with JAX and MaxText Using NVFP4 on NVIDIA Blackwell" (developer blog, 2026):
# NVFP4 over the FP8 baseline, same hyperparameters, batch and parallelism, per-GPU model TFLOP/s: Llama 3 8B
# 1.35x on GB200 and 1.31x on GB300, Llama 3.1 405B 1.44x on GB200 and 1.73x on GB300. Its recipe quantizes
# only the MLP GEMMs to NVFP4, attention stays in the baseline's precision. Run here on the shared
# Megatron-Bridge 25.11 FP8 rows of the same models and systems (another framework's layouts: the speed-up's
# size, not its absolute throughput, is compared).
MAXTEXT_NVFP4 = [("TR-MBRIDGE-25.11-GB200-09", 1.35), ("TR-MBRIDGE-25.11-GB300-01", 1.31),
                 ("TR-MBRIDGE-25.11-GB200-11", 1.44), ("TR-MBRIDGE-25.11-GB300-03", 1.73)]


@pytest.mark.parametrize(("row_id", "published"), MAXTEXT_NVFP4)
def test_nvfp4_training_speedup_over_fp8_as_published(row_id, published):
    speedup = _speedup(row_id, block_format="nvfp4", quantized_gemms={"attention_projections": "fp8"})
    assert speedup > 1.0
    assert speedup == pytest.approx(published, rel=0.15)


def test_nvfp4_speedup_grows_with_the_fp4_to_fp8_peak_ratio():
    """GB300's FP4 is 3x its FP8, GB200's 2x: the published 405B speed-up is larger on GB300 (1.73 vs 1.44)."""
    on_gb200, on_gb300 = (_speedup(row, block_format="nvfp4", quantized_gemms={"attention_projections": "fp8"})
                          for row in ("TR-MBRIDGE-25.11-GB200-11", "TR-MBRIDGE-25.11-GB300-03"))
    assert on_gb300 > on_gb200


# The same Megatron-Bridge 25.11 table (docs/performance-summary.md) gives MXFP8 next to FP8 current scaling
# for Llama 3 8B: 29,789 vs 31,508 tokens/s/GPU on GB200, 29,521 vs 30,624 on B200 (the MX recipe's quantize
# kernels and block-scaled GEMMs cost a few percent).
@pytest.mark.parametrize(("row_id", "published"), [("TR-MBRIDGE-25.11-GB200-09", 29789 / 31508),
                                                   ("TR-MBRIDGE-25.11-B200-17", 29521 / 30624)])
def test_mxfp8_over_fp8_current_scaling_as_published(row_id, published):
    assert _speedup(row_id, block_format="mxfp8") == pytest.approx(published, abs=0.03)


def test_what_a_recipe_keeps_in_higher_precision_costs_time():
    """NVFP4 everywhere > attention projections in fp8 > in bf16; first and last layers in bf16 (the NVFP4
    pretraining recipe's 2 + 8 blocks of 62 scaled to Llama 3 8B's 32 layers: 1 + 4) slower still."""
    row = "TR-MBRIDGE-25.11-GB300-01"
    speeds = [_speedup(row, block_format="nvfp4", quantized_gemms=q) for q in (
        {}, {"attention_projections": "fp8"}, {"attention_projections": "bf16"},
        {"attention_projections": "bf16", "first_layers_bf16": 1, "last_layers_bf16": 4})]
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == 4


_SERVE = {"kind": "inference", "batch": 64, "input_len": 1024, "output_len": 1024, "kv_cache": {"precision": "fp8"}}


@pytest.mark.parametrize(("model", "layout"), [("deepseek-v3", {"tp": 8, "ep": 8, "expert_tp": 1}),  # DeepSeek-R1
                                               ("llama3.1-70b", {"tp": 4})])  # Llama 3.3 70B: the same architecture
def test_fp4_serving_on_b200(model, layout):
    """NVFP4 weights (W4A4) with an FP8 KV cache on B200 run; the weights take 4.5 bits each (the embedding and
    LM head stay 16-bit) and decode, which streams them, is faster than with FP8 weights."""
    def served(**recipe):
        return armillary.estimate(model, "dgx-b200", {**layout, "attention": "flash3", **recipe}, _SERVE,
                                  gpus=layout["tp"])

    fp8, fp4 = served(precision="fp8"), served(precision="bf16", block_format="nvfp4")
    assert fp4.feasible and fp8.feasible
    assert 0.5625 < fp4.memory.weights / fp8.memory.weights < 0.65
    assert fp4.tpot_s < fp8.tpot_s and fp4.ttft_s < fp8.ttft_s
    assert fp4.max_batch > fp8.max_batch
    cache = served(precision="bf16", block_format="nvfp4").memory.kv_cache
    nvfp4_cache = armillary.estimate(model, "dgx-b200", {**layout, "attention": "flash3", "block_format": "nvfp4"},
                                     {**_SERVE, "kv_cache": {"precision": "nvfp4"}}, gpus=layout["tp"]).memory.kv_cache
    assert nvfp4_cache == pytest.approx(0.5625 * cache)


def test_search_tries_block_formats_and_rebuilds_them():
    """A search over none / nvfp4 on B200 prices both through the same array functions as one estimate: the
    block-format points in fp8's family (memory, MFU), the others in the base's own bf16."""
    workload = {"seq_len": 8192, "global_batch": 64}
    space = {"block_format": ["none", "nvfp4"], "tp": [1, 2], "pp": [1], "vpp": [1], "micro_batch": [2], "zero": [1],
             "recompute": ["none"], "sequence_parallel": [False], "overlap_dp": [True], "overlap_tp": [False],
             "overlap_param_gather": [True], "rank_order": ["tp-cp-dp-pp"], "attention": ["flash3"]}
    result = armillary.search("llama3-8b", "dgx-b200", workload, {"precision": "bf16", "block_format": "nvfp4"},
                              space, gpus=8, top=10)
    assert result.top[0].strategy.block_format is BlockFormat.NVFP4
    assert {c.strategy.block_format for c in result.top} == {BlockFormat.NONE, BlockFormat.NVFP4}
    for c in result.top:
        one = armillary.estimate("llama3-8b", "dgx-b200", c.strategy, workload, gpus=8)
        assert (c.step_time_s, c.memory_bytes) == pytest.approx((one.step_time_s, one.memory_hbm.total), rel=1e-9)


def _emitted(target, strategy: dict, workload: dict | None = None, model: str = "llama3-8b",
             system: str = "gb300-nvl72", gpus: int = 8):
    d = deployment(target, load_model(model), load_system(system, gpus), load_strategy(strategy),
                   load_workload(workload or {"seq_len": 8192, "global_batch": 128}))
    return list(d.commands[0].argv), " ".join(d.notes)


def _after(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} in {argv}"
    return argv[argv.index(flag) + 1]


def test_emit_megatron_fp4_and_mxfp8_recipes():
    """Megatron-LM's Transformer Engine arguments (arguments.py): --fp4-format e2m1 --fp4-recipe nvfp4, the
    MXFP8 recipe with --fp8-recipe mxfp8, layers kept in bf16 with --first-last-layers-bf16."""
    argv, notes = _emitted(Target.MEGATRON, {"precision": "bf16", "block_format": "nvfp4", "quantized_gemms": {
        "first_layers_bf16": 1, "last_layers_bf16": 4, "attention_projections": "fp8"}})
    assert (_after(argv, "--fp4-format"), _after(argv, "--fp4-recipe")) == ("e2m1", "nvfp4")
    assert "--bf16" in argv and "--fp8-format" not in argv and "--first-last-layers-bf16" in argv
    assert (_after(argv, "--num-layers-at-start-in-bf16"), _after(argv, "--num-layers-at-end-in-bf16")) == ("1", "4")
    assert "attention projections in fp8" in notes
    argv, _ = _emitted(Target.MEGATRON, {"precision": "fp8", "block_format": "mxfp8"})
    assert (_after(argv, "--fp8-format"), _after(argv, "--fp8-recipe")) == ("e4m3", "mxfp8")
    argv, notes = _emitted(Target.MEGATRON, {"block_format": "mxfp4"}, system="mi355x-8")
    assert _after(argv, "--fp4-recipe") == "mxfp4" and "Primus" in notes


def test_emit_fp4_serving_flags():
    serve = {"kind": "inference", "batch": 8, "input_len": 1024, "output_len": 256, "kv_cache": {"precision": "nvfp4"}}
    argv, _ = _emitted(Target.VLLM, {"tp": 8, "block_format": "nvfp4"}, serve, "llama3.1-70b", "dgx-b200")
    assert (_after(argv, "--quantization"), _after(argv, "--kv-cache-dtype")) == ("modelopt_fp4", "nvfp4")
