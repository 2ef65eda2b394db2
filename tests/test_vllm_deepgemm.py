"""When vLLM's block-fp8 GEMMs moved to DeepGEMM: a pip-installed vLLM runs DeepGEMM for block-fp8 linear
layers and fused MoE on Hopper by default from 0.20.0, the first wheel that vendors it (vllm/third_party/deep_gemm;
VLLM_USE_DEEP_GEMM defaults to 1 from 0.11.0, but before 0.20.0 only a separately installed deep_gemm package
made has_deep_gemm() true). So `vllm-0.8` states the DeepGEMM kernels as its own (its latest releases, 0.20-0.27)
and the Triton / CUTLASS ceiling as a `releases` range, 0.8 to before 0.20, as it states the 0.9 memory share."""

from __future__ import annotations

import pytest

from armillary.estimate.inference_precision import fp8_kernels
from armillary.serving.engine import load_engine
from armillary.serving.launch import resolve_defaults, with_engine
from armillary.specs.device import Precision
from armillary.specs.loading import load_system
from armillary.specs.workload import Inference

H100 = load_system("dgx-h100", 8)


@pytest.mark.parametrize(("words", "deepgemm"), [
    ("vllm==0.8.5", False), ("vllm 0.10.2", False), ("vllm 0.11.0", False),  # VLLM_USE_DEEP_GEMM 1, none installed
    ("vllm 0.19.1", False), ("vLLM 0.9", False),  # a series wholly before 0.20
    ("vllm 0.20.0", True), ("vllm 0.27.1", True), ("vllm 0.20", True),
    ("vLLM", True), ("vllm-0.8", True),  # no version: the profile's own, its latest releases'
])
def test_block_fp8_kernels_by_release(words: str, deepgemm: bool) -> None:
    engine, _ = resolve_defaults(load_engine("vllm-0.8"), words)
    assert (engine.block_fp8_kernels is None) is deepgemm
    if not deepgemm:
        kernels = engine.block_fp8_kernels
        assert kernels is not None and kernels.ceiling == 0.25 and kernels.latency is not None
    assert engine.memory_fraction == (0.92 if deepgemm else 0.9)  # the same split: 0.20.0 changed both


def test_a_workload_naming_the_release_gets_its_kernels() -> None:
    """A served block-scaled checkpoint (DeepSeek's 128x128 blocks): 0.19.1's GEMMs run capped at 0.25 of the fp8
    peak, 0.20.0's at the device's fp8 curve."""
    def workload(engine: str) -> Inference:
        return Inference.model_validate({"kind": "inference", "input_len": 1000, "output_len": 100,
                                         "weights": "fp8", "weight_scales": "block", "serving": {"engine": engine}})

    old, _ = with_engine(workload("vllm==0.19.1"), device=H100.device)
    new, _ = with_engine(workload("vllm==0.20.0"), device=H100.device)
    assert old.block_fp8_kernels is not None and new.block_fp8_kernels is None
    capped = fp8_kernels(H100, old).device.gemm_efficiency(Precision.FP8)(1e13)
    assert float(capped) == pytest.approx(0.25)
    assert fp8_kernels(H100, new) is H100  # the device's own fp8 GEMMs


def test_the_split_is_sourced() -> None:
    engine = load_engine("vllm-0.8")
    (older,) = [r for r in engine.releases if r.block_fp8_kernels is not None]
    assert (older.since, older.before) == ("0.8", "0.20")
    assert "0.19.1" in older.sources["block_fp8_kernels"] and "has_deep_gemm" in older.sources["block_fp8_kernels"]
    assert "third_party/deep_gemm" in engine.sources["block_fp8_kernels"]
    # the profile after it (0.28) runs the same kernels as vllm-0.8's own
    assert load_engine("vllm-0.28").block_fp8_kernels == engine.block_fp8_kernels
