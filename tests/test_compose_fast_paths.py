"""The shortcuts the collective composer's array path takes for speed (issue 47: search throughput) give what
the plain computations they replace give, bit for bit: the candidates' times stacked with np.array
(`fastest_candidate._stacked`) as np.stack of np.broadcast_arrays stacks them; the two-tier test of a group inside one
dimension as the count over every dimension; and the skipped `* 1.0` of a candidate's latency
(`algorithms._candidate_costs`) as the full expression."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm import algorithms, fastest_candidate
from armillary.comm.one_dimension import one_dimension_each
from armillary.plan.placement import Placement
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system


def _bits(x: object) -> tuple[str, tuple[int, ...], bytes]:
    a = np.asarray(x)
    return a.dtype.str, a.shape, a.tobytes()


def test_stacked_is_stack_of_broadcast_arrays():
    rng = np.random.default_rng(1)
    same = [rng.random(7) for _ in range(3)]
    mixed = [rng.random(7), rng.random((2, 1)), 3.0]
    ints = [np.arange(7), rng.random(7)]  # one dtype differs: broadcast and stacked as before
    for times in (same, mixed, ints):
        assert _bits(fastest_candidate._stacked(times)) == _bits(np.stack(np.broadcast_arrays(*times)))


def test_two_tier_inside_one_dimension_is_the_count():
    rng = np.random.default_rng(2)
    spans = (rng.choice([1.0, 2.0, 8.0, np.nan], size=50), rng.choice([1.0, 4.0, np.nan], size=50))
    counted = sum(np.asarray(s) > 1 for s in spans)
    assert one_dimension_each(Placement(spans)) == (not np.any(counted > 1))
    one = (spans[0], np.ones(50))
    assert one_dimension_each(Placement(one))
    assert not one_dimension_each(Placement((np.array([2.0]), np.array([2.0]))))


@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                                Collective.ALL_TO_ALL])
def test_candidate_costs_with_and_without_the_unit_factors(op):
    """A latency scale of 1.0 given as an array (the full expression) and as the number 1.0 (the shortcut) cost
    every candidate alike, bit for bit."""
    net = load_system("dgx-a100", 64).network[1]
    n = np.array([1e3, 3.3e5, 7e6, 2.1e8, 5e9])
    p = np.array([2.0, 4.0, 8.0, 16.0, 2.0])
    short = algorithms._candidate_costs(op, n, p, net, 1.5e12, algorithms.ALG_AUTO, None, (), 1.0, False)
    full = algorithms._candidate_costs(op, n, p, net, 1.5e12, algorithms.ALG_AUTO, None, (), np.ones(5), False)
    for xs, ys in zip(short[:3], full[:3], strict=True):
        assert [_bits(x) for x in xs] == [_bits(y) for y in ys]
