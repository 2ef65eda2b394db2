"""The serving harness reads a row's server flags as vLLM, SGLang and TensorRT-LLM write them: command-line
dashes, Python underscores and printed settings alike; what a row leaves out is assumed and written down,
and a row that states neither the tensor-parallel degree nor the GPUs names those columns."""


import pytest

from armillary.serving.run import ServingResult
from armillary.specs.workload import StoredPrecision
from armillary.validation.row_columns import Unsupported
from armillary.validation.run import is_serving_row, read_rows
from armillary.validation.serving_launch import engine_of_row
from armillary.validation.serving_metrics import read_serving_metric
from armillary.validation.serving_rows import _client, serving_row_specs, simulate_serving_row

ROW = {"framework": "vLLM 0.6.3: vllm serve -tp 8", "other_reported": "", "notes": ""}


@pytest.mark.parametrize("written", [
    "--gpu-memory-utilization 0.95 --max-num-seqs 64 --block-size 32 --max-num-batched-tokens 4096",
    "gpu_memory_utilization=0.95, max_num_seqs=64, block_size=32, max_num_batched_tokens=4096",
    "settings: gpu_memory_utilization: 0.95; max_num_seqs: 64; block_size: 32; max_num_batched_tokens: 4096",
    "max_num_seqs=64, block_size=32, max_num_batched_tokens=4096 and gpu_memory_utilization=0.95.",
])
def test_vllm_flags_however_written(written: str) -> None:
    engine = engine_of_row({**ROW, "framework": f"vLLM 0.6.3: vllm serve -tp 8 {written}"}, False, [])
    assert (engine.memory_fraction, engine.max_batch, engine.block_tokens, engine.max_batched_tokens) == (
        0.95, 64, 32, 4096)


def test_sglang_flags() -> None:
    row = {**ROW, "framework": "SGLang 0.4.3: launch_server --tp 8 --mem-fraction-static 0.85 --page-size 32 "
                               "--max-running-requests 48 --chunked-prefill-size 2048 --disable-radix-cache "
                               "--cuda-graph-max-bs 32"}
    engine = engine_of_row(row, False, [])
    assert (engine.memory_fraction, engine.block_tokens, engine.max_batch, engine.max_batched_tokens) == (
        0.85, 32, 48, 2048)
    assert engine.chunked_prefill and not engine.prefix_caching and engine.graph_max_batch == 32
    off = engine_of_row({**row, "framework": "SGLang 0.4.3: --chunked-prefill-size -1 --disable-cuda-graph"}, False, [])
    assert not off.chunked_prefill and not off.cuda_graphs
    # --disable-cuda-graph-padding keeps the graphs
    assert engine_of_row({**row, "framework": "SGLang 0.4.3: --disable-cuda-graph-padding"}, False, []).cuda_graphs


def test_tensorrt_llm_flags() -> None:
    row = {**ROW, "framework": "TensorRT-LLM 1.0: trtllm-serve --max_batch_size 128 --max_num_tokens 8192 "
                               "--kv_cache_free_gpu_memory_fraction 0.8 --tokens_per_block 64"}
    engine = engine_of_row(row, False, [])
    assert (engine.max_batch, engine.max_batched_tokens, engine.memory_fraction, engine.block_tokens) == (
        128, 8192, 0.8, 64)


def _srv_row() -> dict[str, str]:
    return dict(next(r for r in read_rows() if r["id"] == "SRV-VLLM-DSR1-H200-C004-O800"))


def test_tensor_parallel_degree_from_the_column_the_flags_or_the_gpus() -> None:
    row = _srv_row()
    assert serving_row_specs(row).strategy.tp == 8
    row["tp"], row["n_gpus"] = "", "4"
    row["framework"] = row["framework"].replace("--tensor-parallel-size 8", "--tensor-parallel-size 2")
    assert serving_row_specs(row).strategy.tp == 2
    row["framework"] = row["framework"].replace("--tensor-parallel-size 2", "")
    specs = serving_row_specs(row)
    assert specs.strategy.tp == 4 and any("not stated" in n for n in specs.notes)
    row["n_gpus"] = ""
    with pytest.raises(Unsupported, match="tp / n_gpus"):
        serving_row_specs(row)


def test_kv_cache_dtype_flag_sets_an_fp8_cache() -> None:
    row = _srv_row()
    assert serving_row_specs(row).workload.kv_cache.precision is None
    row["framework"] += " --kv-cache-dtype fp8_e4m3"
    assert serving_row_specs(row).workload.kv_cache.precision is StoredPrecision.FP8


