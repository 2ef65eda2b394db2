"""Workload: what is run. Training (an iteration of a global batch) or inference (a batch of requests,
and the serving scheduler that runs a stream of them)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from armillary.specs.base import Spec
from armillary.specs.device import GemmLatency, Platform
from armillary.specs.formats import element_bytes
from armillary.specs.quantity import Fraction


class LoraTarget(StrEnum):
    """A linear layer of a decoder layer that carries a LoRA adapter (Hugging Face PEFT names)."""

    Q = "q"
    K = "k"
    V = "v"
    O = "o"  # noqa: E741 (the attention output projection, PEFT's o_proj)
    GATE = "gate"
    UP = "up"  # the MLP's first projection of a non-gated MLP (fc1)
    DOWN = "down"


class BasePrecision(StrEnum):
    """How the frozen base weights of a LoRA run are stored. nf4 is QLoRA's 4-bit NormalFloat with
    double-quantized block scales (Dettmers et al. 2023 §3, 4.127 bits per parameter), dequantized to bf16
    before each GEMM."""

    BF16 = "bf16"
    FP8 = "fp8"
    NF4 = "nf4"

    @property
    def bytes(self) -> float:
        """Bytes per stored parameter. nf4: 4 bits + an fp8 scale per 64 weights + an fp32 scale per 256
        scales (Dettmers et al. 2023 §3 "Double Quantization": 8/64 + 32/(64*256) = 0.127 bits)."""
        return {"bf16": 2.0, "fp8": 1.0, "nf4": (4 + 8 / 64 + 32 / (64 * 256)) / 8}[self.value]


class Lora(Spec):
    """LoRA fine-tuning (Hu et al. 2021, arXiv:2106.09685): the base model frozen, a rank-r adapter
    B·A (A: d_in x r, B: r x d_out) beside each targeted linear layer. Only the adapters have gradients and
    optimizer states. The embedding, the LM head and the norms stay frozen."""

    method: Literal["lora"] = "lora"
    rank: PositiveInt = Field(description="r: the adapters' rank (MLPerf Llama 2 70B LoRA: 16)")
    # MLPerf Llama 2 70B LoRA: its reference adapts the attention projections (qkv_proj, o_proj) and NVIDIA's
    # NeMo submissions set target_modules ['attention'] (NeMo: linear_qkv and linear_proj)
    target_modules: tuple[LoraTarget, ...] = Field(
        (LoraTarget.Q, LoraTarget.K, LoraTarget.V, LoraTarget.O), min_length=1,
        description="linear layers with an adapter: q, k, v, o (attention), gate, up, down (MLP); default the "
                    "attention projections, as MLPerf Llama 2 70B LoRA")
    fused: bool = Field(True, description="q / k / v share one adapter on the fused QKV projection and gate / up "
                        "one on the fused first MLP projection (Megatron / NeMo linear_qkv, linear_fc1); false: one "
                        "adapter per projection (Hugging Face PEFT)")
    base_precision: BasePrecision = Field(BasePrecision.BF16, description="storage of the frozen base weights: "
                                          "bf16, fp8, or nf4 (QLoRA, dequantized to bf16 before each GEMM)")
    dropout: float = Field(0.0, ge=0, lt=1, description="probability of the dropout on an adapter's input (Hu et al. "
                           "2021's lora_dropout; LitGPT finetune/lora.py 0.05, PEFT and NeMo 0.0 by default): above 0 "
                           "the dropped input and its 1-byte mask are kept for the A gradient")


class Training(Spec):
    kind: Literal["training"] = "training"
    seq_len: PositiveInt = Field(description="tokens per sample")
    global_batch: PositiveInt = Field(description="samples per iteration (all data-parallel ranks)")
    finetune: Lora | None = Field(None, description="parameter-efficient fine-tuning of a frozen base (LoRA, "
                                  "QLoRA); none: every weight is trained (pre-training or full fine-tuning)")
    mtp: bool = Field(False, description="train the model's multi-token-prediction modules (`Model.mtp_layers`) "
                      "beside the main loss, as DeepSeek-V3's pre-training did (Megatron-Core --mtp-num-layers); "
                      "off: they are not built, as in runs that disable them")


class StoredPrecision(StrEnum):
    """How weights or KV-cache entries are stored. int8 / int4 weights are weight-only quantization: the
    GEMMs run at the activation precision after dequantizing in the kernel (AWQ, GPTQ). mxfp8, nvfp4, mxfp4:
    block-scaled (`specs.formats`), their scales stored beside them (NVFP4 4.5 bits per element): weights of
    a recipe that runs its GEMMs in that format, or a KV cache (TensorRT-LLM's NVFP4 KV cache on Blackwell)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"

    @property
    def bytes(self) -> float:
        return element_bytes(self.value)


class WeightScales(StrEnum):
    """How an fp8 checkpoint scales its weights (Hugging Face quantization_config)."""

    TENSOR = "tensor"  # one scale per weight matrix (per-tensor static: TensorRT-LLM, AMD Quark)
    CHANNEL = "channel"  # one per output channel, activations scaled per token at run time (fbgemm_fp8)
    BLOCK = "block"  # one per 128 x 128 block (DeepSeek-V3, weight_block_size)


class Fp8Kernels(Spec):
    """An engine's GEMM kernels for fp8 weights of one scaling scheme."""

    ceiling: Fraction = Field(description="highest share of the device's fp8 peak they reach (large M)")
    latency: GemmLatency | None = Field(None, description="their floor at small M (decode); none: roofline")
    moe_ceiling: Fraction | None = Field(None, description="the fused-MoE kernel's highest share of the fp8 peak "
                                         "(large M); none: `ceiling`")
    moe_memory_efficiency: Fraction | None = Field(None, description="share of the HBM bandwidth at which the "
                                                   "fused-MoE kernel streams expert weights; none: the device's")


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


class MlaDecode(StrEnum):
    """How decode runs multi-head latent attention (DeepSeek-V2 §2.1.3, "absorbed" into the projections)."""

    # W^UK folded into the query and W^UV into the output: attention runs over the cached latent (one
    # shared d_c + d_h^R "head", MQA-like) with no per-head K/V (vLLM >= 0.7.1, SGLang >= 0.3, TRT-LLM)
    ABSORBED = "absorbed"
    # K and V up-projected per head when written and cached per head (vLLM <= 0.7.0, SGLang --disable-mla)
    EXPANDED = "expanded"
    # absorbed, with the products W^Q W^UK and W^UV W^O computed at load and stored beside the raw weights
    # (kept for prefill): vLLM 0.7.1-0.7.x, VLLM_MLA_PERFORM_MATRIX_ABSORPTION on by default (PR #12528,
    # removed by PR #14770 "MLA get rid of materialization", 2025-03-14)
    MATERIALIZED = "materialized"


class LengthDistribution(StrEnum):
    FIXED = "fixed"  # every request has input_len / output_len tokens
    UNIFORM = "uniform"  # uniform within mean x (1 -+ spread)
    LOGNORMAL = "lognormal"  # lognormal with the given mean and sigma = spread
    # prompts and replies as vLLM's benchmark_serving samples ShareGPT: the measured quantiles of its sample,
    # scaled to the given means; shorter replies end a share at their first token (serving.trace.sharegpt_lengths)
    SHAREGPT = "sharegpt"


class Policy(StrEnum):
    """What the scheduler does when the KV cache cannot hold every admitted sequence."""

    # TensorRT-LLM default: a request is admitted only when pages for its prompt and its whole output are
    # free; they stay reserved, so nothing is ever paused (TensorRT-LLM "Useful Runtime Options":
    # CapacitySchedulerPolicy GUARANTEED_NO_EVICT)
    GUARANTEED_NO_EVICT = "guaranteed_no_evict"
    # TensorRT-LLM MAX_UTILIZATION: admit while the current pages fit; pause the newest when the cache
    # runs out (its cache dropped and recomputed on resumption)
    MAX_UTILIZATION = "max_utilization"
    # vLLM default: the newest running sequence is preempted, its pages freed, prompt and output so far
    # recomputed when it is scheduled again (Kwon et al. 2023, section 4.5, "recomputation")
    RECOMPUTE = "recompute"
    # vLLM V0 swap: the preempted sequence's pages are copied to the second memory tier over its link and
    # copied back before it resumes (Kwon et al. 2023, section 4.5, "swapping")
    SWAP = "swap"


class Balance(StrEnum):
    """How requests are spread over a deployment's replicas."""

    ROUND_ROBIN = "round_robin"  # in turn (SGLang's router and DP workers by default, Kubernetes services)
    # to the replica with the fewest tokens still to compute (prompt tokens not yet prefilled plus output
    # tokens not yet generated) when the request arrives (llm-d / vLLM production-stack style load-aware routing)
    LEAST_OUTSTANDING_TOKENS = "least_outstanding_tokens"


class Arrivals(StrEnum):
    """How a benchmark client sends requests (vLLM benchmark_serving.py / sglang bench_serving.py)."""

    POISSON = "poisson"  # exponential gaps at the request rate
    GAMMA = "gamma"  # gamma gaps of shape `burstiness` at the request rate (vLLM --burstiness; < 1: bursty)
    OFFLINE = "offline"  # every request queued at t = 0 (trtllm-bench throughput, vLLM benchmark_throughput)


class Serving(Spec):
    """The request stream and the scheduler of the serving simulation (`armillary serve`)."""

    trace: str | None = Field(None, description="CSV of requests (arrival_s, input_len, output_len); "
                              "without it Poisson arrivals at the given rate")
    lengths: LengthDistribution = Field(LengthDistribution.FIXED, description="generated request lengths "
                                        "around input_len / output_len")
    spread: float = Field(0.5, ge=0, description="uniform: relative half-width; lognormal: sigma; sharegpt: "
                          "unused (the dataset's own)")
    seed: NonNegativeInt = 0
    max_batch: PositiveInt = Field(256, description="sequences per iteration (vLLM max_num_seqs)")
    max_batched_tokens: PositiveInt = Field(8192, description="new tokens per iteration (vLLM "
                                            "max_num_batched_tokens): the prefill chunk budget")
    chunked_prefill: bool = Field(True, description="split prompts into chunks that share iterations with "
                                  "decodes (Sarathi-Serve); off: a prompt runs whole, in an iteration of its own")
    scheduler_steps: PositiveInt = Field(1, description="decode iterations per scheduler pass (vLLM V0 "
                                         "--num-scheduler-steps, multi-step scheduling): a decode batch runs "
                                         "that many steps before waiting requests are admitted, and the "
                                         "per-iteration host overheads are shared by them")
    prefill_replicas: NonNegativeInt = Field(0, description="disaggregation: this many replicas only prefill "
                                             "and hand the KV cache to the others (DistServe); 0 = colocated")
    engine: str | None = Field(None, description="serving engine profile (presets/engines, or a file): its "
                               "defaults fill the fields left unset and its overheads cost each iteration")
    policy: Policy = Field(Policy.RECOMPUTE, description="what a full KV cache does")
    balance: Balance = Field(Balance.ROUND_ROBIN, description="how requests are spread over the replicas "
                             "(least_outstanding_tokens: open-loop arrivals)")
    prefix_hit_rate: float = Field(0.0, ge=0, lt=1, description="share of each prompt found in the prefix "
                                   "cache (not computed) by an engine that caches prefixes (its profile's "
                                   "prefix_caching)")
    arrivals: Arrivals = Field(Arrivals.POISSON, description="generated arrivals: poisson, gamma or offline")
    burstiness: PositiveFloat = Field(1.0, description="gamma arrivals: shape of the gaps (1 = Poisson)")
    concurrency: PositiveInt | None = Field(None, description="closed loop: at most this many requests "
                                            "outstanding (benchmark --max-concurrency)")
    ttft_slo_s: PositiveFloat = Field(1.0, description="time-to-first-token limit: P90 for the rate search, "
                                      "per request for goodput")
    tpot_slo_s: PositiveFloat = Field(0.1, description="time-per-output-token limit: P99 for the rate search, "
                                      "per request for goodput")


class Inference(Spec):
    """A static batch of `batch` requests of `input_len` prompt and `output_len` generated tokens on each
    model replica (tp x pp x ep devices; dp replicas)."""

    kind: Literal["inference"] = "inference"
    # bounds: far beyond any model's context, small enough that per-step arrays stay within memory
    batch: PositiveInt = Field(1, le=2**24, description="sequences decoded together per replica")
    input_len: PositiveInt = Field(le=2**24, description="prompt tokens per request")
    output_len: PositiveInt = Field(le=2**20, description="generated tokens per request (the first comes from "
                                                          "prefill)")
    weights: StoredPrecision | None = Field(None, description="weight precision; default: the strategy's "
                                            "block_format (mxfp8, nvfp4, mxfp4), else fp8 under the fp8 recipe, "
                                            "else the activation precision")
    weight_scales: WeightScales = Field(WeightScales.TENSOR, description="how fp8 weights are scaled: per "
                                        "tensor, per output channel (with per-token activation scales) or per "
                                        "128x128 block; channel and block run the engine's kernels for them")
    fp8_attention_projections: bool = Field(True, description="with fp8 weights, the attention projections "
                                            "(QKV, output) are fp8 too; false: kept at 16 bits, their GEMMs in "
                                            "bf16 (Meta's FP8 Llama 3.1 checkpoints)")
    block_fp8_kernels: Fp8Kernels | None = Field(None, description="the engine's kernels for block-scaled fp8 "
                                                 "weights (filled by the engine profile); none: the device's fp8 "
                                                 "GEMMs")
    channel_fp8_kernels: dict[Platform, Fp8Kernels] = Field(
        default_factory=dict, description="the engine's kernels for channel-scaled fp8 weights, by the device's "
        "software platform (filled by the engine profile); a platform not listed: the device's fp8 GEMMs")
    kv_cache: KvCache = KvCache()
    decode_attention: DecodeAttention = Field(DecodeAttention.GROUPED, description="how the decode kernel "
                                              "reads the cache of a GQA / MQA model")
    mla_decode: MlaDecode = Field(MlaDecode.ABSORBED, description="multi-head latent attention in decode: "
                                  "absorbed (attention over the cached latent) or expanded (per-head K/V cache)")
    absorbed_mla_prefill: bool = Field(False, description="prompt chunks also run multi-head latent attention "
                                       "absorbed over the latent cache (3.4x the attention FLOPs of the per-head "
                                       "form); false: per-head K/V up-projected for the prompt")
    serving: Serving = Serving()


Workload = Training | Inference
