"""The word embedding's gradient all-reduce between the first and the last pipeline stage.

With pp > 1, a model whose output layer shares the word embedding's weights (tied embeddings) holds a copy of the
embedding on the last stage as well as the first, and so does a model training multi-token-prediction modules
(their embedding sits on the last stage: estimate/mtp.py). After the pipeline flush, and after the data-parallel
gradient sync, the two copies' gradients are summed by an all-reduce over the embedding group, the first and the
last stage of each pipeline (2 ranks, the same tensor-parallel rank and data-parallel replica): Megatron-Core
finalize_model_grads.py `_allreduce_word_embedding_grads` (core_v0.15.0: `if share_embeddings_and_output_weights
or mtp_num_layers`, `torch.distributed.all_reduce(grad, group=embedding_group)` on the main gradient), and
DeepSpeed's pipeline engine the same for its tied layers (runtime/pipe/module.py
`allreduce_tied_weight_gradients`, run by the schedule's ReduceTiedGrads after the last backward). It runs in line,
hidden behind nothing; the optimizer step waits for it.

Size: vocab x hidden / tp gradient elements in the gradient reduction's precision (`grad_reduce_bytes`: fp32 main
gradients unless --grad-reduce-in-bf16). A LoRA run freezes the embedding: nothing to reduce.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from armillary.comm.collectives import all_reduce, needed
from armillary.estimate.data_parallel import DataParallelCost, grad_reduce_bytes
from armillary.estimate.result import DIM_PP, CommCall
from armillary.memo import KeyedCache, typed
from armillary.numerics import Array, any_true, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import ALL_REDUCE
from armillary.specs.system import System

# the strategy's fields `embedding_sync_cost` reads (with the model's vocabulary, hidden size and tie, the MTP
# depth and the pipeline group's spans, the key of one configuration's cost per system)
EMBEDDING_SYNC_FIELDS = ("pp", "tp", "precision", "grad_reduce_bf16")
embedding_sync_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*EMBEDDING_SYNC_FIELDS)

_KEPT: KeyedCache[System, DataParallelCost] = KeyedCache(32, 256)


def embedding_pair(pp_group: Placement) -> Placement:
    """The embedding group of a pipeline placed as `pp_group`: its first and its last stage, two ranks that sit
    apart on the outermost dimension the pipeline spans (they are (p - 1) strides apart, the pipeline's ends), one
    position on every other (a pipeline inside one node: both on the scale-up dimension)."""
    outer = pp_group.outermost
    return Placement(tuple(where(outer == i, 2.0, 1.0) for i in range(len(pp_group.spans))))


def embedding_synced(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, mtp_depth: Array) -> Array:
    """1 where the step makes the all-reduce, else 0: a pipeline (pp > 1) whose last stage holds a copy of the word
    embedding, by tied embeddings or trained MTP modules, and trains it (LoRA freezes it)."""
    return where((st.pp > 1) & ((m.tied_embeddings > 0) | (mtp_depth > 0)) & (w.lora_rank <= 0), 1.0, 0.0)


def embedding_sync_cost(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, mtp_depth: Array,
                        pp_group: Placement, system: System, on: Array | None = None) -> DataParallelCost:
    """The all-reduce as a parameter set's data-parallel cost that nothing hides (`in_line_s`, once per iteration;
    `data_parallel.exposed_together` adds it to the exposed data-parallel time), with its call (the pipeline
    dimension's all-reduce of vocab x hidden / tp gradients over the 2-rank embedding group)."""
    on = embedding_synced(m, st, w, mtp_depth) if on is None else on  # (`on`: where the caller has it)
    grad_bytes = m.vocab * m.hidden / st.tp * grad_reduce_bytes(st)
    cost = needed(lambda: all_reduce(grad_bytes, embedding_pair(pp_group), system), on > 0)
    return DataParallelCost(in_line_s=on * cost.time, behind_forward_s=0.0, behind_backward_s=0.0,
                            once_forward_s=0.0, once_backward_s=0.0,
                            calls=(CommCall.of(DIM_PP, ALL_REDUCE, on, grad_bytes, cost),))


def with_embedding_sync(dp: tuple[DataParallelCost, ...], m: ModelArrays, st: StrategyArrays, w: TrainingArrays,
                        mtp_depth: Array, pp_group: Placement, system: System) -> tuple[DataParallelCost, ...]:
    """`dp` with the embedding all-reduce after its costs, where any point makes it (one configuration that does not:
    `dp` itself, so its estimate is what it was); one configuration's cost kept per system under its inputs."""
    on = embedding_synced(m, st, w, mtp_depth)
    if not any_true(on):
        return dp
    key = typed(m.vocab, m.hidden, m.tied_embeddings, mtp_depth, w.lora_rank, *embedding_sync_fields(st),
                *pp_group.spans)
    return (*dp, _KEPT.get(system, key, lambda: embedding_sync_cost(m, st, w, mtp_depth, pp_group, system, on)))
