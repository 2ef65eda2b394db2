"""Turn one serving-under-load row of the validation CSV (ids "SRV-...", and inference rows whose client sends
at a rate, a concurrency or all at once) into a simulated benchmark run and the quantity its metric names.

The row's words are read here; the rules they select are the serving layer's. The row names the engine (its
profile, as it starts on the device and as launched with the flags the row states: `serving.launch`), the
model and GPU presets, the lengths (fixed, or ShareGPT's measured quantiles) and the client
(`serving.benchmark`: offline, a closed loop at a concurrency, Poisson at a rate, MLPerf's scenarios; the
client trtllm-bench, named by the row's words, launches its engine as `serving.benchmark.client_engine` says
for the API and `armillary serve` too). What is not stated is assumed
and written down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from armillary.errors import SpecError
from armillary.plan.arrays import ModelArrays
from armillary.serving.benchmark import (
    STEADY_BATCHES,
    Benchmark,
    Client,
    Mode,
    requests_for,
    sequences_held,
    trace_for,
    workload_for,
)
from armillary.serving.engine import Engine
from armillary.serving.engine_releases import Family
from armillary.serving.run import ServingResult, serve_trace
from armillary.serving.trace import Trace
from armillary.specs.loading import load_model, load_system
from armillary.specs.model import Model
from armillary.specs.stack import hopper_or_later
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, LengthDistribution
from armillary.validation.gpu_words import system_preset_for
from armillary.validation.inference_rows import InferenceRowSpecs
from armillary.validation.model_words import model_preset_for
from armillary.validation.precision_words import fp8_of, kv_fp8_of, unread_weight_format
from armillary.validation.reading import about_the_run
from armillary.validation.row_columns import Unsupported, int_column, qualified_readings
from armillary.validation.serving_launch import (
    attention_groups,
    client_engine_of_row,
    dp_attention,
    engine_of_row,
    flag_value,
    launch_words,
    number_in,
    refuse_unsimulated_launch,
    tensor_parallel,
)
from armillary.validation.serving_metrics import ServingMetric, read_serving_metric
from armillary.validation.vocabulary import OFFLINE_LOAD


def _lengths(row: dict[str, str], requests: int | None, notes: list[str]) -> tuple[int, int, bool]:
    """(mean input, mean output, whether they vary)."""
    isl, osl = row.get("isl", ""), row.get("osl", "")
    fixed_in, fixed_out = int_column(row, "isl"), int_column(row, "osl")
    if fixed_in is not None and fixed_out is not None:
        return fixed_in, fixed_out, False
    total_in = number_in(r"(\d+) input tokens total", isl)
    total_out = number_in(r"(\d+) output tokens generated", osl)
    approx_in = number_in(r"~\s*(\d+)", isl)
    if total_in is not None and total_out is not None:
        if not requests:
            raise Unsupported("batch_or_concurrency: the lengths are totals over the run, but its request count is "
                              "not stated")
        notes.append("ShareGPT lengths as vLLM's benchmark_serving samples them (serving.trace.sharegpt_lengths), "
                     "around the row's totals / prompts")
        return round(total_in / requests), round(total_out / requests), True
    if approx_in is not None and fixed_out is not None:
        return int(approx_in), fixed_out, False
    if not isl.strip() and not osl.strip():
        raise Unsupported("isl / osl: the request lengths are not stated")
    raise Unsupported(f"isl / osl: cannot read lengths from {isl!r} / {osl!r}")


def _prefix_hit_rate(row: dict[str, str], input_len: int, engine: Engine, notes: list[str]) -> float:
    text = row.get("notes", "")
    prefix = number_in(r"gsp-system-prompt-len (\d+)", text)
    per_group = number_in(r"gsp-prompts-per-group (\d+)", text)
    if prefix is None or per_group is None:
        return 0.0
    if not engine.prefix_caching:
        notes.append(f"shared prefixes computed again: {engine.name} runs without prefix caching")
        return 0.0
    rate = prefix / input_len * (per_group - 1) / per_group  # the group's first prompt computes its prefix
    notes.append(f"prefix hit rate {rate:.2f}: shared {prefix:g}-token system prompt, {per_group:g} per group")
    return rate


def _modelopt_kv_fp8(row: dict[str, str], engine: Engine, fp8: bool, notes: list[str]) -> bool:
    """Whether TensorRT-LLM serves a ModelOpt FP8 checkpoint's KV cache in fp8 when the row names no KV
    precision: its kv_cache_config dtype defaults to "auto", which keeps the checkpoint's kv_cache_quant_algo
    (validate_and_set_kv_cache_quant, tensorrt_llm/_torch/pyexecutor; trtllm-bench get_settings passes "auto"
    unless the extra options set a dtype), and ModelOpt's Hugging Face export quantizes the KV cache to FP8
    by default (TensorRT-Model-Optimizer examples/llm_ptq/hf_ptq.py: --kv_cache_qformat default "fp8" once
    export_fmt defaults to "hf"; the 2024 script turned it off for that export, "hf" not in export_fmt).
    Assumed, not read per checkpoint: NVIDIA's Aug-2024 export of Llama-3.1-405B-Instruct-FP8 (modelopt
    0.17.0) reads kv_cache_quant_algo null; its FP8 Llama checkpoints were exported again in Feb 2025
    (hf_quant_config.json of the 8B and 70B then 241 bytes, the length of the FP8-KV form; not read)."""
    text = f"{row.get('precision', '')} {row.get('model', '')}"
    if not (fp8 and engine.family is Family.TENSORRT_LLM and re.search(r"model[- ]?opt", text, re.I)):
        return False
    if re.search(r"kv[-_ ]cache[-_ ]dtype\s*[ =:]\s*(auto|bf16|bfloat16|fp16|float16)", launch_words(row), re.I):
        return False
    notes.append("fp8 KV cache: TensorRT-LLM's kv_cache dtype 'auto' keeps the ModelOpt checkpoint's "
                 "kv_cache_quant_algo, FP8 in ModelOpt's default export (assumed; the checkpoint's own "
                 "hf_quant_config.json not read)")
    return True


def _checkpoint_scales(row: dict[str, str], mla: bool, notes: list[str]) -> dict[str, Any]:
    """How the row's fp8 checkpoint is scaled (its Hugging Face quantization_config), per tensor unless known
    otherwise: deepseek-ai's in 128x128 blocks (weight_block_size), Meta's FP8 Llama 3.1 per output channel
    with dynamic per-token activation scales and 16-bit attention projections (quant_method fbgemm_fp8; Llama 3
    paper, Dubey et al. 2024 §6.2: no quantization in self-attention nor in the first and last layers, row-wise
    scales)."""
    text = f"{row.get('model', '')} {row.get('precision', '')}"
    if mla and "not stated" in row.get("precision", "").lower():
        notes.append("fp8 weights and GEMMs: the deepseek-ai checkpoint is stored in block-scaled fp8 (128x128 blocks)")
        return {"weight_scales": "block"}
    precision = row.get("precision", "")
    if re.search(r"block[- ]?(scaled|wise|scaling)|\b128\s*x\s*128\b|weight[-_ ]block[-_ ]size", precision, re.I) or (
            mla and fp8_of(precision.lower()) and re.search(r"deepseek-ai|as published", precision, re.I)):
        # the precision says so: block-scaled fp8 ("FP8 (block-scaled 128x128)"), or deepseek-ai's own checkpoint
        notes.append("fp8 weights and GEMMs: block-scaled fp8 (128x128 blocks), as the precision says")
        return {"weight_scales": "block"}
    if re.search(r"meta-llama/\S*-FP8\b", text, re.I):
        notes.append("Meta's FP8 checkpoint (fbgemm_fp8): channel-scaled fp8 weights, attention projections at 16 "
                     "bits (the first and last layers' 16-bit MLPs not modelled)")
        return {"weight_scales": "channel", "fp8_attention_projections": False}
    return {"weight_scales": "tensor"}


def _client(row: dict[str, str]) -> Benchmark:
    """The benchmark client as the row words it (`_load`), and the tool that launches the engine itself where
    the row names one: trtllm-bench (its framework, printed settings or notes), which runs offline only (a
    trtllm-bench row in another mode is refused, not served with the server's settings)."""
    load = _load(row)
    text = f"{row.get('framework', '')} {row.get('other_reported', '')} {row.get('notes', '')}"
    if not re.search(r"trtllm-bench", text, re.I):
        return load
    try:
        return Benchmark(load.mode, load.requests, load.rate, load.concurrency, Client.TRTLLM_BENCH)
    except SpecError as err:
        raise Unsupported(f"framework: {err}") from None


def _load(row: dict[str, str]) -> Benchmark:
    """How the row's client sends requests: "500 prompts", "--num-prompts 500", "max-concurrency 64",
    "concurrency: 64", "request rate 16 req/s", "--request-rate 2.5", "QPS 4", "Poisson arrivals, target 71.2
    QPS", "max-load offline (infinite request rate)", "all 1000 requests queued"; read only from clauses about
    the client (the measured results are not the client). MLPerf's scenarios by their names."""
    client = "; ".join(about_the_run(f"{row.get('batch_or_concurrency', '')}; {row.get('framework', '')}"))
    metric = row.get("metric", "")
    mlperf = re.search(r"mlperf", f"{row.get('framework', '')} {row.get('source', '')}", re.I) is not None
    if re.search(r"\boffline\b", metric, re.I):  # MLPerf's "Offline tokens per second"
        client += "; offline"
    if re.search(r"\d\s*(?:-|–|—|\bto\b)\s*\d", row.get("batch_or_concurrency", "")):
        # "conc 4-128", "4 to 128": the sweep, not the one load of the row's measurement
        raise Unsupported(f"batch_or_concurrency: {row.get('batch_or_concurrency')!r} is a range; the run's one "
                          "load is needed")
    requests = number_in(r"(\d+)\s*(?:prompts|requests|queries|samples)\b", client) or flag_value("num-prompts", client)
    count = int(requests) if requests else None
    concurrency = number_in(r"(?<![a-z0-9_])(?:max[-_ ])?(?:concurrency|conc)\b\s*[ =:]?\s*(\d+)", client) or number_in(
        r"(\d+)\s*concurrent\b", client)  # "64 concurrent requests", "64 concurrent users"
    rate = (number_in(r"request[-_ ]rate\s*[ =:]?\s*(\d+(?:\.\d+)?)", client)
            or number_in(r"(\d+(?:\.\d+)?)\s*(?:req|requests|queries)\s*/\s*s\b", client)
            or number_in(r"\bqps\s*[ =:]?\s*(\d+(?:\.\d+)?)", client)
            or number_in(r"(\d+(?:\.\d+)?)\s*qps\b", client))
    if concurrency is not None and rate is not None:
        # benchmark_serving's --request-rate with --max-concurrency: Poisson arrivals capped at that many in
        # flight, neither the closed loop nor the open one the clients here simulate
        raise Unsupported(f"batch_or_concurrency: a finite request rate ({rate:g}/s) capped at a concurrency "
                          f"({concurrency:g}) is not simulated (a closed loop at request rate inf, or an open loop)")
    if concurrency is not None:
        return Benchmark(Mode.CONCURRENCY, count, concurrency=int(concurrency))
    if re.search(OFFLINE_LOAD, client, re.I):
        return Benchmark(Mode.MLPERF_OFFLINE if mlperf else Mode.OFFLINE, count)
    if rate is None:
        raise Unsupported(f"batch_or_concurrency: no concurrency, request rate or offline load in "
                          f"{row.get('batch_or_concurrency', '')!r}")
    server = mlperf and re.search(r"\bserver\b", metric, re.I)
    return Benchmark(Mode.MLPERF_SERVER if server else Mode.RATE, count, rate=rate)


@dataclass(frozen=True)
class ServingRowSpecs(InferenceRowSpecs):
    """The specifications, and the engine and requests of the benchmark."""

    engine: Engine
    trace: Trace
    benchmark: Benchmark


def serving_row_specs(row: dict[str, str]) -> ServingRowSpecs:
    """The benchmark a serving row describes (engine, specifications, requests), with what had to be
    assumed."""
    notes: list[str] = []
    preset, system_preset = model_preset_for(row.get("model")), system_preset_for(row.get("gpu"))
    if preset is None or system_preset is None:
        raise Unsupported(f"model / gpu: no preset for {row.get('model')!r} on {row.get('gpu')!r}")
    model = load_model(preset)
    refuse_unsimulated_launch(row)
    client = _client(row)
    engine = engine_of_row(row, model.mla is not None, notes, model.max_seq_len, load_system(system_preset, 1).device)
    input_len, output_len, varied = _lengths(row, client.requests, notes)
    notes.extend(qualified_readings(row, ("isl", "osl")))  # "1K" read as 1024 tokens, said so
    fp8 = _fp8_weights(row, model)
    workload: dict[str, Any] = {
        "kind": "inference", "input_len": input_len, "output_len": output_len, "weights": "fp8" if fp8 else None,
        **_checkpoint_scales(row, model.mla is not None, notes),
        "kv_cache": {"precision": "fp8"} if kv_fp8_of(row.get("precision", "").lower()) or re.search(
            r"kv[-_ ]cache[-_ ]dtype\s*[ =:]\s*fp8", launch_words(row), re.I)
        or _modelopt_kv_fp8(row, engine, fp8, notes) else {},
        "serving": {"prefix_hit_rate": _prefix_hit_rate(row, input_len, engine, notes),
                    "concurrency": client.concurrency}}
    tp = tensor_parallel(row, notes)
    if (gpus := int_column(row, "n_gpus")) is not None and (tp > gpus or gpus % tp):
        raise Unsupported(f"tp / n_gpus: tp {tp} is not a whole share of the row's {gpus} GPUs")
    system = load_system(system_preset, int_column(row, "n_gpus") or tp)
    attention = "flash3" if hopper_or_later(row.get("gpu", "")) else "flash"
    strategy = Strategy.model_validate({"tp": tp, "precision": "fp8" if fp8 else "bf16", "attention": attention,
                                        **_experts(row, model, tp, notes)})
    notes.append(f"tp={tp}, {attention} attention, {system.name} preset")
    inference = workload_for(client, Inference.model_validate(workload))
    engine = client_engine_of_row(row, client, engine, model, strategy, inference, system, notes)
    held = _held(client, model, strategy, inference, system, engine, notes)
    lengths = LengthDistribution.SHAREGPT if varied else LengthDistribution.FIXED
    inference = inference.model_copy(update={"serving": inference.serving.model_copy(update={"lengths": lengths})})
    trace = trace_for(client, inference, requests_for(client, held))
    return ServingRowSpecs(model, system, strategy, inference, tuple(notes), engine, trace, client)


def _fp8_weights(row: dict[str, str], model: Model) -> bool:
    """Whether the row serves fp8 weights (an MLA model whose precision is not stated: its fp8 checkpoint);
    a weight format other than fp8 or 16-bit is not read."""
    precision = row.get("precision", "").lower()
    # the model's name may name its format too: "DeepSeek-R1 (NVFP4)", "nvidia/DeepSeek-R1-FP4"
    if (other := unread_weight_format(precision) or unread_weight_format(row.get("model", "").lower())) is not None:
        raise Unsupported(f"precision: {row.get('precision')!r} names {other!r} weights, which serving rows do not "
                          "read yet (fp8 and 16-bit weights are read)")
    return fp8_of(precision) or (model.mla is not None and "not stated" in precision)


def _experts(row: dict[str, str], model: Model, tp: int, notes: list[str]) -> dict[str, Any]:
    """The strategy's expert layout (ep, expert_tp) and data-parallel attention, as the row's flags run them."""
    moe: dict[str, Any] = {}
    ep_size = flag_value("ep-size", launch_words(row))
    if model.moe is not None and ep_size is not None and ep_size > 1:
        # TensorRT-LLM --ep_size: experts spread over ep_size ranks, each expert split over tp / ep_size
        # (moe_tp_size = tp_size / moe_ep_size, tensorrt_llm/mapping.py)
        if tp % int(ep_size):
            raise Unsupported(f"framework: --ep_size {ep_size:g} does not divide the tensor-parallel degree {tp}")
        moe = {"ep": int(ep_size), "expert_tp": tp // int(ep_size)}
        notes.append(f"experts over {int(ep_size)} ranks, each split over {tp // int(ep_size)} (--ep_size)")
    elif model.moe is not None and re.search(r"enable[-_](expert[-_]parallel|ep[-_]moe)\b", launch_words(row), re.I):
        # vLLM --enable-expert-parallel / SGLang 0.4 --enable-ep-moe (ep_size = tp_size): whole experts spread
        # over the TP ranks, which still hold every token (estimate.inference.replicated_experts)
        moe = {"ep": tp, "expert_tp": 1}
        notes.append(f"experts spread whole over the {tp} TP ranks (ep={tp}): expert parallelism enabled")
    elif model.moe is not None:
        # `--tp 8` without expert parallelism: the fused MoE shards every expert over the TP ranks
        # (estimate.inference.replicated_experts: one all-reduce per layer, no token exchange)
        moe = {"ep": 1, "expert_tp": tp}
        notes.append(f"experts sharded over the {tp} TP ranks (expert_tp={tp}, ep=1), as the engine runs them")
    if dp_attention(row):  # attention in --dp groups (dp_size = tp_size unless stated), experts sharded over tp
        groups = attention_groups(row, tp)
        moe["attention_dp"] = groups
        ranks = "one rank" if groups == tp else f"{tp // groups} ranks"
        notes.append(f"data-parallel attention over {groups} groups of {ranks}; tokens gathered to the experts")
    return moe


def _held(client: Benchmark, model: Model, strategy: Strategy, inference: Inference, system: System,
          engine: Engine, notes: list[str]) -> int:
    """The sequences the server holds at once, which size a run whose request count is not stated (1 where
    the row states it: `requests_for` then takes the row's count)."""
    if client.requests is not None:
        return 1
    held = sequences_held(ModelArrays.of(model), strategy, inference, system, engine)
    notes.append(f"requests not stated: {requests_for(client, held)} ({client.mode.value}: "
                 + ("LoadGen's minimum duration" if client.rate is not None else
                    f"{STEADY_BATCHES} batches of the {min(held, client.concurrency or held)} the server holds "
                    "at once") + "); rates read over the steady window (first completion to last first token)")
    return held


def simulate_serving_row(row: dict[str, str]) -> tuple[ServingMetric, float, tuple[str, ...], ServingResult]:
    """(the row's metric, its predicted value in the row's unit, assumptions, the simulated benchmark)."""
    metric = read_serving_metric(row)
    s = serving_row_specs(row)
    result = serve_trace(ModelArrays.of(s.model), s.strategy, s.workload, s.system, 1, s.trace, engine=s.engine)
    if s.benchmark.steady:
        metric = read_serving_metric(row, steady=True)
    return metric, float(metric.read(result)), s.notes, result
