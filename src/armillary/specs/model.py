"""Model specification: the architecture of a decoder-only language model.

One spec covers the families as optional blocks that compose: a dense transformer has none; `moe` makes
the MLP a mixture of experts (Mixtral, Qwen3-MoE, GPT-OSS), `mla` replaces multi-head attention by
multi-head latent attention (DeepSeek-V2/V3, which also set `moe`), `token_mixer: mlgru` with `bitlinear`
describes the MatMul-free LM (Zhu et al. 2024).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from armillary.specs.base import Spec


class MlpKind(StrEnum):
    """Feed-forward block. Gated kinds have three matrices (gate, up, down), plain ones two."""

    GELU = "gelu"
    RELU = "relu"
    SWIGLU = "swiglu"
    GEGLU = "geglu"

    @property
    def matrices(self) -> int:
        return 3 if self in (MlpKind.SWIGLU, MlpKind.GEGLU) else 2


class NormKind(StrEnum):
    LAYERNORM = "layernorm"  # scale and bias: 2h parameters
    RMSNORM = "rmsnorm"  # scale only: h parameters

    @property
    def params_per_channel(self) -> int:
        return 2 if self is NormKind.LAYERNORM else 1


class PositionKind(StrEnum):
    LEARNED = "learned"  # a (max_seq_len x hidden) table, as in GPT-2/3 and Megatron GPT
    ROTARY = "rotary"
    ALIBI = "alibi"
    NONE = "none"


class MixtureOfExperts(Spec):
    """Routed experts with top-k gating, optional shared experts and leading dense layers
    (Fedus et al. 2022; DeepSeekMoE, Dai et al. 2024 §3; docs/formulas.md §7)."""

    experts: PositiveInt = Field(description="routed experts per MoE layer")
    top_k: PositiveInt = Field(description="routed experts each token is sent to")
    expert_ffn: PositiveInt = Field(description="intermediate size of one routed expert")
    shared_experts: NonNegativeInt = Field(0, description="always-active experts (DeepSeekMoE shared-expert isolation)")
    shared_ffn: PositiveInt | None = Field(None, description="intermediate size of one shared expert; "
                                           "defaults to expert_ffn")
    dense_layers: NonNegativeInt = Field(0, description="leading layers with a dense MLP of size `ffn` "
                                         "(DeepSeek first_k_dense_replace)")
    router_bias: bool = Field(False, description="the router (gate) linear has a bias (GPT-OSS)")
    expert_groups: PositiveInt | None = Field(
        None, description="group-limited routing: the experts form this many equal groups, numbered in order, "
        "and each token's top_k experts come from `group_top_k` of them (DeepSeek-V3 config n_group 8, one group "
        "per node of the EP group: node-limited routing); None: any expert")
    group_top_k: PositiveInt | None = Field(None, description="groups each token may use (DeepSeek-V3 "
                                            "topk_group 4); with `expert_groups`")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        if (self.expert_groups is None) != (self.group_top_k is None):
            raise ValueError("expert_groups and group_top_k go together (group-limited routing)")
        if self.expert_groups is not None and self.group_top_k is not None:
            if self.experts % self.expert_groups:
                raise ValueError(f"expert_groups ({self.expert_groups}) must divide experts ({self.experts})")
            if self.group_top_k > self.expert_groups:
                raise ValueError(f"group_top_k ({self.group_top_k}) exceeds expert_groups ({self.expert_groups})")
            if self.group_top_k * (self.experts // self.expert_groups) < self.top_k:
                raise ValueError(f"group_top_k ({self.group_top_k}) groups of {self.experts // self.expert_groups} "
                                 f"experts hold fewer than top_k ({self.top_k})")
        return self

    @property
    def shared_size(self) -> int:
        """Total intermediate size of the shared experts (they act as one dense MLP)."""
        return self.shared_experts * (self.shared_ffn or self.expert_ffn)


class LatentAttention(Spec):
    """Multi-head latent attention (DeepSeek-V2 §2.1, Eqs. 9-19): keys and values are up-projected from a
    compressed latent of `kv_lora_rank` per token, which is what the KV cache holds together with one
    decoupled RoPE key of `rope_head_dim` shared by all heads."""

    kv_lora_rank: PositiveInt = Field(description="d_c: KV compression dimension")
    q_lora_rank: PositiveInt | None = Field(None, description="d_c': query compression; None = direct projection "
                                            "(DeepSeek-V2-Lite)")
    rope_head_dim: PositiveInt = Field(description="d_h^R: decoupled RoPE dimension per head")
    nope_head_dim: PositiveInt = Field(description="d_h: per-head query/key dimension without RoPE")
    v_head_dim: PositiveInt = Field(description="per-head value dimension")


class TokenMixer(StrEnum):
    ATTENTION = "attention"
    MLGRU = "mlgru"  # MatMul-free linear GRU: i, f, g, o projections and an element-wise recurrence


class TernaryKernel(StrEnum):
    """How ternary BitLinear layers execute (docs/formulas.md §10 pitfall)."""

    DEQUANTIZE = "dequantize"  # released GPU code: quantize, dequantize, dense 16-bit matmul
    ADDITIONS = "additions"  # ideal: packed 2-bit weights, accumulations only (no multiplies)


class BitLinear(Spec):
    """Ternary weights {-1, 0, 1} with 8-bit activations (BitNet b1.58; Zhu et al. 2024 §3.1)."""

    kernel: TernaryKernel = TernaryKernel.DEQUANTIZE
    nonzero_fraction: float = Field(2 / 3, gt=0, le=1, description="share of weights that are +-1 "
                                    "(accumulations per output; 2/3 for uniform ternary)")


class PublishedSize(Spec):
    """The model's published parameter counts, which tests hold the spec's own count to."""

    total: PositiveInt
    active: PositiveInt | None = Field(None, description="parameters used per token (MoE)")
    active_excludes_embedding: bool = Field(False, description="the source leaves the input embedding (a "
                                            "lookup) out of the active count, as the GPT-OSS model card does")
    source: str


class Model(Spec):
    """A decoder-only language model: GPT, Llama, BLOOM, OPT, MPT, Nemotron... and, with the optional
    blocks, MoE, MLA and MatMul-free models."""

    name: str = "custom"
    aliases: tuple[str, ...] = Field((), description="other names the same architecture is published under "
                                     "(DeepSeek-R1 for DeepSeek-V3); rows and run files may use them")
    layers: PositiveInt
    hidden: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt | None = Field(None, description="key/value heads; heads = MHA, 1 = MQA")
    head_dim: PositiveInt | None = Field(None, description="defaults to hidden / heads")
    ffn: PositiveInt = Field(description="intermediate size of the MLP")
    mlp: MlpKind = MlpKind.GELU
    norm: NormKind = NormKind.LAYERNORM
    position: PositionKind = PositionKind.ROTARY
    vocab: PositiveInt
    tied_embeddings: bool = False
    linear_bias: bool = Field(False, description="biases on the attention and MLP linear layers")
    qkv_bias: bool = Field(False, description="biases on the query, key and value projections only (Qwen2)")
    dropout: bool = Field(False, description="dropout in the block (stores masks for backward)")
    max_seq_len: PositiveInt = 2048
    sliding_window: PositiveInt | None = Field(
        None, description="attention window in tokens (Mistral-style local attention); None = full causal")
    qk_norm: bool = Field(False, description="RMSNorm on each head's queries and keys (Qwen3, OLMo 2)")
    attention_sinks: bool = Field(False, description="a learned sink logit per head (GPT-OSS)")
    yarn: bool = Field(False, description="rotary positions scaled by YaRN (Peng et al. 2023; HF config rope_scaling "
                       "rope_type yarn: GPT-OSS, DeepSeek-V2 / V3); position must be rotary")
    glu_clamp: PositiveFloat | None = Field(
        None, description="the gated MLP clamps its gate half to at most this value and its linear half to "
        "+- this value before the activation (GPT-OSS: HF config swiglu_limit 7.0); None: no clamp")
    window_layers: float = Field(1.0, gt=0, le=1, description="fraction of layers using sliding_window "
                                 "(GPT-OSS and Gemma 2 alternate local and global layers: 0.5)")
    moe: MixtureOfExperts | None = None
    mla: LatentAttention | None = None
    token_mixer: TokenMixer = TokenMixer.ATTENTION
    bitlinear: BitLinear | None = Field(None, description="ternary BitLinear weights (MatMul-free LM)")
    mtp_layers: NonNegativeInt = Field(
        0, description="multi-token-prediction depth D: sequential MTP modules after the last layer, each an "
        "RMSNorm'ed hidden state and embedding projected 2h -> h, one transformer layer of the last layer's kind "
        "and the shared LM head with its own loss (DeepSeek-V3 report §2.2; HF config num_nextn_predict_layers). "
        "Trained only when the workload says so (`Training.mtp`); 0: none")
    published: PublishedSize | None = None
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the number comes from")

    @model_validator(mode="after")
    def _check_heads(self) -> Self:
        if self.yarn and self.position is not PositionKind.ROTARY:
            raise ValueError(f"yarn: YaRN scales rotary positions; position is {self.position.value}")
        if self.moe is not None and self.moe.dense_layers >= self.layers:
            raise ValueError(f"moe.dense_layers ({self.moe.dense_layers}) must be below layers ({self.layers})")
        if self.mla is not None:
            if self.kv_heads not in (None, self.heads):
                raise ValueError("mla: keys and values have one head per query head; leave kv_heads unset")
            if self.head_dim not in (None, self.mla.nope_head_dim + self.mla.rope_head_dim):
                raise ValueError("mla: head_dim is nope_head_dim + rope_head_dim; leave it unset")
        if self.token_mixer is TokenMixer.MLGRU and (self.mla is not None or self.kv_heads not in (None, self.heads)):
            raise ValueError("token_mixer mlgru has no attention: drop mla and kv_heads")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) is not a multiple of heads ({self.heads}); give head_dim"
            )
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_head(self) -> int:
        """Query/key dimension per head."""
        if self.mla is not None:
            return self.mla.nope_head_dim + self.mla.rope_head_dim
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def d_value(self) -> int:
        return self.mla.v_head_dim if self.mla is not None else self.d_head

    @property
    def family(self) -> str:
        """dense, moe, mla+moe, matmul-free...: the blocks this model uses."""
        parts = [name for name, used in (("mla", self.mla), ("moe", self.moe),
                                         ("matmul-free", self.bitlinear)) if used]
        return "+".join(parts) or "dense"
