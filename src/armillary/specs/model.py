"""Model specification: the architecture of a transformer language model.

The dense decoder is the first family; `family` is the discriminator under which MoE, MLA and other
families slot in as further specs with their own fields.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, Self

from pydantic import Field, PositiveInt, model_validator

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


class DenseModel(Spec):
    """A dense decoder-only transformer (GPT, Llama, BLOOM, OPT, MPT, Nemotron...)."""

    family: Literal["dense"] = "dense"
    name: str = "custom"
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
    dropout: bool = Field(False, description="dropout in the block (stores masks for backward)")
    max_seq_len: PositiveInt = 2048
    sliding_window: PositiveInt | None = Field(
        None, description="attention window in tokens (Mistral-style local attention); None = full causal")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the number comes from")

    @model_validator(mode="after")
    def _check_heads(self) -> Self:
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
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads


Model = DenseModel
