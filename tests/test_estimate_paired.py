"""A sweep's data-parallel reduce-scatters and all-gathers composed two at a time (issue 47,
`data_parallel.paired`): each point's time and bytes are bit for bit what its own call gives, with the bytes
one value, one per point, or on axes the group's spans do not have."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm.collectives import all_gather, reduce_scatter
from armillary.estimate.data_parallel import paired
from armillary.estimate.layer_comm import all_to_all_cost
from armillary.plan.placement import place_groups
from armillary.specs.loading import load_system


@pytest.mark.parametrize("collective", [reduce_scatter, all_gather, all_to_all_cost])
@pytest.mark.parametrize("first, second", [
    (1e9, 2.5e8),  # one value each, the group's spans swept
    (np.array([[3e9], [7e5]]), 1e8),  # on the spans' axes, and one value
    (np.array([1e6, 5e9, 3e3]).reshape(3, 1, 1), np.array([[4e7], [9e9]])),  # an axis the spans do not have
])
def test_paired_is_each_call(collective, first, second):
    system = load_system("dgx-a100", 64)
    sizes = tuple(d.size for d in system.network)
    group = place_groups(np.array([[1], [8]]), np.array([8, 4]), 1, sizes, 1, 0).gradient
    pair = paired(collective, first, second, group, system)
    for got, n_bytes in zip(pair, (first, second), strict=True):
        alone = collective(n_bytes, group, system)
        for field in ("time", "scale_up_bytes", "scale_out_bytes"):
            a, b = getattr(got, field), getattr(alone, field)
            shape = np.broadcast_shapes(np.shape(a), np.shape(b))
            assert np.array_equal(np.broadcast_to(a, shape), np.broadcast_to(b, shape)), field
            assert np.ndim(a) >= np.ndim(b)
        assert np.all(np.asarray(got.time) > 0)


def test_paired_is_not_a_mixup():
    """The two messages do not trade places: the larger message takes longer at every point."""
    system = load_system("dgx-a100", 64)
    sizes = tuple(d.size for d in system.network)
    group = place_groups(np.array([[1], [8]]), np.array([8, 4]), 1, sizes, 1, 0).gradient
    big, small = paired(reduce_scatter, 4e9, 1e6, group, system)
    assert np.all(np.asarray(big.time) > np.asarray(small.time))