def test_expert_parallel_flag_spreads_whole_experts() -> None:
    row = _srv_row()
    assert (serving_row_specs(row).strategy.ep, serving_row_specs(row).strategy.expert_tp) == (1, 8)
    for flag in ("--enable-expert-parallel", "--enable-ep-moe", "enable_expert_parallel=True"):
        spread = serving_row_specs({**row, "framework": f"{row['framework']} {flag}"}).strategy
        assert (spread.ep, spread.expert_tp) == (8, 1), flag


@pytest.fixture(scope="module")
def served() -> ServingResult:
    row = _srv_row()
    return simulate_serving_row(row)[3]


@pytest.mark.parametrize(("metric", "unit", "expected"), [
    ("output token throughput", "output tokens/s (whole 8-GPU server)", lambda r: r.output_tokens_per_s),
    ("Output Throughput", "tok/s per GPU", lambda r: r.output_tokens_per_s / 8),
    ("total token throughput", "tokens/s", lambda r: r.total_tokens_per_s),
    ("Request throughput", "req/s", lambda r: r.requests_per_s),
    ("mean TPOT", "ms", lambda r: r.tpot_s.mean * 1e3),
    ("Median TTFT", "s", lambda r: r.ttft_s.p50),
    ("P99 end-to-end latency", "ms", lambda r: r.e2e_s.p99 * 1e3),
    ("mean ITL", "ms", lambda r: r.itl_mean_s * 1e3),
])
def test_serving_metrics_read_as_the_clients_print_them(served: ServingResult, metric, unit, expected) -> None:
    assert read_serving_metric({"metric": metric, "unit": unit}).read(served) == pytest.approx(expected(served))


def test_total_token_throughput_counts_prompts_and_outputs(served: ServingResult) -> None:
    t = served.times
    assert served.total_tokens_per_s == pytest.approx(
        (t.input_len.sum() + t.output_len.sum()) / served.makespan_s)  # every request completed
    assert served.completed == len(t.input_len)


@pytest.mark.parametrize("metric", ["median ITL", "GPU utilization"])
def test_unknown_serving_metrics_name_the_metric(metric: str) -> None:
    with pytest.raises(Unsupported, match="metric"):
        read_serving_metric({"metric": metric, "unit": "ms"})


@pytest.mark.parametrize(("client", "expected"), [
    ("max-concurrency 64 (closed loop, 500 prompts, request rate inf)", (500, 64, None, "concurrency")),
    ("--num-prompts 500 --max-concurrency 64", (500, 64, None, "concurrency")),
    ("concurrency: 64, 500 requests", (500, 64, None, "concurrency")),
    ("request rate 2.5 req/s (Poisson), 1000 prompts", (1000, None, 2.5, "rate")),
    ("--request-rate 16 --num-prompts 1000", (1000, None, 16, "rate")),
    ("QPS 4, 200 prompts", (200, None, 4, "rate")),
    ("1000 prompts at 8 req/s, no concurrency cap", (1000, None, 8, "rate")),
    ("1000 prompts, request rate inf", (1000, None, None, "offline")),
])
def test_benchmark_clients_however_worded(client: str, expected: tuple) -> None:
    c = _client({"batch_or_concurrency": client, "framework": "vLLM 0.6.3"})
    assert (c.requests, c.concurrency, c.rate, c.mode.value) == expected


def test_a_client_without_a_rate_or_concurrency_names_the_column() -> None:
    with pytest.raises(Unsupported, match="batch_or_concurrency"):
        _client({"batch_or_concurrency": "500 prompts", "framework": "vLLM",
                 "other_reported": "request throughput 4.99 req/s"})  # a measured result is no rate


def test_serving_rows_are_known_by_their_client_not_only_their_id() -> None:
    assert is_serving_row({"id": "X-1", "batch_or_concurrency": "max-concurrency 8, 200 prompts"})
    assert is_serving_row({"id": "X-2", "batch_or_concurrency": "Poisson at 4 req/s"})
    assert not is_serving_row({"id": "INF-TRT061-01", "batch_or_concurrency": "1024"})
    static = [r for r in read_rows() if r["kind"] == "inference" and r["batch_or_concurrency"].strip().isdigit()]
    assert static and not any(is_serving_row(r) for r in static)
