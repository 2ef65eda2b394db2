"""Achieved fraction of a peak rate as a function of operation size: compute (GEMM FLOP) and networks
(message bytes)."""

from __future__ import annotations

import itertools

import numpy as np
from pydantic import Field, PrivateAttr, field_validator

from armillary.specs.base import Spec
from armillary.specs.quantity import Fraction


class EfficiencyCurve(Spec):
    """Achieved fraction of peak as a function of operation size (FLOP or bytes).

    Piecewise linear in log(size) between the points, constant beyond the ends. The same curve
    serves one estimate (a float) and a sweep (an array of sizes).
    """

    points: tuple[tuple[float, Fraction], ...] = Field(min_length=1)
    _log_sizes: np.ndarray = PrivateAttr()
    _efficiencies: np.ndarray = PrivateAttr()

    @field_validator("points")
    @classmethod
    def _ascending(cls, points: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        sizes = [p[0] for p in points]
        if any(s <= 0 for s in sizes) or sizes != sorted(sizes):
            raise ValueError("points must have positive sizes in ascending order: [[size, efficiency], ...]")
        return points

    def model_post_init(self, context: object, /) -> None:
        self._log_sizes = np.log([p[0] for p in self.points])
        self._efficiencies = np.array([p[1] for p in self.points])

    def __call__(self, size: np.ndarray | float) -> np.ndarray:
        return np.interp(np.log(np.maximum(size, 1.0)), self._log_sizes, self._efficiencies)

    def capped(self, ceiling: float) -> EfficiencyCurve:
        """This curve nowhere above `ceiling`: min(curve, ceiling) exactly, the crossings added as points."""
        points: list[tuple[float, float]] = []
        pairs = list(zip(self._log_sizes, self._efficiencies, strict=True))
        for (x0, y0), (x1, y1) in itertools.pairwise(pairs):
            points.append((x0, min(y0, ceiling)))
            if (y0 - ceiling) * (y1 - ceiling) < 0:  # the segment crosses the ceiling in between
                points.append((x0 + (ceiling - y0) / (y1 - y0) * (x1 - x0), ceiling))
        points.append((pairs[-1][0], min(pairs[-1][1], ceiling)))
        return EfficiencyCurve(points=tuple((float(np.exp(x)), y) for x, y in points))
