"""ASTRA-sim-compatible `direct` (issue 48): both kinds, named and selectable per dimension, and ASTRA-sim's own
3-D network (astra-network-analytical input/Ring_FullyConnected_Switch.yml: 2 x 8 x 4 NPUs, 200 / 100 / 50
GB/s, 50 / 500 / 2,000 ns) with ring / direct / halvingDoubling per dimension.

The ASTRA-sim figures are its analytical congestion-unaware backend at astra-sim HEAD 518bd51 on a one-node
all-reduce Chakra trace per NPU, system file as its examples (LIFO, endpoint-delay 10, localBWAware; one active
chunk per dimension; `preferred-dataset-splits` 4: pipelined, 1: one chunk, the phases one after another).
"fast memory": local-mem-bw 160,000 (its reductions cost nothing, so the network semantics alone are compared);
"1600": its examples' local-mem-bw, where each ring step's reduction is also charged to local memory.
docs/loops-convolutions-traces.md records the commands."""

import pytest

from armillary.comm.algorithms import dimension_cost
from armillary.comm.astra_network import astra_sim_system
from armillary.comm.collectives import collective
from armillary.comm.sweep import group_of
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.network import DirectAllReduce, NetworkDimension
from armillary.specs.system import System
from armillary.units import GIB, MIB

THREE_D = (["Ring", "FullyConnected", "Switch"], [2, 8, 4], [200.0, 100.0, 50.0], [50.0, 500.0, 2000.0],
           ["ring", "direct", "halvingDoubling"])
TWO_D = (["Ring", "FullyConnected"], [2, 8], [200.0, 100.0], [50.0, 500.0], ["ring", "direct"])
FAST = 1.6e17  # bytes/s: local memory that is never the bottleneck
# ns, (pipelined: 4 splits, sequential: 1 split), fast memory / local-mem-bw 1600
ASTRA_3D_FAST = {64 * MIB: (313_680, 525_763), GIB: (5_010_616, 8_153_864)}
ASTRA_3D_1600 = {64 * MIB: (375_960, 597_781), GIB: (6_007_192, 9_306_146)}
ASTRA_2D_FAST = {64 * MIB: (313_680, 392_499), GIB: (5_010_616, 6_262_492)}


def all_reduce_ns(system: System, n: float, composition: Composition) -> float:
    group = group_of(system, system.devices)
    return float(collective(Collective.ALL_REDUCE, n, group, system, composition=composition).cost.time) * 1e9


def one_shot(system: System) -> System:
    return system.model_copy(update={"network": tuple(d.model_copy(update={"direct": DirectAllReduce.ONE_SHOT})
                                                      for d in system.network)})


def test_two_kinds_of_direct_by_hand():
    """8 ranks of a fully connected dimension, 7 links of 100 GB/s, n = 64 MiB: one-shot sends (p-1) n = 7 n
    in one step; two-shot (ASTRA-sim AllToAll.cc) a reduce-scatter and an all-gather, 2 (p-1)/p n in 2 steps."""
    dim = NetworkDimension(name="fc", kind="fully_connected", size=8, links=7, bandwidth=700e9, latency=1e-6,
                           efficiency=1.0, algorithms=[Algorithm.DIRECT])
    n, huge = 64 * MIB, 1e18  # reductions at an unbounded memory rate
    one = dimension_cost(Collective.ALL_REDUCE, n, 8.0, dim, huge, Algorithm.DIRECT)
    two_shot = dim.model_copy(update={"direct": DirectAllReduce.TWO_SHOT})
    two = dimension_cost(Collective.ALL_REDUCE, n, 8.0, two_shot, huge, Algorithm.DIRECT)
    assert one.sent_bytes == pytest.approx(7 * n) and two.sent_bytes == pytest.approx(2 * 7 / 8 * n)
    assert two.transfer == pytest.approx(2 * 7 / 8 * n / 700e9, rel=1e-5)
    assert two.fixed - one.fixed == pytest.approx(1e-6)  # one more step of latency (Simple protocol)


