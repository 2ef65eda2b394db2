"""Activation recomputation: whether and what a training step recomputes in its backward pass instead of
storing (Korthikanti et al. 2022, §5; Megatron-Core --recompute-modules)."""

from __future__ import annotations

from enum import StrEnum


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, §5)."""

    NONE = "none"
    SELECTIVE = "selective"  # recompute the attention core (QK^T, softmax, dropout, attention over V)
    FULL = "full"  # store only each layer's input, recompute the whole layer in backward


class RecomputeModule(StrEnum):
    """What selective recomputation re-runs (Megatron-Core --recompute-modules): the module's outputs are
    not stored but recomputed from its input in the backward pass."""

    CORE_ATTN = "core_attn"  # scores, softmax, dropout, attention over V (Korthikanti et al. §5)
    LAYERNORM = "layernorm"  # the two pre-norms (their outputs feed QKV and the MLP)
    MLP = "mlp"  # the dense MLP of dense layers
    SHARED_EXPERTS = "shared_experts"  # the shared experts of MoE layers
    MOE_ACT = "moe_act"  # the routed experts' activation function
    MLA_UP_PROJ = "mla_up_proj"  # MLA's up-projections: only the latents are kept
    MOE = "moe"  # the whole MoE layer: router, dispatch / combine (re-run with their communication), experts
    # every element-wise kernel of the layer: norms, residual adds, rotary embedding, activation
    ELEMENTWISE = "elementwise"
    # every second matmul of a layer in forward order, with Q, K, V and gate, up as separate linears: K, the
    # output projection and up (down without a gate) (torchtitan's op-level selective checkpointing)
    ALTERNATE_MATMULS = "alternate_matmuls"
