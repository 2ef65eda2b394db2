"""Achieved fraction of a peak rate as a function of operation size: compute (GEMM FLOP) and networks
(message bytes)."""

from __future__ import annotations

import bisect
import itertools
from typing import overload

import numpy as np
from pydantic import Field, PrivateAttr, field_validator

from armillary.specs.base import Spec
from armillary.specs.quantity import Fraction

# an efficiency curve as plain floats: (log sizes, efficiencies, each segment's slope)
CurveTable = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
_ONE_SIZE = frozenset((float, int, np.float64))  # the exact types of one size (not a sweep)


class EfficiencyCurve(Spec):
    """Achieved fraction of peak as a function of operation size (FLOP or bytes).

    Piecewise linear in log(size) between the points, constant beyond the ends. The same curve
    serves one estimate (a float) and a sweep (an array of sizes).
    """

    points: tuple[tuple[float, Fraction], ...] = Field(min_length=1)
    _log_sizes: np.ndarray = PrivateAttr()
    _efficiencies: np.ndarray = PrivateAttr()
    # the points as Python floats with each segment's slope, for one size at a time (`interpolate`)
    _table: CurveTable = PrivateAttr()

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
        xs, ys = tuple(self._log_sizes.tolist()), tuple(self._efficiencies.tolist())
        self._table = xs, ys, tuple((y1 - y0) / (x1 - x0) for (x0, x1), (y0, y1) in
                                    zip(itertools.pairwise(xs), itertools.pairwise(ys), strict=True))

    @overload
    def __call__(self, size: np.ndarray) -> np.ndarray: ...

    @overload
    def __call__(self, size: float) -> float: ...

    def __call__(self, size: np.ndarray | float) -> np.ndarray | float:
        if type(size) in _ONE_SIZE:  # one size: `at`, the same numbers without numpy's overhead
            return self.at(float(np.log(max(size, 1.0))))
        return np.interp(np.log(np.maximum(size, 1.0)), self._log_sizes, self._efficiencies)

    def at(self, log_size: float) -> float:
        """The curve at one log(size) (`interpolate`)."""
        return interpolate(self._table, log_size)

    @property
    def table(self) -> CurveTable:
        """(log sizes, efficiencies, slopes) as plain floats, for `interpolate` (a pydantic private attribute
        costs a microsecond to read: a caller evaluating many sizes reads it once)."""
        return self._table

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


def interpolate(table: CurveTable, log_size: float) -> float:
    """An efficiency curve (`EfficiencyCurve.table`) at one log(size): np.interp's arithmetic on plain floats
    (numpy/_core/src/multiarray/compiled_base.c `arr_interp`: the end values outside the points, a point's own
    value on it, else slope * (x - x_j) + y_j), so one size and a sweep agree to the bit."""
    xs, ys, slopes = table
    if log_size < xs[0]:
        return ys[0]
    if log_size >= xs[-1]:
        return ys[-1]
    if log_size != log_size:  # NaN
        return log_size
    j = bisect.bisect_right(xs, log_size) - 1  # xs[j] <= log_size < xs[j + 1]
    if xs[j] == log_size:
        return ys[j]
    return slopes[j] * (log_size - xs[j]) + ys[j]
