"""Turn one measured inference row of the validation CSV into specifications and a predicted value.

Rows name a model (matched to a preset), a GPU, a TP degree, a precision, and input / output lengths
with a batch. Throughput rows are compared in output tokens per second and GPU, first-token rows in
milliseconds. What the row does not state is assumed and written down.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.run import estimate_inference_run
from armillary.specs.loading import load_model, load_system
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference
from armillary.validation.gpu_words import system_preset_for
from armillary.validation.metrics import PER_GPU, PER_LONGER_TIME, refuse_other_gpu_count, time_unit, unit_in_metric
from armillary.validation.model_words import model_preset_for
from armillary.validation.precision_words import fp8_of, fp16_of, kv_fp8_of, unread_weight_format
from armillary.validation.row_columns import Unsupported, int_column, qualified_readings
from armillary.validation.vocabulary import framework_words, metric_words


def _int(row: dict[str, str], key: str) -> int:
    value = int_column(row, key)
    if value is None:
        raise Unsupported(f"column {key!r} is empty or not a number ({row.get(key)!r})")
    return value


# TensorRT-LLM up to v0.6 ("TensorRT-LLM v0.5", "TRT-LLM 0.6.1"): masked MHA decode reads the cache once per query head
_TRT_MHA = re.compile(r"(tensorrt|trt)[- _]?llm\s*v?0\.[0-6](?!\d)", re.I)
# TensorRT-LLM v0.6.1's performance document builds its GPT-J and Llama 2 engines without --paged_kv_cache
# (docs/source/performance.md @138f96d4, "Benchmarking per Model"): gptSessionBenchmark then allocates one
# contiguous cache of batch x (input + output) tokens in the memory the weights leave. Only Falcon-180B's
# engines are built with --paged_kv_cache (and --use_inflight_batching).
_PAGED_SESSION_ENGINES = ("falcon-180b",)


@dataclass(frozen=True)
class InferenceRowSpecs:
    model: Model
    system: System
    strategy: Strategy
    workload: Inference
    notes: tuple[str, ...]


def inference_row_specs(row: dict[str, str]) -> InferenceRowSpecs:
    """The specifications an inference row describes, with what had to be assumed."""
    notes: list[str] = []
    preset = model_preset_for(row.get("model"))
    if preset is None:
        raise Unsupported(f"model: no preset for {row.get('model')!r}")
    system_preset = system_preset_for(row.get("gpu"))
    if system_preset is None:
        raise Unsupported(f"gpu: no system preset for {row.get('gpu')!r}")
    precision_text = row.get("precision", "").lower()
    if (other := unread_weight_format(precision_text)) is not None:
        raise Unsupported(f"precision: {row.get('precision')!r} names {other!r} weights, which inference rows do not "
                          "read yet (fp8 and 16-bit weights are read)")
    fp8 = fp8_of(precision_text)
    workload: dict[str, Any] = {"kind": "inference", "batch": _int(row, "batch_or_concurrency"),
                                "input_len": _int(row, "isl"), "output_len": _int(row, "osl")}
    if _TRT_MHA.search(framework_words(row.get("framework"))):
        workload["decode_attention"] = "per_query_head"
        notes.append("decode attention reads the cache once per query head (TensorRT-LLM <= 0.6 masked MHA; "
                     "GQA-aware kernels came after v0.6.1, PR #524)")
    if fp8:
        workload["weights"] = "fp8"
        notes.append("fp8 GEMMs and weights; attention and the LM head in 16 bits")
    if kv_fp8_of(precision_text):  # also beside 16-bit weights ("FP16 weights, FP8 KV cache")
        workload["kv_cache"] = {"precision": "fp8"}
    precision = "fp8" if fp8 else "fp16" if fp16_of(precision_text) else "bf16"
    tp, gpus = _int(row, "tp"), _int(row, "n_gpus")
    system = load_system(system_preset, max(gpus, 1))
    if "gptsessionbenchmark" in row.get("framework", "").lower() and preset not in _PAGED_SESSION_ENGINES:
        workload["kv_cache"] = {**workload.get("kv_cache", {}), "block_tokens": 1, "memory_fraction": 1.0}
        notes.append(f"{system.name} preset; FlashAttention-2 kernels; one contiguous KV cache for the batch "
                     "(engine built without --paged_kv_cache)")
    else:
        notes.append(f"{system.name} preset; FlashAttention-2 kernels; KV pages of 64 tokens")
    strategy = Strategy.model_validate({"tp": tp, "pp": int_column(row, "pp") or 1, "precision": precision,
                                        "attention": "flash"})
    notes.extend(qualified_readings(row, ("n_gpus", "tp", "pp", "isl", "osl", "batch_or_concurrency")))
    return InferenceRowSpecs(load_model(preset), system, strategy, Inference(**workload), tuple(notes))


InferenceReading = Callable[[InferenceEstimate, InferenceRowSpecs], float]


def read_inference_metric(row: dict[str, str], notes: list[str] | None = None) -> tuple[str, InferenceReading]:
    """(label, the predicted value in the row's unit) of a static-batch inference row's metric: output
    throughput per GPU, or of all the row's GPUs where its words say so ("total", "whole", "server", "8 GPUs");
    first-token latency in the row's time unit (ms when it names none). A rate per user, an input (prefill)
    rate or a rate per node is refused naming the metric."""
    metric, unit = metric_words(row.get("metric")), metric_words(row.get("unit"))
    both = f"{metric} {unit}"
    refuse_other_gpu_count(row, both)
    refused = (f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: only output throughput per GPU or of all "
               "the GPUs, and first-token latency, are read")
    if re.search(r"(per|/)[\s-]*(user|request|stream|node|host|instance)s?\b|interactivity", both) or (
            re.search(r"\b(input|prompt|prefill)\b", both) and not re.search(r"total|(input|prompt) and output", both)):
        raise Unsupported(refused)
    # input and output tokens together (trtllm-bench's "Total Token Throughput"), requests or samples, a rate per
    # minute or hour: not the output tokens per second this reader predicts ("peak" throughput of a static batch is
    # the best batch's, TensorRT-LLM v0.6.1's performance document)
    if re.search(r"total token|input and output|prompt and output|requests?/s|req/s|samples?/s|queries|\bqps\b",
                 both) or PER_LONGER_TIME.search(both):
        raise Unsupported(refused)
    if "throughput" in metric or (re.search(r"tokens?/s|tok/s", both) and not re.search(r"latency|ttft", both)):
        if re.search(r"\btokens? throughput\b|\bthroughput per (gpu|device|chip)\b|\btps\b", metric) and not re.search(
                r"output|generat|decode|completion|completed|\bout\b", both):
            # InferenceMAX's "Token Throughput per GPU" (its json's tput_per_gpu) counts input and output tokens
            # (InferenceMAX issue #293), vLLM's benchmark_throughput prints both: not read as output tokens
            raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: tokens not said to be "
                              "output (or generated) tokens")
        if re.search(r"\b(k|m|thousand|million)\s*(tokens?|tok)\b|\b(mw|megawatt|rack|nvl\s*\d+)\b", both):
            raise Unsupported(refused)
        if "per-gpu vs total not stated" in unit:
            if notes is not None:
                notes.append("throughput read as per GPU, like the same document's H100 table")
            return "output tok/s per GPU", lambda r, s: float(r.output_tokens_per_s_per_device)
        if not PER_GPU.search(both) and re.search(r"total|whole|server|aggregate|all gpus|\d+ gpus", both):
            return ("output tok/s (all GPUs)",
                    lambda r, s: float(r.output_tokens_per_s_per_device) * s.system.devices)
        if not PER_GPU.search(both) and (int_column(row, "n_gpus") or 1) > 1:
            # per GPU or the GPUs' total: 8x apart on 8 GPUs, and the tools print both (trtllm-bench's "Total
            # Output Throughput" and "Per GPU Output Throughput")
            raise Unsupported(f"unit {row.get('unit')!r} / metric {row.get('metric')!r}: per GPU or of all the "
                              f"{int_column(row, 'n_gpus')} GPUs is not stated ('tok/s/GPU', 'tok/s total')")
        return "output tok/s per GPU", lambda r, s: float(r.output_tokens_per_s_per_device)
    if re.search(r"1st token|first[- ]token|\bttft\b", metric):
        per_second = 1.0 / time_unit(unit or unit_in_metric(metric), "ms")  # 1e3 for ms
        label = f"first-token latency [{unit or 'ms'}]"
        return label, lambda r, s: float(r.ttft_s) * per_second
    raise Unsupported(f"metric {row.get('metric')!r} is not predicted")


def predict_inference(row: dict[str, str]) -> tuple[str, float, tuple[str, ...], InferenceEstimate]:
    """(metric label, predicted value, assumptions, the estimate) for one inference row."""
    specs = inference_row_specs(row)
    notes = list(specs.notes)
    result = estimate_inference_run(specs.model, specs.system, specs.strategy, specs.workload)
    label, read = read_inference_metric(row, notes)
    return label, read(result, specs), tuple(notes), result
