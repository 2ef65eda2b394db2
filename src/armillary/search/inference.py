"""Inference objective: the serving configuration (tp, pp, ep, batch, weight and KV-cache precision, the
share of replicas that only prefill; the replicas follow from the devices) with the most output tokens per
second and device whose time per output token (and, optionally, time to first token) stays within a limit.

The batch axis is evaluated as an array through the estimator's own functions (`prefill_pass`,
`decode_phase`, `inference_memory`, `kv_budget`: the same code as `estimate_inference`), one block per
(tp, pp, ep, weights, KV precision); only the top candidates are estimated again as full results."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from armillary import display
from armillary.errors import SpecError
from armillary.estimate.feasibility import inference_checks
from armillary.estimate.inference import ReplicaModel, replica_model
from armillary.estimate.inference_memory import inference_memory, kv_budget
from armillary.estimate.inference_phases import decode_phase, kv_handover_time, prefill_pass
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
    attention_dp: tuple[PositiveInt, ...] = Field((1,), description="data-parallel attention groups per replica "
                                                  "(SGLang --enable-dp-attention; MoE models, experts over all tp "
                                                  "ranks: ep = tp); the batch splits over the groups")
    weights: tuple[StoredPrecision | None, ...] = (None,)
    kv_cache: tuple[StoredPrecision | None, ...] = Field((None,), description="KV-cache precisions")
    prefill_share: tuple[Annotated[float, Field(ge=0, lt=1)], ...] = Field(
        (0.0,), description="disaggregation: share of the replicas that only prefill (0: each replica prefills "
        "and decodes its own batch)")
    continuous: bool = Field(False, description="judge TPOT as a replica serving a stream at that batch: a "
                             "colocated replica prefills the prompts of the requests that replace finished ones "
                             "between its decode steps (DistServe §2.2), disaggregated decode replicas do not; "
                             "false: one static batch, decode steps only")
    tpot_limit_s: PositiveFloat = Field(description="time per output token at most this")
    ttft_limit_s: PositiveFloat | None = Field(None, description="time to first token at most this")


# How an inference search judges its limits, stated in its output beside `serving.rate.JUDGED` (what `serve
# --max-rate` judges): the same words of the SLOs, different runs, so different answers (docs/serving.md)
JUDGED = ("limits judged on one static batch per replica: its `batch` prompts prefilled together (TTFT = that "
          "prefill; disaggregated: plus the cache handover), mean TPOT over its decode steps (--strategies "
          "continuous: true adds the prefills of the requests that refill the batch), tokens/s of that batch; "
          "`armillary serve RUN --max-rate` judges a served stream instead (P90 TTFT, P99 TPOT, continuous "
          "batching, chunked prefill) and usually sustains more tokens/s per device: check the best with it "
          "(--emit RUN.yaml)")


@dataclass(frozen=True)
class ServingCandidate:
    """One configuration of an inference search: its strategy, batch and weight precision, and its figures."""

    rank: int
    strategy: Strategy
    batch: int
    weights: StoredPrecision | None
    estimate: InferenceEstimate  # one replica's static batch, prefill then decode
    prefill_replicas: int  # of the replicas the devices hold; 0: not disaggregated
    output_tokens_per_s_per_device: float  # as ranked: the estimate's, or the disaggregated pools' pace
    ttft_s: float  # with disaggregation: prefill and the cache's handover to a decode replica
    tpot_s: float


@dataclass(frozen=True)
class InferenceSearchResult:
    """The best serving configurations (`top`, by output tokens/s per device) of a space of `points`, of
    which `feasible` fit in memory and `within_limits` met the TPOT / TTFT limits."""

    top: tuple[ServingCandidate, ...]
    points: int
    feasible: int  # fit in memory
    within_limits: int

    def headline(self) -> display.Headline:
        """The figures a repr shows: the space's counts and the best configuration."""
        best = self.top[0] if self.top else None
        return [("points", f"{self.points:,}"), ("feasible", f"{self.feasible:,}"),
                ("within_limits", f"{self.within_limits:,}"),
                ("best", "none" if best is None else f"tp {best.strategy.tp} pp {best.strategy.pp} batch "
                 f"{best.batch}: {display.number(best.output_tokens_per_s_per_device)} output tokens/s per device, "
                 f"TPOT {display.seconds(best.tpot_s)}")]

    def __repr__(self) -> str:
        return display.short_repr(type(self).__name__, self.headline())

    def _repr_html_(self) -> str:
        return display.html_table(type(self).__name__, self.headline())


def split_replicas(replicas: int, share: float) -> int:
    """Prefill-only replicas for a share of `replicas`: the nearest whole number, at least one when the share
    is above 0; none left for decoding (the share does not fit) when it would take them all."""
    return 0 if share == 0 else max(1, round(share * replicas))


def _pools(r: ReplicaModel, w: Inference, batch: np.ndarray, ttft: np.ndarray, decode_s: np.ndarray,
           replicas: int, prefill: int) -> tuple[np.ndarray, np.ndarray]:
    """(ttft, output tokens/s per device) of `prefill` replicas that prefill batches of prompts back to back
    and hand each cache over to the other replicas, which decode batches back to back (DistServe, Zhong et al.
    2024 §3: the pools' request rates, the slower one paces the system; the handover overlaps the next
    prefill). Without a split: one replica's static batch, prefill then decode."""
    if prefill == 0:
        return ttft, batch * w.output_len / (ttft + decode_s) / r.devices
    rate = np.minimum(prefill * batch / ttft, (replicas - prefill) * batch / decode_s)  # requests per second
    handover = kv_handover_time(r, batch * float(w.input_len))
    return ttft + handover, rate * w.output_len / (replicas * r.devices)


