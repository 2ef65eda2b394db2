"""The settings trtllm-bench throughput (TensorRT-LLM 1.x, PyTorch backend) launches its engine with, where
they differ from trtllm-serve's (the engine profiles'): decode CUDA graphs to its own max batch, and, for a
run that states neither --max_batch_size nor --max_num_tokens, the limits of its tuning heuristic.

These are the benchmark tool's rules, not the engine's, so they live beside the benchmark clients: a
benchmark whose client is trtllm-bench (`serving.benchmark.Client`) launches its engine through
`serving.benchmark.client_engine`, which applies `trtllm_bench_engine`: the one path of `armillary serve
--client trtllm-bench`, `api.serve_benchmark` and the validation harness (which names the client from a
row's words, `validation/serving_rows.py`).
"""

from __future__ import annotations

import math

from armillary.serving.engine import Engine
from armillary.specs.device import Device
from armillary.specs.model import Model
from armillary.specs.workload import Inference, StoredPrecision

# trtllm-bench's tuning heuristic for the runtime limits it passes when a run states neither --max_batch_size
# nor --max_num_tokens (TensorRT-LLM 1.0: tensorrt_llm/bench/benchmark/utils/general.py get_settings ->
# bench/build/build.py get_benchmark_engine_settings -> bench/build/tuning.py calc_engine_setting and
# finetune_setting)
REQUEST_CAP, TOKEN_CAP = 4096, 32768
# tuning.py BYTES_PER_ELEM, by the quantization of the weights or the KV cache: FP8 1, NVFP4 0.5, anything else 2
BYTES_PER_ELEM = {StoredPrecision.FP8: 1.0, StoredPrecision.NVFP4: 0.5}


def bytes_per_elem(precision: StoredPrecision | None) -> float:
    """tuning.py's bytes per element of weights or KV entries stored at `precision` (none: 16-bit)."""
    return BYTES_PER_ELEM.get(precision, 2.0) if precision is not None else 2.0


def trtllm_bench_limits(params: float, weight_bytes: float, kv_bytes_per_token: float, device_gib: float,
                        gpus: int, pp: int, isl: int, osl: int, fraction: float, max_isl: int | None = None,
                        chunked: bool = False) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench 1.x sets for a dataset of mean lengths isl / osl.

    calc_engine_setting: the KV memory is `fraction` of the GPUs' total memory (NVML, GiB) less the weights
    (params x bytes per element), the requests it holds are that over (isl + osl) tokens of
    `kv_bytes_per_token` (2 x attention layers x max(tp, kv heads) x head size x KV bytes, over all GPUs);
    finetune_setting rounds "slightly optimistic": the requests (at most 4096, per pipeline stage) up to a
    multiple of 32 (at least 64) below 256, of 128 below 1024, else of 256; the tokens, requests x (1 + isl /
    osl) capped at 32768, up to a multiple of 256 (at least 2048) below 4096, of 512 below 8192, else of 1024.
    get_settings: without chunked prefill the tokens are at least the longest prompt plus the batch."""
    available_gib = device_gib * gpus - params * weight_bytes / 2**30
    requests = available_gib * fraction / (kv_bytes_per_token / 2**30 * (isl + osl))
    raw_batch = min(requests, REQUEST_CAP) / pp
    raw_tokens = min(raw_batch * (1 + isl / osl), TOKEN_CAP)
    batch = _rounded_up(raw_batch, ((256, 32), (1024, 128), (math.inf, 256)), 64)
    tokens = _rounded_up(raw_tokens, ((4096, 256), (8192, 512), (math.inf, 1024)), 2048)
    if not chunked:
        tokens = max(tokens, (isl if max_isl is None else max_isl) + batch)
    return batch, tokens


def trtllm_bench_engine(engine: Engine, model: Model, w: Inference, tp: int, device: Device,
                        limits: bool = True) -> tuple[Engine, tuple[str, ...]]:
    """The TensorRT-LLM 1.x engine as trtllm-bench throughput launches it for workload `w` on `tp` devices,
    and what that changed, in words.

    Its get_settings passes cuda_graph_config {enable_padding: True, max_batch_size: its max batch}
    (bench/benchmark/utils/general.py, 1.0-1.2): decode graphs up to its whole batch, not trtllm-serve's
    default 128 (the tensorrt-llm-1.1 profile's graph_max_batch). With `limits` (the run states neither
    --max_batch_size nor --max_num_tokens) the batch and token limits are its heuristic's
    (`trtllm_bench_limits`), sized for the workload's weight and KV-cache precision and the engine's memory
    fraction (--kv_cache_free_gpu_mem_fraction, default .90) of the device's memory (trtllm-bench reads
    NVML's total); pipeline stages are not read (pp 1). A model with multi-head latent attention, or one
    without a published parameter count, keeps the engine's limits (the heuristic's per-token bytes are
    those of K and V heads; its MLA form was not read)."""
    notes: list[str] = []
    if engine.graph_max_batch is not None:
        notes.append(f"trtllm-bench captures decode CUDA graphs to its max batch ({engine.name} trtllm-serve: "
                     f"{engine.graph_max_batch})")
        engine = engine.model_copy(update={"graph_max_batch": None})
    if not limits or model.mla is not None or model.published is None:
        return engine, tuple(notes)
    precision = w.kv_cache.precision
    head = model.head_dim or model.hidden // model.heads
    per_token = 2 * model.layers * max(tp, model.kv_heads or model.heads) * head * bytes_per_elem(precision)
    batch, tokens = trtllm_bench_limits(float(model.published.total), bytes_per_elem(w.weights), per_token,
                                        float(device.hbm.capacity) / 2**30, tp, 1, w.input_len, w.output_len,
                                        engine.memory_fraction, chunked=engine.chunked_prefill)
    notes.append(f"trtllm-bench limits from its heuristic (bench/build/tuning.py calc_engine_setting): "
                 f"{batch} sequences, {tokens} tokens ({precision or '16-bit'} KV cache, "
                 f"{engine.memory_fraction:g} of the memory left by the weights)")
    return engine.model_copy(update={"max_batch": batch, "max_batched_tokens": tokens}), tuple(notes)


def _rounded_up(x: float, steps: tuple[tuple[float, int], ...], floor: int) -> int:
    """`x` rounded up to a multiple of the step of the first (below, step) it lies below, at least `floor`
    (tuning.py's rounding of the batch and of the tokens)."""
    step = next(size for below, size in steps if x < below)
    return max(floor, step * math.ceil(x / step))
