"""The fullest / critical stage of a sweep (estimate/stages.py) against the elementwise choice it stands for:
np.where field by field, whichever points take a later stage (none, all, some), with fields shared by both
stages and NaN points. Issue 47's shortcuts must give the same value at every point."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from armillary.estimate.result import MemoryBreakdown
from armillary.estimate.stages import StageTime, critical_stage, fullest_stage

RNG = np.random.default_rng(47)


def _memory(scale: float, shared: np.ndarray) -> MemoryBreakdown:
    return MemoryBreakdown(RNG.random((3, 1)) * scale, RNG.random((1, 4)) * scale, 1.0 * scale, RNG.random((3, 4)),
                           0.0, shared, runtime=RNG.random((3, 4)) * scale)


def _reference(stages: list[tuple[MemoryBreakdown, MemoryBreakdown]], has_mid: np.ndarray) -> list[np.ndarray]:
    """Each field of the fullest stage's two tiers, chosen point by point in plain numpy."""
    best_total, best = stages[0][0].total, list(stages[0])
    for (hbm, t2), present in ((stages[1], has_mid), (stages[2], 1.0)):
        take = (present > 0) & (hbm.total > best_total)
        best = [MemoryBreakdown(*(np.where(take, getattr(new, f.name), getattr(old, f.name))
                                  for f in fields(MemoryBreakdown))) for new, old in zip((hbm, t2), best, strict=True)]
        best_total = np.where(take, hbm.total, best_total)
    return [np.broadcast_to(getattr(tier, f.name), (3, 4)) for tier in best for f in fields(MemoryBreakdown)]


@pytest.mark.parametrize("scales", [(1.0, 0.1, 0.2), (0.1, 0.2, 5.0), (1.0, 1.0, 1.0), (1.0, np.nan, 1.0)])
def test_the_fullest_stage_is_the_elementwise_choice(scales: tuple[float, float, float]) -> None:
    shared = RNG.random((1, 4))  # one array in every stage (the pipeline and TP buffers)
    stages = [(_memory(s, shared), _memory(2 * s, shared)) for s in scales]
    has_mid = np.array([[1.0], [0.0], [1.0]])
    got = fullest_stage(*stages, has_mid)
    values = [np.broadcast_to(getattr(tier, f.name), (3, 4)) for tier in got for f in fields(MemoryBreakdown)]
    for g, r in zip(values, _reference(stages, has_mid), strict=True):
        assert np.array_equal(g, r, equal_nan=True)


def test_the_fullest_stage_takes_a_whole_stage_every_point_takes() -> None:
    """Every point's last stage holds more: its breakdowns are returned as they are."""
    shared = RNG.random((1, 4))
    first, middle, last = ((_memory(s, shared), _memory(s, shared)) for s in (1.0, 0.5, 10.0))
    hbm, t2 = fullest_stage(first, middle, last, np.ones((3, 1)))
    assert hbm is last[0] and t2 is last[1]


def test_the_critical_stage_is_the_elementwise_choice() -> None:
    shared = RNG.random(4)
    times = [StageTime(compute=RNG.random((3, 1)) * s, recompute=shared, tp=RNG.random(4) * s) for s in (1.0, 0.3, 1.2)]
    totals = [t.total for t in times]
    got = critical_stage(*zip(totals, times, strict=True))
    best_total, best = totals[0], times[0]
    for total, t in zip(totals[1:], times[1:], strict=True):
        take = total > best_total
        best = StageTime(*(np.where(take, getattr(t, f.name), getattr(best, f.name)) for f in fields(StageTime)))
        best_total = np.where(take, total, best_total)
    for f in fields(StageTime):
        assert np.array_equal(np.broadcast_to(getattr(got, f.name), (3, 4)),
                              np.broadcast_to(getattr(best, f.name), (3, 4)))
    # no point takes the slower-free middle stage: the first stays whole
    assert critical_stage((totals[0], times[0]), (0.0 * totals[0], times[1])) is times[0]
