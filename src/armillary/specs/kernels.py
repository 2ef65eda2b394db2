"""Which kernels a training stack runs where that changes time or memory: the attention kernel, the loss
kernel and what a layer's kernels keep for backward."""

from __future__ import annotations

from enum import StrEnum


class Attention(StrEnum):
    """Attention kernel. flash: FlashAttention-2 (fused, tiled, no s x s tensor in HBM; Dao 2023);
    flash1: FlashAttention-1 (Dao et al. 2022); flash3: FlashAttention-3 / cuDNN fused attention on Hopper
    and later (Shah et al. 2024), faster per FLOP."""

    STANDARD = "standard"
    FLASH1 = "flash1"
    FLASH = "flash"
    FLASH3 = "flash3"


class CrossEntropy(StrEnum):
    """How the loss is computed, which fixes what its logits hold in HBM (`activations.logit_bytes`)."""

    FUSED = "fused"  # a fused / vocab-parallel cross-entropy (Megatron): fp32 logits and their 16-bit source
    EAGER_FP32 = "eager_fp32"  # logits cast to fp32, PyTorch's F.cross_entropy op by op (torchtitan of 2024)


class ActivationKernels(StrEnum):
    """What a layer's kernels keep for backward (`activations.LayerActivations`)."""

    FUSED = "fused"  # fused kernels (Megatron-Core / Transformer Engine): Korthikanti et al. 2022's count
    EAGER = "eager"  # PyTorch autograd op by op, as LitGPT's 2023 model code runs it (`activations.eager_activations`)
