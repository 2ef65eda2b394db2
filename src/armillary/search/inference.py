"""Inference objective: the serving configuration (tp, pp, batch, weight precision) with the most output
tokens per second and device whose time per output token (and, optionally, time to first token) stays
within a limit. Points are estimated one by one (`estimate_inference`), a few milliseconds each."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pydantic import Field, PositiveFloat, PositiveInt

from armillary.errors import SpecError
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.run import estimate_inference_run
from armillary.plan import rules
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
    weights: tuple[StoredPrecision | None, ...] = (None,)
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


def search_inference(model: Model, system: System, workload: Inference, base: Strategy, space: InferenceSpace,
                     top_k: int = 10) -> InferenceSearchResult:
    """Rank the points of `space` that fit and meet the limits by output tokens/s per device (ties: lower
    TPOT, then enumeration order)."""
    tps = space.tp or default_tp(system.devices_per_node, system.devices)
    points = feasible = 0
    kept: list[tuple[float, float, int, ServingCandidate]] = []
    for n, (tp, pp, batch, weights) in enumerate(itertools.product(tps, space.pp, space.batch, space.weights)):
        points += 1
        if not (rules.replica_fits(tp, pp, system.devices).ok and rules.tp_divides_heads(tp, model.heads).ok):
            continue
        strategy = base.model_copy(update={"tp": tp, "pp": pp, "dp": None})
        w = workload.model_copy(update={"batch": batch, "weights": weights})
        try:
            r = estimate_inference_run(model, system, strategy, w)
        except SpecError:
            continue
        if not r.feasible:
            continue
        feasible += 1
        if r.tpot_s > space.tpot_limit_s or (space.ttft_limit_s is not None and r.ttft_s > space.ttft_limit_s):
            continue
        kept.append((-float(r.output_tokens_per_s_per_device), float(r.tpot_s), n,
                     ServingCandidate(0, strategy, batch, weights, r)))
    kept.sort(key=lambda k: k[:3])
    top = tuple(ServingCandidate(rank, c.strategy, c.batch, c.weights, c.estimate)
                for rank, (*_, c) in enumerate(kept[:top_k]))
    return InferenceSearchResult(top, points, feasible, len(kept))
