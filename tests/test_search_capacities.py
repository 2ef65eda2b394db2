"""Searches of systems that differ only in their memory capacities share one estimate of each block (issue 47:
co-design at 1e9 points): a training step's time and memory do not depend on the capacities, so each system
judges its memory on the shared estimate and answers as its own search does."""

from __future__ import annotations

import pytest

from armillary.search.run import LayoutCache, Objective, search
from armillary.search.space import StrategySpace
from armillary.search.systems import SystemSpace, codesign, system_variant
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

GIB = 2**30
SPACE = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2), offload_optimizer=(False, True))


def _answer(r):
    return ([(c.index, c.step_time_s, c.memory_bytes) for c in r.top],
            (r.points, r.evaluated, r.pruned, r.bounded, r.feasible))


@pytest.mark.parametrize(("objective", "chunk"), [(Objective.TIME, 2048), (Objective.MEMORY, 262144)])
def test_a_shared_cache_gives_each_capacity_its_own_answer(objective, chunk):
    """Small blocks (so that the time bound skips some, differently per capacity) and one block; capacities
    from one that fits little to one that fits all; a second tier that some offloading points need."""
    model, workload = load_model("llama2-13b"), load_workload({"seq_len": 2048, "global_batch": 128})
    base, system = load_strategy({"attention": "flash"}), load_system("dgx-a100", 32)
    cache, bounded, feasible, first = LayoutCache(), [], [], 0
    tier2 = system.device.second_tier
    assert tier2 is not None
    for hbm, second in ((80, 1.0), (16, 1.0), (200, 0.01)):
        variant = system_variant(system, {"gpus": 32, "hbm_capacity": hbm * GIB, "hbm_bandwidth":
                                          system.device.hbm.bandwidth, "tier2_capacity": second * tier2.capacity,
                                          "tier2_bandwidth": tier2.bandwidth, "scale_up_bandwidth":
                                          system.network[0].bandwidth, "scale_out_bandwidth":
                                          system.network[-1].bandwidth, "devices_per_node": system.devices_per_node})
        own = search(model, variant, workload, base, SPACE, objective, top_k=4, chunk=chunk)
        shared = search(model, variant, workload, base, SPACE, objective, top_k=4, chunk=chunk, cache=cache)
        assert _answer(shared) == _answer(own)
        first = first or cache.estimated
        bounded.append(own.bounded)
        feasible.append(own.feasible)
    assert objective is Objective.MEMORY or max(bounded) > 0  # the time bound skipped blocks
    assert len(set(feasible)) == 3  # each capacity fits its own share
    assert cache.estimated - first < first  # the later capacities read most blocks the first estimated
    with pytest.raises(ValueError, match="more than the memory capacities"):
        search(model, system.with_devices(4), workload, base, SPACE, objective, chunk=chunk, cache=cache)


def test_codesign_answers_as_one_search_per_system():
    """codesign groups its systems by everything but the capacities; the answer is the one of a search per
    system (an executor other than `serial` runs each search on its own)."""
    from armillary.search.executors import serial

    space = SystemSpace.model_validate({"gpus": [8, 16], "hbm_capacity": ["24 GiB", "40 GiB", "80 GiB"],
                                        "prices": {"device": 10000, "hbm_per_gib": 100}})
    strategies = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2))
    args = (load_model("llama2-7b"), load_system("dgx-a100", 8),
            load_workload({"seq_len": 2048, "global_batch": 64}), space, load_strategy({"attention": "flash"}),
            strategies)
    grouped = codesign(*args)
    alone = codesign(*args, executor=lambda fn, waves: serial(fn, waves))
    assert [(p.values, p.step_time_s, p.best and p.best.index, p.evaluated) for p in grouped.points] == [
        (p.values, p.step_time_s, p.best and p.best.index, p.evaluated) for p in alone.points]
    assert grouped.pareto == alone.pareto
