"""Routed experts a pass reads (workload.experts.experts_touched) and an engine's block-scaled fp8 GEMMs:
their ceiling and small-M latency floor (estimate.inference_precision.fp8_kernels, cost.compute.kernel_times).
Expected values by hand: T tokens choosing top_k of E experts pick E (1 - (1 - top_k / E)^T) distinct ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from armillary.cost.compute import kernel_times
from armillary.estimate.inference import replica_model, replicated_experts
from armillary.estimate.inference_precision import fp8_kernels
from armillary.plan.arrays import ModelArrays
from armillary.plan.codes import PRECISION
from armillary.serving.engine import load_engine
from armillary.serving.launch import with_engine
from armillary.specs.device import GemmLatency, Precision
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy, TrainingPrecision
from armillary.specs.workload import Inference
from armillary.workload.experts import experts_touched
from armillary.workload.ops import gemm

DEEPSEEK = load_model("deepseek-v3")
H200 = load_system("hgx-h200", 8)


def _workload(**fields: object) -> Inference:
    return Inference.model_validate({"kind": "inference", "input_len": 1000, "output_len": 100, "weights": "fp8",
                                     **fields})


@pytest.mark.parametrize(("experts", "top_k", "tokens", "touched"), [
    (256, 8, 1, 8.0),  # one token reads exactly its top-k experts
    (8, 2, 1, 2.0),  # Mixtral
    (8, 2, 2, 8 * (1 - 0.75**2)),  # two tokens: 3.5 distinct experts in expectation
    (256, 8, 4, 256 * (1 - (31 / 32) ** 4)),
])
def test_distinct_experts_by_hand(experts: int, top_k: int, tokens: int, touched: float) -> None:
    per_expert = tokens * top_k / experts
    assert experts_touched(float(experts), per_expert, top_k / experts) == pytest.approx(touched)


def test_training_sized_passes_touch_every_expert_exactly() -> None:
    # 4096 tokens x 8 / 256 = 128 tokens per expert: (31/32)^4096 underflows against 1
    assert experts_touched(256.0, 128.0, 8 / 256) == 256.0
    assert experts_touched(32.0, 0.0, 8 / 256) == 0.0  # nothing routed, nothing read


@given(st.floats(0.0, 500.0), st.floats(0.0, 500.0), st.sampled_from([(8, 2), (64, 6), (256, 8), (128, 128)]))
def test_touched_is_bounded_and_grows_with_tokens(a: float, b: float, shape: tuple[int, int]) -> None:
    experts, k = shape
    share = k / experts
    low, high = sorted((a, b))
    t_low, t_high = experts_touched(float(experts), low, share), experts_touched(float(experts), high, share)
    assert 0.0 <= t_low <= t_high <= experts
    if high > 0:
        assert t_high >= 1.0  # a routed token always runs at least one expert


def test_decode_of_one_token_reads_its_experts_weights_only() -> None:
    # DeepSeek-V3 at tp 8 with experts sharded over the 8 ranks (vLLM's fused MoE): one token reads its 8
    # experts' gate/up shards (2 x 2048/8 x 7168 fp8 bytes each) and down shards (7168 x 2048/8), not all 256
    r = replica_model(ModelArrays.of(DEEPSEEK), Strategy.model_validate({"tp": 8, "precision": "fp8", "ep": 1,
                                                                         "expert_tp": 8}), _workload(), H200)
    x = replicated_experts(r.m, r.st, 1.0, 2.0, 1.0)
    shard = 2048 / 8 * 7168
    weights_in = 8 * 2 * shard
    assert float(x.experts_in.bytes) == pytest.approx(weights_in + 8 * 7168 * 2 + 8 * 2 * 2048 / 8 * 2)
    assert float(x.experts_in.group) == pytest.approx(8.0)
    many = replicated_experts(r.m, r.st, 4096.0, 2.0, 1.0)
    assert float(many.experts_in.group) == 256.0  # a prefill chunk reads them all


def test_capped_curve_is_the_minimum_of_curve_and_ceiling() -> None:
    curve = EfficiencyCurve(points=((1e9, 0.05), (1e10, 0.1), (1e11, 0.55), (1e12, 0.6)))
    capped = curve.capped(0.25)
    sizes = np.logspace(7, 14, 200)
    assert np.allclose(capped(sizes), np.minimum(curve(sizes), 0.25), rtol=1e-12, atol=1e-12)
    assert curve.capped(0.9)(sizes) == pytest.approx(curve(sizes))


def test_engine_block_fp8_kernels_apply_to_block_scaled_weights_only() -> None:
    w, engine = with_engine(_workload(weight_scales="block"), load_engine("vllm-0.6"))
    assert engine is not None and w.block_fp8_kernels == engine.block_fp8_kernels
    kernels = w.block_fp8_kernels
    assert kernels is not None and kernels.latency is not None
    device = fp8_kernels(H200, w).device
    assert float(device.gemm_efficiency(Precision.FP8)(1e13)) == pytest.approx(kernels.ceiling)
    assert float(device.gemm_efficiency(Precision.BF16)(1e13)) == pytest.approx(
        float(H200.device.gemm_efficiency(Precision.BF16)(1e13)))
    per_tensor, _ = with_engine(_workload(), load_engine("vllm-0.6"))
    assert fp8_kernels(H200, per_tensor) is H200
    # the prefill of a block-scaled checkpoint is slower under the ceiling, a decode step under the floor
    strategy = Strategy.model_validate({"tp": 8, "precision": "fp8", "ep": 1, "expert_tp": 8})
    capped = replica_model(ModelArrays.of(DEEPSEEK), strategy, w, H200)
    free = replica_model(ModelArrays.of(DEEPSEEK), strategy, per_tensor, H200)
    assert float(capped.tokens_time(65536.0).layers) > 1.2 * float(free.tokens_time(65536.0).layers)
    assert float(capped.tokens_time(1.0).layers) > 1.5 * float(free.tokens_time(1.0).layers)


def test_small_gemm_floor_by_hand() -> None:
    # one token through a 7168 -> 2112 fp8 GEMM: the roofline is 15 MB / 4.08 TB/s = 3.7 us; the floor is
    # 15 us + 7168 / 128 x 0.34 us = 34.0 us (vLLM's CUTLASS block-fp8 kernel measured 33.9 us, PR #23280)
    latency = GemmLatency(fixed_s=15e-6, per_k_block_s=0.34e-6)
    device = H200.device.model_copy(update={"fp8_gemm_latency": latency})
    fp8 = PRECISION.code(TrainingPrecision.FP8)
    op = gemm(1.0, 2112.0, 7168.0, 1, 2.0, 2.0, 1.0)
    floor = 15e-6 + 56 * 0.34e-6
    assert float(kernel_times((op,), device, fp8)[0]) == pytest.approx(floor + device.kernel_overhead)
    assert float(kernel_times((op,), H200.device, fp8)[0]) < 5e-6 + H200.device.kernel_overhead
    big = gemm(16384.0, 2112.0, 7168.0, 1, 2.0, 2.0, 1.0)  # a prefill GEMM is past its floor
    assert kernel_times((big,), device, fp8)[0] == pytest.approx(kernel_times((big,), H200.device, fp8)[0])
    bf16 = PRECISION.code(TrainingPrecision.BF16)  # 16-bit GEMMs never take the fp8 floor
    assert kernel_times((op,), device, bf16)[0] == pytest.approx(kernel_times((op,), H200.device, bf16)[0])


def test_fused_moe_kernel_rates_by_hand() -> None:
    """The routed experts' GEMMs at the engine's fused-MoE rates (vLLM PR #13932, Triton fused_moe on H100):
    compute-bound at 3.5% of the fp8 peak, memory-bound streaming weights at 24% of the HBM bandwidth."""
    device = H200.device.model_copy(update={"expert_gemm_ceiling": 0.035, "expert_stream_efficiency": 0.24})
    fp8 = PRECISION.code(TrainingPrecision.FP8)
    big = gemm(65536.0, 512.0, 7168.0, 256, 2.0, 2.0, 1.0)  # a prefill chunk over 256 experts
    small = gemm(4.0, 512.0, 7168.0, 32, 2.0, 2.0, 1.0)  # a decode step's 32 touched experts
    t_big, t_small = kernel_times((big, small), device, fp8, ceiling=0.035, stream_efficiency=0.24)
    peak = H200.device.matrix_peak(Precision.FP8)
    assert float(t_big) == pytest.approx(float(big.flop) / (0.035 * peak) + device.kernel_overhead)
    assert float(t_small) == pytest.approx(float(small.bytes) / (0.24 * device.hbm.bandwidth)
                                           + device.kernel_overhead)


def test_the_fused_moe_caps_deepseek_prefill_where_it_was_measured() -> None:
    """DeepSeek-R1 on 8 H200 (TP 8) under vLLM 0.7's kernels: at 69 TFLOP/s the routed experts alone allow
    about 13.5K prompt tokens/s per node (5.1 GFLOP per token per GPU over 58 MoE layers); the measured
    prefill was flat at 13-15K tokens/s per node whatever the batch (the validation rows' notes). The whole
    layer stack lands a little under the experts' cap, and the engine's experts are the step's bulk."""
    w, _ = with_engine(_workload(weight_scales="block"), load_engine("vllm-0.6"))
    strategy = Strategy.model_validate({"tp": 8, "precision": "fp8", "ep": 1, "expert_tp": 8})
    r = replica_model(ModelArrays.of(DEEPSEEK), strategy, w, H200)
    tokens = 32768.0
    per_node = tokens / float(r.tokens_time(tokens).layers)
    experts_cap = 0.035 * H200.device.matrix_peak(Precision.FP8) / (2 * 8 * 3 * 7168 * 256 * 58)
    assert 12_000 < experts_cap < 15_000
    assert 0.6 * experts_cap < per_node < experts_cap
