"""The scalar fast paths of issue 47 (comm/*, cost/compute.py, numerics.py, ModelArrays.of) give exactly what
the array path gives: one configuration costed alone equals its point of a sweep, bit for bit, and the
per-spec caches return what a fresh computation returns."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm.algorithms import dimension_cost
from armillary.comm.candidates import candidate_table, derived, hop_latencies
from armillary.comm.collectives import collective
from armillary.cost.compute import kernel_times
from armillary.numerics import any_true, is_array, maximum, minimum
from armillary.plan.arrays import ModelArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import Collective
from armillary.specs.loading import load_model, load_system
from armillary.workload.ops import Op

SYSTEMS = ("dgx-a100", "dgx-h100", "gb200-nvl72", "tpu-v5p-slice", "trn2-16")
SIZES = (1e3, 3.3e5, 5e7, 2e9)


@pytest.mark.parametrize("name", SYSTEMS)
@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER,
                                Collective.ALL_TO_ALL])
def test_one_collective_is_its_point_of_a_sweep(name: str, op: Collective) -> None:
    system = load_system(name)
    dims = len(system.network)
    for spans in ((8.0,) + (1.0,) * (dims - 1), (2.0,) + (1.0,) * (dims - 1), (4.0,) + (2.0,) * (dims - 1)):
        group = Placement(spans)
        swept = collective(op, np.array(SIZES), group, system)
        for k, n in enumerate(SIZES):
            one = collective(op, n, group, system)
            assert float(one.cost.time) == float(np.asarray(swept.cost.time)[k])
            assert float(one.cost.scale_up_bytes) == float(np.asarray(swept.cost.scale_up_bytes)[k])
            assert int(np.asarray(one.composition).flat[0]) == int(np.broadcast_to(swept.composition, (len(SIZES),))[k])


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_per_network_cache_is_the_network_read_afresh(name: str) -> None:
    for net in load_system(name).network:
        candidates, hops, *_ = derived(net)
        assert derived(net)[0] is candidates
        assert candidates == candidate_table(net.kind, net.algorithms, net.in_network_reduction,
                                              net.in_network_efficiency, net.efficiency, net.bandwidth,
                                              net.shared_by, net.tree_efficiency)
        assert hops == hop_latencies(net)
        copy = net.model_copy(update={"latency": net.latency * 2})  # another spec: its own entry
        assert derived(copy)[1] == hop_latencies(copy) and derived(copy) is not derived(net)
        rate = 1e12
        assert dimension_cost(Collective.ALL_GATHER, 1e6, 4.0, copy, rate).time >= \
            dimension_cost(Collective.ALL_GATHER, 1e6, 4.0, net, rate).time


def test_kernel_times_of_one_configuration_are_its_point_of_a_sweep() -> None:
    device = load_system("dgx-h100").device
    ops = (Op(1e12, 1e9), Op(0.0, 1e6), Op(3e9, 0.0, 2.0), Op(0.0, 0.0), Op(5e14, 2e10, 4.0))
    codes = np.array([0.0, 1.0, 2.0, 3.0])
    for sixteen_bit in (False, True):
        for ceiling, stream in ((None, None), (0.5, 0.7)):
            swept = kernel_times(ops, device, codes, sixteen_bit, ceiling, stream)
            for k, code in enumerate(codes):
                one = kernel_times(ops, device, float(code), sixteen_bit, ceiling, stream)
                assert one.tobytes() == np.ascontiguousarray(swept[:, k]).tobytes()
            assert swept[3].tolist() == [0.0] * len(codes)  # no work, no kernel


def test_model_arrays_are_built_once_per_frozen_model() -> None:
    model = load_model("gpt3-175b")
    arrays = ModelArrays.of(model)
    assert ModelArrays.of(model) is arrays and arrays == ModelArrays._of(model)
    other = model.model_copy(update={"layers": model.layers + 1})
    assert ModelArrays.of(other).layers == model.layers + 1


def test_the_scalar_helpers_keep_their_types() -> None:
    assert maximum(1.0, 2) == 2 and type(maximum(1.0, 2)) is int
    assert type(maximum(np.float64(3.0), 1.0)) is np.float64 and minimum(np.float32(1.0), 2.0) == 1.0
    assert isinstance(maximum(np.array([1.0]), 2.0), np.ndarray)
    assert any_true(np.bool_(True)) and not any_true(0.0) and any_true(np.array([0.0, 1.0]))
    assert not is_array(1.0, 2) and is_array(1.0, np.array(1.0))


def test_an_identity_cache_keys_on_the_object_and_drops_the_oldest():
    """`memo.IdentityCache`: one value per spec object (an equal object built apart has its own), the oldest
    entry dropped past its size."""
    from armillary.memo import IdentityCache

    calls: list[object] = []
    cache: IdentityCache[list[int], int] = IdentityCache(2)

    def make(spec: list[int]) -> int:
        calls.append(spec)
        return len(calls)

    a, b, c = [1], [1], [2]
    assert cache.get(a, make) == 1 and cache.get(a, make) == 1  # once per object
    assert cache.get(b, make) == 2  # equal, but another object
    assert cache.get(c, make) == 3 and cache.get(a, make) == 4  # a was the oldest of three: made again
