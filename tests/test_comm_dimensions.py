"""Networks of several dimensions (comm/compose.py, docs/formulas.md §1.4): closed forms for rings, meshes and
tori, the bounds pipelining must respect, and invariants (an infinitely fast dimension changes nothing; more
bandwidth on any dimension never slows a collective)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.comm.algorithms import PROTOCOLS
from armillary.comm.channels import ChannelSettings, with_channels
from armillary.comm.collectives import collective
from armillary.plan.placement import Placement, place
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_device, load_system
from armillary.specs.network import NetworkDimension
from armillary.specs.system import System

GiB = 2**30
DEVICE = load_device("h100-sxm")
SIMPLE = PROTOCOLS[2]


def dim(name: str, size: int, bandwidth: float, **kw: object) -> NetworkDimension:
    fields = {"kind": "ring", "latency": 1e-6, "efficiency": 1.0, "algorithms": ["ring"], **kw}
    return NetworkDimension(name=name, size=size, bandwidth=bandwidth, **fields)


def system(*dims: NetworkDimension, library: str = "hierarchical") -> System:
    return System(name="test", device=DEVICE, network=dims, collectives=library)


def whole(s: System) -> Placement:
    return place(float(s.devices), 1.0, s.sizes)


def test_ring_of_16_all_reduce_is_the_closed_form():
    """2(n-1)/n S/B plus 2(n-1) latency steps (docs/formulas.md §1.2), 1 GiB over a ring of 16 at 50 GB/s:
    the per-device injection of a bidirectional ring is its two links, 2 x 50 GB/s."""
    ring = system(dim("ring", 16, 100e9))
    got = float(collective(Collective.ALL_REDUCE, GiB, whole(ring), ring).cost.time)
    latency = SIMPLE.base_latency_s + 2 * 15 * 1e-6
    assert got == pytest.approx(latency + 2 * 15 / 16 * GiB / 100e9)


def test_mesh_all_gather_is_bounded_by_its_corner():
    """TACOS's 4x4 mesh of 50 GB/s links: a corner device receives 15/16 of 1 GiB over its 2 links, so the
    all-gather takes at least 15/16 GiB / 100 GB/s >= 9.375 ms; a torus's devices have 4 links."""
    mesh = system(dim("mesh", 16, 4 * 50e9, kind="mesh", shape=(4, 4)))
    torus = system(dim("torus", 16, 4 * 50e9, kind="torus", shape=(4, 4)))
    t_mesh = float(collective(Collective.ALL_GATHER, GiB, whole(mesh), mesh).cost.time)
    t_torus = float(collective(Collective.ALL_GATHER, GiB, whole(torus), torus).cost.time)
    assert t_mesh >= 15 / 16 * GiB / 100e9 >= 9.375e-3
    assert t_mesh == pytest.approx(2 * t_torus, rel=0.01)


@pytest.mark.parametrize("k", [3, 4])
def test_torus_all_gather_at_its_incoming_link_bound(k):
    """A k x k x k torus of 50 GB/s links: each device receives (p-1)/p of the buffer over 6 links."""
    torus = system(dim("torus", k**3, 6 * 50e9, kind="torus", shape=(k, k, k)))
    got = float(collective(Collective.ALL_GATHER, GiB, whole(torus), torus).cost.time)
    bound = (k**3 - 1) / k**3 * GiB / 300e9
    assert bound <= got <= bound * 1.01


def test_pipelining_a_4x4_ring_beats_sequential_phases_but_not_the_slowest_dimension():
    two = system(dim("x", 4, 100e9), dim("y", 4, 50e9))
    group = whole(two)
    piped = float(collective(Collective.ALL_REDUCE, GiB, group, two, composition=Composition.PIPELINED).cost.time)
    seq = float(collective(Collective.ALL_REDUCE, GiB, group, two, composition=Composition.SEQUENTIAL).cost.time)
    # slowest dimension: y carries the all-reduce of n/4 over 4 ranks, x the all-reduce of n over 4
    slowest = max(2 * 3 / 4 * GiB / 100e9, 2 * 3 / 4 * GiB / 4 / 50e9)
    assert slowest < piped < seq


