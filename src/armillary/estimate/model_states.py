"""Model states per device: the weights, gradients and optimizer states of a device's parameters, sharded over
their replicas by ZeRO stage (Rajbhandari et al. SC'20 §5: P_os, P_os+g, P_os+g+p), of a full run and of a LoRA
run; their bytes per parameter are the precision recipe's (`memory`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.estimate.memory import (
    WEIGHT_BYTES,
    adapter_precision,
    grad_bytes,
    optimizer_bytes,
    per_precision,
    weight_bytes_each,
)
from armillary.memo import derived, quick_init
from armillary.numerics import Array, where
from armillary.plan.arrays import StrategyArrays, TrainingArrays


@quick_init
@dataclass(frozen=True)
class ModelStates:
    """Bytes of a device's weights, gradients and optimizer states."""

    weights: Array
    gradients: Array
    optimizer_states: Array

    def __add__(self, o: ModelStates) -> ModelStates:
        return ModelStates(self.weights + o.weights, self.gradients + o.gradients,
                           self.optimizer_states + o.optimizer_states)


def zero_shards(st: StrategyArrays, stage: int, replicas: Array | None = None) -> Array:
    """Ways ZeRO stage `stage` (1 optimizer, 2 gradients, 3 parameters) splits its state: over the
    `replicas` ranks that hold the same parameters (dp x cp; expert-dp for routed experts) if on, else 1."""
    return where(st.zero >= stage, st.dp * st.cp if replicas is None else replicas, 1)


def model_states(params: Array, st: StrategyArrays, replicas: Array | None = None) -> ModelStates:
    """Bytes of weights, gradients and optimizer states for `params` parameters on one model-parallel
    rank, sharded over their replicas by ZeRO stage (SC'20 §5: P_os, P_os+g, P_os+g+p)."""
    f = _state_factors(st, replicas)
    return ModelStates(params * f[0] / f[3], params * f[1] / f[4], params * f[2] / f[5])


def replicated_and_expert_states(replicated: Array, experts: Array, st: StrategyArrays, edp: Array) -> ModelStates:
    """`model_states(replicated, st) + model_states(experts, st, edp)`, the same sums without the two
    intermediate ModelStates (the estimator takes eight a call)."""
    f, g = _both_factors(st, edp)
    return ModelStates(replicated * f[0] / f[3] + experts * g[0] / g[3],
                       replicated * f[1] / f[4] + experts * g[1] / g[4],
                       replicated * f[2] / f[5] + experts * g[2] / g[5])


def replicated_and_expert_weights(replicated: Array, experts: Array, st: StrategyArrays, edp: Array) -> Array:
    """`replicated_and_expert_states(...).weights` alone (the same expression, without the other states)."""
    f, g = _both_factors(st, edp)
    return replicated * f[0] / f[3] + experts * g[0] / g[3]


Factors = tuple[Array, Array, Array, Array, Array, Array]


def _both_factors(st: StrategyArrays, edp: Array) -> tuple[Factors, Factors]:
    """`_state_factors` of the replicated parameters and of the experts over `edp`, in one look-up."""
    if isinstance(edp, np.ndarray):  # a sweep's expert-dp: kept beside its array, by identity (as _state_factors)
        kept, both = derived(st, ("model states, both", id(edp)),
                             lambda: (edp, (_state_factors(st, None), _state_factors(st, edp))))
        return both if kept is edp else (_state_factors(st, None), _state_factors(st, edp))
    return derived(st, ("model states, both", edp), lambda: (_state_factors(st, None), _state_factors(st, edp)))


def _state_factors(st: StrategyArrays, replicas: Array | None) -> Factors:
    """(weight, gradient, optimizer) bytes per parameter and the ZeRO shards of each state (3, 2, 1): once per
    strategy point and replicas (`memo.derived`; replicas given as an array, a sweep's expert-dp, are keyed by
    the array's identity and kept beside the value, so the id stays theirs while the entry lives)."""
    if isinstance(replicas, np.ndarray):
        kept, factors = derived(st, ("model states", id(replicas)), lambda: (replicas, _factors(st, replicas)))
        return factors if kept is replicas else _factors(st, replicas)
    return derived(st, ("model states", replicas), lambda: _factors(st, replicas))


def _factors(st: StrategyArrays, replicas: Array | None) -> Factors:
    return (weight_bytes_each(st), grad_bytes(st), optimizer_bytes(st),
            zero_shards(st, 3, replicas), zero_shards(st, 2, replicas), zero_shards(st, 1, replicas))


def lora_states(base_params: Array, adapter_params: Array, st: StrategyArrays, w: TrainingArrays,
                replicas: Array | None = None) -> ModelStates:
    """Model states of a LoRA run on one model-parallel rank (Hu et al. 2021 §4.1: the base frozen, only
    the adapters trained): the base weights at their stored bytes (`Lora.base_precision`), no gradient and no
    optimizer state for them; the adapters as any trained weights (bf16 weight, fp32 main gradient, fp32
    master and Adam moments: the Megatron-LM distributed-optimizer table). ZeRO / FSDP shard what there is:
    stage 3 the base weights too (FSDP-QLoRA shards the frozen 4-bit base the same way)."""
    code = adapter_precision(st)
    shards = (zero_shards(st, 3, replicas), zero_shards(st, 2, replicas), zero_shards(st, 1, replicas))
    return ModelStates(base_params * w.base_bytes / shards[0] + adapter_params * per_precision(WEIGHT_BYTES, code)
                       / shards[0], adapter_params * grad_bytes(st, code) / shards[1],
                       adapter_params * optimizer_bytes(st, code) / shards[2])
