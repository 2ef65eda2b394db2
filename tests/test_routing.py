"""Routed flows over an oversubscribed fat tree, checked by hand: 8 devices on 2 leaves of 4 ports, spines at
2:1 (each leaf has 2 ports' worth of uplink per direction)."""

from __future__ import annotations

import dataclasses

import pytest

from armillary.comm.collectives import collective
from armillary.comm.sweep import group_of
from armillary.simulate.engine import run
from armillary.simulate.graph import Category, GraphBuilder, TaskGraph, TaskKind, Tier
from armillary.simulate.routing import routes, untapered
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system

MS = 1e-3


def _tree(oversubscription: float = 2.0):
    return load_system({"name": "two leaves", "device": "h100-sxm", "network": [
        {"name": "fabric", "kind": "fat_tree", "size": 8, "leaf_size": 4, "oversubscription": oversubscription,
         "bandwidth": "50 GB/s", "latency": "1 us", "efficiency": 1.0}]})


def _graph(*transfers: tuple[tuple[int, ...], Collective]) -> TaskGraph:
    """Transfers of 1 ms each (alone, untapered), all starting at once."""
    b = GraphBuilder()
    for k, (ranks, op) in enumerate(transfers):
        kind = TaskKind.SEND if op is Collective.SEND_RECV else TaskKind.COLLECTIVE
        b.add(f"t{k}", kind, Category.EP, ranks, None, MS, (), Tier.SCALE_OUT, 1e6, collective=op)
    graph = b.graph(8)
    return dataclasses.replace(graph, routes=routes(graph.tasks, _tree()))


def _ends_ms(graph: TaskGraph) -> list[float]:
    return [e / 1e6 for e in run(graph).end_ns.tolist()]


def test_four_cross_leaf_sends_take_the_oversubscription_factor():
    # 4 sends leaf 0 -> leaf 1 load the leaf's uplink with 4 ports' worth; it has 2: each runs at half rate
    sends = [((i, 4 + i), Collective.SEND_RECV) for i in range(4)]
    assert _ends_ms(_graph(*sends)) == pytest.approx([2.0] * 4)
    # two of them fit: full rate
    assert _ends_ms(_graph(*sends[:2])) == pytest.approx([1.0] * 2)


def test_an_all_to_all_over_both_leaves_by_hand():
    # each of a leaf's 4 members sends 4 of its 7 shares across: 16/7 ports' worth on 2: rate 7/8
    assert _ends_ms(_graph((tuple(range(8)), Collective.ALL_TO_ALL))) == pytest.approx([8 / 7])
    # two at once: the ranks' own links halve each (rate 1/2), the uplink takes 2 x 16/7 x r <= 2: r = 7/16
    both = _graph((tuple(range(8)), Collective.ALL_TO_ALL), (tuple(range(8)), Collective.ALL_TO_ALL))
    assert _ends_ms(both) == pytest.approx([16 / 7] * 2)


def test_a_lone_ring_crosses_each_uplink_once_and_is_not_slowed():
    # ring 0..7: edges 3->4 and 7->0 cross, one port's worth each way per leaf, under the 2 it has
    assert _ends_ms(_graph((tuple(range(8)), Collective.ALL_REDUCE))) == pytest.approx([1.0])
    # four 2-rank rings across the leaves (0,4), (1,5), ...: each crosses once each way, 4 on 2 ports' worth
    rings = [((i, 4 + i), Collective.ALL_REDUCE) for i in range(4)]
    assert _ends_ms(_graph(*rings)) == pytest.approx([2.0] * 4)


def test_the_analytical_model_charges_the_fully_loaded_share():
    """The closed form charges a cross-leaf group the whole 1/o (every port of the leaf busy): the
    routed simulation of the same lone all-to-all is between the untapered and the tapered closed form."""
    tapered, flat = _tree(), untapered(_tree())
    assert flat.network[0].oversubscription == 1.0
    group = group_of(tapered, 8)
    slow = float(collective(Collective.ALL_TO_ALL, 1e9, group, tapered).cost.time)
    fast = float(collective(Collective.ALL_TO_ALL, 1e9, group, flat).cost.time)
    assert slow > 1.5 * fast
    b = GraphBuilder()
    b.add("a2a", TaskKind.COLLECTIVE, Category.EP, tuple(range(8)), None, fast, (), Tier.SCALE_OUT, 1e9,
          collective=Collective.ALL_TO_ALL)
    graph = b.graph(8)
    routed = run(dataclasses.replace(graph, routes=routes(graph.tasks, tapered))).makespan_ns / 1e9
    assert fast < routed <= slow


def test_no_tapered_tier_no_routes_and_the_same_timeline():
    flat = untapered(_tree())
    b = GraphBuilder()
    b.add("s", TaskKind.SEND, Category.PP, (0, 4), None, MS, (), Tier.SCALE_OUT, 1e6, collective=Collective.SEND_RECV)
    assert routes(b.graph(8).tasks, flat) is None


def test_every_rank_training_routes_the_tapered_tier():
    """Llama 2 7B, tp 8 x dp 8 on 8 DGX H100 nodes whose rails have leaves of 4 nodes at 2:1. Each rail's
    data-parallel ring crosses its leaf's uplink once each way (1 port's worth of the 2 it has), so the
    routed simulation runs as on untapered rails, while the closed form charges every cross-leaf group the
    full 1/2 (its fully loaded bound)."""
    import armillary

    base = load_system("dgx-h100")
    rails = {**base.network[1].model_dump(mode="json", exclude_none=True), "kind": "rail_optimized",
             "leaf_size": 4, "oversubscription": 2.0}
    tapered = load_system({**base.model_dump(mode="json", exclude_none=True),
                           "network": [base.network[0].model_dump(mode="json", exclude_none=True), rails]})
    run_args = ("llama2-7b",), ({"tp": 8, "attention": "flash", "zero": 1}, {"seq_len": 4096, "global_batch": 64})
    routed = armillary.simulate(run_args[0][0], tapered, *run_args[1], gpus=64, symmetric=False)
    flat = armillary.simulate(run_args[0][0], untapered(tapered), *run_args[1], gpus=64, symmetric=False)
    assert routed.graph.routes is not None and flat.graph.routes is None
    from armillary.report.records import simulation_record

    assert simulation_record(routed, False)["routed_uplinks"] == len(routed.graph.routes.capacity) > 0
    assert routed.step_time_s == pytest.approx(flat.step_time_s, rel=1e-9)
    assert float(routed.estimate.step_time_s) > float(flat.estimate.step_time_s)
