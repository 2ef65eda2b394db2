"""Multi-token prediction (MTP) in training: DeepSeek-V3 report (arXiv 2412.19437) §2.2, as Megatron-Core runs it
(megatron/core/transformer/multi_token_prediction.py @d98e8a6, `--mtp-num-layers D`).

Each of the D sequential modules embeds the tokens shifted by k with the shared embedding, RMSNorms that and the
previous depth's hidden state (`enorm`, `hnorm`), projects their concatenation 2h -> h (`eh_proj`, a column-
parallel linear without bias), runs one transformer layer of the model's last-layer kind (`mtp_model_layer`:
an MoE layer for DeepSeek-V3), a final RMSNorm, and the shared output layer with its own cross-entropy
(`process_mtp_loss`: `output_layer` once per depth). Every module sits on the last pipeline stage, after the main
decoder (`mtp_on_this_rank`), which then also holds a copy of the embedding (gpt_model.py: `if self.pre_process
or self.mtp_process: self.embedding = ...`; finalize_model_grads.py all-reduces its gradient with the first
stage's: estimate/embedding_sync.py).

Here the transformer layers join the last stage's layer counts (`with_mtp`: their time, parameters, gradients,
optimizer states, activations and collectives follow as any layer's); `mtp_cost` prices the rest. Every
function broadcasts over a sweep; with no depth they are not called (results bit-identical).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from armillary.cost.compute import kernel_times
from armillary.errors import SpecError
from armillary.estimate.activations import logit_bytes
from armillary.estimate.layer import BACKWARD_STREAM_FACTOR
from armillary.estimate.result import EndsCost
from armillary.estimate.stages import StageLayers, StageTime
from armillary.memo import quick_init
from armillary.numerics import Array, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import rank_queries
from armillary.specs.system import System
from armillary.workload.ops import gemm, stream
from armillary.workload.parameters import count_parameters
from armillary.workload.transformer import sequence_shards


def mtp_depth(m: ModelArrays, w: TrainingArrays) -> Array:
    """The MTP depth a step trains: the model's modules (`Model.mtp_layers`) where the workload trains them
    (`Training.mtp`); an error where it asks for modules the model lacks."""
    if not isinstance(w.mtp, np.ndarray) and not w.mtp:  # one workload that trains none: nothing to check
        return 0.0
    if np.any((np.asarray(w.mtp) > 0) & (np.asarray(m.mtp_layers) == 0)):
        raise SpecError("training.mtp: the model has no multi-token-prediction modules (model.mtp_layers is 0); "
                        "set model.mtp_layers to the MTP depth, or leave training.mtp off")
    return m.mtp_layers * w.mtp


def trains_mtp(depth: Array) -> bool:
    """Whether any point of a sweep trains MTP modules (else nothing here is priced: results as before)."""
    return bool(np.any(depth > 0)) if isinstance(depth, np.ndarray) else bool(depth > 0)


def with_mtp(stages: StageLayers, depth: Array, m: ModelArrays) -> StageLayers:
    """The stage kinds with the MTP modules' transformer layers on the last stage (and on a single stage, which
    is its own last): `depth` layers of the last layer's kind, an MoE layer for an MoE model (its leading
    layers are the dense ones; Megatron-Core's mtp_model_layer takes the decoder's last layer spec)."""
    moe = where(m.experts > 0, 1.0, 0.0)
    dense_add, moe_add, single = depth * (1 - moe), depth * moe, stages.single
    n_first, n_mid, n_last = stages.totals
    return StageLayers(
        first=(stages.first[0] + single * dense_add, stages.first[1] + single * moe_add), middle=stages.middle,
        last=(stages.last[0] + dense_add, stages.last[1] + moe_add),
        totals=(n_first + single * depth, n_mid, n_last + depth), single=single, has_mid=stages.has_mid)


def mtp_layers_model(m: ModelArrays, depth: Array) -> ModelArrays:
    """The model with its trained MTP modules' transformer layers counted as layers of the last kind: what
    the model FLOPs count (Megatron-Bridge training/utils/flop_utils.py @067f987d and Megatron-LM
    training.py num_floating_point_operations: `num_moe_layers += last_layer_is_moe * mtp_num_layers`,
    `num_layers = num_layers + mtp_num_layers`)."""
    return replace(m, layers=m.layers + depth, dense_layers=where(m.experts > 0, m.dense_layers,
                                                                   m.dense_layers + depth))


@quick_init
@dataclass(frozen=True)
class MtpCost:
    """The MTP modules beyond their transformer layers, one micro-batch on the last stage, all depths."""

    time: StageTime
    forward_s: Array  # of `time.compute`: the forward passes
    params: Array  # of a tensor-parallel group (split over tp as the stage's others): the projections and
    # norms, and in a pipeline the last stage's copy of the embedding
    activations: Array  # bytes kept for backward: each depth's logits, its norms' and projection's inputs


def mtp_cost(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System, ends: EndsCost,
             depth: Array, frozen: Array, e: Array, single: Array) -> MtpCost:
    """Per depth: the embedding lookup of the shifted tokens, enorm and hnorm with the concatenation, the
    2h -> h projection (forward, input and weight gradients: 3 x its 2 T 2h h/t forward), the LM head and
    its loss once more (`ends`: its head pass, with the LM head's and the embedding's TP all-reduce), and the
    projection's TP exchange of its 2h-wide input, taken as two of the ends' messages [derived]. A frozen
    (LoRA) projection has no weight gradient."""
    b, t, h = st.micro_batch, st.tp, m.hidden
    tokens = b * rank_queries(w.seq_len, st.cp)
    projection = gemm(tokens, h / t, 2 * h, 1, e)
    # enorm and hnorm read and write h each per token, the concatenation copies 2h [derived, as the ends' norm]
    norms = stream(8 * tokens * h * e / sequence_shards(t, st.sequence_parallel))
    proj_t, norms_t = kernel_times((projection, norms), system.device, st.precision)
    k = BACKWARD_STREAM_FACTOR
    forward = ends.embedding_forward_s + norms_t + proj_t + ends.head_forward_s
    compute = ends.embedding_s + (1 + k) * norms_t + (3 - frozen) * proj_t + ends.head_s
    time = StageTime(compute=depth * compute, recompute=0.0, tp=depth * 4 * ends.tp.time)
    params = count_parameters(m)
    own = 2 * h * h + 3 * m.norm_params * h  # eh_proj (no bias), enorm, hnorm, final_layernorm
    held = depth * own + where(depth > 0, 1.0, 0.0) * (1 - single) * params.embedding
    logits = tokens * (m.vocab / t) * logit_bytes(st, e)
    # saved for backward: the two norms' inputs (h each), the projection's input (2h), the final norm's (h)
    inputs = 5 * tokens * h * e / sequence_shards(t, st.sequence_parallel)
    return MtpCost(time, depth * forward, held, depth * (logits + inputs))


def mtp_flop(m: ModelArrays, w: TrainingArrays, depth: Array, head_flop: Array) -> Array:
    """Model FLOPs of the iteration (whole cluster) the MTP modules add beyond their transformer layers: the LM
    head once more per depth (`head_flop`: `flops.ModelFlop.head`, forward and backward) and the projection's
    3 x 2 (2h) h per token (Megatron-Bridge training/utils/flop_utils.py @067f987d: `3 * 2 * mtp_num_layers *
    2 h^2` and the logits `* (mtp_num_layers + 1)`; its 3h per token for the norms is not counted, as no norm
    is elsewhere). A frozen (LoRA) projection runs forward and input gradient only."""
    frozen = where(w.frozen, 1.0, 0.0)
    return depth * (head_flop + (3 - frozen) * 2 * w.global_batch * w.seq_len * 2 * m.hidden * m.hidden)
