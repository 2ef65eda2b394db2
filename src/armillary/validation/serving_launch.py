"""How a serving row's words say its engine was launched: the engine profile and release its framework names,
the launch flags that set the profile's numbers (`engine_of_row`), the engine as a benchmark client launches it
(`client_engine_of_row`), the tensor parallelism and data-parallel attention groups, and the launches no engine
profile simulates, refused (speculative decoding, disaggregated prefill and decode, a vLLM engine switched by an
environment variable)."""

from __future__ import annotations

import re
from typing import Any

from armillary.errors import SpecError
from armillary.serving.benchmark import (
    Benchmark,
    client_engine,
)
from armillary.serving.engine import LAUNCH_RULES, Engine, on_device
from armillary.serving.engine_versions import engine_for, engine_version
from armillary.serving.launch import resolve_defaults
from armillary.specs.device import Device
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.vocabulary import framework_words


def number_in(pattern: str, text: str) -> float | None:
    found = re.search(pattern, text, re.I)
    return float(found.group(1)) if found else None


def launch_words(row: dict[str, str]) -> str:
    """The server flags a row states: its launch command, what the run printed, its notes."""
    return framework_words(f"{row.get('framework', '')} {row.get('other_reported', '')} {row.get('notes', '')}")


def flag_value(name: str, text: str, value: str = r"(\d+)") -> float | None:
    """The value of a flag written --name-like-this, name_like_this or name like this, followed by a space,
    '=' or ':' (the engines' command lines, Python arguments and printed settings)."""
    words = r"[-_ ]".join(name.split("-"))
    return number_in(rf"(?<![a-z0-9_]){words}\s*[ =:]\s*{value}", text)


_SHARE = r"(\d*\.?\d+)"  # a number such as 0.9 or .9, not the full stop after it
# flags of vLLM, SGLang and TensorRT-LLM that set an engine profile's numbers (whole numbers, or a share)
_ENGINE_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("max-num-seqs", "max_batch", r"(\d+)"), ("max-running-requests", "max_batch", r"(\d+)"),
    ("max-batch-size", "max_batch", r"(\d+)"),
    ("max-num-batched-tokens", "max_batched_tokens", r"(\d+)"), ("max-num-tokens", "max_batched_tokens", r"(\d+)"),
    ("block-size", "block_tokens", r"(\d+)"), ("page-size", "block_tokens", r"(\d+)"),
    ("tokens-per-block", "block_tokens", r"(\d+)"),
    ("gpu-memory-utilization", "memory_fraction", _SHARE), ("mem-fraction-static", "memory_fraction", _SHARE),
    ("kv-cache-free-gpu-mem-fraction", "memory_fraction", _SHARE),
    ("kv-cache-free-gpu-memory-fraction", "memory_fraction", _SHARE),
    ("max-seq-len-to-capture", "graph_max_context", r"(\d+)"), ("cuda-graph-max-bs", "graph_max_batch", r"(\d+)"),
    ("num-scheduler-steps?", "scheduler_steps", r"(\d+)"),  # vLLM V0 multi-step scheduling (v0.6.0)
)


