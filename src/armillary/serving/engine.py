"""A serving engine's defaults (TensorRT-LLM, vLLM, SGLang; by version): its scheduler policy, batch and
token limits, KV page size and memory share, decode attention kernel, and its runtime overheads.

A profile is a data file (presets/engines) with a source per number. A run names its engine in
`workload.serving.engine`; the engine fills whatever the workload leaves unset (`with_engine`), and its
overheads cost every iteration of the serving simulation (`Overheads`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pydantic import Field, NonNegativeFloat, PositiveInt

from armillary.errors import SpecError
from armillary.presets.registry import find_preset, preset_names, read_data_file
from armillary.specs.base import NamedByPatterns
from armillary.specs.workload import BlockFp8Kernels, DecodeAttention, Inference, MlaDecode, Policy


class Engine(NamedByPatterns):
    name: str
    policy: Policy = Field(description="what a full KV cache does (capacity scheduler / preemption mode)")
    chunked_prefill: bool = Field(description="prompts split into chunks sharing iterations with decodes")
    max_batch: PositiveInt = Field(description="sequences per iteration (max_num_seqs / max_batch_size / "
                                   "max_running_requests)")
    max_batched_tokens: PositiveInt = Field(description="new tokens per iteration (max_num_batched_tokens / "
                                            "max_num_tokens / chunked_prefill_size)")
    block_tokens: PositiveInt = Field(description="tokens per KV page")
    memory_fraction: float = Field(gt=0, le=1, description="share of the memory after weights and activations "
                                   "that the KV cache takes")
    memory_of_total: bool = Field(False, description="memory_fraction is a share of the whole device memory "
                                  "(vLLM gpu_memory_utilization, SGLang mem_fraction_static): the KV cache gets "
                                  "that share less weights and activations; false: a share of what they leave "
                                  "(TensorRT-LLM kv_cache_free_gpu_mem_fraction)")
    decode_attention: DecodeAttention = Field(description="how the decode kernel reads a GQA model's cache")
    mla_decode: MlaDecode = Field(MlaDecode.ABSORBED, description="how decode runs multi-head latent attention "
                                  "(DeepSeek): absorbed over the latent cache, or per-head K/V expanded")
    absorbed_mla_prefill: bool = Field(False, description="prompt chunks also run multi-head latent attention "
                                       "absorbed (the engine's prefill kernel attends over the latent cache)")
    cuda_graphs: bool = Field(description="decode iterations replayed as CUDA graphs (no per-kernel launch)")
    prefix_caching: bool = Field(False, description="prompt prefixes shared between requests are reused "
                                 "(a workload's prefix_hit_rate needs it)")
    iteration_overhead_s: NonNegativeFloat = Field(description="host time per iteration not hidden behind the "
                                                   "GPU: scheduling, input preparation, sampling")
    sequence_overhead_s: NonNegativeFloat = Field(description="host time per sequence and iteration "
                                                  "(detokenization, output processing)")
    request_overhead_s: NonNegativeFloat = Field(description="host time per request before it is queued "
                                                 "(HTTP, tokenization)")
    launch_overhead_s: NonNegativeFloat = Field(description="per kernel launched outside a CUDA graph")
    pad_attention_groups: bool = Field(False, description="data-parallel attention: a CUDA-graph decode step "
                                       "pads every group's batch to the largest group's, and the experts compute "
                                       "the padded tokens of all groups")
    block_fp8_kernels: BlockFp8Kernels | None = Field(None, description="its GEMM kernels for fp8 weights with "
                                                      "per-block scales; none: the device's fp8 GEMMs")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the value comes from")


# kernels a decoder layer launches in an eager decode step: 2 norms, QKV, RoPE, cache write, attention,
# output projection, 2 all-reduces, gate/up, activation, down, 2 residual adds [derived: count of the
# kernels of a Llama layer in the vLLM / TensorRT-LLM eager graphs]
KERNELS_PER_LAYER = 14


@dataclass(frozen=True)
class Overheads:
    """Host-side time of one iteration: fixed, per sequence, and kernel launches without CUDA graphs."""

    iteration_s: float = 0.0
    sequence_s: float = 0.0
    request_s: float = 0.0
    launches_s: float = 0.0  # all launches of one eager iteration (0 with CUDA graphs)

    def __call__(self, sequences: Any) -> Any:
        return self.iteration_s + self.launches_s + self.sequence_s * sequences


def overheads(engine: Engine | None, layers: int) -> Overheads:
    if engine is None:
        return Overheads()
    launches = 0.0 if engine.cuda_graphs else engine.launch_overhead_s * KERNELS_PER_LAYER * layers
    return Overheads(engine.iteration_overhead_s, engine.sequence_overhead_s, engine.request_overhead_s, launches)


@functools.lru_cache(maxsize=64)
def _shipped(name: str) -> Engine:
    from armillary.specs.loading import validate_spec

    return validate_spec(Engine, read_data_file(find_preset("engines", name)), "engine")  # type: ignore[arg-type]


def load_engine(value: Engine | str | dict[str, Any]) -> Engine:
    """An engine profile from a preset name, a file path or a mapping."""
    from armillary.specs.loading import load_spec

    if isinstance(value, str):
        if find_preset("engines", value) is not None:
            return _shipped(value.lower())
        if not value.endswith((".yaml", ".yml", ".json")):
            raise SpecError(f"workload.serving.engine: {value!r} is neither a file nor a preset; presets: "
                            f"{', '.join(preset_names('engines'))}")
    return load_spec(Engine, value, "engine")


def engine_for(framework: str) -> Engine | None:
    """The shipped engine whose patterns match the most of a framework description."""
    scored = [(engine.match_length(framework), name, engine)
              for name in preset_names("engines") for engine in (load_engine(name),)]
    best = max(scored, key=lambda s: s[0], default=None)
    return best[2] if best is not None and best[0] > 0 else None


def with_engine(w: Inference, engine: Engine | None = None) -> tuple[Inference, Engine | None]:
    """The workload with its engine's defaults (`engine`, else the one it names) wherever it sets nothing
    itself, and the engine."""
    if engine is None and w.serving.engine is None:
        return w, None
    e = engine if engine is not None else load_engine(str(w.serving.engine))
    sv, kv = w.serving, w.kv_cache
    serving = {k: getattr(e, k) for k in ("policy", "chunked_prefill", "max_batch", "max_batched_tokens")
               if k not in sv.model_fields_set}
    if not e.prefix_caching and sv.prefix_hit_rate > 0:
        raise SpecError(f"workload.serving.prefix_hit_rate: {e.name} does not cache prefixes (its profile's "
                        "prefix_caching is false): set it to 0, or give an engine with prefix_caching: true "
                        "(e.g. vLLM V0 launched with --enable-prefix-caching)")
    cache = {k: getattr(e, k) for k in ("block_tokens", "memory_fraction") if k not in kv.model_fields_set}
    top: dict[str, Any] = {"serving": sv.model_copy(update=serving), "kv_cache": kv.model_copy(update=cache)}
    for k in ("decode_attention", "mla_decode", "absorbed_mla_prefill", "block_fp8_kernels"):
        if k not in w.model_fields_set:
            top[k] = getattr(e, k)
    return w.model_copy(update=top), e