def test_nccl_flat_ring_runs_at_the_node_nic_bound():
    """64 H100s in 8 nodes: the flat ring's rail share is 1/8 of its traffic per device, so its bus
    bandwidth is 8 NICs x 50 GB/s x efficiency (the measured multi-node plateau, ~90-95% of it), given
    enough channels (NCCL_MIN_CTAS=24, the tuned run's 391 GB/s); with NCCL's default 16 the channels
    set the pace (tests/test_comm_channels.py)."""
    h100 = with_channels(load_system("dgx-h100", 64), ChannelSettings(min_ctas=24))
    group = whole(h100)
    got = collective(Collective.ALL_REDUCE, 16 * GiB, group, h100, Algorithm.RING)
    nvlink, nic = h100.network
    rail = 2 * 63 / 64 * 16 * GiB / 8  # each device's share of the ring's crossings
    # NCCL tuning.cc: of the 2(p-1) = 126 steps, 2(nNodes-1) = 14 cross the network, the rest NVLink
    steps = SIMPLE.base_latency_s + 112 * nvlink.latency + 14 * nic.latency
    assert float(got.cost.time) == pytest.approx(steps + rail / (nic.bandwidth * nic.efficiency))
    busbw = 16 * GiB / float(got.cost.time) * 2 * 63 / 64
    assert 0.97 * 8 * nic.bandwidth * nic.efficiency < busbw < 8 * nic.bandwidth * nic.efficiency


def _times(s: System, op: Collective, n: float) -> float:
    return float(collective(op, n, whole(s), s).cost.time)


OPS = [Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL,
       Collective.BROADCAST]


@settings(max_examples=40, deadline=None)
@given(op=hs.sampled_from(OPS), n=hs.floats(1e3, 1e10), library=hs.sampled_from(["nccl", "hierarchical"]))
def test_an_infinitely_fast_extra_dimension_of_size_one_changes_nothing(op, n, library):
    base = system(dim("x", 8, 400e9, kind="switch", algorithms=["ring", "tree"]),
                  dim("y", 4, 50e9, kind="switch", algorithms=["ring", "tree"]), library=library)
    extra = system(*base.network, dim("z", 1, 1e30, kind="switch"), library=library)
    assert _times(extra, op, n) == pytest.approx(_times(base, op, n), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(op=hs.sampled_from(OPS), n=hs.floats(1e3, 1e10), which=hs.integers(0, 2), scale=hs.floats(1.0, 50.0),
       library=hs.sampled_from(["nccl", "hierarchical"]))
def test_more_bandwidth_on_any_dimension_never_slows_a_collective(op, n, which, scale, library):
    dims = (dim("x", 4, 400e9, kind="switch", algorithms=["ring", "tree", "direct"]),
            dim("y", 4, 100e9), dim("z", 2, 25e9, kind="switch", algorithms=["ring", "tree"]))
    slow = system(*dims, library=library)
    fast = slow.with_dimension(which, bandwidth=dims[which].bandwidth * scale)
    assert _times(fast, op, n) <= _times(slow, op, n) * (1 + 1e-12)


def test_arrays_of_groups_give_the_scalar_costs():
    three = system(dim("x", 4, 400e9, kind="switch"), dim("y", 4, 100e9), dim("z", 4, 25e9))
    sizes, strides = np.array([4.0, 16.0, 8.0, 64.0, 2.0]), np.array([1.0, 1.0, 2.0, 1.0, 16.0])
    arrays = collective(Collective.ALL_REDUCE, GiB, place(sizes, strides, three.sizes), three).cost.time
    for i in range(len(sizes)):
        one = collective(Collective.ALL_REDUCE, GiB, place(float(sizes[i]), float(strides[i]), three.sizes), three)
        assert arrays[i] == pytest.approx(float(one.cost.time), rel=1e-12)


def test_group_spans_by_stride_on_three_dimensions():
    """16 ranks at stride 2 on 4 x 4 x 4: 2 in each x line, 4 lines of y, 2 z planes."""
    spans = place(16.0, 2.0, (4, 4, 4)).spans
    assert [float(s) for s in spans] == [2, 4, 2] and math.prod(float(s) for s in spans) == 16


def test_two_tier_files_load_as_two_dimensions():
    h100 = load_system("dgx-h100", 32)
    assert h100.sizes == (8, 4) and h100.devices_per_node == 8 and h100.nodes == 4
    assert h100.with_devices(4).sizes == (4, 1)
    # a job that does not fill whole nodes takes equal shares: 12 GPUs as 2 nodes x 6, 256 GPUs on
    # NVL72 racks as 4 racks x 64
    assert h100.with_devices(12).sizes == (6, 2)
    assert load_system("gb200-nvl72", 256).sizes == (64, 4)
    assert load_system("gb200-nvl72", 7).sizes == (7, 1)
