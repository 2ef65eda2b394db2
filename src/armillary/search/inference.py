"""Inference objective: the serving configuration (tp, pp, ep, batch, weight and KV-cache precision; the
replicas follow from the devices) with the most output tokens per second and device whose time per output
token (and, optionally, time to first token) stays within a limit.

The batch axis is evaluated as an array through the estimator's own functions (`prefill_pass`,
`decode_phase`, `inference_memory`, `kv_budget`: the same code as `estimate_inference`), one block per
(tp, pp, ep, weights, KV precision); only the top candidates are estimated again as full results."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from armillary.errors import SpecError
from armillary.estimate.feasibility import inference_checks
from armillary.estimate.inference import decode_phase, inference_memory, kv_budget, prefill_pass, replica_model
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.run import estimate_inference_run
from armillary.plan import rules
from armillary.plan.arrays import ModelArrays
from armillary.search.space import default_tp
from armillary.specs.base import Spec
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, StoredPrecision


class InferenceSpace(Spec):
    tp: tuple[PositiveInt, ...] | None = Field(None, description="default: powers of two up to a node")
    pp: tuple[PositiveInt, ...] = (1,)
    batch: tuple[PositiveInt, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    ep: tuple[PositiveInt, ...] = Field((1,), description="expert parallelism inside each replica's TP ranks "
                                        "(expert_tp = tp / ep); MoE models only")
    weights: tuple[StoredPrecision | None, ...] = (None,)
    kv_cache: tuple[StoredPrecision | None, ...] = Field((None,), description="KV-cache precisions")
    tpot_limit_s: PositiveFloat = Field(description="time per output token at most this")
    ttft_limit_s: PositiveFloat | None = Field(None, description="time to first token at most this")


@dataclass(frozen=True)
class ServingCandidate:
    rank: int
    strategy: Strategy
    batch: int
    weights: StoredPrecision | None
    estimate: InferenceEstimate


@dataclass(frozen=True)
class InferenceSearchResult:
    top: tuple[ServingCandidate, ...]
    points: int
    feasible: int  # fit in memory
    within_limits: int


def _block(m: ModelArrays, system: System, strategy: Strategy, w: Inference,
           batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(feasible, ttft, tpot, output tokens/s per device) of one layout and precision over a batch array."""
    r = replica_model(m, strategy, w, system)
    replicas = system.devices // r.devices
    broken = rules.failed(inference_checks(m, strategy.tp, strategy.cp, strategy.pp, strategy.ep, replicas,
                                           system.devices))
    prefill, decode = prefill_pass(r, w, batch), decode_phase(r, w, batch)
    memory = inference_memory(r, w, batch, batch * w.input_len)
    free, budget = kv_budget(r, w, memory)
    tier2 = system.device.second_tier
    fits = (np.asarray(free) > 0) & (memory.kv_cache <= budget) & (not broken)
    if tier2 is not None:
        fits &= memory.kv_cache_tier2 <= tier2.capacity
    ttft, decode_s = np.asarray(prefill.total), np.asarray(decode.total)
    tpot = decode_s / (w.output_len - 1) if w.output_len > 1 else 0.0 * decode_s
    per_device = batch * w.output_len / (ttft + decode_s) / r.devices
    return np.broadcast_to(fits, batch.shape), ttft, np.broadcast_to(tpot, batch.shape), per_device


def search_inference(model: Model, system: System, workload: Inference, base: Strategy, space: InferenceSpace,
                     top_k: int = 10) -> InferenceSearchResult:
    """Rank the points of `space` that fit and meet the limits by output tokens/s per device (ties: lower
    TPOT, then enumeration order: tp, pp, ep, batch, weights, KV precision)."""
    tps = space.tp or default_tp(system.devices_per_node, system.devices)
    m, batch = ModelArrays.of(model), np.asarray(space.batch, dtype=float)
    nw, nk, nb = len(space.weights), len(space.kv_cache), len(batch)
    eps = space.ep if model.moe is not None else (1,)
    points = len(tps) * len(space.pp) * len(eps) * nb * nw * nk
    feasible, blocks = 0, list[tuple[Strategy, Inference]]()
    keys: list[np.ndarray] = []  # per block: (-tokens/s per device, tpot, enumeration index, batch) of kept points
    for layout, (tp, pp, ep) in enumerate(itertools.product(tps, space.pp, eps)):
        if not (rules.replica_fits(tp, pp, system.devices).ok and rules.tp_divides_heads(tp, model.heads).ok
                and tp % ep == 0):
            continue
        moe = {"ep": ep, "expert_tp": tp // ep} if model.moe is not None else {}
        strategy = base.model_copy(update={"tp": tp, "pp": pp, "dp": None, **moe})
        for (i, weights), (j, kv) in itertools.product(enumerate(space.weights), enumerate(space.kv_cache)):
            cache = workload.kv_cache.model_copy(update={"precision": kv}) if kv is not None else workload.kv_cache
            w = workload.model_copy(update={"weights": weights, "kv_cache": cache})
            try:
                fits, ttft, tpot, per_device = _block(m, system, strategy, w, batch)
            except SpecError:
                continue
            feasible += int(fits.sum())
            ok = fits & (tpot <= space.tpot_limit_s)
            if space.ttft_limit_s is not None:
                ok &= ttft <= space.ttft_limit_s
            order = (layout * nb + np.arange(nb)) * nw * nk + i * nk + j  # the point's enumeration index
            block = np.full(int(ok.sum()), float(len(blocks)))
            keys.append(np.stack([-per_device[ok], tpot[ok], order[ok], batch[ok], block]))
            blocks.append((strategy, w))
    kept = np.concatenate(keys, axis=1) if keys else np.zeros((5, 0))
    best = np.lexsort((kept[2], kept[1], kept[0]))[:top_k]
    top = []
    for rank, k in enumerate(best):
        strategy, w = blocks[int(kept[4, k])]
        b = int(kept[3, k])
        top.append(ServingCandidate(rank, strategy, b, w.weights,
                                    estimate_inference_run(model, system, strategy, w.model_copy(update={"batch": b}))))
    return InferenceSearchResult(tuple(top), points, feasible, int(kept.shape[1]))