def test_direct_is_named_in_the_network_spec():
    assert NetworkDimension(name="x", bandwidth=1e9, latency=1e-6, efficiency=1.0).direct is DirectAllReduce.ONE_SHOT
    with pytest.raises(ValueError, match=r"one_shot.*two_shot"):
        NetworkDimension(name="x", bandwidth=1e9, latency=1e-6, efficiency=1.0, direct="astra")


@pytest.mark.parametrize("n", sorted(ASTRA_3D_FAST))
def test_astra_sim_3d_ring_direct_halving_doubling_within_10_percent(n):
    """ASTRA-sim's 3-D example, all-reduce on 64 NPUs, its network semantics alone (fast local memory):
    pipelined and one chunk after another both within 10%. With its examples' local-mem-bw 1600 the phases
    one after another stay within 10%; pipelined ASTRA-sim also charges every ring step's reduction to local
    memory on the slowest dimension (+20% there), which NCCL-style kernels overlap and the model does not
    charge: 9% under at 64 MiB, 16% at 1 GiB (the docs page says so)."""
    fast = astra_sim_system(*THREE_D, local_memory_bandwidth=FAST)
    for k, composition in enumerate((Composition.PIPELINED, Composition.SEQUENTIAL)):
        assert all_reduce_ns(fast, n, composition) == pytest.approx(ASTRA_3D_FAST[n][k], rel=0.10)
    slow = astra_sim_system(*THREE_D, local_memory_bandwidth=1600 * 2**30)
    assert all_reduce_ns(slow, n, Composition.SEQUENTIAL) == pytest.approx(ASTRA_3D_1600[n][1], rel=0.10)
    assert 0.8 < all_reduce_ns(slow, n, Composition.PIPELINED) / ASTRA_3D_1600[n][0] < 1.0


def test_pipelined_is_faster_than_sequential_on_the_3d_network():
    """Before, the pipelined composition costed each dimension below the top as its all-reduce, which on the
    direct dimension was one-shot ((p-1) n: 4x the bytes of its reduce-scatter + all-gather at p = 8), so it
    came out ~1.3x slower than the phases one after another; ASTRA-sim: 5.0 ms against 8.2 ms at 1 GiB."""
    system = astra_sim_system(*THREE_D, local_memory_bandwidth=FAST)
    for n in (64 * MIB, GIB):
        assert all_reduce_ns(system, n, Composition.PIPELINED) < 0.7 * all_reduce_ns(system, n, Composition.SEQUENTIAL)
    assert all_reduce_ns(one_shot(system), GIB, Composition.PIPELINED) == pytest.approx(
        all_reduce_ns(system, GIB, Composition.PIPELINED), rel=1e-6)  # below the top, direct's kind is moot


@pytest.mark.parametrize("n", sorted(ASTRA_2D_FAST))
def test_direct_at_the_top_follows_astra_sims_two_shot(n):
    """Ring 2 x FullyConnected 8 with ring / direct: the direct dimension is the top, where the all-reduce runs
    on it. Two-shot matches ASTRA-sim within 5%; one-shot is 1.6x slower one chunk after another at 1 GiB
    ((p-1) n / 2 on the direct dimension instead of 2 (p-1)/p n / 2)."""
    system = astra_sim_system(*TWO_D, local_memory_bandwidth=FAST)
    for k, composition in enumerate((Composition.PIPELINED, Composition.SEQUENTIAL)):
        assert all_reduce_ns(system, n, composition) == pytest.approx(ASTRA_2D_FAST[n][k], rel=0.05)
    assert all_reduce_ns(one_shot(system), n, Composition.SEQUENTIAL) > 1.5 * ASTRA_2D_FAST[n][1]


def test_astra_network_input_errors_name_the_field():
    with pytest.raises(ValueError, match=r"topology\[0\] 'Torus'"):
        astra_sim_system(["Torus"], [4], [50.0], [500.0], ["ring"])
    with pytest.raises(ValueError, match=r"implementation\[0\] 'oneRing'"):
        astra_sim_system(["Ring"], [4], [50.0], [500.0], ["oneRing"])
    with pytest.raises(ValueError, match="one entry per dimension"):
        astra_sim_system(["Ring", "Switch"], [4], [50.0], [500.0], ["ring"])
