"""The benchmark client trtllm-bench: the API, `armillary serve` and the validation harness launch the engine
through one path (`serving.benchmark.client_engine`), so one run asked three ways gets one answer; the client
is refused where its rules do not apply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from armillary import api
from armillary.cli import app
from armillary.errors import SpecError
from armillary.serving.benchmark import Benchmark, Client, Mode
from armillary.serving.engine import load_engine
from armillary.validation.serving_rows import serving_row_specs, simulate_serving_row

# an offline trtllm-bench row of the 1.0 performance overview's form, short enough to serve in a test: 1,500
# requests of 128 + 128 tokens, decoded far beyond trtllm-serve's 128-sequence CUDA graphs
ROW = {
    "id": "T-TRTBENCH-CLIENT", "kind": "inference", "model": "nvidia/Llama-3.1-8B-Instruct-FP8",
    "precision": "FP8 (ModelOpt checkpoint)", "gpu": "H200 SXM 141GB (DGX H200)", "n_gpus": "1", "tp": "1",
    "framework": "TensorRT-LLM (PyTorch backend), trtllm-bench throughput", "isl": "128", "osl": "128",
    "batch_or_concurrency": "max-load offline (infinite request rate), 1500 prompts",
    "metric": "Total Output Throughput", "value": "1", "unit": "output tokens/s (whole TP group)",
    "other_reported": "", "notes": "",
}
# the same run stated by hand: the ModelOpt checkpoint's fp8 weights and KV cache, the 1.0 profile
MODEL, SYSTEM, STRATEGY = "llama3.1-8b", "hgx-h200", {"tp": 1, "precision": "fp8", "attention": "flash3"}
WORKLOAD: dict[str, Any] = {"kind": "inference", "input_len": 128, "output_len": 128, "weights": "fp8",
                            "kv_cache": {"precision": "fp8"}, "serving": {"engine": "tensorrt-llm-1.0"}}
BENCH = {"mode": "offline", "requests": 1500, "client": "trtllm-bench"}


def test_the_api_gives_the_harness_engine_and_prediction_for_the_same_run() -> None:
    specs = serving_row_specs(ROW)
    assert specs.benchmark.client is Client.TRTLLM_BENCH
    assert specs.engine.graph_max_batch is None and specs.engine.max_batch == 4096  # its heuristic, its graphs
    _, predicted, notes, _ = simulate_serving_row(ROW)
    bench = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD, BENCH, gpus=1)
    assert bench.output_tokens_per_s == pytest.approx(predicted, rel=1e-9)
    assert bench.assumed and all(n in notes for n in bench.assumed)  # the same launch, in the same words
    # trtllm-serve (no client): its 128-sequence graphs, its 2048 / 8192 limits; a different answer
    served = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD, {"mode": "offline", "requests": 1500}, gpus=1)
    assert served.assumed == () and served.output_tokens_per_s < bench.output_tokens_per_s


def test_limits_the_workload_states_are_kept_as_a_row_stating_them() -> None:
    """serving.max_batch / max_batched_tokens in the workload are --max_batch_size / --max_num_tokens: no
    heuristic, only trtllm-bench's graphs; the harness reads the same from a row's flags."""
    stated = {**WORKLOAD, "serving": {"engine": "tensorrt-llm-1.0", "max_batch": 256, "max_batched_tokens": 4096}}
    bench = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, stated, BENCH, gpus=1)
    assert len(bench.assumed) == 1 and "CUDA graphs" in bench.assumed[0]
    _, predicted, _, _ = simulate_serving_row({**ROW, "other_reported": "--max_batch_size 256 --max_num_tokens 4096"})
    assert bench.output_tokens_per_s == pytest.approx(predicted, rel=1e-9)


def test_serve_on_the_command_line_is_the_api(tmp_path: Any) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(f"model: {MODEL}\nsystem: {SYSTEM}\ngpus: 1\nstrategy: {json.dumps(STRATEGY)}\n"
                   f"workload: {json.dumps(WORKLOAD)}\n")
    out = CliRunner().invoke(app, ["serve", str(run), "--mode", "offline", "--requests", "1500", "--client",
                                   "trtllm-bench", "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)["benchmark"]
    bench = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD, BENCH, gpus=1)
    assert record["client"] == "trtllm-bench" and record["client_launch"] == list(bench.assumed)
    assert record["output_tokens_per_s"] == pytest.approx(bench.output_tokens_per_s, rel=1e-9)
    text = CliRunner().invoke(app, ["serve", str(run), "--mode", "offline", "--requests", "200", "--client",
                                    "trtllm-bench"])
    assert text.exit_code == 0 and "client trtllm-bench" in text.output
    alone = CliRunner().invoke(app, ["serve", str(run), "--rate", "2", "--client", "trtllm-bench"])
    assert alone.exit_code != 0 and "--mode" in alone.output


@pytest.mark.parametrize(("bench", "workload", "words"), [
    ({"mode": "offline", "client": "trtllm-serve"}, WORKLOAD, "trtllm-bench"),  # the allowed values named
    ({"mode": "concurrency", "concurrency": 8, "client": "trtllm-bench"}, WORKLOAD, "offline only"),
    ({"mode": "mlperf-offline", "client": "trtllm-bench"}, WORKLOAD, "offline only"),
    (BENCH, {**WORKLOAD, "serving": {"engine": "vllm-0.8"}}, "TensorRT-LLM 1.x"),
    (BENCH, {**WORKLOAD, "serving": {"engine": "tensorrt-llm-0.17"}}, "TensorRT-LLM 1.x"),
    (BENCH, {**WORKLOAD, "serving": {}}, "no engine is named"),
])
def test_the_client_is_refused_where_its_rules_do_not_apply(bench: dict[str, Any], workload: dict[str, Any],
                                                            words: str) -> None:
    with pytest.raises(SpecError, match=words):
        api.serve_benchmark(MODEL, SYSTEM, STRATEGY, workload, bench, gpus=1)


def test_pipeline_stages_are_refused() -> None:
    with pytest.raises(SpecError, match="pp 2"):
        api.serve_benchmark(MODEL, SYSTEM, {**STRATEGY, "pp": 2}, WORKLOAD, BENCH, gpus=2)


def test_a_trtllm_bench_row_in_another_mode_is_refused_not_served_as_trtllm_serve() -> None:
    from armillary.validation.row_columns import Unsupported

    with pytest.raises(Unsupported, match="offline only"):
        serving_row_specs({**ROW, "batch_or_concurrency": "max-concurrency 64, 640 prompts"})
    with pytest.raises(SpecError, match="offline only"):
        Benchmark(Mode.RATE, rate=2.0, client=Client.TRTLLM_BENCH)


def test_the_1_0_profile_captures_graphs_to_128_sequences_as_trtllm_serve() -> None:
    """TorchLlmArgs' default cuda_graph_config in 1.0's llm_args.py: max_batch_size 0 taken as 128."""
    trtllm10 = load_engine("tensorrt-llm-1.0")
    assert trtllm10.graph_max_batch == load_engine("tensorrt-llm-1.1").graph_max_batch == 128
    assert "1520735490" in trtllm10.sources["graph_max_batch"]