def engine_of_row(row: dict[str, str], model_mla: bool, notes: list[str], max_seq_len: int = 0,
            device: Device | None = None) -> Engine:
    text = launch_words(row)
    framework = framework_words(row.get("framework"))
    try:
        engine = engine_for(framework)  # a version no profile describes is refused, not given another's
    except SpecError as err:
        raise Unsupported(str(err)) from None
    if engine is None:
        raise Unsupported(f"framework: no engine profile for {row.get('framework')!r}")
    _refuse_switched_vllm_engine(framework, text)
    try:  # the row's replica: its tp (SGLang's memory share reads it; unstated: refused below, where needed)
        tp: int | None = tensor_parallel(row, [])
    except Unsupported:
        tp = None
    groups = attention_groups(row, tensor_parallel(row, [])) if dp_attention(row) else 1
    if device is not None and (started := on_device(engine, device, tp, 1, groups)) is not engine:
        engine = started
        notes.append(f"{device.name}: the engine's defaults for this device ({engine.max_batch} sequences, "
                     f"{engine.max_batched_tokens} tokens, CUDA graphs to {engine.graph_max_batch} sequences)")
    if engine_version(framework) is None:
        notes.append(f"engine version not stated: assumed {engine.name} (its family's fallback profile)")
    update: dict[str, Any] = {}
    for flag, field, value in _ENGINE_FLAGS:
        if (number := flag_value(flag, text, value)) is not None:
            update[field] = number if field == "memory_fraction" else int(number)
    if (chunk := flag_value("chunked-prefill-size", text, r"(-?\d+)")) is not None:  # SGLang; -1 turns chunking off
        update["chunked_prefill"] = chunk > 0
        if chunk > 0:
            update["max_batched_tokens"] = int(chunk)
    if re.search(r"chunked[- ]prefill(=| )?(false|off)|enable-chunked-prefill false", text, re.I):
        update["chunked_prefill"] = False
    elif re.search(r"enable-chunked-prefill", text, re.I):  # the flag alone turns it on
        update["chunked_prefill"] = True
    if re.search(r"enable-prefix-caching", text, re.I):
        update["prefix_caching"] = True
    if re.search(r"disable[-_]radix[-_]cache", text, re.I):
        update["prefix_caching"] = False
    if re.search(r"enforce[-_]eager(?![ =]+false)|disable[-_]cuda[-_]graph(?![-_]padding)", text, re.I):
        update["cuda_graphs"] = False
    # vLLM's max_model_len defaults to the model config's max_position_embeddings (ModelConfig)
    model_len = flag_value("max-model-len", text) or (float(max_seq_len) if max_seq_len else None)
    # the engine's own defaults from its version, the model and these flags (one source: serve and the API too)
    launched, assumed = resolve_defaults(engine, framework, mla=model_mla,
                                         max_model_len=int(model_len) if model_len is not None else None,
                                         attention_dp=groups,
                                         flags=update)
    notes.extend(assumed)
    changed = {k: v for k, v in launched if v != getattr(engine, k) and k not in LAUNCH_RULES
               and (model_mla or k != "mla_decode")}  # the settings the run uses
    notes.append(f"engine {engine.name}" + (f", launched with (where it differs from the profile): {changed}"
                                            if changed else ""))
    return launched


def _refuse_switched_vllm_engine(framework: str, text: str) -> None:
    """A vLLM release run with the other engine than its default: VLLM_USE_V1=1 before 0.8 (V0 the default; 0.8.0
    made V1 the default, vLLM 0.8.0 release notes) or VLLM_USE_V1=0 from 0.8 (vllm/envs.py). The version's profile
    describes its default engine, so the row is refused rather than given it."""
    setting = re.search(r"vllm_use_v1\s*=\s*([01])", text, re.I)
    version = engine_version(framework)
    if setting is None or version is None or version[0] != "vllm":
        return
    default_v1 = (version[1], version[2]) >= (0, 8)
    if (setting.group(1) == "1") != default_v1:
        raise Unsupported(f"framework: VLLM_USE_V1={setting.group(1)} runs vLLM {version[1]}.{version[2]} on its "
                          f"{'V1' if setting.group(1) == '1' else 'V0'} engine, which the version's profile (its "
                          "default engine) does not describe")


def client_engine_of_row(row: dict[str, str], client: Benchmark, engine: Engine, model: Model, strategy: Strategy,
                   inference: Inference, system: System, notes: list[str]) -> Engine:
    """The engine as the row's benchmark client launches it (`serving.benchmark.client_engine`, the path of
    the API and `armillary serve`): trtllm-bench's own settings for a trtllm-bench row, its heuristic's limits
    unless the row states --max_batch_size or --max_num_tokens."""
    flags = launch_words(row)
    stated = flag_value("max-batch-size", flags) is not None or flag_value("max-num-tokens", flags) is not None
    try:
        launched, assumed = client_engine(client, engine, model, strategy, inference, system, limits_stated=stated)
    except SpecError as err:
        raise Unsupported(f"framework: {err}") from None
    notes.extend(assumed)
    assert launched is not None  # the row's engine, or the client's launch of it
    return launched


def dp_attention(row: dict[str, str]) -> bool:
    return bool(re.search(r"enable[-_]dp[-_]attention", f"{row.get('framework', '')} {row.get('other_reported', '')}",
                          re.I))


# speculative decoding (SGLang --speculative-algorithm EAGLE / NEXTN, vLLM --speculative-config with
# deepseek_mtp / ngram / eagle, TensorRT-LLM's MTP speculative_config, Medusa, lookahead): several tokens a step,
# which the simulated engine does not do
_SPECULATIVE = re.compile(r"specul|\bmtp\d*\b|\beagle-?\d?\b|\bnextn\b|num[-_]nextn|draft[-_ ]?(model|tokens?)|"
                          r"\bmedusa\b|\blookahead\b|\bngram\b", re.I)
