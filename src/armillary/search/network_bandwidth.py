"""Per-dimension network bandwidth optimization (the role of LIBRA, Won et al., ISPASS'24).

Model (LIBRA §IV): each collective of a step sends `bytes[j, i]` per device on dimension i (its hierarchical
decomposition, `comm.compose.phase_message`), taking bytes / (efficiency x bandwidth_i) there; a collective
takes the max over its dimensions when the dimensions are pipelined, the sum when not; the step is the
compute time plus the collectives (LIBRA holds the strategy and the overlap fixed).

Each dimension's time is convex in its bandwidth (b -> a / b), a max or sum of convex functions is convex,
and the constraints (total bandwidth, bounds, ordering b_0 >= b_1 >= ..., a budget on the cost, linear in
the bandwidths) are linear: one convex program. It is solved with the central-cut ellipsoid method (Bland,
Goldfarb & Todd 1981), numpy only: a few hundred cuts for 3-5 dimensions. Time x cost and time x power are
not convex; they are minimized by a 1-D search over the budget of the time-optimal points (the time vs cost
curve that `network-optimize` plots).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np


class BandwidthObjective(StrEnum):
    TIME = "time"
    TIME_COST = "time_cost"
    TIME_POWER = "time_power"


@dataclass(frozen=True)
class BandwidthWorkload:
    """A step as the bandwidth optimizer sees it: compute seconds and, per collective (rows, already times
    its calls per step), the bytes one device sends on each dimension (columns) divided by the dimension's
    achievable fraction of its bandwidth."""

    compute_s: float
    traffic: np.ndarray  # (collectives, dimensions), bytes
    pipelined: bool = True
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class BandwidthConstraints:
    """Linear constraints on the per-device bandwidths b (bytes/s per dimension)."""

    lower: np.ndarray
    upper: np.ndarray
    total: float | None = None  # sum of b <= total
    ordered: bool = False  # b_0 >= b_1 >= ... (inner dimensions at least as fast as outer)
    cost_per_bw: np.ndarray | None = None  # $ per (byte/s) of each dimension, per device
    budget: float | None = None  # cost . b <= budget
    power_per_bw: np.ndarray | None = None  # W per (byte/s)
    power_budget: float | None = None  # power . b <= power_budget

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """A, c with A b <= c."""
        n = len(self.lower)
        a = [-np.eye(n), np.eye(n)]
        c = [-self.lower, self.upper]
        if self.total is not None:
            a.append(np.ones((1, n)))
            c.append(np.array([self.total]))
        if self.ordered and n > 1:
            a.append(np.eye(n, k=1)[:-1] - np.eye(n)[:-1])  # b_(i+1) - b_i <= 0
            c.append(np.zeros(n - 1))
        if self.budget is not None and self.cost_per_bw is not None:
            a.append(self.cost_per_bw[None, :])
            c.append(np.array([self.budget]))
        if self.power_budget is not None and self.power_per_bw is not None:
            a.append(self.power_per_bw[None, :])
            c.append(np.array([self.power_budget]))
        return np.vstack(a), np.concatenate(c)


@dataclass(frozen=True)
class BandwidthOptimum:
    bandwidth: np.ndarray  # bytes/s per dimension
    step_time_s: float
    cost: float  # cost . b (0 without a cost model)
    power: float
    sensitivity: np.ndarray  # d step time / d b_i (s per byte/s), at the optimum
    iterations: int


def step_time(work: BandwidthWorkload, bandwidth: np.ndarray) -> np.ndarray:
    """Step seconds for bandwidths `bandwidth` (..., dimensions): compute plus each collective's max (or
    sum) over dimensions of bytes / bandwidth (LIBRA §IV-B). Broadcasts over leading axes."""
    b = np.asarray(bandwidth, dtype=float)
    per_dim = work.traffic / b[..., None, :]  # (..., collectives, dimensions)
    comm = per_dim.max(axis=-1) if work.pipelined else per_dim.sum(axis=-1)
    return work.compute_s + comm.sum(axis=-1)


def _subgradient(work: BandwidthWorkload, b: np.ndarray) -> np.ndarray:
    """d step time / d b: -bytes / b^2 of each collective's bottleneck dimension (or of all, unpipelined)."""
    per_dim = work.traffic / b
    if work.pipelined:
        mask = np.zeros_like(per_dim)
        mask[np.arange(per_dim.shape[0]), per_dim.argmax(axis=1)] = 1.0
        return -(mask * work.traffic).sum(axis=0) / b**2
    return -work.traffic.sum(axis=0) / b**2


