"""Minimize a convex function of the per-dimension bandwidths b under A b <= c and E b = e.

Equalities (a fixed dimension, a sum of dimensions held at a value: LIBRA's `bw[0] == 500`,
`bw[2] + bw[3] == 200`, `quicksum(bw) == 1000`, inputs/constraints/multiple_constraints.py) leave a
feasible set of zero volume, where the ellipsoid method cannot start. They are eliminated instead:
b = x0 + N z with x0 a particular solution and N an orthonormal basis of E's null space (SVD), and the
inequalities become (A N) z <= c - A x0 (Boyd & Vandenberghe, Convex Optimization, §4.2.4, eliminating
equality constraints). The reduced problem is solved by the central-cut ellipsoid method (Bland, Goldfarb &
Todd 1981) in 2 or more free directions, by golden-section search on its feasible interval in one, and by
checking the single point in none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Objective = Callable[[np.ndarray], float]
Subgradient = Callable[[np.ndarray], np.ndarray]
GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class Solution:
    x: np.ndarray
    value: float
    iterations: int


def _null_space(e_rows: np.ndarray, rhs: np.ndarray, n: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(x0, N): a solution of E x = e and an orthonormal basis of E's null space; raises when E x = e has none."""
    if len(e_rows) == 0:
        return np.zeros(n), np.eye(n)
    x0 = np.linalg.lstsq(e_rows, rhs, rcond=None)[0]
    if np.any(np.abs(e_rows @ x0 - rhs) > 1e-9 * max(scale, float(np.max(np.abs(rhs))))):
        raise ValueError("the equality constraints contradict each other")
    _, s, vt = np.linalg.svd(e_rows)
    rank = int(np.sum(s > 1e-12 * s[0])) if len(s) else 0
    return x0, vt[rank:].T


def minimize(f: Objective, grad: Subgradient, a: np.ndarray, c: np.ndarray, e_rows: np.ndarray, e: np.ndarray,
             middle: np.ndarray, radius: float, tol: float = 1e-9, max_iter: int = 5000) -> Solution:
    """The least f(x) with a x <= c and e_rows x = e; every feasible x lies within `radius` of `middle`."""
    n = len(middle)
    scale = float(np.max(np.abs(middle))) + radius
    x0, basis = _null_space(e_rows, e, n, scale)
    ar, cr = a @ basis, c - a @ x0
    slack = 1e-9 * (np.abs(c) + scale * np.abs(a).sum(axis=1))
    free = np.linalg.norm(ar, axis=1) > 1e-12 * np.maximum(np.linalg.norm(a, axis=1), 1e-300)
    if np.any(~free & (cr < -slack)):
        raise ValueError("the constraints leave no feasible bandwidth")
    ar, cr = ar[free], cr[free]
    k = basis.shape[1]
    if k == 0:
        return Solution(x0, f(x0), 0)
    if k == 1:
        return _golden(f, x0, basis[:, 0], ar[:, 0], cr)
    return _ellipsoid(f, grad, x0, basis, ar, cr, basis.T @ (middle - x0), radius, scale, tol, max_iter)


def _golden(f: Objective, x0: np.ndarray, d: np.ndarray, a: np.ndarray, c: np.ndarray,
            iterations: int = 120) -> Solution:
    """A convex f along x0 + z d, z in the interval a z <= c."""
    up = [ci / ai for ai, ci in zip(a, c, strict=True) if ai > 0]
    down = [ci / ai for ai, ci in zip(a, c, strict=True) if ai < 0]
    lo, hi = max(down, default=-np.inf), min(up, default=np.inf)
    if not np.isfinite(lo) or not np.isfinite(hi) or lo > hi + 1e-12 * max(abs(lo), abs(hi), 1.0):
        raise ValueError("the constraints leave no feasible bandwidth")
    hi = max(hi, lo)
    g = lambda z: f(x0 + z * d)  # noqa: E731
    p, q = hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo)
    fp, fq = g(p), g(q)
    for _ in range(iterations):
        if fp <= fq:
            hi, q, fq = q, p, fp
            p = hi - GOLDEN * (hi - lo)
            fp = g(p)
        else:
            lo, p, fp = p, q, fq
            q = lo + GOLDEN * (hi - lo)
            fq = g(q)
    candidates = [lo, hi, (lo + hi) / 2]
    best = min(candidates, key=g)
    return Solution(x0 + best * d, g(best), iterations)


def _ellipsoid(f: Objective, grad: Subgradient, x0: np.ndarray, basis: np.ndarray, a: np.ndarray, c: np.ndarray,
               center: np.ndarray, radius: float, scale: float, tol: float, max_iter: int) -> Solution:
    """Central-cut ellipsoid method over z (x = x0 + basis z): a violated constraint's row cuts, else the
    objective's subgradient; the best feasible centre is kept."""
    k = len(center)
    shape = np.eye(k) * (radius * 1.01 + 1e-12) ** 2
    norms = np.maximum(np.linalg.norm(a, axis=1), 1e-300)
    best, best_f, it = None, np.inf, 0
    for it in range(max_iter):  # noqa: B007
        violated = (a @ center - c) / norms  # distance outside each constraint
        j = int(np.argmax(violated)) if len(c) else 0
        if len(c) and violated[j] > 1e-12 * scale:
            g = a[j]
        else:
            x = x0 + basis @ center
            value = f(x)
            if value < best_f:
                best, best_f = x, value
            g = basis.T @ grad(x)
        pg = shape @ g
        gpg = float(g @ pg)
        if gpg <= 0 or np.sqrt(gpg) / np.linalg.norm(g) < tol * scale:  # the ellipsoid's width along g
            break
        step = pg / np.sqrt(gpg)
        center = center - step / (k + 1)
        shape = k * k / (k * k - 1.0) * (shape - 2.0 / (k + 1) * np.outer(step, step))
    if best is None:
        raise ValueError("the constraints leave no feasible bandwidth")
    return Solution(best, best_f, it + 1)
