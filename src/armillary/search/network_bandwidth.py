"""Per-dimension network bandwidth optimization (the role of LIBRA, Won et al., ISPASS'24).

Model (LIBRA §IV): each collective of a step sends `bytes[j, i]` per device on dimension i (its hierarchical
decomposition, `comm.phase_net.phase_message`), taking bytes / (efficiency x bandwidth_i) there; a collective
takes the max over its dimensions when the dimensions are pipelined, the sum when not; the step is the
compute time plus the collectives (LIBRA holds the strategy and the overlap fixed).

Each dimension's time is convex in its bandwidth (b -> a / b), a max or sum of convex functions is convex,
and the constraints are linear (LIBRA's forms, inputs/constraints/multiple_constraints.py: the total as <= or
==, a dimension fixed, sums of chosen dimensions as <= or ==, b_i >= b_j for any pairs, a budget on the
cost or the power): one convex program. `bandwidth_solver` eliminates the equalities and runs the
central-cut ellipsoid method (Bland, Goldfarb & Todd 1981), numpy only: a few hundred cuts for 3-5
dimensions. Time x cost and time x power are
not convex; they are minimized by a 1-D search over the budget of the time-optimal points (the time vs cost
curve that `network-optimize` plots).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from armillary.search.bandwidth_solver import GOLDEN as GOLDEN_RATIO
from armillary.search.bandwidth_solver import minimize


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
class DimensionSum:
    """The bandwidths of some dimensions add up to `value` (`equal`) or to at most `value` (LIBRA's
    `bw[2] + bw[3] == 200`, inputs/constraints/multiple_constraints.py)."""

    dims: tuple[int, ...]
    value: float
    equal: bool = False


@dataclass(frozen=True)
class BandwidthConstraints:
    """Linear constraints on the per-device bandwidths b (bytes/s per dimension). A dimension whose lower and
    upper bounds are equal is fixed at that bandwidth (an equality, not a +-epsilon box)."""

    lower: np.ndarray
    upper: np.ndarray
    total: float | None = None  # sum of b <= total (== total with total_equal)
    ordered: bool = False  # b_0 >= b_1 >= ... (inner dimensions at least as fast as outer)
    cost_per_bw: np.ndarray | None = None  # $ per (byte/s) of each dimension, per device
    budget: float | None = None  # cost . b <= budget
    power_per_bw: np.ndarray | None = None  # W per (byte/s)
    power_budget: float | None = None  # power . b <= power_budget
    sums: tuple[DimensionSum, ...] = ()
    order: tuple[tuple[int, int], ...] = ()  # (i, j): b_i >= b_j (a partial order; `ordered` is the chain)
    total_equal: bool = False

    def check(self) -> None:
        """Raise ValueError naming what is wrong with the bounds, sums or order."""
        n = len(self.lower)
        if len(self.upper) != n or np.any(self.lower <= 0) or np.any(self.upper < self.lower):
            raise ValueError("bandwidth bounds must satisfy 0 < lower <= upper, one pair per dimension")
        for s in self.sums:
            if not s.dims or len(set(s.dims)) != len(s.dims) or not all(0 <= i < n for i in s.dims):
                raise ValueError(f"a sum of dimensions needs distinct dimensions 0..{n - 1}, not {list(s.dims)}")
        for i, j in self.order:
            if i == j or not (0 <= i < n and 0 <= j < n):
                raise ValueError(f"an order b_i >= b_j needs two different dimensions 0..{n - 1}, not ({i}, {j})")

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """A, c with A b <= c (bounds, the total, orders, inequality sums, budgets)."""
        n = len(self.lower)
        a = [-np.eye(n), np.eye(n)]
        c = [-self.lower, self.upper]
        if self.total is not None and not self.total_equal:
            a.append(np.ones((1, n)))
            c.append(np.array([self.total]))
        pairs = [*((i, i + 1) for i in range(n - 1) if self.ordered), *self.order]
        for i, j in pairs:  # b_j - b_i <= 0
            row = np.zeros(n)
            row[j], row[i] = 1.0, -1.0
            a.append(row[None, :])
            c.append(np.zeros(1))
        for s in self.sums:
            if not s.equal:
                a.append(_indicator(s.dims, n)[None, :])
                c.append(np.array([s.value]))
        if self.budget is not None and self.cost_per_bw is not None:
            a.append(self.cost_per_bw[None, :])
            c.append(np.array([self.budget]))
        if self.power_budget is not None and self.power_per_bw is not None:
            a.append(self.power_per_bw[None, :])
            c.append(np.array([self.power_budget]))
        return np.vstack(a), np.concatenate(c)

    def equalities(self) -> tuple[np.ndarray, np.ndarray]:
        """E, e with E b = e: fixed dimensions (equal bounds), equal sums, an equal total."""
        n = len(self.lower)
        rows = [(_indicator((i,), n), float(self.lower[i])) for i in range(n) if self.lower[i] == self.upper[i]]
        rows += [(_indicator(s.dims, n), s.value) for s in self.sums if s.equal]
        if self.total is not None and self.total_equal:
            rows.append((np.ones(n), self.total))
        if not rows:
            return np.zeros((0, n)), np.zeros(0)
        return np.array([r for r, _ in rows]), np.array([v for _, v in rows])


def _indicator(dims: tuple[int, ...], n: int) -> np.ndarray:
    row = np.zeros(n)
    row[list(dims)] = 1.0
    return row


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
    """The bandwidths of least step time under `cons` (the convex program, `bandwidth_solver.minimize`:
    equalities eliminated, then the ellipsoid method)."""
    cons.check()
    a, c = cons.rows()
    e_rows, e = cons.equalities()
    middle = (cons.lower + cons.upper) / 2
    radius = float(np.linalg.norm(cons.upper - cons.lower)) / 2
    found = minimize(lambda b: float(step_time(work, b)), lambda b: _subgradient(work, b), a, c, e_rows, e,
                     middle, radius, tol, max_iter)
    return _optimum(work, cons, found.x, found.iterations)


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
             objective: BandwidthObjective = BandwidthObjective.TIME, points: int = 48,
             fixed: float = 0.0) -> BandwidthOptimum:
    """The best bandwidths for `objective`: least time, or least time x (fixed + cost . b) / time x
    (fixed + power . b).

    The product is LIBRA's performance-per-cost objective (astra-sim/libra src/model/model.py,
    SolverObjective.PerfPerCostOpt minimizes e2e_time x network_cost); `fixed` is what each device costs
    (draws) besides its network, the NPU term of LIBRA's system perf-per-cost (its cost model's
    CostElement.Npu; README: "network/system performance-per-cost"). With fixed = 0 the network alone is
    priced, and a product with a cheap, slow network wins however slow the step gets; with the device's
    price the network is bought while it saves more device time than it costs. Minimized over the
    time-optimal points of a range of cost (power) levels (the product's optimum is one of them), then a
    golden-section search in log level between the best level's neighbours."""
    if objective is BandwidthObjective.TIME:
        return minimize_time(work, cons)
    if fixed < 0 or not np.isfinite(fixed):
        raise ValueError(f"the cost of a device besides its network must be finite and >= 0, not {fixed}")
    power = objective is BandwidthObjective.TIME_POWER
    weights = cons.power_per_bw if power else cons.cost_per_bw
    if weights is None:
        raise ValueError(f"objective {objective.value} needs a {'power' if power else 'cost'} per bandwidth "
                         "for every dimension")
    low = float(weights @ cons.lower)
    cap = cons.power_budget if power else cons.budget
    high = float(weights @ cons.upper) if cap is None else cap
    levels = np.geomspace(low * (1 + 1e-9), max(high, low * (1 + 1e-6)), points)

    def at(level: float) -> tuple[float, BandwidthOptimum | None]:
        try:
            o = minimize_time(work, replace(cons, power_budget=level) if power else replace(cons, budget=level))
        except ValueError:
            return np.inf, None
        return o.step_time_s * (fixed + float(weights @ o.bandwidth)), o

    scanned = [at(float(level)) for level in levels]
    k = int(np.argmin([v for v, _ in scanned]))
    best = scanned[k]
    if best[1] is None:
        raise ValueError("the constraints leave no feasible bandwidth")
    lo, hi = np.log(levels[max(k - 1, 0)]), np.log(levels[min(k + 1, len(levels) - 1)])
    for _ in range(16):  # the product along the frontier, assumed unimodal between the neighbours
        p, q = hi - GOLDEN_RATIO * (hi - lo), lo + GOLDEN_RATIO * (hi - lo)
        vp, vq = at(float(np.exp(p))), at(float(np.exp(q)))
        best = min((best, vp, vq), key=lambda r: r[0])
        lo, hi = (lo, q) if vp[0] <= vq[0] else (p, hi)
    assert best[1] is not None
    return best[1]