_NOT_SPECULATIVE = re.compile(r"\b(no|without|w/o|disabled?|off)\s+(speculative|spec\w*|mtp)\b|"
                              r"\b(speculative( decoding)?|mtp)\s*(off|disabled|none)\b", re.I)
# a disaggregated deployment: prefill and decode on separate workers (SGLang --disaggregation-mode, NVIDIA Dynamo
# and llm-d's prefill / decode workers, InferenceMAX's "1P1D")
_DISAGGREGATED = re.compile(r"disaggregat|\b\d+\s*p\s*\d+\s*d\b|\b(prefill|decode)[-_ ](workers?|nodes?|instances?|"
                            r"servers?|pool)\b|\bp/d\b|\bpd[-_ ]disagg", re.I)


def refuse_unsimulated_launch(row: dict[str, str]) -> None:
    """A launch the simulated server does not run, refused naming the framework column: speculative decoding,
    a disaggregated prefill / decode deployment, pipeline parallelism, several data-parallel replicas without
    data-parallel attention (vLLM --data-parallel-size, SGLang --dp without --enable-dp-attention), or launch
    flags whose tensor-parallel degree contradicts the tp column."""
    launch = framework_words(row.get("framework"))
    if _SPECULATIVE.search(launch) and not _NOT_SPECULATIVE.search(launch):
        raise Unsupported(f"framework {row.get('framework')!r}: speculative decoding (MTP, EAGLE, draft tokens) is "
                          "not simulated")
    if _DISAGGREGATED.search(launch):
        raise Unsupported(f"framework {row.get('framework')!r}: a disaggregated prefill / decode deployment is not "
                          "simulated")
    pp = number_in(r"(?:--pipeline[-_]parallel[-_]size|--pp[-_]size|--pp|(?<![a-z-])-pp)[ =]+(\d+)", launch)
    if pp is not None and pp > 1:
        raise Unsupported(f"framework {row.get('framework')!r}: pipeline parallelism ({pp:g} stages) is not simulated "
                          "for serving")
    dp = _data_parallel(launch)
    if dp is not None and dp > 1 and not dp_attention(row):
        raise Unsupported(f"framework {row.get('framework')!r}: {dp:g} data-parallel replicas (without data-parallel "
                          "attention) are not simulated; one replica over the row's GPUs is")
    flag = number_in(r"(?:--tensor[-_]parallel[-_]size|--tp[-_]size|--tp|(?<![a-z-])-tp)[ =]+(\d+)", launch)
    column = int_column(row, "tp")
    if flag is not None and column is not None and int(flag) != column:
        raise Unsupported(f"tp / framework: the tp column {column} and the launch's tensor-parallel size {flag:g} "
                          "differ")


def _data_parallel(launch: str) -> float | None:
    """The data-parallel size a launch states: vLLM --data-parallel-size / -dp, SGLang --dp-size / --dp."""
    return number_in(r"(?:--data[-_]parallel[-_]size|--dp[-_]size|--dp|(?<![a-z-])-dp)[ =]+(\d+)", launch)


def attention_groups(row: dict[str, str], tp: int) -> int:
    """The data-parallel attention groups of a row with --enable-dp-attention: its --dp / --dp-size (SGLang's
    dp_size, which divides tp_size), else tp groups of one rank each."""
    dp = _data_parallel(framework_words(row.get("framework")))
    if dp is None:
        return tp
    if tp % int(dp):
        raise Unsupported(f"framework {row.get('framework')!r}: --dp {dp:g} does not divide the tensor-parallel "
                          f"degree {tp}")
    return int(dp)


def tensor_parallel(row: dict[str, str], notes: list[str]) -> int:
    """The tp column, else the launch flag (--tensor-parallel-size, -tp, --tp, --tp-size), else the server's
    GPUs (the benchmarks serve one replica over all of them)."""
    if (tp := int_column(row, "tp")) is not None:
        return tp
    text = launch_words(row)
    flag = number_in(r"(?:--tensor[-_]parallel[-_]size|--tp[-_]size|--tp|(?<![a-z-])-tp)[ =]+(\d+)", text)
    if flag is not None:
        return int(flag)
    if (gpus := int_column(row, "n_gpus")) is not None:
        notes.append(f"tp={gpus}: not stated, one replica over the server's {gpus} GPUs")
        return gpus
    raise Unsupported("tp / n_gpus: neither the tensor-parallel degree nor the GPUs are stated")
