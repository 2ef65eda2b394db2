"""How an fp8 checkpoint is stored and which kernels run it: channel-scaled weights on ROCm in vLLM V0
(estimate.inference_precision.engine_fp8_kernels) and 16-bit attention projections (Meta's FP8 Llama 3.1). Expected
values by hand."""

from __future__ import annotations

import pytest

from armillary.errors import SpecError
from armillary.estimate.inference import replica_model
from armillary.estimate.inference_memory import inference_memory
from armillary.estimate.inference_precision import engine_fp8_kernels
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import load_engine
from armillary.serving.launch import with_engine
from armillary.specs.device import Platform
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference, WeightScales

LLAMA_405B = ModelArrays.of(load_model("llama3.1-405b"))
MI300X = load_system("mi300x-8", 8)
H100 = load_system("dgx-h100", 8)
TP8_FP8 = Strategy.model_validate({"tp": 8, "precision": "fp8"})


def _workload(**fields: object) -> Inference:
    return Inference.model_validate({"kind": "inference", "input_len": 200, "output_len": 100, "weights": "fp8",
                                     **fields})


def test_devices_name_their_platform() -> None:
    assert MI300X.device.platform is Platform.ROCM and H100.device.platform is Platform.CUDA


def test_channel_scaled_kernels_apply_on_rocm_only() -> None:
    w, engine = with_engine(_workload(weight_scales="channel"), load_engine("vllm-0.6"))
    assert engine is not None
    rocm = engine.channel_fp8_kernels[Platform.ROCM]
    assert engine_fp8_kernels(MI300X, w) == rocm
    assert engine_fp8_kernels(H100, w) is None  # CUTLASS fuses the scales on CUDA: the device's GEMMs
    per_tensor, _ = with_engine(_workload(), load_engine("vllm-0.6"))
    assert engine_fp8_kernels(MI300X, per_tensor) is None
    block, _ = with_engine(_workload(weight_scales=WeightScales.BLOCK), load_engine("vllm-0.6"))
    assert engine_fp8_kernels(H100, block) == engine.block_fp8_kernels


def test_the_rocm_fallback_adds_what_the_offline_runs_measured() -> None:
    """A decode step of 4 sequences: the channel-scaled MLP GEMMs add 180 K blocks x 4.5 us per layer, 126
    layers: 102.1 ms, to their own time; the step grows by the 103.8 ms the offline runs measured, less what
    the 16-bit projections add, within 3%, and by as much at 512 sequences (the fallback adds, it does not
    floor)."""
    channel, _ = with_engine(_workload(weight_scales="channel", fp8_attention_projections=False),
                             load_engine("vllm-0.6"))
    sixteen_bit = _workload(fp8_attention_projections=False)
    slow = replica_model(LLAMA_405B, TP8_FP8, channel, MI300X)
    fast = replica_model(LLAMA_405B, TP8_FP8, sixteen_bit, MI300X)
    floor = 126 * (16384 + 6656) / 128 * 4.5e-6
    assert floor == pytest.approx(0.1021, rel=1e-3)
    added = float(slow.tokens_time(4.0).layers - fast.tokens_time(4.0).layers)
    assert added == pytest.approx(103.8e-3 - 2.2e-3, rel=0.03)
    at_512 = float(slow.tokens_time(512.0).layers - fast.tokens_time(512.0).layers)
    assert at_512 >= floor
    # at a 4,096-token prefill the floor is past: the kernels run at their ceiling, slower than the device's
    assert float(slow.tokens_time(4096.0).layers) > 1.3 * float(fast.tokens_time(4096.0).layers)


def test_sixteen_bit_attention_projections_by_hand() -> None:
    """Llama 3.1 405B, TP 8: the attention projections hold 16,384 x (16,384 + 2 x 1,024) + 16,384 x 16,384
    = 570.4M parameters per layer; at 2 bytes instead of 1 they add 126 x 570.4M / 8 = 8.98 GB per device
    (Meta's checkpoint loads 56.77 GiB per MI300X in vLLM, dstack's log; all-fp8 47.7 GiB)."""
    fp8 = replica_model(LLAMA_405B, TP8_FP8, _workload(), MI300X)
    mixed = replica_model(LLAMA_405B, TP8_FP8, _workload(fp8_attention_projections=False), MI300X)
    added = float(inference_memory(mixed, _workload(), 1, 1).weights - inference_memory(fp8, _workload(), 1, 1).weights)
    assert added == pytest.approx(126 * (16384 * 18432 + 16384 * 16384) / 8, rel=1e-9)
    assert float(inference_memory(mixed, _workload(), 1, 1).weights) / 2**30 == pytest.approx(56.77, abs=1.0)
    # the projections' GEMMs run in bf16: a long prefill is slower, the MLP unchanged
    assert float(mixed.tokens_time(8192.0).layers) > float(fp8.tokens_time(8192.0).layers)
    with pytest.raises(SpecError, match="fp8_attention_projections"):
        replica_model(ModelArrays.of(load_model("deepseek-v3")), TP8_FP8, _workload(fp8_attention_projections=False),
                      load_system("hgx-h200", 8))