def _block(m: ModelArrays, system: System, strategy: Strategy, w: Inference, batch: np.ndarray,
           share: float, continuous: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(feasible, ttft, tpot, output tokens/s per device, prefill replicas) of one layout and precision over a
    batch array (`continuous`: as `InferenceSpace.continuous`)."""
    r = replica_model(m, strategy, w, system)
    replicas = system.devices // r.devices
    prefill = split_replicas(replicas, share)
    # data-parallel attention: every group runs batch / groups sequences, the groups in step
    # (static_batch.estimate_inference splits a static batch the same way)
    groups = float(strategy.attention_dp)
    whole, batch = batch, batch / groups
    broken = rules.failed(inference_checks(m, strategy.tp, strategy.cp, strategy.pp, strategy.ep, replicas,
                                           system.devices))
    prefill_time, decode = prefill_pass(r, w, batch), decode_phase(r, w, batch)
    memory = inference_memory(r, w, batch, batch * w.input_len)
    free, budget = kv_budget(r, w, memory)
    tier2 = system.device.second_tier
    fits = ((np.asarray(free) > 0) & (memory.kv_cache <= budget) & (not broken) & (prefill < replicas)
            & (whole % groups == 0))
    if tier2 is not None:
        fits &= memory.kv_cache_tier2 <= tier2.capacity
    prompt_s, decode_s = np.asarray(prefill_time.total), np.asarray(decode.total)
    # a stream: each decode step of a colocated replica waits on its share of the prompts that refill the batch
    stalled = prompt_s + decode_s if continuous and prefill == 0 else decode_s
    tpot = stalled / (w.output_len - 1) if w.output_len > 1 else 0.0 * decode_s
    ttft, per_device = _pools(r, w, batch, prompt_s, decode_s, replicas, prefill)
    return np.broadcast_to(fits, batch.shape), ttft, np.broadcast_to(tpot, batch.shape), groups * per_device, prefill


def search_inference(model: Model, system: System, workload: Inference, base: Strategy, space: InferenceSpace,
                     top_k: int = 10) -> InferenceSearchResult:
    """Rank the points of `space` that fit and meet the limits by output tokens/s per device (ties: lower
    TPOT, then enumeration order: tp, pp, ep, attention_dp, batch, weights, KV precision, prefill share)."""
    tps = space.tp or default_tp(system.devices_per_node, system.devices)
    m, batch = ModelArrays.of(model), np.asarray(space.batch, dtype=float)
    nw, nk, nb, ns = len(space.weights), len(space.kv_cache), len(batch), len(space.prefill_share)
    eps = space.ep if model.moe is not None else (1,)
    dps = space.attention_dp if model.moe is not None else (1,)
    points = len(tps) * len(space.pp) * len(eps) * len(dps) * nb * nw * nk * ns
    feasible, blocks = 0, list[tuple[Strategy, Inference, int]]()
    # per block: (-tokens/s per device, tpot, enumeration index, batch, block, ttft, tokens/s) of kept points
    keys: list[np.ndarray] = []
    for layout, (tp, pp, ep, dp) in enumerate(itertools.product(tps, space.pp, eps, dps)):
        if not (rules.replica_fits(tp, pp, system.devices).ok and rules.tp_divides_heads(tp, model.heads).ok
                and tp % ep == 0 and rules.attention_dp_divides_tp(dp, tp).ok
                and rules.attention_dp_experts_span_tp(dp, ep, tp // ep, tp).ok):
            continue
        moe = {"ep": ep, "expert_tp": tp // ep, "attention_dp": dp} if model.moe is not None else {}
        strategy = base.model_copy(update={"tp": tp, "pp": pp, "dp": None, **moe})
        for (i, weights), (j, kv), (q, share) in itertools.product(enumerate(space.weights),
                                                                    enumerate(space.kv_cache),
                                                                    enumerate(space.prefill_share)):
            cache = workload.kv_cache.model_copy(update={"precision": kv}) if kv is not None else workload.kv_cache
            w = workload.model_copy(update={"weights": weights, "kv_cache": cache})
            try:
                fits, ttft, tpot, per_device, prefill = _block(m, system, strategy, w, batch, share,
                                                                space.continuous)
            except SpecError:
                continue
            feasible += int(fits.sum())
            ok = fits & (tpot <= space.tpot_limit_s)
            if space.ttft_limit_s is not None:
                ok &= ttft <= space.ttft_limit_s
            order = ((layout * nb + np.arange(nb)) * nw * nk + i * nk + j) * ns + q  # the enumeration index
            block = np.full(int(ok.sum()), float(len(blocks)))
            keys.append(np.stack([-per_device[ok], tpot[ok], order[ok], batch[ok], block, ttft[ok]]))
            blocks.append((strategy, w, prefill))
    kept = np.concatenate(keys, axis=1) if keys else np.zeros((6, 0))
    best = np.lexsort((kept[2], kept[1], kept[0]))[:top_k]
    top = []
    for rank, k in enumerate(best):
        strategy, w, prefill = blocks[int(kept[4, k])]
        b = int(kept[3, k])
        estimate = estimate_inference_run(model, system, strategy, w.model_copy(update={"batch": b}))
        top.append(ServingCandidate(rank, strategy, b, w.weights, estimate, prefill, float(-kept[0, k]),
                                    float(kept[5, k]), float(kept[1, k])))
    return InferenceSearchResult(tuple(top), points, feasible, int(kept.shape[1]))
