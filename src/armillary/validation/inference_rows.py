"""Turn one measured inference row of the validation CSV into specifications and a predicted value.

Rows name a model (matched to a preset), a GPU, a TP degree, a precision, and input / output lengths
with a batch. Throughput rows are compared in output tokens per second and GPU, first-token rows in
milliseconds. What the row does not state is assumed and written down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.run import estimate_inference_run
from armillary.specs.loading import load_model, load_system
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference
from armillary.validation.rows import Unsupported, int_column
from armillary.validation.vocabulary import model_preset_for, system_preset_for


def _int(row: dict[str, str], key: str) -> int:
    value = int_column(row, key)
    if value is None:
        raise Unsupported(f"column {key!r} is empty or not a number ({row.get(key)!r})")
    return value


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
    fp8 = "fp8" in precision_text
    workload: dict[str, Any] = {"kind": "inference", "batch": _int(row, "batch_or_concurrency"),
                                "input_len": _int(row, "isl"), "output_len": _int(row, "osl")}
    if "tensorrt-llm v0.5" in row.get("framework", "").lower() or "v0.6" in row.get("framework", "").lower():
        workload["decode_attention"] = "per_query_head"
        notes.append("decode attention reads the cache once per query head (TensorRT-LLM <= 0.6 masked MHA; "
                     "GQA-aware kernels came after v0.6.1, PR #524)")
    if fp8:
        workload["weights"] = "fp8"
        notes.append("fp8 GEMMs and weights; attention and the LM head in 16 bits")
        if "kv" in precision_text:
            workload["kv_cache"] = {"precision": "fp8"}
    precision = "fp8" if fp8 else "fp16" if "fp16" in precision_text else "bf16"
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
    return InferenceRowSpecs(load_model(preset), system, strategy, Inference(**workload), tuple(notes))


def predict_inference(row: dict[str, str]) -> tuple[str, float, tuple[str, ...], InferenceEstimate]:
    """(metric label, predicted value, assumptions, the estimate) for one inference row."""
    specs = inference_row_specs(row)
    notes = list(specs.notes)
    result = estimate_inference_run(specs.model, specs.system, specs.strategy, specs.workload)
    metric = row.get("metric", "").lower()
    if "throughput" in metric:
        if "per-gpu vs total not stated" in row.get("unit", "").lower():
            notes.append("throughput read as per GPU, like the same document's H100 table")
        return "output tok/s per GPU", float(result.output_tokens_per_s_per_device), tuple(notes), result
    if "1st token" in metric or "first token" in metric:
        return "first-token latency [ms]", float(result.ttft_s) * 1e3, tuple(notes), result
    raise Unsupported(f"metric {row.get('metric')!r} is not predicted")
