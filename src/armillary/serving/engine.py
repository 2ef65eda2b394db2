"""A serving engine's defaults (TensorRT-LLM, vLLM, SGLang; by version): its scheduler policy, batch and
token limits, KV page size and memory share, decode attention kernel, and its runtime overheads.

A profile is a data file (presets/engines) with a source per number. A run names its engine in
`workload.serving.engine`: which profile a version names is `serving.engine_versions`; the engine as it starts
on the device is `on_device` here, as its release, the model and the launch set its defaults, and the workload
it fills, `serving.launch`; its overheads cost every iteration of the serving simulation (`Overheads`). Its
defaults by device and launch size are `serving.engine_tiers`; its project, releases and per-release values
`serving.engine_releases`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveInt, field_validator, model_validator
from pydantic_core import PydanticCustomError

from armillary.errors import SpecError
from armillary.plan.arrays import ModelArrays
from armillary.presets.registry import find_preset, preset_names, read_data_file
from armillary.serving.engine_releases import _FAMILIES, Family, ReleaseDefaults, ReleaseRange
from armillary.serving.engine_tiers import DeviceDefaults
from armillary.specs.base import Spec
from armillary.specs.device import Device, Platform
from armillary.specs.workload import DecodeAttention, Fp8Kernels, MlaDecode, Policy


class Engine(Spec):
    name: str
    family: Family = Field(description="the project the profile describes (vllm, sglang, tensorrt-llm): what "
                           "rules for one engine only go by, never the name")
    versions: tuple[ReleaseRange, ...] = Field(
        (), description="the releases whose defaults the profile describes, each range from `since` up to, not "
        "including, `before`: an engine named with one of them gets this profile (`engine_versions.engine_for`); "
        "none: not stated, and a rule for some releases only (the trtllm-bench client's, TensorRT-LLM 1.x) "
        "refuses the profile")
    unversioned: bool = Field(False, description="the profile an engine of its family named without a version "
                              "gets (\"vLLM\", \"trtllm-serve\"): one shipped profile per family, and a rule "
                              "for some releases takes such a run as this profile's `versions`; false: not it")
    series: tuple[str, ...] = Field(
        (), description="release series (major.minor) named without a patch (\"SGLang 0.5\") that this profile "
        "takes where several profiles describe the series' releases; a series whose releases one profile "
        "describes wholly is that profile's without it")
    policy: Policy = Field(description="what a full KV cache does (capacity scheduler / preemption mode)")
    chunked_prefill: bool = Field(description="prompts split into chunks sharing iterations with decodes")
    max_batch: PositiveInt = Field(description="sequences per iteration (max_num_seqs / max_batch_size / "
                                   "max_running_requests)")
    max_batched_tokens: PositiveInt = Field(description="new tokens per iteration (max_num_batched_tokens / "
                                            "max_num_tokens / chunked_prefill_size)")
    block_tokens: PositiveInt = Field(description="tokens per KV page")
    memory_fraction: float = Field(gt=0, le=1, description="the KV cache's memory share: of the memory weights "
                                   "and activations leave, or of the whole device with memory_of_total")
    admission_watermark: float = Field(0.0, ge=0, lt=1, description="share of the KV pages that must stay free "
                                       "after a prompt is admitted (vLLM V0's block-manager watermark, against "
                                       "evicting at once what was just admitted); running sequences may use them")
    memory_of_total: bool = Field(False, description="memory_fraction is a share of the whole device memory "
                                  "(vLLM gpu_memory_utilization, SGLang mem_fraction_static): the KV cache gets "
                                  "that share less weights and activations; false: a share of what they leave "
                                  "(TensorRT-LLM kv_cache_free_gpu_mem_fraction)")
    activations_outside_share: bool = Field(False, description="with memory_of_total, the share holds the weights "
                                            "and the KV cache only: activations live in the memory it leaves "
                                            "(SGLang mem_fraction_static: ModelRunner.profile_max_num_token sizes "
                                            "the pool before any forward pass); false: the share less the "
                                            "profiled activations (vLLM Worker.determine_available_memory)")
    decode_attention: DecodeAttention = Field(description="how the decode kernel reads a GQA model's cache")
    mla_decode: MlaDecode = Field(MlaDecode.ABSORBED, description="how decode runs multi-head latent attention "
                                  "(DeepSeek): absorbed over the latent cache, or per-head K/V expanded")
    mla_without_chunked_prefill: bool = Field(False, description="a model with multi-head latent attention runs "
                                              "without chunked prefill unless launched with it (vLLM V0)")
    mla_forces_no_chunked_prefill: bool = Field(False, description="a model with multi-head latent attention runs "
                                                "without chunked prefill and prefix caching even when launched "
                                                "with them (vLLM 0.7.1-0.7.3)")
    long_context_chunked_prefill_above: PositiveInt | None = Field(
        None, description="chunked prefill turned on, unless launched with it set, for a model whose context "
        "(max_model_len) is longer than this many tokens (vLLM V0: 32768); none: no such rule")
    chunked_token_budget: PositiveInt | None = Field(
        None, description="new tokens per iteration with chunked prefill on, where the launch sets no budget "
        "(vLLM V0: 512 in 0.6, 2048 in 0.7); none: max_batched_tokens")
    unchunked_token_budget_floor: PositiveInt | None = Field(
        None, description="new tokens per iteration without chunked prefill, where the launch sets no budget: "
        "max(the model's context, this), so that any prompt fits one iteration (vLLM V0: 2048); none: "
        "max_batched_tokens")
    attention_dp_budget_divisor: PositiveInt | Literal["groups"] = Field(
        1, description="with data-parallel attention the engine divides its token budget (its default or the "
        "launch's) by this, each attention group's budget: 2 in SGLang 0.4.0-0.4.4; groups: by the number of "
        "attention groups (dp_size, later SGLang); 1: unchanged")
    releases: tuple[ReleaseDefaults, ...] = Field(
        (), description="defaults of some releases within the profile's range that differ from its own "
        "(`ReleaseDefaults`): each whose range holds the run's stated version applies, later over earlier")
    absorbed_mla_prefill: bool = Field(False, description="prompt chunks also run multi-head latent attention "
                                       "absorbed (the engine's prefill kernel attends over the latent cache)")
    cuda_graphs: bool = Field(description="decode iterations replayed as CUDA graphs (no per-kernel launch)")
    graph_max_context: PositiveInt | None = Field(
        None, description="longest context (tokens, the new one included) of a decode batch that still replays "
        "a CUDA graph; a batch with a longer sequence runs eagerly (vLLM V0 max_seq_len_to_capture); none: no "
        "limit")
    graph_max_batch: PositiveInt | None = Field(
        None, description="largest decode batch (sequences) a CUDA graph was captured for; a larger batch runs "
        "eagerly (SGLang cuda_graph_max_bs, vLLM V1's largest capture size); none: up to max_batch")
    scheduler_steps: PositiveInt = Field(1, description="decode iterations per scheduler pass (vLLM V0 "
                                         "--num-scheduler-steps): new requests wait for the end of a run")
    prefix_caching: bool = Field(False, description="prompt prefixes shared between requests are reused "
                                 "(a workload's prefix_hit_rate needs it)")
    iteration_overhead_s: NonNegativeFloat = Field(description="host time per iteration not hidden behind the "
                                                   "GPU: scheduling, input preparation, sampling")
    sequence_overhead_s: NonNegativeFloat = Field(description="host time per sequence and iteration "
                                                  "(detokenization, output processing)")
    request_overhead_s: NonNegativeFloat = Field(description="host time per request before it is queued "
                                                 "(HTTP, tokenization)")
    eager_kernel_s: NonNegativeFloat = Field(description="host time per kernel of a decode step run eagerly "
                                             "(outside a CUDA graph): the module code, dispatch and launch the "
                                             "device waits on between a decode step's short kernels")
    pad_attention_groups: bool = Field(False, description="data-parallel attention: a CUDA-graph decode step "
                                       "pads every group's batch to the largest group's, and the experts compute "
                                       "the padded tokens of all groups")
    latent_cache_sized_as_kv: bool = Field(False, description="the engine sizes the pages of a latent (MLA) "
                                           "cache as if every token held a key and a value of the latent's "
                                           "width, so its pages hold half the tokens the memory would")
    block_fp8_kernels: Fp8Kernels | None = Field(None, description="its GEMM kernels for fp8 weights with "
                                                 "per-block scales; none: the device's fp8 GEMMs")
    channel_fp8_kernels: dict[Platform, Fp8Kernels] = Field(
        default_factory=dict, description="its GEMM kernels for fp8 weights with per-channel scales, by the "
        "device's platform; a platform not listed: the device's fp8 GEMMs (a fused scaled GEMM)")
    device_defaults: tuple[DeviceDefaults, ...] = Field(
        (), description="tiers of defaults the engine sets from the device it starts on, in order: the first the "
        "device fits applies (`DeviceDefaults`); none fits, or none listed: the profile's numbers on every device")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the value comes from")

    @model_validator(mode="before")
    @classmethod
    def _family_stated(cls, data: Any) -> Any:
        if isinstance(data, dict) and "family" not in data:
            raise PydanticCustomError("family_missing", "family: missing; give the project the profile describes, "
                                      "one of {families}", {"families": _FAMILIES})
        if isinstance(data, dict) and "matches" in data:
            raise PydanticCustomError("matches_removed", "matches: no longer read; the releases a profile "
                                      "describes are its `versions` (and `unversioned`, `series`)", {})
        return data

    @field_validator("series")
    @classmethod
    def _series(cls, series: tuple[str, ...]) -> tuple[str, ...]:
        for s in series:
            if not re.fullmatch(r"\d+\.\d+", s):
                raise ValueError(f"{s!r} is not a release series (major.minor, e.g. 0.5)")
        return series

    def within(self, family: Family, first: str, after: str) -> bool:
        """Whether the profile is one of `family`'s and states releases (`versions`) that all lie from `first`
        up to, not including, `after` (e.g. TensorRT-LLM "1.0" to "2.0": 1.x)."""
        return self.family is family and bool(self.versions) and all(r.within(first, after) for r in self.versions)

    @property
    def releases_stated(self) -> str:
        """The releases the profile describes, in words ("releases not stated" where it states none)."""
        spans = ", ".join(f"{r.since} to before {r.before}" for r in self.versions)
        return f"{self.family.value} releases {spans}" if spans else f"{self.family.value}, releases not stated"


# The fields that say which engine and releases a profile is, not what it does: sourced like the rest, but
# neither read in nor assumed of the engine's code
IDENTITY = ("name", "family", "versions", "unversioned", "series")
# Fields of the rules an engine applies as it is launched (`resolve_defaults`) whose default is "no such rule": a
# profile that leaves one out states none, and needs no source for it
LAUNCH_RULES = ("mla_without_chunked_prefill", "mla_forces_no_chunked_prefill", "long_context_chunked_prefill_above",
                "chunked_token_budget", "unchunked_token_budget_floor", "attention_dp_budget_divisor", "releases")
# Every field whose default is "no such rule" (the launch rules, the memory share that leaves the activations
# out, and the words other than a release a profile takes: a mention without a version, a series without a
# patch): a profile sources them only where it sets them
OPTIONAL_RULES = (*LAUNCH_RULES, "activations_outside_share", "unversioned", "series")


# Short kernels of a decoder layer in a decode step: those that end before the host has launched the next
# (norms, rotary, cache writes, top-k, activation quantization, the all-reduce's copy, residual adds); the
# weight GEMMs, the attention kernel and the experts' run longer [derived: each half's kernels counted in
# vLLM V0 at f35f8e22: models/deepseek_v2.py, attention/backends/mla/common.py + triton_mla.py,
# layers/fused_moe/fused_moe.py, layers/quantization/utils/fp8_utils.py]:
# - a Llama layer: attention half norm, QKV, RoPE, cache write, attention, output projection, all-reduce;
#   MLP half norm, gate/up, activation, down, all-reduce, 2 residual adds: 4 + 5 short of 14
# - multi-head latent attention (DeepseekV2MLAAttention, Triton MLA, absorbed, fp8 block weights): 36
#   kernels, of which q_a / kv_a / W_Q_UK / W_QR / W_UV_O and the decode kernel's first stage run long: 30
# - MoE (DeepseekV2MoE: fused_moe with grouped_topk and a shared expert, fp8 block weights): 40 kernels, of
#   which the shared expert's 2 GEMMs, the router and the 2 fused_moe kernels run long: 35; grouped_topk's
#   18 torch ops are 3 for a plain softmax top-k (topk_softmax, sum, div), and a layer without a shared
#   expert has 4 fewer (its 2 quantizations, activation and add)
SHORT_KERNELS = {"attention": 4, "mla": 30, "mlp": 5, "moe": 35}
GROUPED_TOPK_KERNELS, SOFTMAX_TOPK_KERNELS, SHARED_EXPERT_SHORT_KERNELS = 18, 3, 4


def short_kernels(m: ModelArrays, layers: float) -> float:
    """Short kernels (`SHORT_KERNELS`) of `layers` decoder layers, the model's share of dense and MoE
    layers, in one decode step."""
    moe_share = float(m.moe_layers) / max(float(m.layers), 1.0)
    attention = SHORT_KERNELS["mla"] if float(m.kv_lora) > 0 else SHORT_KERNELS["attention"]
    moe = (SHORT_KERNELS["moe"] - (float(m.expert_groups) <= 1) * (GROUPED_TOPK_KERNELS - SOFTMAX_TOPK_KERNELS)
           - (float(m.shared_ffn) <= 0) * SHARED_EXPERT_SHORT_KERNELS)
    return layers * (attention + moe_share * moe + (1 - moe_share) * SHORT_KERNELS["mlp"])


def cache_sizing_factor(engine: Engine | None, m: ModelArrays) -> float:
    """Bytes per cached token the engine counts when it sizes its KV pages, over those the cache stores: 2 for
    a latent (MLA) cache in an engine that sizes it as a key plus a value (`latent_cache_sized_as_kv`), else 1."""
    return 2.0 if engine is not None and engine.latent_cache_sized_as_kv and float(m.kv_lora) > 0 else 1.0


@dataclass(frozen=True)
class Overheads:
    """Host-side time of one iteration: fixed and per sequence, and that of a decode step run eagerly.

    A decode step runs eagerly without CUDA graphs, when it has more sequences than the graphs
    (`graph_batch`) or when one of them is longer than theirs (`graph_context`): each kernel then takes at
    least the host's time to launch it, max(kernel, host), which adds the host's time of its short kernels
    (`eager_s`: `short_kernels` x the engine's `eager_kernel_s`); the long ones (weight GEMMs, attention,
    experts) cover the host's launch of the next. A prompt's kernels are long: the host stays ahead."""

    iteration_s: float = 0.0
    sequence_s: float = 0.0
    request_s: float = 0.0
    eager_s: float = 0.0  # host time of one eager decode step's kernels
    graph_context: float = np.inf  # the longest sequence a CUDA-graph decode step takes (0: no graphs)
    graph_batch: float = np.inf  # the most sequences a CUDA-graph decode step takes

    def __call__(self, sequences: Any) -> Any:
        return self.iteration_s + self.sequence_s * sequences

    def eager(self, new: np.ndarray, past: np.ndarray) -> Any:
        """Eager host time of iterations over sequences of `new` tokens over `past` cached ones (columns:
        iterations): `eager_s` for a decode step outside the CUDA graphs (`kernels.outside_graphs`), else 0."""
        if not self.eager_s:
            return 0.0
        from armillary.serving.kernels import outside_graphs  # numba: compiled on first use, not at import

        decode = np.all(new <= 1, axis=0)  # one new token each
        outside = outside_graphs(np.max(past + new, axis=0), np.shape(new)[0], self.graph_context, self.graph_batch)
        return np.where(decode & outside, self.eager_s, 0.0)


def overheads(engine: Engine | None, m: ModelArrays, layers: float, scheduler_steps: int = 1) -> Overheads:
    """The engine's host overheads for a replica whose busiest stage holds `layers` of model `m`'s layers;
    with multi-step scheduling one scheduler pass and its bookkeeping serve `scheduler_steps` iterations
    (vLLM v0.6.0 release notes: the CPU work amortized over the steps)."""
    if engine is None:
        return Overheads()
    context = 0.0 if not engine.cuda_graphs else float(engine.graph_max_context or np.inf)
    return Overheads(engine.iteration_overhead_s / scheduler_steps, engine.sequence_overhead_s / scheduler_steps,
                     engine.request_overhead_s,
                     engine.eager_kernel_s * short_kernels(m, layers), context,
                     float(engine.graph_max_batch or np.inf))


def on_device(engine: Engine, device: Device, tp: int | None = None, pp: int = 1, attention_dp: int = 1) -> Engine:
    """The engine as it starts on `device` for a run of `tp` x `pp` ranks (tp None: `ASSUMED_TP`, as the tiers
    were first read) with `attention_dp` data-parallel attention groups: the numbers of the first of its
    `device_defaults` tiers the device fits (`DeviceDefaults.settings`: its memory share computed for that run),
    the profile's own where that tier sets none; the profile itself (the same object) where nothing changes."""
    tier = next((t for t in engine.device_defaults if t.fits(device)), None)
    if tier is None:
        return engine
    found = tier.settings(device, engine.graph_max_batch, tp, pp, attention_dp)
    update = {k: v for k, v in found.items() if v != getattr(engine, k)}
    return engine.model_copy(update=update) if update else engine


@functools.lru_cache(maxsize=64)
def _shipped(name: str) -> Engine:
    from armillary.specs.loading import validate_spec

    return validate_spec(Engine, read_data_file(find_preset("engines", name)), "engine")  # type: ignore[arg-type]


def load_engine(value: Engine | str | dict[str, Any]) -> Engine:
    """An engine profile from a preset name, a file path, a mapping, or an engine and version in words
    ("vllm 0.7.3", "vllm==0.7.3", "TensorRT-LLM v0.17"; `engine_for`, which refuses a version no profile
    describes)."""
    from armillary.specs.loading import load_spec

    if isinstance(value, str):
        if find_preset("engines", value) is not None:
            return _shipped(value.lower())
        if not value.endswith((".yaml", ".yml", ".json")):
            from armillary.serving.engine_versions import engine_for  # it reads the profiles this module loads

            found = engine_for(re.sub(r"==", " ", value), "workload.serving.engine")
            if found is not None:
                return found
            raise SpecError(f"workload.serving.engine: {value!r} is neither a file nor a preset; presets: "
                            f"{', '.join(preset_names('engines'))}")
    return load_spec(Engine, value, "engine")
