"""Model FLOPs of a training iteration (no recomputation), the numerator of MFU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.memo import quick_init
from armillary.numerics import Array, minimum, where
from armillary.plan.arrays import ModelArrays, TrainingArrays
from armillary.workload.adapters import adapter_parameters
from armillary.workload.experts import experts_forward
from armillary.workload.transformer import layer_forward


@quick_init
@dataclass(frozen=True)
class ModelFlop:
    """Model FLOPs of one iteration, whole cluster (no recomputation)."""

    layers: Array  # forward + backward of all layers
    head: Array  # LM head, forward + backward
    attention_core: Array  # forward of the attention core of all layers (what selective recompute re-runs)
    layers_forward: Array = 0.0  # forward of all layers (what full recomputation re-runs)

    @property
    def total(self) -> Array:
        return self.layers + self.head


def model_flop_per_iteration(m: ModelArrays, w: TrainingArrays,
                             dense_layer: tuple[Array, Array] | None = None, routed_share: Array = 1.0) -> ModelFlop:
    """3 x forward (backward = 2 x forward) of all layers and the LM head. For GPT:
    72 B L s h^2 (1 + s/(6h) + V/(12 h L)) (Korthikanti et al. 2022, App. A). An MoE layer counts its
    router, shared experts and top_k routed experts per token (the active parameters), of which the
    experts process `routed_share` (tokens beyond a capacity factor below 1 are dropped, not computed).
    `dense_layer`: the (all GEMMs, attention core) forward FLOPs of one dense layer for the whole batch,
    when known. LoRA (`TrainingArrays.lora_rank`): the frozen base without weight gradients, plus the
    adapters."""
    B, s = w.global_batch, w.seq_len
    if dense_layer is None:
        fw = layer_forward(m, B, s, 1.0, 0.0, 2.0)
        dense_layer = sum(op.flop for op in fw.gemms), sum(op.flop for op in fw.core_gemms)
    dense, core = dense_layer
    # a sliding-window layer's attention core counts min(window, s) keys per query where a full layer counts s
    # (Megatron-Bridge training/utils/flop_utils.py, transformer_flops: swa_context = min(window, seq))
    windowed = where((m.window > 0) & (m.window < s), 1 - m.window_layers * (1 - minimum(m.window, s) / s), 1.0)
    dense, core = dense - (1 - windowed) * core, windowed * core
    moe: Array = 0.0
    if isinstance(m.experts, np.ndarray) or m.experts > 0:
        moe_fw = layer_forward(m, B, s, 1.0, 0.0, 2.0, mlp_width=m.shared_ffn)
        routed = experts_forward(m, B * s, 1.0, 1.0, 1.0, 2.0, 2.0)
        moe = (sum(op.flop for op in (*moe_fw.gemms, routed.router))
               - (1 - windowed) * sum(op.flop for op in moe_fw.core_gemms)
               + routed_share * (routed.experts_in.flop + routed.experts_out.flop))
    # every weight trained: 3 x forward (forward, input and weight gradients). LoRA (Hu et al. 2021 §4.1):
    # the frozen base runs forward and its input gradient (2 x forward; no weight-gradient GEMM), the
    # adapters forward, input and weight gradients (3 x 2 r (d_in + d_out) per
    # token, `workload.adapters`); the frozen LM head forward and input gradient. The attention core has
    # no weights: its backward stays (2 x its forward).
    frozen = where(w.frozen, 1.0, 0.0)
    adapters: Array = 0.0  # without LoRA (one workload of rank 0): r x (d_in + d_out) = 0 x finite widths
    if isinstance(w.lora_rank, np.ndarray) or w.lora_rank != 0:
        adapters = B * s * 2 * (m.dense_layers * adapter_parameters(m, w) + m.moe_layers
                                * adapter_parameters(m, w, m.shared_ffn))
    base = m.dense_layers * dense + m.moe_layers * moe
    cores = m.layers * core
    layers = (3 - frozen) * base + frozen * cores + 3 * adapters
    return ModelFlop(layers=layers, head=(3 - frozen) * 2 * B * s * m.hidden * m.vocab, attention_core=cores,
                     layers_forward=base + adapters)
