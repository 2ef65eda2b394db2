"""Workload: what is run. Training (an iteration of a global batch) or inference (a batch of requests,
and the serving scheduler that runs a stream of them)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from armillary.specs.base import Spec


class Training(Spec):
    kind: Literal["training"] = "training"
    seq_len: PositiveInt = Field(description="tokens per sample")
    global_batch: PositiveInt = Field(description="samples per iteration (all data-parallel ranks)")


class StoredPrecision(StrEnum):
    """How weights or KV-cache entries are stored. int8 / int4 weights are weight-only quantization: the
    GEMMs run at the activation precision after dequantizing in the kernel (AWQ, GPTQ)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes(self) -> float:
        return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}[self.value]


class KvCache(Spec):
    """The KV cache: element precision, paged allocation and placement."""

    precision: StoredPrecision | None = Field(None, description="cache element precision; default: the "
                                              "activation precision (16 bits)")
    block_tokens: PositiveInt = Field(64, description="tokens per page of the paged cache (TensorRT-LLM "
                                      "tokens_per_block 64; vLLM block_size 16); a sequence holds whole pages")
    memory_fraction: float = Field(0.9, gt=0, le=1, description="share of the memory left after weights and "
                                   "activations the cache may take (TensorRT-LLM kv_cache_free_gpu_mem_fraction)")
    tier2_fraction: float = Field(0.0, ge=0, lt=1, description="share of each sequence's cache kept in the "
                                  "device's second memory tier (host / CXL) and read over its link")


class DecodeAttention(StrEnum):
    """How the decode attention kernel reads the KV cache of a grouped-query model."""

    GROUPED = "grouped"  # each KV head once per step for its whole query group (FlashDecoding, XQA, vLLM)
    PER_QUERY_HEAD = "per_query_head"  # once per query head: TensorRT-LLM <= 0.6 masked MHA (GQA-aware MMHA
    # arrived after v0.6.1: NVIDIA/TensorRT-LLM PR #524, "MMHA optimization for MQA and GQA")


class LengthDistribution(StrEnum):
    FIXED = "fixed"  # every request has input_len / output_len tokens
    UNIFORM = "uniform"  # uniform within mean x (1 -+ spread)
    LOGNORMAL = "lognormal"  # lognormal with the given mean and sigma = spread


class Serving(Spec):
    """The request stream and the scheduler of the serving simulation (`armillary serve`)."""

    trace: str | None = Field(None, description="CSV of requests (arrival_s, input_len, output_len); "
                              "without it Poisson arrivals at the given rate")
    lengths: LengthDistribution = Field(LengthDistribution.FIXED, description="generated request lengths "
                                        "around input_len / output_len")
    spread: float = Field(0.5, ge=0, description="uniform: relative half-width; lognormal: sigma")
    seed: NonNegativeInt = 0
    max_batch: PositiveInt = Field(256, description="sequences per iteration (vLLM max_num_seqs)")
    max_batched_tokens: PositiveInt = Field(8192, description="new tokens per iteration (vLLM "
                                            "max_num_batched_tokens): the prefill chunk budget")
    chunked_prefill: bool = Field(True, description="split prompts into chunks that share iterations with "
                                  "decodes (Sarathi-Serve); off: a prompt runs whole, in an iteration of its own")
    prefill_replicas: NonNegativeInt = Field(0, description="disaggregation: this many replicas only prefill "
                                             "and hand the KV cache to the others (DistServe); 0 = colocated")
    ttft_slo_s: PositiveFloat = Field(1.0, description="time-to-first-token limit: P90 for the rate search, "
                                      "per request for goodput")
    tpot_slo_s: PositiveFloat = Field(0.1, description="time-per-output-token limit: P99 for the rate search, "
                                      "per request for goodput")


class Inference(Spec):
    """A static batch of `batch` requests of `input_len` prompt and `output_len` generated tokens on each
    model replica (tp x pp x ep devices; dp replicas)."""

    kind: Literal["inference"] = "inference"
    batch: PositiveInt = Field(1, description="sequences decoded together per replica")
    input_len: PositiveInt = Field(description="prompt tokens per request")
    output_len: PositiveInt = Field(description="generated tokens per request (the first comes from prefill)")
    weights: StoredPrecision | None = Field(None, description="weight precision; default: fp8 under the fp8 "
                                            "recipe, else the activation precision")
    kv_cache: KvCache = KvCache()
    decode_attention: DecodeAttention = Field(DecodeAttention.GROUPED, description="how the decode kernel "
                                              "reads the cache of a GQA / MQA model")
    serving: Serving = Serving()


Workload = Training | Inference
