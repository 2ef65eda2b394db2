"""The fitting routines every calibration uses (network tiers in `comm.calibration`, device compute in
`calibrate.compute_fit`): one parameter at a time, through the cost model itself, so that a fitted file
reproduces its measurements with exactly the functions that price the workload.

- `bisect`: the value of a monotone parameter at which the model meets a measurement (an asymptotic
  efficiency, the bandwidth multiplier of one message, the efficiency of one GEMM);
- `golden_section`: the least-squares value of a parameter over several measurements (a latency, a launch
  overhead), from a coarse grid refined by golden-section search;
- `non_decreasing_ramp`: a per-size curve made physical (a larger operation never gets a smaller share of
  the peak, nor finishes sooner).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

_GOLDEN = (0.382, 0.618)  # 1 - 1/phi and 1/phi: the golden-section interior points (Kiefer 1953)


def bisect(too_low: Callable[[float], bool], lo: float, hi: float, iterations: int = 50,
           geometric: bool = False) -> tuple[float, float]:
    """The bracket [lo, hi] around the point where `too_low(x)` turns from True to False (x too low below
    it), halved `iterations` times; `geometric` halves in log space (for parameters spanning decades)."""
    for _ in range(iterations):
        mid = (lo * hi) ** 0.5 if geometric else (lo + hi) / 2
        lo, hi = (mid, hi) if too_low(mid) else (lo, mid)
    return lo, hi


def golden_section(loss: Callable[[float], float], grid: np.ndarray, iterations: int = 40) -> float:
    """The minimizer of `loss`: the best point of `grid`, refined between its neighbours by golden-section
    search (a unimodal loss near the grid optimum)."""
    k = int(np.argmin([loss(float(x)) for x in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    for _ in range(iterations):
        a, b = lo + _GOLDEN[0] * (hi - lo), lo + _GOLDEN[1] * (hi - lo)
        lo, hi = (lo, b) if loss(a) < loss(b) else (a, hi)
    return float((lo + hi) / 2)


def log_squared_error(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> float:
    """Sum of squared log ratios: the loss of every fit (relative errors, so that small and large
    operations weigh alike)."""
    return float(np.sum(np.log(np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float)) ** 2))


def non_decreasing_ramp(sizes: Sequence[float], values: Sequence[float]) -> list[float]:
    """`values` (a share of peak at each ascending size) made non-decreasing in size, and growing between
    neighbours by at most 1 + ln(S1/S0), which keeps S / value(S) non-decreasing under log-linear
    interpolation: a larger operation is never faster. Both are enforced from the largest size down, so
    that it keeps its measured value (a noisy mid-size point is raised, never the anchor lowered)."""
    ramp = list(np.minimum.accumulate(np.array(values, dtype=float)[::-1])[::-1])
    for i in range(len(ramp) - 1, 0, -1):
        floor = ramp[i] / (1 + 0.98 * np.log(sizes[i] / sizes[i - 1]))
        ramp[i - 1] = max(ramp[i - 1], float(floor))
    return [float(r) for r in ramp]
