"""trtllm-bench throughput rows (TensorRT-LLM 1.x, PyTorch backend): the runtime limits trtllm-bench's
heuristic sets when a run states neither --max_batch_size nor --max_num_tokens, and the KV-cache precision
of a ModelOpt FP8 checkpoint served with kv_cache dtype "auto"."""

import pytest

from armillary.serving.engine import load_engine
from armillary.serving.trtllm_bench import bytes_per_elem, trtllm_bench_engine, trtllm_bench_limits
from armillary.specs.workload import StoredPrecision
from armillary.validation.serving_rows import serving_row_specs

# INF-TRT10-02 as the TensorRT-LLM 1.0 performance overview's row reads
ROW = {
    "id": "T-TRTBENCH", "kind": "inference", "model": "nvidia/Llama-3.1-8B-Instruct-FP8",
    "precision": "FP8 (ModelOpt checkpoint)", "gpu": "H200 SXM 141GB (DGX H200)", "n_gpus": "1", "tp": "1",
    "framework": "TensorRT-LLM (PyTorch backend), trtllm-bench throughput", "isl": "128", "osl": "2048",
    "batch_or_concurrency": "max-load offline (infinite request rate); batch chosen by runtime (CUDA graphs up "
                            "to 8192)",
    "metric": "Total Output Throughput", "value": "26221", "unit": "output tokens/s (whole TP group)",
    "other_reported": "", "notes": "Synthetic uniform ISL/OSL dataset",
}


def test_limits_by_hand() -> None:
    """Llama 3.1 8B fp8 on 141 GiB, 16-bit KV (2 x 32 layers x 8 heads x 128 x 2 bytes), 128 / 2048 at 0.9:
    (141 - 8.03e9 / 2^30) x 0.9 / (131072 / 2^30 x 2176) = 452.4 requests -> 512 (a multiple of 128 below
    1024); 452.4 x (1 + 128 / 2048) = 480.7 tokens -> 2048 (the floor), above the 128 + 512 a prompt needs."""
    assert trtllm_bench_limits(8030261248, 1.0, 131072, 141.0, 1, 1, 128, 2048, 0.9) == (512, 2048)
    # fp8 KV: 904.8 requests -> 1024 (a multiple of 128); 961 tokens -> 2048
    assert trtllm_bench_limits(8030261248, 1.0, 65536, 141.0, 1, 1, 128, 2048, 0.9) == (1024, 2048)


@pytest.mark.parametrize("isl, osl, expected", [
    (128, 128, (4096, 8192)),  # 3845 requests -> 4096 (a multiple of 256); 7690 tokens -> 8192 (of 512)
    (20000, 2000, (64, 20064)),  # 43.7 requests -> the floor of 64; the tokens at least a prompt plus the batch
    (2048, 128, (512, 8192)),  # 452.4 requests -> 512; 452.4 x 17 = 7690 tokens -> 8192 (a multiple of 512)
])
def test_limits_rounding(isl: int, osl: int, expected: tuple[int, int]) -> None:
    assert trtllm_bench_limits(8030261248, 1.0, 131072, 141.0, 1, 1, isl, osl, 0.9) == expected


def test_chunked_prefill_keeps_the_heuristic_tokens() -> None:
    assert trtllm_bench_limits(8030261248, 1.0, 131072, 141.0, 1, 1, 20000, 2000, 0.9, chunked=True) == (64, 2048)


def test_offline_trtllm_bench_row() -> None:
    specs = serving_row_specs(ROW)
    assert specs.workload.kv_cache.precision is StoredPrecision.FP8
    assert (specs.engine.max_batch, specs.engine.max_batched_tokens) == (1024, 2048)
    assert any("trtllm-bench limits" in n for n in specs.notes)
    assert any("fp8 KV cache" in n for n in specs.notes)


def test_stated_limits_and_kv_dtype_win() -> None:
    row = {**ROW, "other_reported": "--max_batch_size 256 --max_num_tokens 4096; kv_cache_dtype auto"}
    specs = serving_row_specs(row)
    assert (specs.engine.max_batch, specs.engine.max_batched_tokens) == (256, 4096)
    assert specs.workload.kv_cache.precision is None
    assert not any("trtllm-bench limits" in n for n in specs.notes)


def test_other_engines_and_clients_untouched() -> None:
    serve = serving_row_specs({**ROW, "framework": "TensorRT-LLM 1.0 trtllm-serve",
                               "batch_or_concurrency": "max-concurrency 64, 640 prompts"})
    assert (serve.engine.max_batch, serve.engine.max_batched_tokens) == (2048, 8192)  # trtllm-serve defaults
    vllm = serving_row_specs({**ROW, "framework": "vLLM 0.6.3 benchmark_throughput"})
    assert vllm.workload.kv_cache.precision is None  # vLLM's "auto" KV cache: the model dtype
    assert not any("trtllm-bench limits" in n for n in vllm.notes)


def test_the_serving_layer_gives_serve_the_harness_engine() -> None:
    """`trtllm_bench_engine` takes specs, not row words: called on the row's specs with the profile as started,
    it gives the engine the harness launched; without `limits` (a run stating them) only the graphs change."""
    specs = serving_row_specs(ROW)
    profile = load_engine("tensorrt-llm-1.0")
    engine, notes = trtllm_bench_engine(profile, specs.model, specs.workload, specs.strategy.tp, specs.system.device)
    assert (engine.max_batch, engine.max_batched_tokens) == (specs.engine.max_batch, specs.engine.max_batched_tokens)
    assert any("trtllm-bench limits" in n for n in notes)
    trtllm11 = load_engine("tensorrt-llm-1.1")
    kept, notes = trtllm_bench_engine(trtllm11, specs.model, specs.workload, 1, specs.system.device, limits=False)
    assert kept.graph_max_batch is None and trtllm11.graph_max_batch == 128  # to its max batch, not serve's 128
    assert (kept.max_batch, kept.max_batched_tokens) == (trtllm11.max_batch, trtllm11.max_batched_tokens)
    assert len(notes) == 1


def test_bytes_per_elem_as_tuning_py() -> None:
    assert [bytes_per_elem(p) for p in (StoredPrecision.FP8, StoredPrecision.NVFP4, StoredPrecision.BF16, None)] == [
        1.0, 0.5, 2.0, 2.0]
