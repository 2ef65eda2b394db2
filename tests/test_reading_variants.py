"""Shipped rows reworded as another publisher would write them: the harness reads the same specification, or
refuses naming the column, never a silently different one (docs/validation.md, "Words the harness reads").

Each class of wording is one parametrised test; the reading compared is the built model, system, strategy and
workload with the metric's value on a fixed stand-in estimate, never the error against the measurement.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reading_variant_cases import _SERVED, _model, _rows
from reading_variant_cases import training as training_reading

from armillary.validation.gpu_words import system_preset_for
from armillary.validation.inference_rows import inference_row_specs, read_inference_metric
from armillary.validation.memory_rows import unit_bytes
from armillary.validation.model_words import model_preset_for
from armillary.validation.precision_words import kv_fp8_of, precision_of
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows, validate
from armillary.validation.serving_metrics import read_serving_metric
from armillary.validation.serving_rows import serving_row_specs
from armillary.validation.strategy_words import recompute_of
from armillary.validation.vocabulary import flag, kind_of


def _row(row_id: str, **change: str) -> dict[str, str]:
    return {**_rows()[row_id], **change}


def serving_reading(row: dict[str, str]) -> tuple[Any, ...]:
    metric = read_serving_metric(row)
    s = serving_row_specs(row)
    return (metric.label, metric.read(_SERVED), _model(s.model), s.system, s.strategy,  # type: ignore[arg-type]
            s.workload, s.engine, s.benchmark)


def refusal(read: Any, row: dict[str, str]) -> str:
    with pytest.raises(Unsupported) as why:
        read(row)
    return str(why.value)


# --- gpu -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("row_id", "words"), [
    ("TR-NEMO2407-01", w) for w in ("NVIDIA H100 80GB HBM3", "H100-SXM5-80G", "8x H100 SXM", "HGX H100 8-GPU",
                                     "DGX H100", "H100 SXM (80 GB)")] + [
    ("TR-MBRIDGE-25.11-GB200-09", w) for w in ("GB200 NVL72 (rack)", "NVIDIA GB200", "GB200 NVL72")] + [
    ("TR-KOR-T5-22B-FULL", w) for w in ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", "8x A100 80GB")])
def test_gpu_wordings_read_the_same_system(row_id: str, words: str) -> None:
    assert training_reading(_row(row_id, gpu=words)) == training_reading(_row(row_id))


@pytest.mark.parametrize("words", ["MI300X OAM", "AMD MI300X", "8x AMD Instinct MI300X", "Instinct MI300X 192GB HBM3"])
def test_mi300x_wordings_read_the_same_server(words: str) -> None:
    row_id = "SRV-VLLM-DSR1-MI300X-C128-O800"
    assert serving_reading(_row(row_id, gpu=words)) == serving_reading(_row(row_id))


# another part of the same name (PCIe card, NVL board, Grace Hopper, an NVL4 board) is no shipped system
@pytest.mark.parametrize("words", ["H100 PCIe 80GB", "A100-PCIE-80GB", "H100 NVL 94GB", "H200 NVL",
                                   "GH200 Grace Hopper",
                                   "GB200 NVL4", "L40S", "MI250X", "TPU v5e"])
def test_other_parts_are_refused_naming_the_gpu(words: str) -> None:
    assert system_preset_for(words) is None
    assert refusal(training_reading, _row("TR-NEMO2407-01", gpu=words)).startswith("gpu:")


# --- n_gpus --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("words", ["64 GPUs", "64 (8 per node)", "64 H100s"])
def test_gpu_counts_with_words_read_the_same(words: str) -> None:
    assert training_reading(_row("TR-NEMO2407-01", n_gpus=words)) == training_reading(_row("TR-NEMO2407-01"))


# "8 nodes" is 64 GPUs, never 8; "8x8" and "8 nodes x 8 GPUs" hold two numbers
@pytest.mark.parametrize("words", ["8 nodes", "8 hosts", "8 x DGX H100", "2 racks", "8x8", "8 x 8", "8 nodes x 8 GPUs"])
def test_node_counts_are_refused_naming_n_gpus(words: str) -> None:
    assert refusal(training_reading, _row("TR-NEMO2407-01", n_gpus=words)).startswith("n_gpus:")


def test_fewer_gpus_than_one_replica_is_refused_not_a_crash() -> None:
    # TR-KOR-TXT-530B-DP8-FULL: tp 8 x pp 35 = 280 GPUs a replica; 35 of them cannot hold it
    why = refusal(training_reading, _row("TR-KOR-TXT-530B-DP8-FULL", n_gpus="35"))
    assert why.startswith("n_gpus:") and "280" in why


# --- precision -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("words", ["FP8 (delayed scaling)", "fp8 e4m3", "FP8 hybrid", "fp8 (E4M3 fwd / E5M2 bwd)",
                                   "Transformer Engine FP8", "fp8 + bf16"])
def test_fp8_wordings_read_the_same_training(words: str) -> None:
    assert training_reading(_row("TR-NEMO2407-01", precision=words)) == training_reading(_row("TR-NEMO2407-01"))


@pytest.mark.parametrize("words", ["BF16 (FP8 disabled)", "bf16, no fp8", "bf16 without fp8"])
def test_a_negated_fp8_is_not_read_as_fp8(words: str) -> None:
    assert precision_of(words).value == "bf16"  # type: ignore[union-attr]


@pytest.mark.parametrize("words", ["FP16", "fp16", "float16", "FP16 (half)"])
def test_fp16_inference_wordings(words: str) -> None:
    assert inference_row_specs(_row("INF-TRT061-17", precision=words)).strategy.precision.value == "fp16"


@pytest.mark.parametrize("words", ["NVFP4 weights, FP8 KV", "INT8 SmoothQuant (W8A8)", "INT4 AWQ (W4A16)", "GPTQ 4-bit",
                                   "MXFP4 (gpt-oss)", "W4A8"])
def test_unread_weight_formats_are_refused_naming_the_precision(words: str) -> None:
    assert refusal(inference_row_specs, _row("INF-TRT061-01", precision=words)).startswith("precision:")
    assert refusal(serving_row_specs, _row("SRV-VLLM-DSR1-MI300X-C128-O800", precision=words)).startswith(
        "precision:")


@pytest.mark.parametrize(("words", "kv"), [("FP8 (weights+KV cache)", True), ("FP8 weights + FP8 KV cache", True),
                                           ("fp8 kv", True), ("FP8 weights", False),
                                           ("FP8 weights, BF16 KV cache", False),
                                           ("FP16 (KV cache fp16)", False)])
def test_one_reading_of_an_fp8_kv_cache_for_inference_and_serving(words: str, kv: bool) -> None:
    assert kv_fp8_of(words) is kv
    static = inference_row_specs(_row("INF-TRT061-01", precision=words)).workload.kv_cache.precision
    served = serving_row_specs(_row("SRV-SGLANG-DSR1-H200-C128-O800", precision=words)).workload.kv_cache.precision
    assert (static == "fp8") is kv and (served == "fp8") is kv


# --- recompute -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("row_id", "words"), [
    ("TR-KOR-T4-1", w) for w in ("off", "disabled", "no recompute", "activation checkpointing: off", "recompute: false",
                                 "activation checkpointing disabled", "no AC",
                                 "None (no activation recomputation)")] + [
    ("TR-KOR-T5-22B-FULL", w) for w in ("full (every layer)", "activation checkpointing: on", "gradient checkpointing",
                                        "recompute_granularity=full", "activation checkpointing enabled",
                                        "full, uniform, 1 layer")])
def test_recompute_wordings_read_the_same(row_id: str, words: str) -> None:
    assert training_reading(_row(row_id, recompute=words)) == training_reading(_row(row_id))


@pytest.mark.parametrize(("words", "layers"), [("full, 8 layers", 8), ("full (block, 4 layers)", 4),
                                               ("--recompute-num-layers 2 --recompute-method block", 2)])
def test_full_recompute_of_stated_layers_is_the_block_method(words: str, layers: int) -> None:
    # TR-KOR-T5-22B-FULL: 48 layers, pp 1: one chunk of 48 layers; the first `layers` of it recomputed
    strategy = row_specs(_row("TR-KOR-T5-22B-FULL", recompute=words))[0].strategy
    assert (strategy.recompute.value, strategy.recompute_layers) == ("full", layers)


def test_full_recompute_by_the_uniform_method_recomputes_every_layer() -> None:
    strategy = row_specs(_row("TR-KOR-T5-22B-FULL", recompute="full (uniform, 4 layers)"))[0].strategy
    assert strategy.recompute.value == "full" and strategy.recompute_layers is None


# --- flags ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("row_id", "words"), [
    ("TR-KOR-T5-22B-SEL", w) for w in ("on", "enabled", "true", "SP on", "sequence parallel: yes",
                                       "sequence_parallel=True", "Y", "SP=1", "--sequence-parallel")] + [
    ("TR-SC21-T1-02", w) for w in ("off", "disabled", "false", "SP off", "sequence_parallel=False", "N", "not used",
                                   "SP=0", "not enabled")])
def test_sequence_parallel_wordings_read_the_same(row_id: str, words: str) -> None:
    assert training_reading(_row(row_id, seq_parallel=words)) == training_reading(_row(row_id))


@given(st.sampled_from(["yes", "on", "enabled", "true", "1"]), st.sampled_from(["SP", "sequence_parallel", "seq-par"]),
       st.sampled_from(["=", ": ", " = "]), st.booleans())
def test_a_setting_reads_as_its_value(value: str, key: str, sep: str, negate: bool) -> None:
    said = {"yes": "no", "on": "off", "enabled": "disabled", "true": "false", "1": "0"}[value] if negate else value
    assert flag(f"{key}{sep}{said.upper()}") is (not negate)


@given(st.sampled_from(["activation checkpointing", "recompute", "AC", "gradient checkpointing"]),
       st.sampled_from([": off", " disabled", ": false", "=0", " off"]))
def test_a_recompute_switched_off_reads_none(what: str, off: str) -> None:
    assert recompute_of(f"{what}{off}").value == "none"  # type: ignore[union-attr]


# --- training metrics ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("row_id", "metric", "unit", "scale"), [
    ("TR-NEMO2407-01", "tokens/sec/gpu", "", 1), ("TR-NEMO2407-01", "throughput", "tokens/sec/GPU", 1),
    ("TR-NEMO2407-01", "Tokens per second per GPU", "", 1), ("TR-NEMO2407-01", "TGS (tokens/GPU/s)", "", 1),
    ("TR-NEMO2407-01", "tokens per GPU per second", "", 1), ("TR-NEMO2407-01", "throughput", "tokens/s per H100", 1),
    ("TR-NEMO2407-01", "throughput", "k tokens/s/GPU", 1e-3),
    ("TR-MLM-H100-01", "TFLOPS per GPU", "", 1), ("TR-MLM-H100-01", "model TFLOPS/GPU", "TFLOPS", 1),
    ("TR-KOR-TXT-530B-DP8-FULL", "MFU %", "", 1), ("TR-KOR-TXT-530B-DP8-FULL", "model FLOP utilization (%)", "", 1),
    ("TR-KOR-TXT-530B-DP8-FULL", "Model FLOPs Utilization", "%", 1),
    ("TR-KOR-T5-22B-FULL", "step time (s)", "", 1), ("TR-KOR-T5-22B-FULL", "seconds/iteration", "", 1),
    ("TR-KOR-T5-22B-FULL", "s/it", "", 1), ("TR-KOR-T5-22B-FULL", "sec/step", "", 1),
    ("TR-KOR-T5-22B-FULL", "train_step_timing", "s", 1), ("TR-KOR-T5-22B-FULL", "step time (ms)", "", 1e3),
    ("TR-KOR-T5-22B-FULL", "iteration time", "msec", 1e3), ("TR-KOR-T5-22B-FULL", "iteration time", "us", 1e6)])
def test_training_metric_wordings(row_id: str, metric: str, unit: str, scale: float) -> None:
    label, value, specs = training_reading(_row(row_id))
    new_label, new_value, new_specs = training_reading(_row(row_id, metric=metric, unit=unit))
    assert new_label.split(" (in ")[0] == label and new_specs == specs
    assert new_value == pytest.approx(value * scale, rel=1e-12)


# rates of steps, a rate with no owner, a MFU with a TFLOP/s unit: refused naming the metric or unit
@pytest.mark.parametrize(("metric", "unit"), [("it/s", ""), ("iterations per second", ""), ("throughput", "it/s"),
                                              ("step time", "it/s"), ("tokens/s", ""), ("samples/s", ""),
                                              ("throughput", "tokens/s (8 GPUs)"), ("TFLOPS", "")])
def test_unread_training_metrics_are_refused(metric: str, unit: str) -> None:
    assert re.match(r"(metric|unit)\b", refusal(training_reading, _row("TR-KOR-T5-22B-FULL", metric=metric, unit=unit)))


# --- serving metrics and clients -----------------------------------------------------------------------------

@pytest.mark.parametrize(("metric", "unit", "label", "value"), [
    ("Output token throughput (tok/s)", "", "output tok/s (server)", 5000.0),
    ("output throughput", "tok/s per GPU", "output tok/s per GPU", 625.0),
    ("TTFT p50 (ms)", "", "p50 TTFT", 180.0), ("Median TTFT", "ms", "p50 TTFT", 180.0),
    ("TTFT (50th percentile)", "ms", "p50 TTFT", 180.0), ("TTFT p50 (s)", "", "p50 TTFT", 0.18),
    ("Mean TTFT (ms)", "", "mean TTFT", 200.0), ("TTFT p99", "ms", "p99 TTFT", 400.0),
    ("Mean TPOT", "ms", "mean TPOT", 30.0), ("request throughput", "req/s", "requests/s", 3.0),
    ("Total token throughput", "tok/s", "total tok/s", 9000.0)])
def test_serving_metric_wordings(metric: str, unit: str, label: str, value: float) -> None:
    read = read_serving_metric(_row("SRV-VLLM-DSR1-MI300X-C128-O800", metric=metric, unit=unit))
    assert read.label.startswith(label) and read.read(_SERVED) == pytest.approx(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("metric", "unit"), [("tok/s/user", ""), ("output speed", "tokens/s/user"),
                                              ("interactivity", "tok/s/user"), ("tokens/s per request", ""),
                                              ("input token throughput", "tok/s"), ("prefill throughput", "tokens/s"),
                                              ("throughput", "tokens/s per node"), ("TTFT p95 (ms)", ""),
                                              ("TTFT p99.9", "ms"), ("max TTFT", "ms"), ("P99 ITL", "ms")])
def test_unread_serving_metrics_are_refused_naming_the_metric(metric: str, unit: str) -> None:
    row = _row("SRV-VLLM-DSR1-MI300X-C128-O800", metric=metric, unit=unit)
    assert refusal(read_serving_metric, row).startswith("metric")


@pytest.mark.parametrize("words", ["--max-concurrency 128", "max concurrency: 128", "128 concurrent requests",
                                   "concurrency=128",
                                   "128 concurrent users (closed loop, 500 prompts, request rate inf)"])
def test_concurrency_wordings_read_the_same_client(words: str) -> None:
    row_id = "SRV-VLLM-DSR1-MI300X-C128-O800"
    base = serving_row_specs(_row(row_id)).benchmark
    assert serving_row_specs(_row(row_id, batch_or_concurrency=words)).benchmark.concurrency == base.concurrency == 128


@pytest.mark.parametrize("pinned", ["vllm==0.7.3", "vLLM v0.7.3", "VLLM 0.7.3"])
def test_pinned_versions_pick_the_same_engine(pinned: str) -> None:
    row_id = "SRV-VLLM-DSR1-MI300X-C128-O800"
    framework = re.sub(r"^vLLM 0\.7\.3", pinned, _rows()[row_id]["framework"])
    assert serving_reading(_row(row_id, framework=framework)) == serving_reading(_row(row_id))


@pytest.mark.parametrize("framework", ["TensorRT-LLM 0.6.1 (gptSessionBenchmark, static batching)",
                                       "TRT-LLM v0.6.1 (gptSessionBenchmark, static batching)"])
def test_tensorrt_llm_spellings_keep_its_decode_attention(framework: str) -> None:
    new = inference_row_specs(_row("INF-TRT061-01", framework=framework))
    assert new == inference_row_specs(_row("INF-TRT061-01"))


# --- inference metrics ---------------------------------------------------------------------------------------

def test_a_total_throughput_is_the_per_gpu_rate_times_the_gpus() -> None:
    row = _row("INF-TRT061-01", n_gpus="2", tp="2", unit="output tokens/s (total, 2 GPUs)")
    label, read = read_inference_metric(row)
    specs = inference_row_specs(row)
    assert label == "output tok/s (all GPUs)" and read(SimpleNamespace(output_tokens_per_s_per_device=100.0),  # type: ignore[arg-type]
                                                       specs) == 200.0


@pytest.mark.parametrize(("unit", "value"), [("ms", 123.0), ("s", 0.123), ("", 123.0)])
def test_first_token_latency_in_the_rows_unit(unit: str, value: float) -> None:
    _, read = read_inference_metric(_row("INF-TRT061-01", metric="1st token latency (batch 1)", unit=unit))
    assert read(SimpleNamespace(ttft_s=0.123), None) == pytest.approx(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("metric", ["output speed (tok/s/user)", "prefill throughput", "throughput per node"])
def test_unread_inference_metrics_are_refused(metric: str) -> None:
    assert refusal(read_inference_metric, _row("INF-TRT061-01", metric=metric, unit="")).startswith("metric")


# --- models --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("words", "preset"), [
    ("Llama-3.1-405B-Instruct", "llama3.1-405b"), ("meta-llama/Llama-3.1-405B", "llama3.1-405b"),
    ("Meta-Llama-3.1-405B", "llama3.1-405b"), ("meta-llama/Meta-Llama-3-70B-Instruct", "llama3-70b"),
    ("meta-llama/Llama-3.3-70B", "llama3.1-70b"), ("DeepSeek-R1-0528", "deepseek-v3"),
    ("DeepSeek V3 671B", "deepseek-v3"), ("Mixtral 8x22B", "mixtral-8x22b"),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("DeepSeek V3 670B", None), ("Llama 3.1 406B", None), ("Qwen2.5-32B", None), ("Kimi-K2", None)])
def test_model_names(words: str, preset: str | None) -> None:
    # a size after the name names the preset only when it is the preset's published total (DeepSeek-V3: 671B)
    assert model_preset_for(words) == preset


# --- lengths, batches and memory sizes ----------------------------------------------------------------------

@pytest.mark.parametrize("words", ["8K", "8k tokens", "8192 tokens"])
def test_a_sequence_length_in_k_is_a_power_of_two(words: str) -> None:
    # TR-NEMO2407-11 trains at seq 8192; "8K" was read as 8 tokens
    assert training_reading(_row("TR-NEMO2407-11", seq=words)) == training_reading(_row("TR-NEMO2407-11"))


@pytest.mark.parametrize(("column", "words"), [("gbs", "4M tokens"), ("gbs", "1048576 tokens"), ("n_gpus", "16K"),
                                               ("gbs", "2k")])
def test_batches_in_tokens_and_counts_in_thousands_are_refused(column: str, words: str) -> None:
    assert refusal(training_reading, _row("TR-NEMO2407-11", **{column: words})).startswith(f"{column}:")


@pytest.mark.parametrize("words", ["2048 sequences", "2048 (4M tokens)", "2048 samples"])
def test_a_batch_with_words_reads_its_sequences(words: str) -> None:
    row = _row("TR-NEMO2407-11", gbs="2048")
    assert training_reading({**row, "gbs": words}) == training_reading(row)


@pytest.mark.parametrize("words", ["8x H100 80GB (640GB total)", "H100 80GB, 2 TB DDR5 host",
                                   "NVIDIA H100 80GB HBM3 (8 per node)", "H100 80GB (2048 GB system memory)"])
def test_a_node_or_host_memory_size_is_not_the_gpus(words: str) -> None:
    assert training_reading(_row("TR-NEMO2407-01", gpu=words)) == training_reading(_row("TR-NEMO2407-01"))


def test_an_input_length_in_k_reads_1024_tokens_and_says_so() -> None:
    # INF-TRT061-03: input 2048 tokens
    specs = inference_row_specs(_row("INF-TRT061-03", isl="2K"))
    assert specs.workload == inference_row_specs(_row("INF-TRT061-03")).workload
    assert "isl=2048 read from '2K'" in specs.notes


@pytest.mark.parametrize(("metric", "unit", "scale"), [
    ("time-to-train", "minutes", 1), ("TTT", "min", 1), ("time to convergence", "min", 1), ("TTT (minutes)", "", 1),
    ("time to train (h)", "", 1 / 60), ("time to train", "hours", 1 / 60)])
def test_time_to_train_wordings(metric: str, unit: str, scale: float) -> None:
    # the unit in the metric's words where the unit column is empty: "(h)" was read as minutes
    row_id = "TR-MLPERF-v3.0-dgxh100-n64-nemo-TTT"
    _, value, specs = training_reading(_row(row_id))
    _, new_value, new_specs = training_reading(_row(row_id, metric=metric, unit=unit))
    assert new_specs == specs and new_value == pytest.approx(value * scale, rel=1e-12)


def test_an_instance_name_is_not_a_percentile() -> None:
    # "p5" is AWS's instance, not a 5th percentile; "p95" is one
    row = _row("SRV-VLLM-DSR1-MI300X-C128-O800", metric="mean TTFT on p5", unit="ms")
    assert read_serving_metric(row).label.startswith("mean TTFT")
    assert refusal(read_serving_metric, {**row, "metric": "TTFT p95"}).startswith("metric")


@pytest.mark.parametrize(("column", "words"), [("tp", "TP{}"), ("tp", "TP={}"), ("tp", "tensor-parallel-size {}"),
                                               ("pp", "PP {}"), ("mbs", "micro batch {}"), ("gbs", "GBS={}"),
                                               ("seq", "seq len {}")])
def test_a_value_after_its_columns_name_is_read(column: str, words: str) -> None:
    # TR-SC21-T1-05: tp 8, pp 2, mbs 4; before, "TP8" read as not stated (the row refused) and "micro batch 4"
    # as the assumed micro-batch 1
    row = _rows()["TR-SC21-T1-05"]
    assert training_reading({**row, column: words.format(row[column])}) == training_reading(row)


def test_an_expert_degree_after_its_name_is_not_assumed_one() -> None:
    row = _rows()["TR-MBRIDGE-25.11-B200-19"]
    new = row_specs({**row, "ep": f"EP={row['ep']}"})
    assert int(row["ep"]) > 1 and new[0].strategy.ep == int(row["ep"]) == row_specs(row)[0].strategy.ep


@pytest.mark.parametrize("words", ["yes (DeepSpeed-Ulysses)", "Ulysses", "ring attention", "yes, context parallel"])
def test_ulysses_or_ring_attention_is_not_megatrons_sequence_parallelism(words: str) -> None:
    assert refusal(training_reading, _row("TR-KOR-T5-22B-SEL", seq_parallel=words)).startswith("seq_parallel:")


@pytest.mark.parametrize(("words", "kind"), [("Training", "training"), ("pre-training", "training"),
                                             ("fine-tuning", "training"), ("Inference (offline)", "inference"),
                                             ("serving", "inference"), ("nccl-tests", "collective"),
                                             ("memory", "memory"), ("benchmark", None)])
def test_a_rows_kind_as_sources_word_it(words: str, kind: str | None) -> None:
    assert kind_of(words) == kind


@pytest.mark.parametrize(("unit", "size"), [("GiB", 2**30), ("GiB per GPU", 2**30), ("GB/GPU", 1e9), ("MiB", 2**20)])
def test_memory_units_per_gpu(unit: str, size: float) -> None:
    assert unit_bytes({"unit": unit}) == size


@pytest.mark.parametrize("unit", ["GiB (total)", "GB per node", "TB"])
def test_other_memory_units_are_refused(unit: str) -> None:
    assert refusal(unit_bytes, {"unit": unit}).startswith("unit:")


def test_a_kind_spelled_in_other_words_is_run_not_dropped(tmp_path: Path) -> None:
    """`validate` keeps a row whose kind says "Training" (its publisher's word) and runs it as training."""
    row = next(r for r in read_rows() if r["kind"] == "training")
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(row))
        writer.writeheader()
        writer.writerow({**row, "kind": "Training"})
    (result,) = validate(path, kinds=("training",))
    assert result.id == row["id"]
    assert result.error is not None
