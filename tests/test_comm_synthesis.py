"""Collective synthesis (TACOS-style): published times, hand-derived bounds, replay, determinism."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from armillary.comm.synthesis import LinkGraph, from_graph, grid, lower_bound, ring, synthesize, synthesize_best
from armillary.comm.topology import topology_graph
from armillary.simulate.replay import replay, schedule_graph, simulate_schedule
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system

GIB = 2**30
BW = 50 * GIB  # 50 GiB/s per link and direction
LAT = 0.5e-6
# 1 GiB over 50 GiB/s: S / B = 1/50 s = 20,000 us (TACOS's tables use binary units for both)
S_OVER_B_US = 20_000.0


@pytest.mark.parametrize(("shape", "periodic", "in_links", "published_us", "bound_us"), [
    ((5, 5), False, 2, 9606.0, 9600.0),  # corner: 2 incoming links
    ((3, 3, 3), True, 6, 3706.2, 3209.9),
    ((4, 4), True, 4, 5002.0, 4687.5),
    ((4, 4, 4), True, 6, 3443.0, 3281.25),
])
def test_published_all_gathers(shape: tuple[int, ...], periodic: bool, in_links: int, published_us: float,
                               bound_us: float) -> None:
    p = int(np.prod(shape))
    by_hand = (p - 1) / p * S_OVER_B_US / in_links  # bytes the busiest node receives over its incoming links
    assert by_hand == pytest.approx(bound_us, abs=0.05)
    links = grid(shape, periodic, BW, LAT)
    best = synthesize_best(Collective.ALL_GATHER, links, GIB, seeds=16)
    assert best.bound * 1e6 == pytest.approx(by_hand)
    assert best.bound <= best.time
    assert best.time * 1e6 <= published_us + 0.1
    # a whole number of chunk transfers (chunk time + latency) on the busiest node's links
    chunk_us = S_OVER_B_US / p + LAT * 1e6
    assert best.time * 1e6 >= np.ceil((p - 1) / in_links) * chunk_us - 1e-6


def test_32x32_mesh_within_3_percent_of_bound() -> None:
    s = synthesize(Collective.ALL_GATHER, grid((32, 32), False, BW, LAT), GIB, record=False)
    assert s.bound == pytest.approx(1023 / 1024 * S_OVER_B_US / 2 * 1e-6)
    assert s.bound <= s.time <= 1.03 * s.bound


@pytest.mark.parametrize("n", [4, 8, 16])
def test_never_above_ring_on_a_ring(n: int) -> None:
    """A bidirectional ring: half the chunks each way, (p - 1) steps of a chunk of n / (2p)."""
    links = ring(n, BW, LAT)
    s = synthesize(Collective.ALL_GATHER, links, GIB, chunks_per_npu=2)
    ring_time = (n - 1) * (LAT + GIB / (2 * n) / BW)
    assert s.bound <= s.time <= ring_time * (1 + 1e-9)


def test_deterministic_per_seed_and_valid() -> None:
    links = grid((4, 4), True, BW, LAT)
    a = synthesize(Collective.ALL_GATHER, links, GIB, seed=3)
    b = synthesize(Collective.ALL_GATHER, links, GIB, seed=3)
    assert a.time == b.time and np.array_equal(a.chunk, b.chunk) and np.array_equal(a.link, b.link)
    # every device receives every chunk it lacks exactly once
    got = np.zeros((16, 16), int)
    np.add.at(got, (a.dst, a.chunk), 1)
    assert np.array_equal(got, 1 - np.eye(16, dtype=int))
    # one transfer at a time per link
    for link in np.unique(a.link):
        on = np.sort(a.start[a.link == link])
        assert np.all(np.diff(on) >= LAT + GIB / 16 / BW - 1e-12)
    assert np.all((a.utilization >= 0) & (a.utilization <= 1 + 1e-9))


def _mixed_torus() -> LinkGraph:
    """A 4x4 torus whose every other link pair runs at half rate (two transfer classes)."""
    t = grid((4, 4), True, BW, LAT)
    bw = t.bandwidth.copy()
    bw[::4] *= 0.5
    bw[1::4] *= 0.5
    return replace(t, bandwidth=bw)


@pytest.mark.parametrize(("links", "seed", "chunks", "time_us", "digest"), [
    (lambda: grid((5, 5), False, BW, LAT), 3, 1, 9606.0, "b40af5330aa19784"),
    (lambda: grid((4, 4, 4), True, BW, LAT), 0, 2, 3448.5, "08527f1ddbc98c5d"),
    (_mixed_torus, 5, 2, 7506.0, "26f4bf2bb4b50b96"),
    (lambda: grid((40, 40), False, BW, LAT), 0, 1, 10400.0, "fdd89398d84f0901"),  # > LOOK_NODES: look 1
])
def test_schedules_are_pinned(links: Callable[[], LinkGraph], seed: int, chunks: int, time_us: float,
                              digest: str) -> None:
    """The exact schedules of the kernel as first published here (PR of issue 18): a speed-up of the kernel
    must not change a single transfer for the same seed (digest of link, chunk, start, end)."""
    s = synthesize(Collective.ALL_GATHER, links(), GIB, chunks, seed=seed)
    h = hashlib.sha1()
    for a in (s.link, s.chunk, s.start, s.end):
        h.update(np.ascontiguousarray(a).tobytes())
    assert s.time * 1e6 == pytest.approx(time_us, abs=1e-6)
    assert h.hexdigest()[:16] == digest


@pytest.mark.parametrize("op", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
@pytest.mark.parametrize("links", [grid((4, 4), True, BW, LAT), grid((3, 5), False, BW, LAT), ring(6, BW, 2e-6)])
def test_replay_reproduces_the_synthesized_time(op: Collective, links: object) -> None:
    s = synthesize(op, links, GIB, chunks_per_npu=2, reduce_bytes_per_s=2e12)  # type: ignore[arg-type]
    r = replay(s)
    assert r.complete
    assert r.time == pytest.approx(s.time, rel=0.01)
    assert np.all(r.start <= s.start + 1e-12)
    assert s.time >= lower_bound(op, s.links, GIB)


@pytest.mark.parametrize("op", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_event_simulator_replays_the_schedule_link_by_link(op: Collective) -> None:
    s = synthesize(op, grid((3, 4), True, BW, LAT), GIB, chunks_per_npu=2, reduce_bytes_per_s=2e12)
    graph = schedule_graph(s)
    assert len(graph.tasks) == len(s.link)
    # every transfer waits for the one before it on its link: a link carries one chunk at a time
    assert sum(1 for t in graph.tasks if t.deps) >= len(s.link) - s.links.src.shape[0]
    assert simulate_schedule(s) == pytest.approx(s.time, rel=0.01)


def test_event_simulator_serializes_a_link() -> None:
    """Two chunks over the single link of a 2-device line: the simulator runs them back to back."""
    s = synthesize(Collective.ALL_GATHER, grid((2,), False, BW, LAT), GIB, chunks_per_npu=2)
    assert simulate_schedule(s) == pytest.approx(2 * (LAT + GIB / 4 / BW), rel=1e-6)


def test_reduce_scatter_pays_the_reduction() -> None:
    links = grid((4, 4), True, BW, LAT)
    free = synthesize(Collective.REDUCE_SCATTER, links, GIB, seed=1)
    costly = synthesize(Collective.REDUCE_SCATTER, links, GIB, seed=1, reduce_bytes_per_s=1e11)
    assert costly.time > free.time


def test_graph_of_a_system_unwinds_switches() -> None:
    """dgx-h100: 8 GPUs on NVSwitch become 8 x 7 directed links of bandwidth / 7 each."""
    system = load_system("dgx-h100", 8)
    links = from_graph(topology_graph(system))
    assert links.nodes == 8 and len(links.src) == 56
    assert links.incoming_bandwidth() == pytest.approx(np.full(8, system.network[0].bandwidth))
    s = synthesize(Collective.ALL_GATHER, links, GIB)
    assert s.time >= s.bound


def test_disconnected_graph_is_an_error() -> None:
    import networkx as nx

    with pytest.raises(ValueError, match="does not connect"):
        synthesize(Collective.ALL_GATHER, from_graph(nx.empty_graph(3), BW, LAT), GIB)


@pytest.mark.parametrize("op", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_msccl_xml_passes_the_schema_and_round_trips(op: Collective) -> None:
    from armillary.comm import msccl

    s = synthesize(op, grid((3, 3), True, BW, LAT), GIB, chunks_per_npu=2)
    xml = msccl.to_xml(s)
    assert msccl.validate(xml) == []
    assert msccl.read_transfers(xml) == msccl.schedule_transfers(s)
    broken = xml.replace('type="s"', 'type="x"', 1)
    assert any("type 'x'" in e for e in msccl.validate(broken))
    dropped = xml.replace('type="r"', 'type="nop"', 1) if op is Collective.ALL_GATHER else xml.replace(
        'type="rrc"', 'type="nop"', 1)
    assert any("do not match" in e for e in msccl.validate(dropped))


def test_algorithm_synthesized_in_the_collective_model() -> None:
    """On a ring of p, the synthesized all-gather (two chunks per rank, one each way) takes p - 1 rounds of
    alpha + n / (2p) / (B / 2): by hand (p - 1) alpha + (p - 1)/p n / B, the bandwidth-optimal ring."""
    from armillary.comm.algorithms import PROTOCOLS, dimension_cost
    from armillary.specs.communication import Algorithm
    from armillary.specs.network import NetworkDimension, NetworkKind

    p, n, bw, alpha = 8, float(GIB), 100e9, 2e-6
    base = PROTOCOLS[-1].base_latency_s  # the Simple kernel's fixed cost
    offered = (Algorithm.RING, Algorithm.SYNTHESIZED)
    net = NetworkDimension(name="ring", kind=NetworkKind.RING, size=p, bandwidth=bw, latency=alpha, efficiency=1.0,
                           algorithms=offered)
    cost = dimension_cost(Collective.ALL_GATHER, n, p, net, 1e12, Algorithm.SYNTHESIZED)
    assert cost.time == pytest.approx(base + (p - 1) * alpha + (p - 1) / p * n / bw)
    assert cost.fixed == pytest.approx(base + (p - 1) * alpha)
    # all-to-all: 8 x (1+1+2+2+3+3+4) = 128 hops of n/p over 16 links of B/2 each: at least 2 n/B (16 rounds)
    a2a = dimension_cost(Collective.ALL_TO_ALL, n, p, net, 1e12, Algorithm.SYNTHESIZED)
    assert base + 16 * alpha + 2 * n / bw <= a2a.time <= 1.25 * (base + 16 * alpha + 2 * n / bw)
    with pytest.raises(ValueError, match="synthesized"):
        dimension_cost(Collective.BROADCAST, n, p, net, 1e12, Algorithm.SYNTHESIZED)
    with pytest.raises(ValueError, match="not offered"):  # like any algorithm, only where the dimension lists it
        dimension_cost(Collective.ALL_GATHER, n, p, net.model_copy(update={"algorithms": (Algorithm.RING,)}), 1e12,
                       Algorithm.SYNTHESIZED)
    sizes = np.array([1e3, 1e6, 1e9])  # auto weighs it where offered: never slower than either
    auto = dimension_cost(Collective.ALL_GATHER, sizes, p, net, 1e12)
    for alg in offered:
        assert np.all(auto.time <= dimension_cost(Collective.ALL_GATHER, sizes, p, net, 1e12, alg).time * (1 + 1e-12))


def test_chakra_export_round_trips(tmp_path: Path) -> None:
    from armillary.simulate.chakra.schema import NodeType, read_trace
    from armillary.simulate.schedule_chakra import read_transfers, write_schedule

    s = synthesize(Collective.ALL_REDUCE, grid((3, 3), True, BW, LAT), GIB)
    paths = write_schedule(s, tmp_path)
    assert len(paths) == 9
    assert read_transfers(paths) == sorted(zip(s.src.tolist(), s.dst.tolist(), s.chunk.tolist(), strict=True))
    _, nodes = read_trace(paths[0])
    kinds = {n.type for n in nodes}
    assert kinds == {int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)}
    ids = {n.id for n in nodes}
    assert all(d in ids for n in nodes for d in n.data_deps)  # dependencies stay on the device


def test_example_torus_offers_synthesized_schedules_to_the_estimator() -> None:
    """examples/trn2-torus-synthesized.yaml lists `synthesized` on its 4x4 torus: the estimator synthesizes
    schedules for it and weighs them against the closed-form ring, taking the faster per collective."""
    from armillary.comm.algorithms import dimension_cost
    from armillary.comm.synthesized_cost import rounds
    from armillary.estimate.run import estimate_run
    from armillary.specs.communication import Algorithm
    from armillary.specs.run import load_run

    path = Path(__file__).parents[1] / "examples" / "trn2-torus-synthesized.yaml"
    model, system, strategy, workload = load_run(path)
    rounds.cache_clear()
    with_synthesis = estimate_run(model, system, strategy, workload)
    assert rounds.cache_info().currsize > 0  # the estimator costed synthesized schedules
    net = system.network[0]
    for n in (2.0**16, 2.0**25, 2.0**30):
        auto = dimension_cost(Collective.ALL_GATHER, n, 16.0, net, 2e12)
        ring = dimension_cost(Collective.ALL_GATHER, n, 16.0, net, 2e12, exclude=(Algorithm.SYNTHESIZED,))
        synth = dimension_cost(Collective.ALL_GATHER, n, 16.0, net, 2e12, algorithm=Algorithm.SYNTHESIZED)
        assert auto.time == pytest.approx(min(ring.time, synth.time))
    _, ring_only, _, _ = load_run(path, [("system.network.0.algorithms", ["ring"])])
    # the closed-form multi-dimensional ring (bound + one latency per axis step) is never slower than a
    # 2-chunk schedule here, so the step equals the ring-only step
    assert with_synthesis.step_time_s <= estimate_run(model, ring_only, strategy, workload).step_time_s + 1e-12
