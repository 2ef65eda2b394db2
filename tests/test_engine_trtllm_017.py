"""TensorRT-LLM 0.17's PyTorch backend as trtllm-serve ran it in early 2025 (`presets/engines/tensorrt-llm-0.17`):
no decode CUDA graphs by default (PyTorchConfig.use_cuda_graph False at commit 9b931c0f), so every decode step
pays the host's launches, and an MLA latent cache sized as if it held a key and a value per token
(calculate_max_num_blocks' default kv_factor 2), so the pages hold half the tokens. Checked by hand: which
profile a row's words pick, the eager host time of a DeepSeek-V3 step, the cache bytes and pages."""

import pytest

from armillary.estimate.inference import replica_model
from armillary.estimate.inference_memory import inference_memory, kv_blocks, kv_budget
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import cache_sizing_factor, load_engine, overheads
from armillary.serving.engine_versions import engine_for
from armillary.serving.launch import with_engine
from armillary.serving.run import _limits
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference

DSTACK = ("TensorRT-LLM 0.17.post1.dev (commit 9b931c0f, PyTorch backend): trtllm-serve --tp_size 8 --ep_size 4 "
          "--pp_size 1 --max_batch_size 512 --max_num_tokens 16384")


@pytest.mark.parametrize(("framework", "profile"), [
    (DSTACK, "tensorrt-llm-0.17"),
    ("TRT-LLM v0.18.2", "tensorrt-llm-0.17"),
    ("TensorRT-LLM v0.21.0", "tensorrt-llm-0.17"),
    ("TensorRT-LLM 1.0.0", "tensorrt-llm-1.0"),  # CUDA graphs by default from PR #5480 (1.0)
    ("TensorRT-LLM (PyTorch backend), trtllm-bench throughput", "tensorrt-llm-1.0"),  # unversioned
    ("TensorRT-LLM (NVIDIA MLPerf harness)", "tensorrt-llm-1.0"),
    ("TensorRT-LLM v0.6.1 (gptSessionBenchmark, static batching)", "tensorrt-llm-0.6"),
])
def test_a_rows_words_pick_the_profile_of_its_version(framework: str, profile: str) -> None:
    picked = engine_for(framework)
    assert picked is not None and picked.name == load_engine(profile).name


def test_the_017_profile_decodes_eagerly_and_sizes_a_latent_cache_as_k_plus_v() -> None:
    old, new = load_engine("tensorrt-llm-0.17"), load_engine("tensorrt-llm-1.0")
    assert not old.cuda_graphs and old.latent_cache_sized_as_kv
    assert new.cuda_graphs and not new.latent_cache_sized_as_kv
    v3 = ModelArrays.of(load_model("deepseek-v3"))
    # every decode step outside a graph: the capture length is 0 tokens
    assert overheads(old, v3, 61).graph_context == 0.0
    # DeepSeek-V3's 61 layers: 58 MoE layers of 30 (MLA) + 35 short kernels, 3 dense of 30 + 5 = 3,875 kernels
    # at 15.6 us (vLLM V0's eager DeepSeek-V3 host time per kernel) = 60.45 ms a decode step
    assert overheads(old, v3, 61).eager_s == pytest.approx(3875 * 15.6e-6)


def test_only_a_latent_cache_is_counted_twice() -> None:
    flagged = load_engine("tensorrt-llm-0.17")
    v3, llama = ModelArrays.of(load_model("deepseek-v3")), ModelArrays.of(load_model("llama2-7b"))
    assert cache_sizing_factor(flagged, v3) == 2.0
    assert cache_sizing_factor(flagged, llama) == 1.0  # K and V already: nothing to double
    assert cache_sizing_factor(load_engine("tensorrt-llm-1.0"), v3) == 1.0
    assert cache_sizing_factor(None, v3) == 1.0


def test_deepseek_r1_on_8_h200_holds_half_the_latent_tokens_by_hand() -> None:
    model, system = load_model("deepseek-v3"), load_system("hgx-h200", 8)
    strategy = Strategy.model_validate({"tp": 8, "ep": 4, "expert_tp": 2, "precision": "fp8", "attention": "flash3"})
    w = Inference.model_validate({"kind": "inference", "input_len": 3200, "output_len": 800, "weights": "fp8",
                                  "weight_scales": "block",
                                  "serving": {"max_batch": 512, "max_batched_tokens": 16384}})
    r = replica_model(ModelArrays.of(model), strategy, w, system)
    # the latent cache every TP rank keeps: 61 layers x (512 + 64) x 2 bytes = 70,272 bytes a token
    assert r.cache_bytes_per_token == pytest.approx(61 * 576 * 2)
    old, new = load_engine("tensorrt-llm-0.17"), load_engine("tensorrt-llm-1.0")
    w, _ = with_engine(w, old)  # both profiles: 32-token pages, 0.9 of the memory weights and activations leave
    assert (w.kv_cache.block_tokens, w.kv_cache.memory_fraction) == (32, 0.9) and w.serving.chunked_prefill is False
    _, budget = kv_budget(r, w, inference_memory(r, w, 512.0, 16384.0))
    assert _limits(r, w, 3200, new).kv_blocks == kv_blocks(float(budget), 61 * 576 * 2, 32)
    # the 0.17 manager counts 2 x 576 per layer and token: 140,544 bytes, half the pages
    assert _limits(r, w, 3200, old).kv_blocks == kv_blocks(float(budget), 2 * 61 * 576 * 2, 32)
    assert _limits(r, w, 3200, old).kv_blocks == pytest.approx(_limits(r, w, 3200, new).kv_blocks / 2, abs=1)