def minimize_time(work: BandwidthWorkload, cons: BandwidthConstraints, tol: float = 1e-9,
                  max_iter: int = 5000) -> BandwidthOptimum:
    """The bandwidths of least step time under `cons` (ellipsoid method on the convex program)."""
    a, c = cons.rows()
    n = len(cons.lower)
    if np.any(cons.lower <= 0) or np.any(cons.upper < cons.lower):
        raise ValueError("bandwidth bounds must satisfy 0 < lower <= upper")
    if n == 1:  # time falls with bandwidth: the largest feasible
        b = np.array([min(c[k] / a[k, 0] for k in range(len(c)) if a[k, 0] > 0)])
        if np.any(a @ b > c * (1 + 1e-12) + 1e-12):
            raise ValueError("the constraints leave no feasible bandwidth")
        return _optimum(work, cons, b, 0)
    center = (cons.lower + cons.upper) / 2
    radius = float(np.linalg.norm(cons.upper - cons.lower)) / 2 * 1.01 + 1e-12
    shape = np.eye(n) * radius**2
    best, best_t = None, np.inf
    scale = float(np.max(cons.upper))
    norms = np.maximum(np.linalg.norm(a, axis=1), 1e-300)
    it = 0
    for it in range(max_iter):  # noqa: B007
        violated = (a @ center - c) / norms  # distance outside each constraint, bytes/s
        k = int(np.argmax(violated))
        if violated[k] > 1e-12 * scale:
            g = a[k]
        else:
            t = float(step_time(work, center))
            if t < best_t:
                best, best_t = center.copy(), t
            g = _subgradient(work, center)
        pg = shape @ g
        gpg = float(g @ pg)
        if gpg <= 0 or np.sqrt(gpg) / np.linalg.norm(g) < tol * scale:  # the ellipsoid's width along g
            break
        step = pg / np.sqrt(gpg)
        center = center - step / (n + 1)
        shape = n * n / (n * n - 1.0) * (shape - 2.0 / (n + 1) * np.outer(step, step))
    if best is None:
        raise ValueError("the constraints leave no feasible bandwidth")
    return _optimum(work, cons, best, it + 1)


def _optimum(work: BandwidthWorkload, cons: BandwidthConstraints, b: np.ndarray, iterations: int) -> BandwidthOptimum:
    cost = float(cons.cost_per_bw @ b) if cons.cost_per_bw is not None else 0.0
    power = float(cons.power_per_bw @ b) if cons.power_per_bw is not None else 0.0
    return BandwidthOptimum(b, float(step_time(work, b)), cost, power, _subgradient(work, b), iterations)


def time_cost_curve(work: BandwidthWorkload, cons: BandwidthConstraints, budgets: np.ndarray,
                    ) -> tuple[BandwidthOptimum, ...]:
    """The time-optimal bandwidths at each budget (needs `cons.cost_per_bw`)."""
    if cons.cost_per_bw is None:
        raise ValueError("a time vs cost curve needs a cost per bandwidth for every dimension")
    out = []
    for budget in budgets:
        try:
            out.append(minimize_time(work, replace(cons, budget=float(budget))))
        except ValueError:
            continue  # below the cheapest feasible point
    return tuple(out)


def optimize(work: BandwidthWorkload, cons: BandwidthConstraints,
             objective: BandwidthObjective = BandwidthObjective.TIME, points: int = 48) -> BandwidthOptimum:
    """The best bandwidths for `objective`: least time, or least time x cost / time x power over the
    time-optimal points of a range of cost (power) levels, from the cheapest feasible point to the budget
    or the bounds."""
    if objective is BandwidthObjective.TIME:
        return minimize_time(work, cons)
    power = objective is BandwidthObjective.TIME_POWER
    weights = cons.power_per_bw if power else cons.cost_per_bw
    if weights is None:
        raise ValueError(f"objective {objective.value} needs a {'power' if power else 'cost'} per bandwidth "
                         "for every dimension")
    low = float(weights @ cons.lower)
    cap = cons.power_budget if power else cons.budget
    high = float(weights @ cons.upper) if cap is None else cap
    best: BandwidthOptimum | None = None
    for level in np.geomspace(low * (1 + 1e-9), max(high, low * (1 + 1e-6)), points):
        try:
            level_cons = replace(cons, power_budget=float(level)) if power else replace(cons, budget=float(level))
            o = minimize_time(work, level_cons)
        except ValueError:
            continue
        if best is None or o.step_time_s * float(weights @ o.bandwidth) < best.step_time_s * float(
                weights @ best.bandwidth):
            best = o
    if best is None:
        raise ValueError("the constraints leave no feasible bandwidth")
    return best
