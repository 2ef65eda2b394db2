"""Issue 47 (search speed): the shortcuts give the same values bit for bit. `comm.overlap.at_least_zero` (numpy's
maximum against a buffer of zeros, written over its argument) is `numerics.maximum(0.0, x)`; `search.run._best_of`
finds a few best values by passes rather than partitions, with the same points as a sort of every value."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm.overlap import ZEROS_FROM, at_least_zero, exposed_fully, zeros_of
from armillary.estimate.data_parallel import _stacked
from armillary.numerics import maximum
from armillary.plan.placement import Placement
from armillary.search.run import FEW_BEST, _best_of


def _special(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values with zeros of both signs, infinities and NaNs among them."""
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 3)
    for value, share in ((0.0, 0.1), (-0.0, 0.1), (np.inf, 0.03), (-np.inf, 0.03), (np.nan, 0.03)):
        x[rng.random(shape) < share] = value
    return x


def _bits(x: object) -> bytes:
    return np.ascontiguousarray(x, dtype=float).tobytes()


def test_at_least_zero_is_numpys_maximum_with_zero_bit_for_bit():
    rng = np.random.default_rng(47)
    shapes = [(3,), (ZEROS_FROM - 1,), (ZEROS_FROM,), (2, 2, 2, 2, 2, 3, 4, 4, 48), (73728,), (4, 1, 7000)]
    for shape in shapes:
        for _ in range(5):
            x = _special(rng, shape)
            want = np.maximum(0.0, x)
            got = at_least_zero(x.copy())
            assert got.shape == want.shape and _bits(got) == _bits(want)
    for number in (0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan):  # one configuration: numerics.maximum's own path
        assert _bits(at_least_zero(number)) == _bits(maximum(0.0, number))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf - inf)
def test_exposed_fully_over_a_sweep_is_the_plain_expression():
    rng = np.random.default_rng(7)
    for comm_shape, hidden_shape in (((2, 1, 1, 4, 48), (2, 3, 4, 1, 48)), ((1, 2, 1, 1, 1, 4, 48), (3, 1, 4, 48)),
                                     ((5,), (5,)), ((1,), (4096,))):
        comm, hidden = _special(rng, comm_shape), _special(rng, hidden_shape)
        assert _bits(exposed_fully(comm, hidden)) == _bits(np.maximum(0.0, comm - hidden))


def test_the_zeros_buffer_is_read_only_and_grows():
    small, large = zeros_of((2, 3)), zeros_of((5, 10000))
    assert not small.flags.writeable and not large.flags.writeable
    assert small.shape == (2, 3) and large.shape == (5, 10000) and not large.any() and not np.signbit(large).any()
    with pytest.raises(ValueError):
        large[0, 0] = 1.0


def _reference(positions: np.ndarray, values: np.ndarray, k: int, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every finite value sorted by (value, index); the first of each distinct value; the first k."""
    finite = np.isfinite(values)
    positions, values = positions[finite], values[finite]
    by = np.lexsort((index[positions], values))
    order, ordered = positions[by], values[by]
    first = np.ones(len(order), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return order[first][:k], ordered[first][:k]


@pytest.mark.parametrize("k", [1, 2, 3, 10, FEW_BEST, FEW_BEST + 1, 40])
def test_the_few_best_found_by_passes_are_those_of_a_sort(k):
    rng = np.random.default_rng(k)
    for _ in range(100):
        n = int(rng.integers(1, 400))
        values = rng.choice(np.concatenate((rng.random(int(rng.integers(1, 30))), [0.0, -0.0])), n)  # many ties
        values[rng.random(n) < 0.05] = np.nan
        values[rng.random(n) < 0.05] = np.inf
        positions = np.sort(rng.choice(10 * n, n, replace=False))
        index = rng.permutation(10 * n)  # the points' indices need not follow their positions
        want = _reference(positions, values, k, index)
        got = _best_of(positions, values, k, None, lambda at, i=index: i[at])
        assert np.array_equal(got[0], want[0]) and _bits(got[1]) == _bits(want[1])


def test_paired_messages_are_the_two_stacked():
    rng = np.random.default_rng(3)
    group = Placement((rng.random((1, 1, 48)), rng.random((1, 1, 48))))
    for first, second in ((rng.random((2, 1, 48)), rng.random((4, 1))), (rng.random(48), 2.5),
                          (np.arange(6).reshape(2, 3), np.arange(3))):
        got = _stacked(first, second, group)
        want = np.stack(np.broadcast_arrays(first, second))
        assert got.dtype == want.dtype and np.array_equal(got.reshape(want.shape), want)
        assert got.shape[1:] == (1,) * (got.ndim - want.ndim) + want.shape[1:]
