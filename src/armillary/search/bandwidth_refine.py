"""The full estimator as the bandwidth objective: a derivative-free pattern search that starts from the
convex (LIBRA-model) optimum and moves bandwidth between dimensions while the estimator's step time falls,
so that algorithm choice, pipelining across dimensions and overlap with compute move with the bandwidths
(the LIBRA model holds them fixed). Moves keep the total and every linear constraint, equalities included
(compass search on the constraint set, Kolda, Lewis & Torczon 2003, §3). With `weights` the score is the
perf-per-cost product step x (fixed + weights . b) instead of the step (`network_bandwidth.optimize`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.estimate.result import StepEstimate
from armillary.estimate.run import estimate_run
from armillary.search.network_bandwidth import BandwidthConstraints
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training


@dataclass(frozen=True)
class Refined:
    bandwidth: np.ndarray
    step_time_s: float
    start_step_time_s: float  # the estimator's step at the starting bandwidths
    evaluations: int
    moved: bool = False  # the search left the starting bandwidths


def with_bandwidths(system: System, bandwidth: np.ndarray) -> System:
    """The system with each dimension's per-device bandwidth replaced."""
    dims = tuple(d.model_copy(update={"bandwidth": float(b)}) for d, b in zip(system.network, bandwidth, strict=True))
    return system.model_copy(update={"network": dims})


def estimator_step(model: Model, system: System, strategy: Strategy, workload: Training,
                   bandwidth: np.ndarray) -> float:
    """The estimator's step seconds with these per-dimension bandwidths."""
    result = estimate_run(model, with_bandwidths(system, bandwidth), strategy, workload)
    assert isinstance(result, StepEstimate)
    return float(result.step_time_s)


def refine(model: Model, system: System, strategy: Strategy, workload: Training, start: np.ndarray,
           cons: BandwidthConstraints, step: float = 0.1, tol: float = 1e-3, budget: int = 400,
           weights: np.ndarray | None = None, fixed: float = 0.0) -> Refined:
    """Move a fraction `step` of one dimension's bandwidth to another while the score falls; halve the
    fraction when no move helps, until it is below `tol` or `budget` estimates are spent."""
    a, c = cons.rows()
    e_rows, e = cons.equalities()
    b = np.asarray(start, dtype=float).copy()

    def score(t: float, x: np.ndarray) -> float:
        return t if weights is None else t * (fixed + float(weights @ x))

    t_best = first = estimator_step(model, system, strategy, workload, b)
    best = score(t_best, b)
    evaluations = 1
    n = len(b)
    while step >= tol and evaluations < budget:
        improved = False
        for i in range(n):
            for j in range(n):
                if i == j or evaluations >= budget:
                    continue
                trial = b.copy()
                moved = step * trial[j]
                trial[j] -= moved
                trial[i] += moved
                if np.any(a @ trial > c + 1e-9 * np.abs(c) + 1e-9) or np.any(
                        np.abs(e_rows @ trial - e) > 1e-9 * np.abs(e) + 1e-9):
                    continue
                t = estimator_step(model, system, strategy, workload, trial)
                evaluations += 1
                if score(t, trial) < best * (1 - 1e-9):
                    b, t_best, best, improved = trial, t, score(t, trial), True
        if not improved:
            step /= 2
    return Refined(b, t_best, first, evaluations, bool(np.any(b != np.asarray(start))))
