"""`exposed_fully` is `exposed(comm, hidden, 1.0)` without the multiply by one: the same bits for float64
times, scalar and array (IEEE 754: 1.0 * x is exact, so -0.0, inf and NaN come through unchanged)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from armillary.comm.overlap import exposed, exposed_fully

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5e-3, 1.5e-3, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308]


def _bits(x: object) -> bytes:
    return np.asarray(x, dtype=np.float64).tobytes()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kind", [float, np.float64])
def test_scalar_bits_and_type(kind: type) -> None:
    for c in SPECIAL:
        for h in SPECIAL:
            a, b = exposed(kind(c), kind(h), 1.0), exposed_fully(kind(c), kind(h))
            assert type(a) is type(b)
            assert _bits(a) == _bits(b), (c, h)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_array_bits() -> None:
    grid = np.array(SPECIAL)
    comm, hidden = np.meshgrid(grid, grid)
    a, b = np.asarray(exposed(comm, hidden, 1.0)), np.asarray(exposed_fully(comm, hidden))
    assert a.dtype == b.dtype == np.float64
    assert a.tobytes() == b.tobytes()
    # and a scalar against an array (a pass's time behind a sweep's GEMM times, and the reverse)
    for c in SPECIAL:
        assert np.asarray(exposed(c, hidden, 1.0)).tobytes() == np.asarray(exposed_fully(c, hidden)).tobytes()
        assert np.asarray(exposed(comm, c, 1.0)).tobytes() == np.asarray(exposed_fully(comm, c)).tobytes()


def test_hand_values() -> None:
    """max(0, T_comm - T_overlappable) (docs/formulas.md §2.3): 3 ms behind 2 ms leaves 1 ms; behind 5 ms none."""
    assert exposed_fully(3e-3, 2e-3) == pytest.approx(1e-3)
    assert exposed_fully(3e-3, 5e-3) == 0.0
    assert exposed(3e-3, 2e-3, 0.5) == pytest.approx(2e-3)  # the general form keeps its overlap
