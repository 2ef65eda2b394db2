"""A sweep's passes over a whole block written over their temporaries (`estimate.result.over`, issue 47): the same
operands in the same order, so the same values bit for bit as the plain expressions, with a new array only where
the temporary has not the result's shape; one configuration's numbers stay plain numbers."""

from __future__ import annotations

import numpy as np

from armillary.comm.overlap import exposed_fully
from armillary.estimate.data_parallel import DataParallelCost, exposed_together
from armillary.estimate.result import over


def _random(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Times with zeros, negative zeros, infinities and NaNs among them."""
    x = rng.random(shape) * 10.0 ** rng.integers(-6, 2)
    x[rng.random(shape) < 0.1] = 0.0
    x[rng.random(shape) < 0.05] = -0.0
    x[rng.random(shape) < 0.03] = np.inf
    x[rng.random(shape) < 0.03] = np.nan
    return x


def test_over_writes_its_temporary_only_where_it_has_the_results_shape():
    a, b = np.arange(6.0).reshape(2, 3), np.array([0.5, -0.0, 2.0])
    held = a * 1.0
    assert over(np.add, held, b, held) is held and np.array_equal(held, a + b)
    small = b * 1.0  # (3,) cannot hold the (2, 3) sum: a new array, the temporary untouched
    got = over(np.add, a, small, small)
    assert got is not small and np.array_equal(got, a + b) and np.array_equal(small, b)


def test_exposed_together_of_a_sweep_is_the_plain_sum_bit_for_bit():
    rng = np.random.default_rng(3)
    dp_shape, pass_shape = (1, 2, 1, 2, 4, 6), (2, 1, 3, 1, 4, 6)
    for _ in range(20):
        costs = tuple(DataParallelCost(*(_random(rng, dp_shape) for _ in range(5)), calls=())
                      for _ in range(int(rng.integers(1, 3))))
        forward, backward = _random(rng, pass_shape), _random(rng, pass_shape)
        microbatches = rng.integers(1, 9, size=(1, 1, 1, 1, 4, 6)).astype(float)
        in_line = behind_f = behind_b = once_f = once_b = 0.0
        for c in costs:
            in_line, behind_f = in_line + c.in_line_s, behind_f + c.behind_forward_s
            behind_b, once_f = behind_b + c.behind_backward_s, once_f + c.once_forward_s
            once_b = once_b + c.once_backward_s
        with np.errstate(invalid="ignore"):  # (inf - inf)
            per_mb = exposed_fully(behind_f, forward) + exposed_fully(behind_b, backward)
            want = in_line + microbatches * per_mb + exposed_fully(once_f, forward) + exposed_fully(once_b, backward)
            got = exposed_together(costs, forward, backward, microbatches)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
    one = DataParallelCost(0.5, 0.25, 2.0, 0.125, 0.75, ())
    scalar = exposed_together((one,), 1.0, 1.5, 4.0)
    assert type(scalar) is float and scalar == 0.5 + 4.0 * (0.0 + 0.5) + 0.0 + 0.0
